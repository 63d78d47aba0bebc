"""Durations as people write them: ``"90s"``, ``"5m"``, ``"1h30m"``, ``2.5`` (seconds).

Every duration is finite, not negative, and at most a maximum that depends on what it is:
a claim's lease at most :data:`MAX_LEASE` (30 days), a wait in line at most
:data:`MAX_TIMEOUT` (24 hours), anything else at most :data:`MAX_SECONDS` (the longest
duration Kubernetes has). NaN, infinities, values of the wrong type and longer durations
are refused with one line that names the argument, the maximum and what to do; the same
rules hold for ``dra.request``, the command line and the REST API.
"""

from __future__ import annotations

import math
import re

from dra_jupyter.errors import InvalidInputError, shown

# The longest duration Kubernetes (Go's time.Duration: int64 nanoseconds) can express,
# about 292 years.
MAX_SECONDS = (2**63 - 1) / 1e9
MAX_LEASE = 30 * 86400.0  # a claim's lease: release and request again to hold longer
MAX_TIMEOUT = 86400.0  # a wait in line
MAX_TEXT = 64  # characters of a duration written as text ("1h30m"); longer is no duration
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(
    value: str | float | int | None,
    *,
    what: str,
    maximum: float = MAX_SECONDS,
    most: str = "2562047h (292 years)",
    longest: str = "duration, 2562047h (292 years); ask for less",
    negative: str = "must not be negative, got {value}",
) -> float | None:
    """Seconds, or None for no limit. ``what`` names the argument in error messages;
    ``maximum`` is the most it may be, ``most`` says it in words, and ``longest`` ends
    the message of a longer one: what it is, the maximum, and what to do; ``negative``
    refuses a value below 0 (``{value}``: the value as given)."""
    if value is None:
        return None
    expected = InvalidInputError(
        f"{what}: expected a duration of at most {most}, such as '5m' or 300 (seconds), "
        f"not {shown(value)}"
    )
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise expected
    sign = 1.0
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf if value > 0 else -math.inf
    else:
        text = value.strip().replace(" ", "")
        sign = -1.0 if text.startswith("-") and len(text) > 1 else 1.0
        text = text[1:] if sign < 0 else text
        if len(text) > MAX_TEXT:
            raise InvalidInputError(
                f"{what}: {shown(value)} is not a duration; write e.g. '90s', '5m', '1h30m' or "
                "seconds"
            )
        if re.fullmatch(r"\d+(\.\d+)?", text):
            text += "s"  # a bare number is seconds
        parts = _PART.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise InvalidInputError(
                f"{what}: {shown(value)} is not a duration; write e.g. '90s', '5m', '1h30m' or "
                "seconds"
            )
        seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    if math.isnan(seconds):
        raise expected
    if seconds < 0 or (seconds == 0 and sign < 0):
        raise InvalidInputError(f"{what}: {negative.format(value=shown(value))}")
    if seconds > maximum:
        raise InvalidInputError(f"{what}: {shown(value)} is longer than the longest {longest}")
    return seconds


def parse_lease(value: str | float | int | None, *, what: str = "lease") -> float | None:
    """A claim's lease in seconds (None: no lease), more than 0 and at most
    :data:`MAX_LEASE`."""
    seconds = parse_duration(
        value,
        what=what,
        maximum=MAX_LEASE,
        most="30d",
        longest="lease, 30d; ask for at most 30d, and request again when it ends",
        negative="must be more than 0, got {value}; ask for e.g. '1h'",
    )
    if seconds == 0:
        raise InvalidInputError(
            f"{what}: must be more than 0, got {shown(value)} (the claim would end at once); "
            "ask for e.g. '1h'"
        )
    return seconds


def parse_timeout(value: str | float | int | None, *, what: str = "timeout") -> float | None:
    """How long to wait in line, in seconds (None: no limit), at most :data:`MAX_TIMEOUT`."""
    return parse_duration(
        value,
        what=what,
        maximum=MAX_TIMEOUT,
        most="24h",
        longest="wait, 24h; wait at most 24h, then retry",
    )


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"

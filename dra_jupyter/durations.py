"""Durations as people write them: ``"90s"``, ``"5m"``, ``"1h30m"``, ``2.5`` (seconds)."""

from __future__ import annotations

import math
import re

from dra_jupyter.errors import InvalidInputError, shown

# The longest duration Kubernetes (Go's time.Duration: int64 nanoseconds) can express,
# about 292 years: longer ones, and inf or nan, are refused.
MAX_SECONDS = (2**63 - 1) / 1e9
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: str | float | int | None, *, what: str) -> float | None:
    """Seconds, or None for no limit. ``what`` names the argument in error messages."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInputError(
            f"{what}: expected a duration such as '5m' or 300, not {shown(value)}"
        )
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf if value > 0 else -math.inf
    else:
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            text += "s"  # a bare number is seconds
        parts = _PART.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise InvalidInputError(
                f"{what}: {shown(value)} is not a duration; write e.g. '90s', '5m', '1h30m' or "
                "seconds"
            )
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if math.isnan(seconds):
        raise InvalidInputError(f"{what}: expected a duration such as '5m' or 300, not nan")
    if seconds < 0:
        raise InvalidInputError(f"{what}: must not be negative, got {shown(value)}")
    if seconds > MAX_SECONDS:
        raise InvalidInputError(
            f"{what}: {shown(value)} is longer than the longest duration, 2562047h (292 years)"
        )
    return seconds


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"

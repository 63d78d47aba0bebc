"""The book of claim intervals and its arithmetic: what a window of it adds up to, by user,
group, claim, device or model.

An :class:`Interval` is one claim held from ``start`` to ``end`` (None: still held), by a
user of some groups, on devices each worth some GPU-equivalents (:class:`DevicePart`), with
the seconds its GPUs were reported active, idle and unknown and the energy they used. A
window counts the part of each interval inside it:

* **held** GPU-seconds: the seconds of the interval inside the window, times its
  GPU-equivalents;
* **active** and **idle**: the interval's reported seconds, spread evenly over it (the part
  inside the window counts), times its GPU-equivalents; reports of more seconds than the
  interval lasted are scaled down to its length;
* **unknown**: the rest of held (no report, or a report that could not tell), so that held
  = active + idle + unknown exactly, in every window;
* **energy**: the joules reported, spread the same way (not weighted: they are the
  devices' own), split over devices by their GPU-equivalents.

Grouped by ``group``, a user of several groups counts in full in each of them (the groups
overlap); ``primary_group`` counts each interval once, in the user's first group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import InvalidInputError, shown

# What dra.usage(by=...) groups by; each is a tuple of the book's dimensions.
BY: dict[str, tuple[str, ...]] = {
    "user": ("user",),
    "group": ("group",),
    "claim": ("claim", "uid", "user", "released_by"),
    "device": ("device", "model"),
}
DIMENSIONS = (
    "user",
    "group",
    "primary_group",
    "claim",
    "uid",
    "released_by",
    "device",
    "model",
)
# The reasons of a release that dra-jupyter makes by its rules (a lease, idleness, a kernel
# gone, a device taken out, a move, fair share): the book records no user as its maker.
RULE_REASONS = frozenset(
    {
        "idle",
        "gpu-idle",
        "kernel-shutdown",
        "expired",
        "reclaimed",
        "server-stop",
        "limit",
        "moved",
        "device-failed",
        "device-moved",
        "fair-share",
    }
)
NO_GROUP = "(none)"  # the group of a user the user database does not know
MAX_SINCE = 400 * 86400.0  # the longest window a report reads back
MAX_DAILY = 31  # days of a daily series (the lab panel's chart)


@dataclass(frozen=True)
class DevicePart:
    """One device of an interval: its key (``driver/pool/device``), its GPU-equivalents (a
    whole GPU 1, a MIG instance or a share its part of the GPU's memory), its model."""

    device: str
    gpus: float
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "gpus": self.gpus, "model": self.model}


@dataclass(frozen=True)
class Interval:
    """A claim held from ``start`` to ``end`` (None: held now), as the book keeps it."""

    claim: str
    uid: str
    user: str
    groups: tuple[str, ...]
    devices: tuple[DevicePart, ...]
    start: float
    end: float | None = None
    reason: str | None = None  # why it ended (the release's reason)
    active_s: float = 0.0  # seconds its GPUs were reported active
    idle_s: float = 0.0  # ... idle
    unknown_s: float = 0.0  # ... reported, but the sampler could not tell
    energy_j: float | None = None  # joules its devices used (None: no energy counter)
    released_by: str | None = None  # the user who released it (None: held, or dra-jupyter)

    @property
    def gpus(self) -> float:
        """Its GPU-equivalents: the sum over its devices."""
        return sum(d.gpus for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "uid": self.uid,
            "user": self.user,
            "groups": list(self.groups),
            "devices": [d.to_dict() for d in self.devices],
            "start": self.start,
            "end": self.end,
            "reason": self.reason,
            "active_s": self.active_s,
            "idle_s": self.idle_s,
            "unknown_s": self.unknown_s,
            "energy_j": self.energy_j,
            "released_by": self.released_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        """An interval as :meth:`to_dict` wrote it (KeyError, TypeError, ValueError if not)."""
        end, energy = data["end"], data["energy_j"]
        return cls(
            claim=str(data["claim"]),
            uid=str(data["uid"]),
            user=str(data["user"]),
            groups=tuple(str(g) for g in data["groups"]),
            devices=tuple(
                DevicePart(str(d["device"]), float(d["gpus"]), str(d.get("model") or ""))
                for d in data["devices"]
            ),
            start=float(data["start"]),
            end=None if end is None else float(end),
            reason=None if data["reason"] is None else str(data["reason"]),
            active_s=float(data["active_s"]),
            idle_s=float(data["idle_s"]),
            unknown_s=float(data["unknown_s"]),
            energy_j=None if energy is None else float(energy),
            released_by=None if data.get("released_by") is None else str(data["released_by"]),
        )


@dataclass(frozen=True)
class Book:
    """The intervals that overlap the window ``[since, now]``, as a backend read them at
    ``now`` (the end of those still held, by the backend's clock)."""

    intervals: tuple[Interval, ...]
    since: float
    now: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since if math.isfinite(self.since) else None,
            "now": self.now,
            "intervals": [i.to_dict() for i in self.intervals],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Book:
        since = data["since"]
        return cls(
            tuple(Interval.from_dict(i) for i in data["intervals"]),
            -math.inf if since is None else float(since),
            float(data["now"]),
        )

    def report(self, by: Sequence[str]) -> list[UsageRow]:
        """The totals of the window, grouped by ``by`` (:func:`report`)."""
        return report(self.intervals, self.since, self.now, self.now, by)


@dataclass(frozen=True)
class Totals:
    """GPU-seconds held, active, idle and unknown, and joules, of some part of a book."""

    held: float = 0.0
    active: float = 0.0
    idle: float = 0.0
    unknown: float = 0.0
    energy: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.held + other.held,
            self.active + other.active,
            self.idle + other.idle,
            self.unknown + other.unknown,
            self.energy + other.energy,
        )

    def weighted(self, gpus: float, energy_share: float) -> Totals:
        """Seconds times ``gpus``; joules times ``energy_share``."""
        return Totals(
            self.held * gpus,
            self.active * gpus,
            self.idle * gpus,
            self.unknown * gpus,
            self.energy * energy_share,
        )

    @property
    def idle_share(self) -> float:
        """Idle of the time whose use is known (active + idle); NaN when none is."""
        known = self.active + self.idle
        return self.idle / known if known > 0 else math.nan


@dataclass(frozen=True)
class UsageRow:
    """The totals of one key (a value per dimension grouped by)."""

    key: tuple[str, ...]
    totals: Totals = field(default_factory=Totals)


def in_window(interval: Interval, since: float, until: float, now: float) -> Totals:
    """The wall-clock part of ``interval`` inside ``[since, until]`` (seconds, not yet
    weighted by its GPU-equivalents; joules in full): see the module's docstring."""
    part = _in_window(interval, since, until, now)
    return Totals(*part) if part is not None else Totals()


def _in_window(
    interval: Interval, since: float, until: float, now: float
) -> tuple[float, float, float, float, float] | None:
    """:func:`in_window` as a tuple (None: nothing inside), for the loop of :func:`report`."""
    start = interval.start
    end = now if interval.end is None else interval.end
    end = max(end, start)
    overlap = (end if end < until else until) - (start if start > since else since)
    if overlap <= 0:
        return None
    length = end - start  # > 0: the overlap is positive
    fraction = overlap / length
    active, idle = interval.active_s, interval.idle_s
    active, idle = (active if active > 0 else 0.0), (idle if idle > 0 else 0.0)
    known = active + idle
    if known > length:  # more reported than it lasted (overlapping ticks): scaled down
        active, idle = active * length / known, idle * length / known
    active = min(overlap, active * fraction)
    idle = min(idle * fraction, overlap - active)
    energy = interval.energy_j or 0.0
    return (
        overlap,
        active,
        idle,
        max(0.0, overlap - active - idle),
        (energy if energy > 0 else 0.0) * fraction,
    )


def _values(interval: Interval, dimension: str) -> Sequence[str]:
    if dimension == "user":
        return (interval.user,)
    if dimension == "group":
        return interval.groups or (NO_GROUP,)
    if dimension == "primary_group":
        return (interval.groups[0] if interval.groups else NO_GROUP,)
    if dimension == "claim":
        return (interval.claim,)
    if dimension == "uid":
        return (interval.uid,)
    if dimension == "released_by":
        return (released_by(interval),)
    raise ValueError(f"dimension {dimension!r} is not the interval's own")


def releaser(reason: str, user: str) -> str | None:
    """Who the book says released a claim that ``user``'s process released for ``reason``:
    that user, or None where the reason is one of dra-jupyter's rules."""
    return None if reason in RULE_REASONS else user


def admin_words(reason: str, by: str | None) -> str | None:
    """The words of an admin's release of another user's claim (``released by admin
    alice``): the reason ``admin`` with the admin's name; else None (the reason says it)."""
    return f"released by admin {by}" if reason == "admin" and by else None


def released_by(interval: Interval) -> str:
    """Who ended the interval, as a report says it: the user who released the claim (its
    holder or an admin), ``(held)`` while it is held, else the reason in parentheses where
    dra-jupyter released it by its rules (``(idle)``, ``(expired)``, ...; ``(released)``
    in a book written before it kept who)."""
    if interval.released_by is not None:
        return interval.released_by
    if interval.end is None:
        return "(held)"
    return f"({interval.reason or 'released'})"


def _keys(interval: Interval, dims: Sequence[str]) -> list[tuple[str, ...]]:
    if len(dims) == 1 and dims[0] == "user":  # the usual report: one key, no loop
        return [(interval.user,)]
    keys: list[tuple[str, ...]] = [()]
    for dim in dims:
        keys = [(*k, v) for k in keys for v in _values(interval, dim)]
    return keys


def report(
    intervals: Iterable[Interval], since: float, until: float, now: float, by: Sequence[str]
) -> list[UsageRow]:
    """The totals of ``[since, until]`` grouped by ``by`` (dimensions of :data:`DIMENSIONS`),
    the largest held first. Grouped by ``device`` or ``model``, each interval is split over
    its devices by their GPU-equivalents; else it counts whole."""
    unknown = [d for d in by if d not in DIMENSIONS]
    if unknown:
        raise InvalidInputError(
            f"usage: cannot group by {shown(unknown[0])}; use one of {', '.join(DIMENSIONS)}"
        )
    per_device = [i for i, d in enumerate(by) if d in ("device", "model")]
    own = [d for d in by if d not in ("device", "model")]
    sums: dict[tuple[str, ...], list[float]] = {}

    def add(key: tuple[str, ...], part: tuple[float, ...], gpus: float, energy: float) -> None:
        kept = sums.get(key)
        if kept is None:
            kept = sums[key] = [0.0, 0.0, 0.0, 0.0, 0.0]
        kept[0] += part[0] * gpus
        kept[1] += part[1] * gpus
        kept[2] += part[2] * gpus
        kept[3] += part[3] * gpus
        kept[4] += part[4] * energy

    for interval in intervals:
        part = _in_window(interval, since, until, now)
        if part is None:
            continue
        keys = _keys(interval, own)
        total = interval.gpus
        if not per_device:
            for key in keys:
                add(key, part, total, 1.0)
            continue
        for device in interval.devices:
            share = device.gpus / total if total > 0 else 1 / len(interval.devices)
            for key in keys:
                full = list(key)
                for i in per_device:  # in the order asked
                    full.insert(i, device.device if by[i] == "device" else device.model)
                add(tuple(full), part, device.gpus, share)
    return [
        UsageRow(key, Totals(*values))
        for key, values in sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ]


def daily(intervals: Sequence[Interval], user: str, days: int, now: float) -> list[float]:
    """GPU-hours held by ``user`` on each of the last ``days`` days (24 h back from
    ``now`` each), oldest first: the lab panel's chart."""
    mine = [i for i in intervals if i.user == user]
    out = []
    for back in range(days, 0, -1):
        start = now - back * 86400
        rows = report(mine, start, start + 86400, now, ("user",))
        out.append(rows[0].totals.held / 3600 if rows else 0.0)
    return out


def dimensions_of(by: object) -> tuple[str, ...]:
    """The dimensions of ``dra.usage(by=...)``; InvalidInputError for another word."""
    dims = BY.get(by) if isinstance(by, str) else None
    if dims is None:
        raise InvalidInputError(f"by={shown(by)} is not known; use one of {', '.join(BY)}")
    return dims


def window(since: str | float | int) -> float:
    """The length in seconds of a window written ``since`` ("7d", "12h", seconds), at most
    :data:`MAX_SINCE`."""
    seconds = parse_duration(
        since,
        what="since",
        maximum=MAX_SINCE,
        most="400d",
        longest="window of a usage report, 400d; ask for less",
    )
    return seconds or 0.0

"""GPU activity per claim: one definition for idle release, the views and the accounting.

Pure: no I/O and no clock; the caller samples (NVML, the pid -> claim map) and feeds a
:class:`Reading` per live claim each tick, with ``now``.

**The definition.** A claim is

- *GPU-active* (:attr:`GpuState.ACTIVE`) when its GPU utilisation was at least
  ``threshold`` percent (default 5) in a reading within the last ``window`` seconds
  (default 60);
- *GPU-inactive* (:attr:`GpuState.INACTIVE`) when it was not, for less than
  ``idle_timeout`` seconds;
- *GPU-idle* (:attr:`GpuState.IDLE`) when it was not for ``idle_timeout`` seconds (since
  its last activity, or since its GPU signal began, whichever is later);
- *unknown* (:attr:`GpuState.UNKNOWN`) when there is no GPU signal: no reading with a
  value within the last ``window`` seconds (a simulated inventory, no NVML, MIG devices
  NVML does not sample). Callers then behave exactly as without this module, and views
  say that the GPU signal is missing.

A claim's utilisation (:func:`claim_reading`) is, per device it holds, the highest SM
utilisation of *its own* processes in NVML's per-process samples, where NVML gives such
samples for that device (a process of the claim without a sample counts 0); else the
device's utilisation (NVML's whole-GPU figure); else nothing. The claim's value is the
highest over its devices with a value; none when no device has one.

**The accounting hook.** Each :meth:`ActivityTracker.feed` reports, per claim, the time
since that claim's previous reading, all of it counted as its state at this reading::

    on_interval(claim_key, active_s, idle_s, unknown_s, energy_j)

``active_s`` when GPU-active, ``idle_s`` when GPU-inactive or GPU-idle (so held time =
active + idle + unknown), ``unknown_s`` when unknown, and ``energy_j``: the joules its
whole GPUs used in that time (the increase of NVML's total energy counter, summed over
them; 0 where it is not known, or the counter went back). A claim's first reading opens
its books (nothing reported); :meth:`ActivityTracker.end` (and a claim absent from a
feed) closes them with a last report up to then.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from dra_jupyter.metrics.base import DeviceProcess, Sample

DEFAULT_THRESHOLD = 5.0  # percent
DEFAULT_WINDOW = 60.0  # seconds
DEFAULT_IDLE_TIMEOUT = 3600.0  # seconds

# on_interval(claim_key, active_s, idle_s, unknown_s, energy_j)
IntervalHook = Callable[[str, float, float, float, float], None]
# one claim's report for the usage book: claim, active, idle and unknown seconds, joules
GpuReport = tuple[str, float, float, float, float | None]


class GpuState(enum.Enum):
    ACTIVE = "active"
    INACTIVE = "inactive"
    IDLE = "idle"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ActivitySettings:
    """The knobs of the definition (see the module docstring)."""

    threshold: float = DEFAULT_THRESHOLD  # percent
    window: float = DEFAULT_WINDOW  # seconds
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # seconds

    def __post_init__(self) -> None:
        if not (0 <= self.threshold <= 100 and self.window > 0 and self.idle_timeout > 0):
            raise ValueError(
                "GPU activity: threshold must be 0 to 100 percent, window and idle timeout "
                f"positive seconds, not {self.threshold}, {self.window}, {self.idle_timeout}"
            )


@dataclass(frozen=True)
class Reading:
    """A claim's GPU signal at one tick: its utilisation (percent; None: no signal) and the
    total energy counter of its whole GPUs (joules, summed; None: not known)."""

    utilization: float | None
    energy: float | None = None


@dataclass(frozen=True)
class Activity:
    """What a view shows of a claim's GPU: its state, the highest utilisation in the
    window (None: unknown), and since when it has been in that state (None: unknown)."""

    state: GpuState
    utilization: float | None = None
    since: float | None = None

    def text(self, now: float) -> str:
        """``GPU busy: 93%``, ``GPU idle for 12 min``, ``GPU quiet: 0%``, or ``no GPU
        signal``."""
        if self.state is GpuState.UNKNOWN or self.utilization is None:
            return "no GPU signal"
        if self.state is GpuState.ACTIVE:
            return f"GPU busy: {self.utilization:.0f}%"
        if self.state is GpuState.IDLE and self.since is not None:
            return f"GPU idle for {_spoken(now - self.since)}"
        return f"GPU quiet: {self.utilization:.0f}%"

    def to_dict(self, now: float) -> dict[str, object]:
        return {
            "state": self.state.value,
            "utilization": self.utilization,
            "since": self.since,
            "text": self.text(now),
        }


UNKNOWN = Activity(GpuState.UNKNOWN)


@dataclass
class _Track:
    last_tick: float
    known_since: float | None = None  # the start of the current run of GPU signal
    last_known: float | None = None  # the last reading with a value
    last_active: float | None = None  # the last reading at or over the threshold
    energy: float | None = None  # the counter at the last reading that had one
    recent: deque[tuple[float, float]] = field(default_factory=deque)  # (time, percent)


class ActivityTracker:
    """The GPU activity of every claim fed to it (see the module docstring)."""

    def __init__(
        self, settings: ActivitySettings | None = None, on_interval: IntervalHook | None = None
    ) -> None:
        self.settings = settings or ActivitySettings()
        self.on_interval = on_interval
        self._tracks: dict[str, _Track] = {}

    def claims(self) -> list[str]:
        return list(self._tracks)

    def feed(self, now: float, readings: Mapping[str, Reading]) -> None:
        """One tick: a reading per live claim. Claims fed before and absent now are ended."""
        for claim in [c for c in self._tracks if c not in readings]:
            self.end(claim, now)
        for claim, reading in readings.items():
            track = self._tracks.get(claim)
            if track is None:
                track = self._tracks[claim] = _Track(last_tick=now)
                self._update(track, reading, now)
                continue
            before = self._tracks[claim].energy
            self._update(track, reading, now)
            energy = 0.0
            if reading.energy is not None and before is not None:
                energy = max(reading.energy - before, 0.0)
            self._report(claim, track, now, energy)

    def end(self, claim: str, now: float) -> None:
        """The claim is gone: its last interval reported, its books closed."""
        track = self._tracks.pop(claim, None)
        if track is not None:
            self._report(claim, track, now, 0.0)

    def last_active(self, claim: str) -> float | None:
        """When the claim's GPU was last active (None: never, or not known)."""
        track = self._tracks.get(claim)
        return None if track is None else track.last_active

    def activity(self, claim: str, now: float) -> Activity:
        """The claim's GPU activity at ``now`` (unknown for a claim never fed)."""
        track = self._tracks.get(claim)
        return UNKNOWN if track is None else self._activity(track, now)

    # --- inside ------------------------------------------------------------------------------

    def _update(self, track: _Track, reading: Reading, now: float) -> None:
        window = self.settings.window
        if reading.utilization is not None:
            if track.last_known is None or now - track.last_known > window:
                track.known_since = now  # the signal (re)starts
            track.last_known = now
            track.recent.append((now, reading.utilization))
            if reading.utilization >= self.settings.threshold:
                track.last_active = now
        while track.recent and now - track.recent[0][0] > window:
            track.recent.popleft()
        if reading.energy is not None:
            track.energy = reading.energy

    def _activity(self, track: _Track, now: float) -> Activity:
        settings = self.settings
        if track.last_known is None or now - track.last_known > settings.window:
            return UNKNOWN
        recent = [u for t, u in track.recent if now - t <= settings.window]
        peak = max(recent, default=None)
        if track.last_active is not None and now - track.last_active <= settings.window:
            return Activity(GpuState.ACTIVE, peak, track.last_active)
        assert track.known_since is not None
        quiet = max(track.known_since, track.last_active or track.known_since)
        state = GpuState.IDLE if now - quiet >= settings.idle_timeout else GpuState.INACTIVE
        return Activity(state, peak, quiet)

    def _report(self, claim: str, track: _Track, now: float, energy: float) -> None:
        seconds = max(now - track.last_tick, 0.0)
        track.last_tick = max(now, track.last_tick)
        if self.on_interval is None or (seconds == 0 and energy == 0):
            return
        state = self._activity(track, now).state
        active = seconds if state is GpuState.ACTIVE else 0.0
        unknown = seconds if state is GpuState.UNKNOWN else 0.0
        self.on_interval(claim, active, seconds - active - unknown, unknown, energy)


def claim_reading(
    devices: Collection[str],
    pids: Collection[int] | None,
    processes: Sequence[DeviceProcess] | None,
    samples: Sequence[Sample],
    energy: Mapping[str, float] | None = None,
) -> Reading:
    """A claim's :class:`Reading` from one sampling (see the module docstring):
    ``devices``, its device keys; ``pids``, its processes (None: count every process on its
    devices); ``processes``, NVML's per device (None: not known); ``samples``, the devices'
    metrics (a simulated sample is no GPU signal); ``energy``, device -> total energy
    counter (joules) of whole GPUs."""
    values: list[float] = []
    for device in devices:
        on = [p for p in processes or () if p.device == device]
        if any(p.utilization is not None for p in on):
            values.append(
                max(
                    (
                        p.utilization or 0.0
                        for p in on
                        if pids is None or p.pid in pids  # others' are not this claim's use
                    ),
                    default=0.0,
                )
            )
            continue
        sample = next((s for s in samples if s.device == device), None)
        if sample is not None and not sample.simulated and sample.utilization is not None:
            values.append(sample.utilization)
    joules = [energy[d] for d in devices if energy is not None and d in energy]
    return Reading(max(values, default=None), sum(joules) if joules else None)


def _spoken(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"

"""One sampler's GPU truth, the same in the service's daemon and the server extension:
each tick, the processes on the devices and whose they are
(:mod:`~dra_jupyter.metrics.processes`), and each claim's GPU activity
(:mod:`~dra_jupyter.metrics.activity`).

A tick has two halves: :meth:`GpuWatch.read` blocks (NVML, ``/proc``; a worker thread may
run it) and returns the claims' readings; :meth:`GpuWatch.feed` (pure, quick) gives them to
the tracker where its state is read (the event loop). A source without a GPU signal
(simulated, none) reads no processes: every claim is *unknown*, and callers behave as
without GPU activity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dra_jupyter.metrics.activity import (
    Activity,
    ActivitySettings,
    ActivityTracker,
    GpuReport,
    Reading,
    claim_reading,
)
from dra_jupyter.metrics.base import DeviceProcess, MetricsSource, Sample
from dra_jupyter.metrics.processes import (
    Holder,
    ProcessUse,
    Reader,
    attribute,
    pids_of,
    read_process,
)


class GpuWatch:
    """The processes last seen on the devices (:attr:`uses`) and every claim's activity."""

    def __init__(
        self, settings: ActivitySettings | None = None, read: Reader = read_process
    ) -> None:
        # each claim's report of a reading, kept for the usage book (:meth:`take_reports`)
        self._reports: list[GpuReport] = []
        self.tracker = ActivityTracker(settings, self._keep)
        self.listed: list[DeviceProcess] = []  # as the source listed them, last read
        self.uses: list[ProcessUse] = []
        self.signal = False  # the last read listed the devices' processes
        self._read = read
        self._since = 0.0

    @property
    def settings(self) -> ActivitySettings:
        return self.tracker.settings

    def _keep(
        self, claim: str, active_s: float, idle_s: float, unknown_s: float, energy_j: float
    ) -> None:
        self._reports.append((claim, active_s, idle_s, unknown_s, energy_j or None))

    def take_reports(self) -> list[GpuReport]:
        """The claims' reports since the last call (``(claim, active_s, idle_s, unknown_s,
        energy_j)``, energy None where not known): what the usage book adds, one write a
        reading (:meth:`~dra_jupyter.local.ledger.Ledger.add_activities`)."""
        reports, self._reports = self._reports, []
        return reports

    def read(
        self,
        source: MetricsSource,
        holders: Sequence[Holder],
        samples: Sequence[Sample],
        now: float,
    ) -> dict[str, Reading]:
        """The processes on the devices now, whose they are, and each claim's reading
        (blocking). ``holders``: the live claims, oldest first; ``samples``: the devices'
        metrics of this tick."""
        processes = source.processes(now, self._since)
        self._since = now
        self.signal = processes is not None
        self.listed = processes or []
        self.uses = attribute(processes, holders, self._read) if processes else []
        energy = source.energy() if processes is not None else None
        return {
            h.name: claim_reading(h.devices, pids_of(self.uses, h.name), processes, samples, energy)
            for h in holders
        }

    def feed(self, now: float, readings: Mapping[str, Reading]) -> None:
        self.tracker.feed(now, readings)

    def activity(self, claim: str, now: float) -> Activity:
        return self.tracker.activity(claim, now)

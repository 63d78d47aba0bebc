"""A metrics source with its history, as a process (a kernel, the server) keeps them."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from dra_jupyter.metrics.base import MetricsSource, Sample
from dra_jupyter.metrics.history import MetricsHistory
from dra_jupyter.metrics.simulated import SimulatedSource, simulated_sample


class Recorder:
    """Samples ``source`` on demand and remembers the samples (bounded)."""

    def __init__(self, source: MetricsSource, length: int = 900) -> None:
        self.source = source
        self.history = MetricsHistory(length)

    @property
    def simulated(self) -> bool:
        return self.source.simulated

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        samples = self.source.sample(held, now)
        self.history.add(samples)
        return samples

    def series(
        self,
        device: str,
        *,
        since: float,
        now: float,
        held_since: Mapping[str, float],
        step: float = 5.0,
    ) -> list[Sample]:
        """The device's samples from ``since`` to ``now``. A simulated device's past is
        computed (its values are a function of time and of being held, ``held_since``:
        device -> when its current claim began); a real one's is what was recorded."""
        if isinstance(self.source, SimulatedSource):
            total = self.source.totals.get(device)
            if device not in self.source.totals:
                return []
            start = held_since.get(device)
            count = max(int((now - since) // step), 0)
            times = [now - (count - i) * step for i in range(count + 1)]
            return [
                simulated_sample(device, total, start is not None and t >= start, t) for t in times
            ]
        return [s for s in self.history.series(device) if since <= s.time <= now]

    def close(self) -> None:
        self.source.close()

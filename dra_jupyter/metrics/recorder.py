"""A metrics source with its history, as a process (a kernel, the server) keeps them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

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
        held: Mapping[str, Sequence[tuple[float, float]]],
        step: float = 5.0,
    ) -> list[Sample]:
        """The device's samples from ``since`` to ``now``. A simulated device's past is
        computed (its values are a function of time and of being held; ``held``: device ->
        the intervals [start, end) of the claims that held it); a real one's is what was
        recorded."""
        if isinstance(self.source, SimulatedSource):
            if device not in self.source.totals:
                return []
            total = self.source.totals[device]
            spans = held.get(device, ())
            count = max(int((now - since) // step), 0)
            times = [now - (count - i) * step for i in range(count + 1)]
            return [
                simulated_sample(device, total, any(a <= t < b for a, b in spans), t) for t in times
            ]
        return [s for s in self.history.series(device) if since <= s.time <= now]

    def close(self) -> None:
        self.source.close()

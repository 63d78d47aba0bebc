"""The last samples of every device, in a bounded ring buffer."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dra_jupyter.metrics.base import Sample

if TYPE_CHECKING:
    import pandas as pd

SAMPLE_COLUMNS = [
    "time",
    "device",
    "utilization",
    "memory_used",
    "memory_total",
    "temperature",
    "simulated",
]
# a frame's columns: the samples', with memory also in GiB (bytes are for computing)
FRAME_COLUMNS = [*SAMPLE_COLUMNS[:5], "memory_used_gib", "memory_total_gib", *SAMPLE_COLUMNS[5:]]
GIB = 2**30


class MetricsHistory:
    """At most ``length`` samples per device (the oldest go first). Not thread-safe: add
    and read from one thread (the server's event loop, a kernel's main thread)."""

    def __init__(self, length: int = 900) -> None:
        if length < 1:
            raise ValueError(f"a metrics history needs room for at least 1 sample, not {length}")
        self.length = length
        self._series: dict[str, deque[Sample]] = {}

    def add(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            series = self._series.get(s.device)
            if series is None:
                series = self._series[s.device] = deque(maxlen=self.length)
            series.append(s)

    def devices(self) -> list[str]:
        return list(self._series)

    def latest(self) -> list[Sample]:
        return [series[-1] for series in self._series.values() if series]

    def series(self, device: str, last: int | None = None) -> list[Sample]:
        """The device's samples, oldest first (the ``last`` ones only, if given)."""
        samples = list(self._series.get(device, ()))
        return samples if last is None else samples[-last:] if last > 0 else []


def to_frame(samples: Sequence[Sample]) -> pd.DataFrame:
    """Samples as a DataFrame: a ``datetime64`` column ``time`` (UTC, whole seconds: what
    a person reads), memory in bytes and in GiB (to one decimal)."""
    import pandas as pd  # noqa: PLC0415  # pandas is heavy: loaded only when asked for

    frame = pd.DataFrame.from_records([s.to_dict() for s in samples], columns=SAMPLE_COLUMNS)
    # one resolution whatever the values (pandas picks seconds or ns from the data otherwise)
    times = pd.to_datetime(frame["time"], unit="s", utc=True).astype("datetime64[ns, UTC]")
    frame["time"] = times.dt.floor("s")
    for column in ("memory_used", "memory_total"):
        frame[f"{column}_gib"] = (frame[column].astype("float64") / GIB).round(1)
    return frame[FRAME_COLUMNS]

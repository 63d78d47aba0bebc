"""The devices' metrics of the server extension, for GET /dra/api/metrics: read on request
(callers at the same time share one read) and sampled every ``interval`` seconds into a
bounded history (:class:`~dra_jupyter.metrics.MetricsHistory`).

Reads block, so they run where the extension runs reads (its reader threads, ``read``);
the source is made on first use (it may probe NVML) and closed where the extension writes
(``call``) when the server stops.

Each sample also reads the processes on the devices, whose they are and each claim's GPU
activity (:class:`~dra_jupyter.metrics.watch.GpuWatch`: ``gpu``), the same way the
service's daemon does; idle release asks it. With the sampling off (``interval`` 0) or no
GPU signal (a simulated inventory, no NVML), every claim's GPU is *unknown*. On a backend
whose usage book this server fills (the local ledger: :func:`~dra_jupyter.types.
activity_book_of`), each sample's GPU activity is added to the claims' intervals there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from tornado.ioloop import PeriodicCallback

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.metrics import MetricsHistory, MetricsSource, NoSource, Sample, source_for
from dra_jupyter.metrics.activity import ActivitySettings, Reading
from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.processes import Holder, ProcessUse
from dra_jupyter.metrics.watch import GpuWatch
from dra_jupyter.server.claims import ClaimService
from dra_jupyter.types import ClaimRecord, activity_book_of

T = TypeVar("T")


class Runner(Protocol):
    """Runs a blocking call off the event loop: ``await run(fn, *args)``."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


class MetricsSampler:
    """The metrics of the devices of ``service``'s backend: the latest samples, their
    history of at most ``length`` samples per device, and where they come from."""

    def __init__(
        self,
        service: ClaimService,
        *,
        length: int,
        interval: float,
        read: Runner,
        call: Runner,
        log: logging.Logger | logging.LoggerAdapter[Any],
        activity: ActivitySettings | None = None,
    ) -> None:
        self.service = service
        self.gpu = GpuWatch(activity)
        # called on the loop after each reading of the processes: (their uses, as listed)
        self.on_uses: Callable[[list[ProcessUse], list[DeviceProcess]], None] | None = None
        self.history = MetricsHistory(max(length, 1))
        self.interval = interval
        self.latest: list[Sample] = []
        self.latest_time = 0.0  # when latest was read
        self._read, self._call, self._log = read, call, log
        self._source: MetricsSource | None = None  # made on first use (may probe)
        self._sampler: PeriodicCallback | None = None
        self._sampling: asyncio.Future[list[Sample]] | None = None
        self._problem = ""  # the last sampling error logged
        self._stopped = False

    def start(self) -> None:
        """Sample every ``interval`` seconds (0: never), where the devices are this machine's."""
        if self.interval > 0 and self.service.backend.capabilities.devices_here:
            self._sampler = PeriodicCallback(self._record, self.interval * 1000)
            self._sampler.start()

    async def stop(self) -> None:
        """No more samples; the source, if made, closed."""
        self._stopped = True
        if self._sampler is not None:
            self._sampler.stop()
        if self._source is not None:
            await self._call(self._source.close)

    def use(self, source: MetricsSource) -> None:
        """Read ``source`` from now on (before the first read: a test's NVML)."""
        self._source = source

    def source(self) -> MetricsSource:
        """The backend's metrics (the service's daemon reads them once for every server), else
        the inventory's own source (resolving the inventory on first use); none where the
        devices are not this machine's (it would be this machine's, or made up)."""
        if self._source is None:
            caps = self.service.backend.capabilities
            if caps.devices_here:
                served = self.service.backend.metrics_source()
                self._source = served or source_for(self.service.inventory())
            else:
                self._source = NoSource(
                    f"no device metrics here: the devices of {caps.where} are on the "
                    "cluster's nodes, not on this server's machine; use the cluster's "
                    "monitoring (e.g. the DCGM exporter)"
                )
        return self._source

    def _sample(self, now: float) -> list[Sample]:
        """One sample of every device (blocking: on a worker thread)."""
        source = self.source()
        if isinstance(source, NoSource):
            return []  # nothing to read, so no claims to list either
        held = {device for r in self.service.live_claims(wait=False) for device in r.device_keys}
        return source.sample(held, now)

    async def read_now(self) -> list[Sample]:
        """Read the devices' metrics now; concurrent callers share one read."""
        if self._sampling is None:
            self._sampling = asyncio.ensure_future(self._read_once())
        return await self._sampling

    async def _read_once(self) -> list[Sample]:
        now = time.time()
        try:
            samples = await self._read(self._sample, now)
        finally:
            self._sampling = None
        self.latest, self.latest_time = samples, now
        return samples

    async def _record(self) -> None:
        if self._stopped:
            return
        try:
            samples = await self.read_now()
            self.history.add(samples)
            now = self.latest_time
            self.gpu.feed(now, await self._read(self._gpu_readings, samples, now))
            if self.on_uses is not None and self.gpu.signal:
                self.on_uses(self.gpu.uses, self.gpu.listed)
            reports = self.gpu.take_reports()
            book = activity_book_of(self.service.backend)
            if reports and book is not None:
                await self._call(book.add_activities, reports)
        except DraJupyterError as err:  # e.g. an inventory that cannot be read: say it once
            if str(err) != self._problem:
                self._problem = str(err)
                self._log.warning("dra_jupyter: no device metrics: %s", err)
        else:
            self._problem = ""

    def _gpu_readings(self, samples: list[Sample], now: float) -> dict[str, Reading]:
        """Whose are the processes on the devices, and each live claim's GPU reading
        (blocking: NVML, /proc)."""
        source = self.source()
        if isinstance(source, NoSource):
            return {}
        records = sorted(self.service.live_claims(wait=False), key=lambda r: (r.created, r.name))
        host = self.service.server_owner.host
        return self.gpu.read(source, [holder(r, host) for r in records], samples, now)

    async def current(self, max_age: float = 1.0) -> list[Sample]:
        """The latest samples, read again when older than ``max_age`` seconds."""
        if time.time() - self.latest_time > max_age:
            await self.read_now()
        return self.latest


def holder(record: ClaimRecord, host: str) -> Holder:
    """What :mod:`~dra_jupyter.metrics.processes` reads of a claim: its holder process only
    where it is on this host (a pid elsewhere is another machine's)."""
    pid = record.owner.pid if record.owner.host == host else 0
    return Holder(record.name, tuple(record.device_keys), pid, record.owner.user)

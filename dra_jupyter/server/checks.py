"""The server's checks of its kernels' claims. A pass (:meth:`Checks.check`) follows new
kernels, releases the claims of kernels that are gone and of idle kernels, warns before
idle deadlines, announces claims made in kernels, and the release of those (and of the
REST API's) that another process released; it runs every ``check_interval``, and
at each deadline between (:mod:`dra_jupyter.server.deadlines`). The taints on the claims'
devices are read every ``health_interval`` (:meth:`Checks.check_health`), the reclaim
warnings every ``reclaim_interval`` (:mod:`dra_jupyter.server.reclaims`); where either has
no interval of its own, each pass reads it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from tornado.ioloop import IOLoop, PeriodicCallback

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.processes import ProcessUse
from dra_jupyter.outofservice import Told, unhealthy_events
from dra_jupyter.server import startup
from dra_jupyter.server.claim_events import ClaimEvents
from dra_jupyter.server.claims import ClaimService
from dra_jupyter.server.deadlines import Deadlines
from dra_jupyter.server.idle import Decision
from dra_jupyter.server.idling import Idling
from dra_jupyter.server.kernelactions import KernelActions
from dra_jupyter.server.kernels import ExecutionWatcher
from dra_jupyter.server.reclaims import Reclaims
from dra_jupyter.server.strays import stray_events
from dra_jupyter.types import ClaimRecord, Watching, tainting_of

T = TypeVar("T")


class Host(Protocol):
    """What the checks need of the server extension
    (:class:`~dra_jupyter.server.app.DRAExtensionApp`)."""

    @property
    def log(self) -> Any: ...

    @property
    def stopped(self) -> bool: ...

    def live_kernels(self) -> list[str]: ...

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def read(self, fn: Callable[..., T], *args: Any) -> T: ...


class Checks:
    """The checks of the claims, periodic and at deadlines (see the module)."""

    def __init__(
        self,
        host: Host,
        service: ClaimService,
        *,
        watcher: ExecutionWatcher,
        kernels: KernelActions,
        idling: Idling,
        claim_events: ClaimEvents,
        reclaims: Reclaims | None,
        startup_claim: startup.Held | None,
    ) -> None:
        self.host = host
        self.service = service
        self.watcher = watcher
        self.kernels = kernels
        self.idling = idling
        self.claim_events = claim_events
        self.reclaims = reclaims
        self.startup_claim = startup_claim  # while it lives
        self.deadlines = Deadlines(self.check)
        self.health = Told()
        self.health_watcher: Watching | None = None  # the machine's, run by this server
        # seconds a NoExecute taint leaves the claims on a device of this machine before
        # they are released (None: on a cluster, whose pods are evicted instead)
        self.grace: float | None = None
        self._checker: PeriodicCallback | None = None
        self._health_checker: PeriodicCallback | None = None
        self._reclaim_checker: PeriodicCallback | None = None
        self._problem = ""  # the last error of a pass logged

    def start(
        self,
        health_watcher: Watching | None,
        *,
        check_interval: float,
        health_interval: float,
        reclaim_interval: float,
        health_grace: float = 300.0,
    ) -> None:
        """The periodic checks, each every so many seconds (0: none of its own)."""
        self.health_watcher = health_watcher
        if self.service.backend.capabilities.devices_here:
            self.grace = health_grace
        if check_interval > 0:
            self._checker = PeriodicCallback(self.check, check_interval * 1000)
            self._checker.start()
        backend = self.service.backend
        if (
            health_interval > 0
            and backend.capabilities.devices_here
            and tainting_of(backend) is not None
        ):
            self._health_checker = PeriodicCallback(self.check_health, health_interval * 1000)
            self._health_checker.start()
        if self.reclaims is not None and reclaim_interval > 0:
            self._reclaim_checker = PeriodicCallback(self.reclaims.tick, reclaim_interval * 1000)
            self._reclaim_checker.start()

    def stop(self) -> None:
        for checker in (self._checker, self._health_checker, self._reclaim_checker):
            if checker is not None:
                checker.stop()
        self.deadlines.stop()

    async def check(self) -> None:
        """One pass: follow new kernels, release the claims of kernels that are gone and of
        idle kernels, warn before idle deadlines, announce claims made in kernels. A pass
        that fails (the API server cannot be reached, say) is logged once; the next tries
        again."""
        if self.host.stopped:
            return
        try:
            await self._check()
        except DraJupyterError as err:
            if str(err) != self._problem:
                self._problem = str(err)
                self.host.log.warning("dra_jupyter: checking claims failed: %s", err)
        else:
            self._problem = ""

    async def _check(self) -> None:
        live = set(self.host.live_kernels())
        for kernel_id in live:
            self.kernels.watch(kernel_id)
        for kernel_id in set(self.watcher.watches) - live:
            self.watcher.detach(kernel_id)
        now = time.time()
        await self._keep_startup_claim(now)
        # kernels this server ran that are gone; claims of any kernel whose process is gone
        # (after a server restart, say) are released by the backend's sweep. A claim of a
        # live kernel process not known here may belong to another server on the ledger.
        gone = self.kernels.known_kernels - live

        def select(record: ClaimRecord) -> str | None:
            return "kernel-shutdown" if record.owner.kernel_id in gone else None

        due: list[float] = []
        records = await self.host.call(
            self.service.live_claims, self.idling.idle_or(select, now), now
        )
        await self._released_elsewhere({r.name for r in records}, now)
        for record in records:
            if record.owner.kernel_id not in live or self.claim_events.released_since(record):
                continue  # another kernel's; or released since this pass read it
            if record.name not in self.claim_events.seen and record.owner.pid != (
                self.service.server_owner.pid
            ):
                self.claim_events.emit_allocated(record, "kernel")
            self.idling.maybe_warn(record, now)
            due.extend(self.idling.moments(record, now))
        due.extend(self._idle_joiners(now, {r.owner.kernel_id for r in records}))
        self.deadlines.at(min((t for t in due if t > now), default=None))
        if self._health_checker is None:
            await self.check_health()
        if self.reclaims is not None and self._reclaim_checker is None:
            await self.reclaims.tick()

    async def _released_elsewhere(self, live: set[str], now: float) -> None:
        """Announce the claims announced allocated that another process released since (a
        kernel's ``c.release()``, ``dra-jupyter release``, a lease ended as another
        process read the ledger), with the reason the backend recorded (none where it
        keeps none: Kubernetes)."""
        gone = self.claim_events.gone(live, now)
        for name, created in gone.items():
            try:
                ended = await self.host.read(self.service.backend.ended, name)
            except DraJupyterError as err:
                self.host.log.debug("dra_jupyter: reading why %s went: %s", name, err)
                continue
            if ended is not None and abs(ended.record.created - created) < 1e-3:
                self.claim_events.emit_gone(ended)

    def _idle_joiners(self, now: float, holders: set[str | None]) -> list[float]:
        """Kernels in pods of a claim they joined own no claim for idle release to delete:
        an idle one leaves its pod (:meth:`KernelActions.leave_joined`), and the claim stays.
        One that holds claims of its own (the maker of the claim it joined, say) leaves with
        their release instead (:meth:`KernelActions.on_claim_released`). Each is warned
        ``idle_warning`` before, as a holder is, that its pod stops and the claim stays.
        Their warnings' and deadlines' moments, for the next pass."""
        due = []
        policy = self.idling.policy
        warned = self.claim_events.joiner_warned
        for kernel_id, devices in self.kernels.joiners().items():
            execution = self.watcher.execution(kernel_id)
            if execution is None or kernel_id in holders:
                continue
            deadline = policy.deadline(execution.last_execute, 0.0)
            decision = policy.decide(
                now=now, busy=execution.busy, deadline=deadline, warned_for=warned.get(kernel_id)
            )
            if decision is Decision.RELEASE:
                warned.pop(kernel_id, None)
                self.kernels.leaving.add(kernel_id)  # once: the move takes a while
                IOLoop.current().spawn_callback(
                    self.kernels.leave_joined, kernel_id, devices, "idle"
                )
                continue
            if decision is Decision.WARN and deadline is not None:
                user = self.service.server_owner.user
                self.claim_events.emit_joiner_idle_warning(
                    kernel_id, devices.join, user, deadline, now
                )
            if deadline is not None and not execution.busy:
                due += [deadline - policy.warning, deadline]
        return due

    async def check_health(self) -> None:
        """Tell the holders of devices taken out of service, once each, with the clock time
        of the release of a ``NoExecute`` taint; release them once its grace is over, on
        every backend of this machine, simulated devices too, with or without the health
        watcher (:mod:`dra_jupyter.outofservice`)."""
        tainting = tainting_of(self.service.backend)
        if self.host.stopped or tainting is None:
            return
        if self.grace is not None:
            try:
                await self.host.call(self.service.release_taken_out, self.grace)
            except DraJupyterError as err:
                self.host.log.debug("dra_jupyter: releasing off taken-out devices: %s", err)
        live = set(self.host.live_kernels())
        try:
            records = await self.host.read(partial(self.service.live_claims, wait=False))
            held = [r for r in records if r.owner.kernel_id in live]
            taints = await self.host.read(tainting.taints) if held else []
        except DraJupyterError as err:
            self.host.log.debug("dra_jupyter: reading taints failed: %s", err)
            return
        for event in self.health.new(unhealthy_events(held, taints, self.grace)):
            self.host.log.warning(
                "dra_jupyter: kernel %s: %s", event["kernel_id"], event["message"]
            )
            self.claim_events.emit_device_unhealthy(event)

    def cell_ended(self, kernel_id: str) -> None:
        """A cell ended: its claims' deadlines start now, and a claim it made is new: a
        check soon, to time them (as the periodic check would, up to check_interval later)."""
        if self.reclaims is not None:
            IOLoop.current().spawn_callback(self.reclaims.report, kernel_id, busy=False)
        self.deadlines.soon()

    def cell_started(self, kernel_id: str) -> None:
        if self.reclaims is not None:  # the service hears of the cell: it is not idle
            IOLoop.current().spawn_callback(self.reclaims.report, kernel_id, busy=True)

    def strays(self, uses: list[ProcessUse], listed: list[DeviceProcess]) -> None:
        """The user's processes on GPUs none of their claims holds: said once each."""
        events = stray_events(os.getuid(), uses, listed)  # the server runs as its user
        for event in self.claim_events.emit_gpu_processes(events):
            self.host.log.warning("dra_jupyter: %s", event["message"])

    async def _keep_startup_claim(self, now: float) -> None:
        """The startup claim is as active as the server's kernels: a cell that ran since the
        last check records activity on it (what the service's ``idle`` limit measures)."""
        held = self.startup_claim
        if held is None:
            return
        ran = max((w.execution.last_execute for w in self.watcher.watches.values()), default=0.0)
        if ran <= held.kept:
            return
        held.kept = now
        if self.reclaims is not None:  # activity, not a Keep (a Keep under pressure is bounded)
            kept = await self.reclaims.active(held.name)
        else:
            kept = await self.host.call(self.service.backend.touch, held.name, now)
        if not kept:
            self.host.log.warning("dra_jupyter: the claim %s made at start is gone", held.name)
            self.startup_claim = None

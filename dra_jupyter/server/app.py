"""The Jupyter server extension ``dra_jupyter``: REST API, kernel ownership, idle release,
on the local backend (this machine, the ledger) or the Kubernetes backend (ResourceClaims
in a namespace, labelled with this server's id).

Configure with ``c.DRAExtensionApp.<trait>`` (``jupyter server --help-all`` lists them).
Nothing is probed when the extension loads: the inventory is resolved on first use.

This module is the wiring: the traits that are settings fields come from
:mod:`~dra_jupyter.server.config`, the checks of the claims and their deadlines are
:mod:`~dra_jupyter.server.checks` and :mod:`~dra_jupyter.server.deadlines`, what happens as
kernels start, restart and stop is :mod:`~dra_jupyter.server.kernelactions`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from jupyter_events import EventLogger
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp
from tornado.ioloop import IOLoop
from traitlets import Bool, Float, Int, Unicode, default, validate

from dra_jupyter.errors import DraJupyterError, UnavailableError
from dra_jupyter.metrics.activity import ActivitySettings
from dra_jupyter.server import givenspecs, kernelasks, startup
from dra_jupyter.server.checks import Checks
from dra_jupyter.server.claim_events import RELEASED, ClaimEvents, register_schemas
from dra_jupyter.server.claims import ClaimService
from dra_jupyter.server.config import settings_of, settings_trait
from dra_jupyter.server.handlers import DRAApp, routes
from dra_jupyter.server.idle import IdlePolicy
from dra_jupyter.server.idling import Idling
from dra_jupyter.server.kernelactions import KERNEL_ACTIONS, KernelActions
from dra_jupyter.server.kernelasks import kernel_ask_env, server_url
from dra_jupyter.server.kernels import (
    ExecutionWatcher,
    install_kernel_env,
    kernel_env,
    uninstall_kernel_env,
)
from dra_jupyter.server.pushes import Pushes
from dra_jupyter.server.reclaims import Reclaims
from dra_jupyter.server.runs import RunService
from dra_jupyter.server.sampling import MetricsSampler
from dra_jupyter.server.terminals import put_scripts_on_terminal_path
from dra_jupyter.server.watching import start_watcher
from dra_jupyter.server.writer import Writer
from dra_jupyter.settings import check_server_id
from dra_jupyter.types import ClaimRecord, Watching, reclaiming_of

T = TypeVar("T")

READERS = 2  # threads for reads (SQLite releases the GIL while it reads)


class DRAExtensionApp(ExtensionApp):
    """GPUs, MIG slices and TPUs for the kernels of this server, given back when idle."""

    name = "dra_jupyter"
    extension_url = "/dra/api/devices"
    load_other_extensions = True

    # Settings fields: their kinds, defaults (the environment's) and help are config.py's
    backend = settings_trait("backend")
    namespace = settings_trait("namespace")
    kubeconfig = settings_trait("kubeconfig")
    shared_view_url = settings_trait("shared_view_url")
    server_id = settings_trait("server_id")
    inventory = settings_trait("inventory")
    ledger = settings_trait("ledger")
    reclaim = settings_trait("reclaim")
    reclaim_grace = settings_trait("reclaim_grace")
    keeps_under_pressure = settings_trait("keeps_under_pressure")
    reclaim_idle = settings_trait("reclaim_idle")

    idle_timeout = Float(
        3600.0,
        config=True,
        help="""Seconds a kernel may execute nothing before its claims are released
        (widget/comm traffic and API polling do not count; a running cell is never idle).
        0 turns idle release off.""",
    )
    idle_warning = Float(
        300.0,
        config=True,
        help="Seconds before the idle deadline at which the idle warning event is emitted.",
    )
    check_interval = Float(
        30.0,
        config=True,
        help="""Seconds between checks for idle claims and claims of kernels that are gone.
        A device comes back at most this long after its deadline.""",
    )
    health_interval = Float(
        1.0,
        config=True,
        help="""Seconds between reads of the taints on the devices of this server's kernels'
        claims, where the devices are this machine's: a device taken out of service (an
        admin's taint, the health watcher's) is told to its holder within about this long.
        On Kubernetes each periodic check reads them. 0: only with each check.""",
    )
    health_watch = Bool(
        True,
        config=True,
        help="""On the embedded backend whose devices are read through NVML, run the
        machine's health watcher (dra_jupyter.local.watcher) in this server, unless one
        runs already for its ledger (dra-jupyter health --watch, another server): a GPU
        that fails is taken out of service. False: leave it to dra-jupyter health --watch.""",
    )
    reclaim_interval = Float(
        1.0,
        config=True,
        help="""On the shared-machine service and the embedded ledger: seconds between reads
        of the reclaim warnings (another user waits for an idle claim's devices: the
        reclaim_warning event; on the embedded ledger each read takes a turn of reclaim
        under pressure), and between checks of running cells to report (every 30 s each).
        0: with each check.""",
    )
    release_on_stop = Bool(
        True,
        config=True,
        help="""Release the claims of this server's kernels (and those made through its REST
        API) when the server stops. False keeps them; they are reclaimed once their
        process is gone.""",
    )
    max_devices_per_user = Int(
        0,
        config=True,
        help="""Most devices one user may hold through the REST API (counting every claim
        of that user in the ledger); 0 means no limit.""",
    )
    watch = Bool(
        True,
        config=True,
        help="""Kubernetes backend: keep this server's views of the cluster by listing once
        and then watching (its namespace's claims, pods and runs' Jobs; the cluster's devices
        for the Devices panel), and push their changes to JupyterLab. False reads from the API
        server on every read and pushes nothing: for comparison only (a LIST per read).""",
    )
    unattached_lease = Float(
        8 * 3600.0,
        config=True,
        help="""Seconds of lease a claim made through the REST API for no kernel gets when it
        asks for none (the Devices panel's form with its notebook unticked): it is released
        then, as dra.request(lease=...) would be, instead of being held until the server
        stops. 0: no lease. Not on Kubernetes, whose claims have no lease.""",
    )
    terminal_path = Bool(
        True,
        config=True,
        help="""Put the folder of this environment's scripts (where dra-jupyter is) first
        on the PATH of JupyterLab's terminals, whose login shells otherwise lose it
        (Debian's /etc/profile sets PATH anew). Not done when
        ServerApp.terminado_settings names a shell_command, or for a shell that is not
        POSIX (sh, bash, dash, zsh, ksh).""",
    )
    allow_admin_view = Bool(
        False,
        config=True,
        help="""Let admins see and release everyone's claims: users whom the authorizer
        allows 'read' on the resource 'dra-admin'.""",
    )

    startup_request = Unicode(
        config=True,
        help="""Devices this server gets as it starts, as a JSON object of dra.request
        keywords ('{"gpu": 1}', '{"mig": "3g.71gb"}'): claimed for the server's user and
        held by the server (the shared-machine service applies that user's limits), their
        environment (CUDA_VISIBLE_DEVICES and the like) the server's and every kernel's,
        released when the server stops. A refusal stops the server. JupyterHub's
        dra_jupyter.hub spawners set it from the spawn form. Default:
        $DRA_JUPYTER_STARTUP_REQUEST, else none.""",
    )
    startup_lease = Unicode(
        config=True,
        help="""The lease of the startup_request's claim ('8h'; empty: the backend's
        default). Default: $DRA_JUPYTER_STARTUP_LEASE.""",
    )
    startup_report = Unicode(
        config=True,
        help="""A file to write what came of startup_request to, as one JSON object (what a
        spawner waits for). Default: $DRA_JUPYTER_STARTUP_REPORT, else none.""",
    )

    metrics_interval = Float(
        2.0,
        config=True,
        help="""Seconds between samples of the devices' metrics (memory, utilisation,
        temperature; NVML, or simulated for a simulated inventory) kept for GET
        /dra/api/metrics. 0 turns the history off (the current values are still read on
        request).""",
    )
    gpu_active_threshold = Float(
        5.0,
        config=True,
        help="""Percent of GPU utilisation (a claim's own processes', where NVML samples
        them per process; else its devices') at or over which a claim's GPU counts as
        active. A kernel whose GPU was active within gpu_window is not idle, whether or not
        it executes anything.""",
    )
    gpu_window = Float(
        60.0,
        config=True,
        help="""Seconds a GPU reading counts: a claim is GPU-active when its utilisation was
        at or over gpu_active_threshold within the last gpu_window seconds; with no reading
        that long, its GPU signal is missing (and idle release is as without it). GPU
        readings are taken with the metrics (metrics_interval; 0: none).""",
    )
    gpu_idle_timeout = Float(
        3600.0,
        config=True,
        help="""Seconds after which a claim whose GPU is not active is GPU-idle (shown, and
        logged; released when release_gpu_idle is on), whether its kernel runs a cell or
        not.""",
    )
    release_gpu_idle = Bool(
        False,
        config=True,
        help="""Release the claims of kernels whose GPU is idle for gpu_idle_timeout (reason
        gpu-idle), even while a cell runs (a kernel blocked in input() or a long sleep); an
        idle warning comes idle_warning seconds before. Off: they are only shown and
        logged.""",
    )
    metrics_history = Int(
        900,
        config=True,
        help="Most metric samples kept per device (a ring buffer; 900 x 2 s = 30 minutes).",
    )

    @validate("server_id")
    def _valid_server_id(self, proposal: Any) -> str:
        return check_server_id(proposal["value"], "c.DRAExtensionApp.server_id")

    @default("startup_request")
    def _default_startup_request(self) -> str:
        return os.environ.get(startup.REQUEST_ENV, "")

    @default("startup_lease")
    def _default_startup_lease(self) -> str:
        return os.environ.get(startup.LEASE_ENV, "")

    @default("startup_report")
    def _default_startup_report(self) -> str:
        return os.environ.get(startup.REPORT_ENV, "")

    # --- set up ------------------------------------------------------------------------------

    @property
    def server(self) -> ServerApp:
        if self.serverapp is None:
            raise RuntimeError("dra_jupyter: the extension is not linked to a server yet")
        return self.serverapp

    @property
    def events(self) -> EventLogger:
        if self.server.event_logger is None:
            raise RuntimeError("dra_jupyter: the server has no event logger")
        return self.server.event_logger

    def initialize_settings(self) -> None:
        if self.terminal_path:  # before jupyter_server_terminals reads it (names load sorted)
            put_scripts_on_terminal_path(self.server.terminado_settings)
        settings = settings_of(self)
        self.service = ClaimService(
            settings,
            live_kernels=self.live_kernels,
            max_devices_per_user=self.max_devices_per_user,
            unattached_lease=self.unattached_lease,
            watch=self.watch,
        )
        self.runs = RunService(self.service)
        self.watcher = ExecutionWatcher()  # told of cells and restarts asked: below
        self.claim_events = ClaimEvents(self.events, self.service.released)
        backend = reclaiming_of(self.service.backend)  # reclaim under pressure: reclaims.py
        self.reclaims = None
        if backend is not None:
            self.reclaims = Reclaims(
                backend,
                read=self.read,
                claims=partial(self.read, partial(self.service.live_claims, wait=False)),
                live_kernels=self.live_kernels,
                busy_kernels=self.watcher.busy,
                emit=self.claim_events.emit_reclaim_warning,
                clock=time.time,
                log=self.log,
            )
        # kernel -> restarts with claims under way, whose "restart" event must not release
        self.keeping: dict[str, int] = {}
        self.kernel_actions = KernelActions(
            self, self.service, self.watcher, self.claim_events.emit_kernel_moved
        )
        # Writes on one thread, many requests per commit (writer.py); reads on their own
        # threads, so that they never wait behind a write (WAL readers: no lock).
        self._writer = Writer(self.service.batch)
        self._readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="dra-read")
        self._watcher: Watching | None = None  # the machine's health watcher, when run here
        self.stopped = False
        self.kernel_secret = kernelasks.new_secret()  # what its kernels ask with
        self.pushes = Pushes(lambda: self.service.backend, self.events.emit)  # to the lab
        self.pushes.listen()
        self.metrics = MetricsSampler(
            self.service,
            length=self.metrics_history,
            interval=self.metrics_interval,
            read=self.read,
            call=self.call,
            log=self.log,
            activity=ActivitySettings(
                threshold=self.gpu_active_threshold,
                window=self.gpu_window,
                idle_timeout=self.gpu_idle_timeout,
            ),
        )
        self.idling = Idling(
            IdlePolicy(self.idle_timeout, self.idle_warning),
            self,  # its traits, read at each use
            watcher=self.watcher,
            metrics=self.metrics,
            claim_events=self.claim_events,
            log=self.log,
        )
        if settings.backend == "kubernetes":  # kernels get the namespace the server uses
            settings = replace(settings, namespace=self.service.backend.namespace)
        try:  # a spawner's kernel specs: a profile's devices in kernel pods (givenspecs.py)
            self.given_specs = givenspecs.install(self.server, os.environ)
        except DraJupyterError as err:
            self.log.error("dra_jupyter: %s", err)
            raise SystemExit(1) from err
        held: startup.Held | None = None
        startup_env: dict[str, str] = {}
        if self.startup_request:  # its environment becomes the server's and its kernels'
            held, startup_env = startup.claim_for_server(
                self.service,
                self.startup_request,
                self.startup_lease,
                self.startup_report,
                self.log,
            )
        self.checks = Checks(
            self,
            self.service,
            watcher=self.watcher,
            kernels=self.kernel_actions,
            idling=self.idling,
            claim_events=self.claim_events,
            reclaims=self.reclaims,
            startup_claim=held,
        )
        self.watcher.on_cell_end = self.checks.cell_ended
        self.watcher.on_cell_start = self.checks.cell_started
        self.watcher.on_restart_asked = lambda k, asked: IOLoop.current().spawn_callback(
            self.kernel_actions.restart_asked, k, asked
        )
        self.metrics.on_uses = self.checks.strays
        asks = settings.backend == "kubernetes"  # kernels ask it, not the cluster: kernelasks.py
        install_kernel_env(
            self.server.kernel_manager,
            lambda kernel_id: {
                **startup_env,
                **kernel_env(kernel_id, settings, self.idle_timeout),
                # its address once it listens (a port it was given may have been taken)
                **(kernel_ask_env(server_url(self.server), self.kernel_secret) if asks else {}),
            },
        )
        logger = self.events
        register_schemas(logger)
        logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self.kernel_actions.on_kernel_action)
        logger.add_listener(schema_id=RELEASED, listener=self.kernel_actions.on_claim_released)

    def initialize_handlers(self) -> None:
        # the kernels' question first: routes() ends with the fallback of every /dra/api path
        self.handlers.extend([(kernelasks.ROUTE, kernelasks.PossibleHandler), *routes()])

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self.pushes.start()
        # once, so that a log read later says which claims this server answers for (a
        # server left running across a restart of the cluster talks to the old address)
        self.log.info("dra_jupyter: claims are kept in %s", self.service.backend.where())
        await self.checks.check()  # reconcile the ledger with the live kernels at once
        grace = self.service.session.settings.health_grace
        if self.health_watch:
            self._watcher = start_watcher(self.service.backend, grace, self.log)
        self.checks.start(
            self._watcher,
            health_grace=grace,
            check_interval=self.check_interval,
            health_interval=self.health_interval,
            reclaim_interval=self.reclaim_interval,
        )
        self.metrics.start()

    async def stop_extension(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.checks.stop()
        self.pushes.stop()
        if self._watcher is not None:
            self._watcher.stop()
        await self.metrics.stop()
        self.events.remove_listener(
            schema_id=KERNEL_ACTIONS, listener=self.kernel_actions.on_kernel_action
        )
        uninstall_kernel_env(self.server.kernel_manager)
        givenspecs.remove(self.given_specs)
        self.watcher.detach_all()
        if self.release_on_stop:
            ours = self.kernel_actions.known_kernels | set(self.live_kernels())
            owner = self.service.server_owner

            def select(record: ClaimRecord) -> str | None:
                made_here = record.owner.host == owner.host and record.owner.pid == owner.pid
                return "server-stop" if made_here or record.owner.kernel_id in ours else None

            try:
                await self.call(self.service.live_claims, select)
            except DraJupyterError as err:  # the server stops all the same
                self.log.warning("dra_jupyter: releasing claims at stop failed: %s", err)
        self._writer.shutdown()
        self._readers.shutdown(wait=True)
        self.service.backend.close()  # its watched views (Kubernetes), after the last read

    # --- what the handlers and the parts call -------------------------------------------------

    def live_kernels(self) -> list[str]:
        return list(self.server.kernel_manager.list_kernel_ids())

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call that may write on the writer thread (calls never overlap;
        the answer comes once its batch is committed)."""
        try:
            return await asyncio.wrap_future(self._writer.submit(partial(fn, *args)))
        except RuntimeError as error:
            raise self._stopping(error) from error
        finally:
            self.claim_events.emit_releases()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking read on a reader thread: it does not wait for the writer."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._readers, partial(fn, *args))
        except RuntimeError as error:
            raise self._stopping(error) from error
        finally:
            self.claim_events.emit_releases()

    def _stopping(self, error: RuntimeError) -> Exception:
        """A request that came after the threads stopped (the lab polls while the server
        stops): a 503 in one line, not a 500 with a traceback; any other error as it is."""
        said = str(error)  # the executor's, the writer's
        if self.stopped and ("after shutdown" in said or "is shut down" in said):
            return UnavailableError("the Jupyter server is stopping; try again once it is back")
        return error

    async def wait(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call that may take seconds (a run's cancel waits for its end) on
        a thread of its own: neither the writer nor the readers wait behind it."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, partial(fn, *args))
        finally:
            self.claim_events.emit_releases()

    async def check(self) -> None:
        """One pass of the checks of the claims, now (:meth:`Checks.check`)."""
        await self.checks.check()

    async def check_health(self) -> None:
        """Tell the holders of devices taken out of service (:meth:`Checks.check_health`)."""
        await self.checks.check_health()


_SERVES_HANDLERS: type[DRAApp] = DRAExtensionApp  # what the handlers read of it, checked

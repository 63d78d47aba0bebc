"""The Jupyter server extension ``dra_jupyter``: REST API, kernel ownership, idle release,
on the local backend (this machine, the ledger) or the Kubernetes backend (ResourceClaims
in a namespace, labelled with this server's id).

Configure with ``c.DRAExtensionApp.<trait>`` (``jupyter server --help-all`` lists them).
Nothing is probed when the extension loads: the inventory is resolved on first use.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from jupyter_events import EventLogger
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp
from tornado.ioloop import IOLoop, PeriodicCallback
from traitlets import Bool, Enum, Float, Int, Unicode, default, validate

from dra_jupyter.backends import resolve_backend
from dra_jupyter.errors import DraJupyterError, InvalidInputError, KernelRestartError
from dra_jupyter.metrics.activity import ActivitySettings
from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.processes import ProcessUse
from dra_jupyter.outofservice import DEVICE_MOVED, Told, unhealthy_events
from dra_jupyter.server import givenspecs, startup
from dra_jupyter.server.claim_events import RELEASED, ClaimEvents, register_schemas
from dra_jupyter.server.claims import Caller, ClaimService, release_message
from dra_jupyter.server.handlers import DRAApp, routes
from dra_jupyter.server.idle import IdlePolicy
from dra_jupyter.server.idling import Idling
from dra_jupyter.server.kernels import (
    ExecutionWatcher,
    install_kernel_env,
    kernel_env,
    uninstall_kernel_env,
)
from dra_jupyter.server.moves import MOVED, Moves, PodDevices, checked_claim, pod_devices
from dra_jupyter.server.reclaims import Reclaims
from dra_jupyter.server.runs import RunService
from dra_jupyter.server.sampling import MetricsSampler
from dra_jupyter.server.strays import stray_events
from dra_jupyter.server.terminals import put_scripts_on_terminal_path
from dra_jupyter.server.watching import start_watcher
from dra_jupyter.server.writer import Writer
from dra_jupyter.settings import (
    BackendName,
    Settings,
    check_server_id,
    default_server_id,
)
from dra_jupyter.types import ClaimRecord, Watching, reclaiming_of, tainting_of

T = TypeVar("T")

KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"
READERS = 2  # threads for reads (SQLite releases the GIL while it reads)


class DRAExtensionApp(ExtensionApp):
    """GPUs, MIG slices and TPUs for the kernels of this server, given back when idle."""

    name = "dra_jupyter"
    extension_url = "/dra/api/devices"
    load_other_extensions = True

    backend = Enum(
        ["local", "service", "kubernetes"],
        config=True,
        help="""Where the claims of this server's kernels and REST API are made: 'local'
        (this machine's devices, the embedded allocator and the SQLite ledger), 'service'
        (this machine's dra-jupyter service, over $DRA_JUPYTER_SOCKET) or 'kubernetes'
        (ResourceClaims in a namespace, allocated by kube-scheduler for the pods that use
        them). Kernels get the same backend. Default: $DRA_JUPYTER_BACKEND ('auto':
        kubernetes in a pod with a service account, else service where it is installed,
        else local), else 'service' where the service is installed (its socket
        $DRA_JUPYTER_SOCKET or its policy file $DRA_JUPYTER_SERVICE_CONFIG exists), else
        'local'.""",
    )
    namespace = Unicode(
        config=True,
        help="""Kubernetes backend: the namespace of the claims. Default:
        $DRA_JUPYTER_NAMESPACE, else the pod's, else the kubeconfig context's, else
        'default'.""",
    )
    kubeconfig = Unicode(
        config=True,
        help="""Kubernetes backend: a kubeconfig file (given to the kernels too). Default:
        $DRA_JUPYTER_KUBECONFIG, else the pod's service account, $KUBECONFIG,
        ~/.kube/config.""",
    )
    server_id = Unicode(
        config=True,
        help="""This server's id, a Kubernetes label value: every claim of its kernels and
        REST API is labelled dra-jupyter/server=<id>, and the server releases the claims
        so labelled whose kernel is gone (at start too: what a restarted server finds of
        its previous kernels). It must be stable across restarts and unique per
        namespace. Default: $DRA_JUPYTER_SERVER_ID, else the host name as a DNS label (a
        notebook pod's name, e.g. jupyter-alice under zero-to-jupyterhub); two servers on
        one host that share a namespace need their own.""",
    )
    inventory = Unicode(
        config=True,
        help="""Where devices come from: 'auto' (NVML when it finds GPUs, else the simulated
        'h200-8x'), 'nvml', a bundled simulated inventory ('h200-8x', 'h100-8x', 'h200-mig',
        'workstation-4gpu', 'tpu-v5e-8', 'mi300x-8') or a YAML file of ResourceSlices.
        Default: $DRA_JUPYTER_INVENTORY, else 'auto'.""",
    )
    ledger = Unicode(
        config=True,
        help="""Path of the claim ledger (a SQLite file shared by every process and user of
        the machine). Default: $DRA_JUPYTER_LEDGER, else
        $XDG_STATE_HOME/dra-jupyter/ledger.sqlite.""",
    )
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
    reclaim = Bool(
        config=True,
        help="""On the embedded ledger: reclaim under pressure (while a request waits, idle
        holders whose release would let it in are warned, then released), given to the
        kernels too. Default: $DRA_JUPYTER_RECLAIM, else True.""",
    )
    reclaim_grace = Float(
        config=True,
        help="""On the embedded ledger: seconds from a reclaim warning to the release, given
        to the kernels too. Default: $DRA_JUPYTER_RECLAIM_GRACE, else 300.""",
    )
    keeps_under_pressure = Int(
        config=True,
        help="""On the embedded ledger: Keeps a warned holder may use while someone waits,
        given to the kernels too. Default: $DRA_JUPYTER_KEEPS_UNDER_PRESSURE, else 1.""",
    )
    reclaim_idle = Float(
        config=True,
        help="""On the embedded ledger: seconds without activity (a cell, a Keep) before a
        holder counts as idle for reclaim under pressure, given to the kernels too.
        Default: $DRA_JUPYTER_RECLAIM_IDLE, else 600.""",
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

    @default("backend")
    def _default_backend(self) -> str:
        return resolve_backend(Settings.from_env())

    @default("namespace")
    def _default_namespace(self) -> str:
        return Settings.from_env().namespace

    @default("kubeconfig")
    def _default_kubeconfig(self) -> str:
        return Settings.from_env().kubeconfig or ""

    @default("server_id")
    def _default_server_id(self) -> str:
        return Settings.from_env().server_id or default_server_id()

    @validate("server_id")
    def _valid_server_id(self, proposal: Any) -> str:
        return check_server_id(proposal["value"], "c.DRAExtensionApp.server_id")

    @default("inventory")
    def _default_inventory(self) -> str:
        return Settings.from_env().inventory

    @default("ledger")
    def _default_ledger(self) -> str:
        return str(Settings.from_env().ledger)

    @default("reclaim")
    def _default_reclaim(self) -> bool:
        return Settings.from_env().reclaim

    @default("reclaim_grace")
    def _default_reclaim_grace(self) -> float:
        return Settings.from_env().reclaim_grace

    @default("keeps_under_pressure")
    def _default_keeps_under_pressure(self) -> int:
        return Settings.from_env().keeps_under_pressure

    @default("reclaim_idle")
    def _default_reclaim_idle(self) -> float:
        return Settings.from_env().reclaim_idle

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
        settings = replace(
            Settings.from_env(),
            backend=_backend_name(self.backend),
            inventory=self.inventory,
            # absolute: kernels start in their notebook's folder, and must share this file
            ledger=Path(self.ledger).expanduser().resolve(),
            namespace=self.namespace,
            kubeconfig=str(Path(self.kubeconfig).expanduser().resolve())
            if self.kubeconfig
            else None,
            server_id=self.server_id,
            reclaim=self.reclaim,
            reclaim_grace=self.reclaim_grace,
            keeps_under_pressure=self.keeps_under_pressure,
            reclaim_idle=self.reclaim_idle,
        )
        self.service = ClaimService(
            settings,
            live_kernels=self.live_kernels,
            max_devices_per_user=self.max_devices_per_user,
        )
        self.runs = RunService(self.service)
        self.watcher = ExecutionWatcher(
            on_cell_end=self._cell_ended,
            on_cell_start=self._cell_started,
            on_restart_asked=lambda k, asked: IOLoop.current().spawn_callback(
                self._restart_asked, k, asked
            ),
        )
        self.known_kernels: set[str] = set()  # every kernel this server has run
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
        self.moves = Moves(
            self, self._kernel_claims, self._release_named, self.claim_events.emit_kernel_moved
        )
        # kernel -> restarts with claims under way, whose "restart" event must not release
        self.keeping: dict[str, int] = {}
        # Writes on one thread, many requests per commit (writer.py); reads on their own
        # threads, so that they never wait behind a write (WAL readers: no lock).
        self._writer = Writer(self.service.batch)
        self._readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="dra-read")
        self._checker: PeriodicCallback | None = None
        self._health_checker: PeriodicCallback | None = None
        self._reclaim_checker: PeriodicCallback | None = None
        self.health = Told()
        self._watcher: Watching | None = None
        self._due: tuple[float, object] | None = None  # the next deadline's timer: (when, handle)
        self._stopped = False
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
        self.metrics.on_uses = self._strays
        self.idling = Idling(
            IdlePolicy(self.idle_timeout, self.idle_warning),
            self,  # its traits, read at each use
            watcher=self.watcher,
            metrics=self.metrics,
            claim_events=self.claim_events,
            log=self.log,
        )
        self._check_problem = ""  # the last error of a check pass logged
        if settings.backend == "kubernetes":  # kernels get the namespace the server uses
            settings = replace(settings, namespace=self.service.backend.namespace)
        try:  # a spawner's kernel specs: a profile's devices in kernel pods (givenspecs.py)
            self.given_specs = givenspecs.install(self.server, os.environ)
        except DraJupyterError as err:
            self.log.error("dra_jupyter: %s", err)
            raise SystemExit(1) from err
        self.startup_env: dict[str, str] = {}
        self.startup_claim: str | None = None  # its name while it lives
        self._startup_kept = 0.0  # when its activity was last recorded
        if self.startup_request:
            self._claim_at_start()
        install_kernel_env(
            self.server.kernel_manager,
            lambda kernel_id: {
                **self.startup_env,
                **kernel_env(kernel_id, settings, self.idle_timeout),
            },
        )
        logger = self.events
        register_schemas(logger)
        logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)
        logger.add_listener(schema_id=RELEASED, listener=self._on_claim_released)

    def _claim_at_start(self) -> None:
        """The claim of ``startup_request`` (:mod:`dra_jupyter.server.startup`), made now: its
        environment becomes this server's and its kernels'; a refusal stops the server."""
        try:
            request = startup.parse_request(self.startup_request)
            record, env = startup.claim_at_start(self.service, request, self.startup_lease or None)
        except DraJupyterError as err:
            outcome = startup.failed(err)
            self._report(outcome)
            self.log.error("dra_jupyter: the devices asked for at start: %s", outcome["message"])
            raise SystemExit(1) from err
        os.environ.update(env)  # the server's own processes (terminals) too
        self.startup_env = env
        self.startup_claim, self._startup_kept = record.name, time.time()
        self._report(startup.succeeded(record, env))
        self.log.info(
            "dra_jupyter: claim %s at start: %s", record.name, ", ".join(record.device_keys)
        )

    def _report(self, outcome: dict[str, Any]) -> None:
        if self.startup_report:
            try:
                startup.report(self.startup_report, outcome)
            except OSError as err:
                self.log.warning("dra_jupyter: %s cannot be written: %s", self.startup_report, err)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        await self.check()  # reconcile the ledger with the live kernels at once
        if self.check_interval > 0:
            self._checker = PeriodicCallback(self.check, self.check_interval * 1000)
            self._checker.start()
        backend = self.service.backend
        if self.health_watch:
            grace = self.service.session.settings.health_grace
            self._watcher = start_watcher(backend, grace, self.log)
        if (
            self.health_interval > 0
            and backend.capabilities.devices_here
            and tainting_of(backend) is not None
        ):
            self._health_checker = PeriodicCallback(self.check_health, self.health_interval * 1000)
            self._health_checker.start()
        if self.reclaims is not None and self.reclaim_interval > 0:
            self._reclaim_checker = PeriodicCallback(
                self.reclaims.tick, self.reclaim_interval * 1000
            )
            self._reclaim_checker.start()
        self.metrics.start()

    async def stop_extension(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for checker in (self._checker, self._health_checker, self._reclaim_checker):
            if checker is not None:
                checker.stop()
        if self._watcher is not None:
            self._watcher.stop()
        self._schedule(None)
        await self.metrics.stop()
        self.events.remove_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)
        uninstall_kernel_env(self.server.kernel_manager)
        givenspecs.remove(self.given_specs)
        self.watcher.detach_all()
        if self.release_on_stop:
            ours = self.known_kernels | set(self.live_kernels())
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

    # --- helpers for the handlers -----------------------------------------------------------

    def live_kernels(self) -> list[str]:
        return list(self.server.kernel_manager.list_kernel_ids())

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call that may write on the writer thread (calls never overlap;
        the answer comes once its batch is committed)."""
        try:
            return await asyncio.wrap_future(self._writer.submit(partial(fn, *args)))
        finally:
            self.claim_events.emit_releases()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking read on a reader thread: it does not wait for the writer."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._readers, partial(fn, *args))
        finally:
            self.claim_events.emit_releases()

    async def wait(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call that may take seconds (a run's cancel waits for its end) on
        a thread of its own: neither the writer nor the readers wait behind it."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, partial(fn, *args))
        finally:
            self.claim_events.emit_releases()

    async def restart_with_claims(self, kernel_id: str) -> tuple[list[ClaimRecord], dict[str, str]]:
        """Restart a kernel of this server keeping its claims, with their environment
        (``CUDA_VISIBLE_DEVICES`` and friends) in the new kernel's. Returns the claims and
        that environment."""
        if not self.service.backend.capabilities.devices_here:
            # Kubernetes: the devices go to pods, so the kernel moves into one with them
            return await self.moves.to_pod(kernel_id), {}
        records = await self.call(self.service.adopt_kernel_claims, kernel_id)
        env = await self.call(self.service.environment, records)
        km: Any = self.server.kernel_manager  # jupyter_server's methods are untyped
        # jupyter_client's update_env: the launch environment of the next (re)start
        km.get_kernel(kernel_id).update_env(env=env)
        self.keeping[kernel_id] = self.keeping.get(kernel_id, 0) + 1
        try:
            ready = await km.restart_kernel(kernel_id)
        except Exception as err:
            self.keeping[kernel_id] -= 1  # no successful restart event will consume it
            raise KernelRestartError(
                f"kernel {kernel_id} could not be restarted ({err}); its claims are kept, "
                "held by the server until the kernel shuts down or is idle"
            ) from err
        try:
            await ready  # the restarted kernel answered kernel_info
        except (RuntimeError, TimeoutError) as err:
            raise KernelRestartError(
                f"kernel {kernel_id} was restarted but did not answer ({err}); check the server log"
            ) from err
        return records, env

    # --- kernels and idle release -----------------------------------------------------------

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        kernel_id: str | None = data.get("kernel_id")
        if self._stopped or not kernel_id or data.get("status") != "success":
            return
        action = data.get("action")
        if action == "start":
            self._watch(kernel_id)
        elif action == "restart":
            # a kernel in a pod has a new address after a restart: follow the new one
            self.watcher.detach(kernel_id)
            self._watch(kernel_id)
            if self.keeping.get(kernel_id, 0) > 0:
                self.keeping[kernel_id] -= 1  # our own restart with claims
                return
            # a plain restart (or the restarter's, after the kernel died) ends the claims
            await self.call(
                self.service.live_claims,
                lambda r: "kernel-shutdown" if r.owner.kernel_id == kernel_id else None,
            )
        elif action == "shutdown":
            self.watcher.detach(kernel_id)
            self.moves.forget(kernel_id)
            await self.call(
                self.service.live_claims,
                lambda r: "kernel-shutdown" if r.owner.kernel_id == kernel_id else None,
            )

    async def _on_claim_released(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """A kernel whose devices are its own pod's (the ``dra-kubernetes`` provisioner says
        so with ``devices_in_pod``) leaves its pod when its claim is released, idle or by its
        user: deleting a claim that a pod uses frees nothing until the pod ends. It comes
        back on the server without devices, and its next execution says why and how to get
        them again (:mod:`dra_jupyter.server.moves`)."""
        kernel_id = data.get("kernel_id")
        reason = str(data.get("reason") or "")
        if self._stopped or not kernel_id or reason in ("kernel-shutdown", MOVED):
            return
        km = self.server.kernel_manager
        if kernel_id not in km:
            return
        devices = pod_devices(getattr(km.get_kernel(kernel_id), "provisioner", None))
        if devices is None:
            return
        why = release_message(reason, self.idle_timeout, self.gpu_idle_timeout)
        again = devices.again()
        note = (
            f"dra: this kernel's pod with {devices.said()} was stopped and its claim "
            f"{data.get('claim')} released ({why}), so its variables are gone; "
            + (f"{again} starts it again on such devices" if again else "to start it again")
            + " (in JupyterLab: Restart kernel with its devices)"
        )
        self.log.info(
            "dra_jupyter: kernel %s leaves its pod: its claim %s was released (%s)",
            kernel_id,
            data.get("claim"),
            reason,
        )
        try:
            await self.moves.to_server(kernel_id, note, devices)
        except DraJupyterError as err:
            self.log.warning("dra_jupyter: kernel %s: %s", kernel_id, err)

    async def _restart_asked(self, kernel_id: str, asked: dict[str, Any]) -> None:
        """A kernel asked for a restart with devices (``dra.request(..., restart=True)``):
        into a pod with the claim it describes (Kubernetes), or with the claims it made
        (their environment). What goes wrong is in the server log and, for a move, at the
        kernel's next execution."""
        try:
            if "claim" in asked:
                where = f"kernel {kernel_id}"
                request = asked.get("request")
                devices = PodDevices(
                    claim=checked_claim(asked["claim"], where),
                    request=request if isinstance(request, dict) else {},
                )
                await self.moves.to_pod(kernel_id, devices)
            else:
                await self.restart_with_claims(kernel_id)
        except DraJupyterError as err:
            self.log.warning("dra_jupyter: kernel %s asked for a restart: %s", kernel_id, err)

    async def check_health(self) -> None:
        """Tell the holders of devices taken out of service, once each
        (:mod:`dra_jupyter.outofservice`)."""
        tainting = tainting_of(self.service.backend)
        if self._stopped or tainting is None:
            return
        if self._watcher is not None:
            await self.call(self._watcher.enforce)
        live = set(self.live_kernels())
        try:
            records = await self.read(partial(self.service.live_claims, wait=False))
            held = [r for r in records if r.owner.kernel_id in live]
            taints = await self.read(tainting.taints) if held else []
        except DraJupyterError as err:
            self.log.debug("dra_jupyter: reading taints failed: %s", err)
            return
        for event in self.health.new(unhealthy_events(held, taints)):
            self.log.warning("dra_jupyter: kernel %s: %s", event["kernel_id"], event["message"])
            self.claim_events.emit_device_unhealthy(event)

    async def move_claim(
        self, caller: Caller, name: str
    ) -> tuple[str, list[ClaimRecord], dict[str, str]]:
        """Move: the claim's kernel gets an equivalent device instead of one taken out of
        service, and restarts with it (on Kubernetes, in a new pod: its claim from the same
        request avoids the device). Returns the kernel, its claims and their environment."""
        record = await self.read(self.service.claim, caller, name)
        kernel_id = record.owner.kernel_id
        if not kernel_id or kernel_id not in set(self.live_kernels()):
            raise InvalidInputError(
                f"claim {name}: it belongs to no kernel of this server, so none can restart "
                "on another device; release it and request again"
            )
        if self.service.backend.capabilities.devices_here:
            await self.call(self.service.move, caller, name, DEVICE_MOVED)
        records, env = await self.restart_with_claims(kernel_id)
        return kernel_id, records, env

    async def _kernel_claims(self, kernel_id: str) -> list[ClaimRecord]:
        records = await self.read(partial(self.service.live_claims, wait=False))
        return [r for r in records if r.owner.kernel_id == kernel_id]

    async def _release_named(self, names: list[str], reason: str) -> None:
        await self.call(self.service.live_claims, lambda r: reason if r.name in names else None)

    def _watch(self, kernel_id: str) -> None:
        self.known_kernels.add(kernel_id)
        km = self.server.kernel_manager
        if kernel_id in km:
            self.watcher.attach(km, kernel_id)

    async def check(self) -> None:
        """One pass: follow new kernels, release the claims of kernels that are gone and of
        idle kernels, warn before idle deadlines, announce claims made in kernels. A pass
        that fails (the API server cannot be reached, say) is logged once; the next tries
        again."""
        if self._stopped:
            return
        try:
            await self._check()
        except DraJupyterError as err:
            if str(err) != self._check_problem:
                self._check_problem = str(err)
                self.log.warning("dra_jupyter: checking claims failed: %s", err)
        else:
            self._check_problem = ""

    async def _check(self) -> None:
        live = set(self.live_kernels())
        for kernel_id in live:
            self._watch(kernel_id)
        for kernel_id in set(self.watcher.watches) - live:
            self.watcher.detach(kernel_id)
        now = time.time()
        await self._keep_startup_claim(now)
        # kernels this server ran that are gone; claims of any kernel whose process is gone
        # (after a server restart, say) are released by the backend's sweep. A claim of a
        # live kernel process not known here may belong to another server on the ledger.
        gone = self.known_kernels - live

        def select(record: ClaimRecord) -> str | None:
            return "kernel-shutdown" if record.owner.kernel_id in gone else None

        due: list[float] = []
        for record in await self.call(
            self.service.live_claims, self.idling.idle_or(select, now), now
        ):
            if record.owner.kernel_id not in live:
                continue
            if record.name not in self.claim_events.seen and record.owner.pid != (
                self.service.server_owner.pid
            ):
                self.claim_events.emit_allocated(record, "kernel")
            self.idling.maybe_warn(record, now)
            due.extend(self.idling.moments(record, now))
        self._schedule(min((t for t in due if t > now), default=None))
        if self._health_checker is None:
            await self.check_health()
        if self.reclaims is not None and self._reclaim_checker is None:
            await self.reclaims.tick()

    def _schedule(self, when: float | None) -> None:
        """A check at ``when`` (a deadline: a warning goes, or a claim is released, then, not
        at the next periodic check up to check_interval later); None: no timer."""
        loop = IOLoop.current()
        if self._due is not None:
            if when is not None and self._due[0] == when:
                return
            loop.remove_timeout(self._due[1])
            self._due = None
        if when is None or self._stopped:
            return
        handle = loop.call_later(max(0.0, when - time.time()) + DUE_SLACK, self._on_due)
        self._due = (when, handle)

    def _strays(self, uses: list[ProcessUse], listed: list[DeviceProcess]) -> None:
        """The user's processes on GPUs none of their claims holds: said once each."""
        events = stray_events(os.getuid(), uses, listed)  # the server runs as its user
        for event in self.claim_events.emit_gpu_processes(events):
            self.log.warning("dra_jupyter: %s", event["message"])

    def _cell_ended(self, kernel_id: str) -> None:
        """A cell ended: its claims' deadlines start now, and a claim it made is new: a
        check soon, to time them (as the periodic check would, up to check_interval later)."""
        if self.reclaims is not None:
            IOLoop.current().spawn_callback(self.reclaims.report, kernel_id, busy=False)
        soon = time.time() + CELL_SETTLE
        if self._due is None or self._due[0] > soon:
            self._schedule(soon)

    def _cell_started(self, kernel_id: str) -> None:
        if self.reclaims is not None:  # the service hears of the cell: it is not idle
            IOLoop.current().spawn_callback(self.reclaims.report, kernel_id, busy=True)

    def _on_due(self) -> None:
        self._due = None
        IOLoop.current().spawn_callback(self.check)

    async def _keep_startup_claim(self, now: float) -> None:
        """The startup claim is as active as the server's kernels: a cell that ran since the
        last check records activity on it (what the service's ``idle`` limit measures)."""
        if self.startup_claim is None:
            return
        ran = max((w.execution.last_execute for w in self.watcher.watches.values()), default=0.0)
        if ran <= self._startup_kept:
            return
        self._startup_kept = now
        if self.reclaims is not None:  # activity, not a Keep (a Keep under pressure is bounded)
            kept = await self.reclaims.active(self.startup_claim)
        else:
            kept = await self.call(self.service.backend.touch, self.startup_claim, now)
        if not kept:
            self.log.warning("dra_jupyter: the claim %s made at start is gone", self.startup_claim)
            self.startup_claim = None


_SERVES_HANDLERS: type[DRAApp] = DRAExtensionApp  # what the handlers read of it, checked


DUE_SLACK = 0.05  # seconds after a deadline its check runs: past it, whatever the clock
CELL_SETTLE = 0.2  # seconds after a cell ends that a check looks at its claims


def _backend_name(trait: str) -> BackendName:
    """The server's backend trait as the settings name it (anything else is local)."""
    return "kubernetes" if trait == "kubernetes" else "service" if trait == "service" else "local"

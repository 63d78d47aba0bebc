"""The Python API: ``dra.request(gpu=2)``, ``dra.devices()``, ``dra.claims()``.

A :class:`Session` ties settings, an owner and a :class:`~dra_jupyter.types.Backend`
together; the module-level functions of :mod:`dra_jupyter` use one default session,
made on first use (importing the package does nothing).

This module knows neither widgets nor which backend it holds: it asks the backend's
:class:`~dra_jupyter.types.Capabilities`, and shows claims through the session's
:class:`ClaimView` (text here; :mod:`dra_jupyter.widgets.notebook` gives a notebook its
cards).
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from types import EllipsisType, TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol

import yaml

from dra_jupyter import runstatus
from dra_jupyter.allocator import STRATEGIES, Explanation
from dra_jupyter.backends import open_backend, open_runs
from dra_jupyter.claimspec import (
    CLAIM_KEYS,
    REQUEST_KEYS,
    RUN_KEYS,
    Same,
    build_claim,
    parse_same,
    unknown_keyword,
)
from dra_jupyter.devicehistory import device_history, resolve_device
from dra_jupyter.durations import parse_duration, parse_lease, parse_timeout
from dra_jupyter.environment import ProcessEnvironment, accelerator_runtime_loaded, environment_for
from dra_jupyter.errors import (
    AllocationError,
    BusyError,
    ClaimNotFoundError,
    DraJupyterWarning,
    InvalidInputError,
    NeverPossibleError,
    NotFoundError,
    ObjectError,
    shown,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.requestnotes import (
    QueueReporter,
    caller_level,
    describe,
    others_on,
    own_holders_note,
    waits_for_a_pod,
)
from dra_jupyter.restarts import ask_restart, in_servers_kernel
from dra_jupyter.runcommand import local_argv
from dra_jupyter.settings import BACKENDS, Settings
from dra_jupyter.tables import (
    CLAIM_COLUMNS,
    CLUSTER_CLAIM_COLUMNS,
    DEVICE_COLUMNS,
    ClaimRow,
    DeviceRow,
    Table,
    claim_rows,
    cluster_claim_rows,
    device_rows,
)
from dra_jupyter.types import (
    KERNEL_LABEL,
    RUN_LABEL,
    SERVER_LABEL,
    USER_LABEL,
    Backend,
    ClaimRecord,
    Command,
    HealthRecord,
    OnWait,
    Owner,
    Tainting,
    Waiter,
    Waiting,
    health_record_of,
    label_value,
    run_of,
    tainting_of,
)
from dra_jupyter.usagebook import book_for, frame_for, report_for, snapshot_for
from dra_jupyter.verdicts import impossible_hint

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.accounting.book import Book, UsageRow
    from dra_jupyter.accounting.prometheus import Snapshot
    from dra_jupyter.metrics.recorder import Recorder

KERNEL_ID_ENV = "DRA_JUPYTER_KERNEL_ID"
START_TIMEOUT = "5m"  # dra.run's start_timeout where not given: a pod's time to start


class WaitReporter(Protocol):
    """Told where a waiting request stands (``on_wait``), then how the wait ended."""

    def __call__(self, waiting: Waiting) -> None: ...

    def allocated(self, claim: Claim) -> None: ...

    def failed(self, message: str) -> None: ...


class ClaimView(Protocol):
    """How a session shows its claims: :class:`TextView` here; the notebook's
    (:class:`dra_jupyter.widgets.notebook.NotebookView`) shows cards."""

    def reporter(self, what: str, simulated: bool) -> WaitReporter:
        """The reporter of a request that may wait (``what``: the request as typed)."""

    def mimebundle(self, claim: Claim) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """What a notebook displays for the claim."""

    def changed(self, claim: Claim) -> None:
        """The claim changed in this process (released): update what shows it."""

    def card(self, claim: Claim) -> Any:
        """The claim's card widget (one per claim: the one shown while it waited)."""

    def origin(self) -> tuple[str, str] | None:
        """The notebook cell that makes a request now, ``(cell id, id of this run)``,
        where the view knows it (a kernel's; else None)."""


class TextView:
    """Claims as text; a waiting request says where it stands on stderr."""

    def reporter(self, what: str, simulated: bool) -> WaitReporter:
        return QueueReporter(what)

    def mimebundle(self, claim: Claim) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        return {"text/plain": repr(claim)}

    def changed(self, claim: Claim) -> None:
        return None

    def card(self, claim: Claim) -> Any:
        raise InvalidInputError(
            f"claim {claim.name}: a card is a notebook widget; in a kernel, "
            "dra.claim(name).card() or display(claim) shows it"
        )

    def origin(self) -> tuple[str, str] | None:
        return None


class _Cells:
    """The claims each notebook cell made in its latest run (this process's, whichever
    session made them): ``cell id -> (run id, claims)``."""

    made: ClassVar[dict[str, tuple[str, list[Claim]]]] = {}


class Claim:
    """Devices held for you. Use ``.env``, ``.devices``; give them back with ``.release()``
    (or use the claim as a context manager)."""

    def __init__(self, session: Session, record: ClaimRecord) -> None:
        self._session = session
        self._record = record
        self._released = False
        self.view: Any = None  # what the session's ClaimView keeps for this claim (its card)
        self.notes: list[str] = []

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def record(self) -> ClaimRecord:
        """The claim as its backend keeps it (its allocation, owner, times)."""
        return self._record

    @property
    def state(self) -> str:
        """``allocated`` while held, ``released`` once given back (by you or by the system).
        Kubernetes: ``pending`` until a pod uses it, ``allocated`` once kube-scheduler has
        chosen its devices, ``reserved`` while a pod holds it."""
        if self._released:
            return "released"
        state = self._session.backend.state(self.name)
        if state in ("released", "deleted"):
            self._released = True
            if state == "deleted":
                self.notes.append(
                    f"claim {self.name} was deleted in namespace {self._record.namespace} by "
                    "someone else; its devices are no longer yours: request them again"
                )
            return "released"
        return state

    @property
    def allocation(self) -> dict[str, Any]:
        """``status.allocation`` (Kubernetes: empty until kube-scheduler allocates it for a
        pod; read again from the cluster until then)."""
        backend = self._session.backend
        if (
            backend.capabilities.allocates_later
            and not self._released
            and not self._record.allocation
        ):
            self._record = backend.record(self.name) or self._record
        return self._record.allocation

    @property
    def devices(self) -> Table[DeviceRow]:
        """This claim's devices; once it is released, their state now (free, or whoever
        holds them since), never a stale holder."""
        self.allocation  # noqa: B018  # a pending claim's record is read again
        mine = set(self._record.device_keys)
        released = self.state == "released"
        held = self._session.backend.holders() if released else [self._record]
        rows = [
            r for r in device_rows(self._session.inventory.patched_slices, held) if r.device in mine
        ]
        title = f"claim {self.name}" + (" (released: the devices' state now)" if released else "")
        return Table(rows, DEVICE_COLUMNS, title=title)

    @property
    def backend(self) -> Backend:
        """Where the claim lives: its session's backend."""
        return self._session.backend

    def released_elsewhere(self) -> None:
        """Released by someone else (the server's idle release, another process): it says
        ``released`` from now on without asking the backend."""
        self._released = True

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that make these devices visible to CUDA, ROCm or TPU."""
        results = self.allocation.get("devices", {}).get("results", [])
        inventory = self._session.inventory
        return environment_for(results, inventory.slices, simulated=inventory.simulated).env

    def apply_env(self, environ: dict[str, str] | None = None) -> list[str]:
        """Add :attr:`env` to this process's environment, which then names the devices of
        every claim it holds (:mod:`dra_jupyter.environment`), or set it in ``environ``;
        returns what the user should know."""
        inventory = self._session.inventory
        found = environment_for(
            self.allocation.get("devices", {}).get("results", []),
            inventory.slices,
            simulated=inventory.simulated,
        )
        notes = []
        if found.missing:
            notes.append(
                f"claim {self.name}: {', '.join(found.missing)} has no identity a runtime can "
                "use yet (a MIG partition the driver has not created), so the environment "
                "leaves it out"
            )
        process = ProcessEnvironment.of_process()
        runtime = None  # asked where it matters: this process's environment, not yet said
        if environ is None and not process.runtime_noted and found.env:
            runtime = accelerator_runtime_loaded()
        if runtime:
            process.runtime_noted = True  # said once per process: it holds for every claim
            notes.append(
                f"claim {self.name}: {runtime} is already loaded in this process, so changes "
                "of its device environment (CUDA_VISIBLE_DEVICES and friends) apply to the "
                "processes it starts from now on, not to itself; to use the devices here, "
                "restart the kernel with its claims (the claim card's Restart kernel with "
                "these devices), or start a fresh process with claim.env"
            )
        if environ is None:
            process.hold(self)
        else:
            environ.update(found.env)
        return notes

    def explain(self) -> Explanation:
        """Whether this claim's request could be met now, and if not why (per device stage)."""
        held = self._session.backend.holders()
        me = (self._record.namespace, self.name)
        others = [r for r in held if (r.namespace, r.name) != me]
        return self._session.backend.allocator(others).explain([self._record.spec])

    def release(self) -> bool:
        """Give the devices back; False if they were released already."""
        if self._released:
            return False
        released = self._session.backend.release(self.name)  # refused: still held
        self._released = True
        ProcessEnvironment.of_process().drop(self)
        self._session.view.changed(self)  # its card says so at once
        return released

    def history(self) -> pd.DataFrame:
        """Utilisation, memory and temperature of this claim's devices since it was made
        (one row per device and time; ``simulated`` says whether the values are made up)."""
        end = math.inf
        if self.state == "released":
            ended = self._session.backend.released_at(self.name)
            end = time.time() if ended is None else ended
        keys = self._record.device_keys
        return self._session.history(
            keys, since=self._record.created, held={k: [(self._record.created, end)] for k in keys}
        )

    def card(self) -> Any:
        """This claim's card widget, in a notebook (the one shown while it waited)."""
        return self._session.view.card(self)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """What the session's view shows: in a notebook the claim card (unless the cell
        that made the claim shows it already), elsewhere text."""
        return self._session.view.mimebundle(self)

    def to_dict(self) -> dict[str, Any]:
        """The ResourceClaim, with ``status.allocation``."""
        return self._record.to_object()

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        devices = ", ".join(
            r["device"] for r in self.allocation.get("devices", {}).get("results", [])
        )
        return f"<Claim {self.name}: {devices} ({'released' if self._released else 'held'})>"


class Session:
    """Settings, owner and backend for one user (and optionally one kernel)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        inventory: Inventory | None = None,
        owner: Owner | None = None,
        backend: Backend | None = None,
        view: ClaimView | None = None,
        run: str = "",
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.run_name = run  # a run's launcher (dra_jupyter.runner): its claims say whose
        self._inventory = inventory
        self.owner = owner or (
            backend.owner
            if backend is not None
            else Owner.current(kernel_id=os.environ.get(KERNEL_ID_ENV) or None)
        )
        if backend is not None:
            self.backend = backend
        self.view: ClaimView = view or TextView()

    def __repr__(self) -> str:
        """What ``dra.configure()`` shows: where claims go, from the settings (nothing is
        opened to say it)."""
        s = self.settings
        where = (
            f"namespace {s.namespace or '(default)'}"
            if s.backend == "kubernetes"
            else f"inventory {s.inventory}, ledger {s.ledger}"
        )
        kernel = f", kernel {self.owner.kernel_id[:8]}" if self.owner.kernel_id else ""
        return (
            f"<dra Session: {s.backend} backend, {where}, strategy {s.strategy}, "
            f"user {self.owner.user}{kernel}>"
        )

    @cached_property
    def backend(self) -> Backend:
        """Where claims are made: the settings' backend, opened on first use."""
        return open_backend(self.settings, self.owner, self._inventory)

    @property
    def inventory(self) -> Inventory:
        """The devices: the configured inventory, or the cluster's ResourceSlices and
        DeviceClasses (read once, again on ``dra.devices()``)."""
        if self._inventory is None:
            self._inventory = self.backend.inventory()
        return self._inventory

    @property
    def namespace(self) -> str:
        """Where claims live: the setting, else (Kubernetes) the pod's or the kubeconfig
        context's namespace, else ``default``."""
        return self.backend.namespace

    @cached_property
    def metrics(self) -> Recorder:
        """This process's metrics of the inventory's devices (NVML, or simulated)."""
        from dra_jupyter.metrics import source_for  # noqa: PLC0415  # NVML only when asked
        from dra_jupyter.metrics.recorder import Recorder  # noqa: PLC0415

        return Recorder(source_for(self.inventory))

    def device_key(self, device: str) -> str:
        """``driver/pool/device`` of a device named in full or by its name (``gpu-0``)."""
        return resolve_device(self.inventory, device)

    def history(
        self,
        devices: str | list[str],
        *,
        since: float | None = None,
        last: str | float = "10m",
        held: Mapping[str, list[tuple[float, float]]] | None = None,
    ) -> pd.DataFrame:
        """Utilisation, memory and temperature of devices over time, as a DataFrame.

        Simulated inventories: values computed for the whole window (they are a function
        of time and of the devices' current claims), marked ``simulated``. Real GPUs: the
        samples this process took (each call, and each refresh of a board in this
        kernel, takes one); the live board shows the server extension's longer history
        (:mod:`dra_jupyter.devicehistory`)."""
        return device_history(self, devices, since=since, last=last, held=held)

    def tainting(self, command: str) -> Tainting:
        """The backend, where admins taint devices on it (``command`` begins the error)."""
        backend = tainting_of(self.backend)
        if backend is None:
            raise InvalidInputError(
                f"{command}: {self.backend.capabilities.where} takes no taints by hand yet; "
                "taint the device on the backend that owns it (its ledger: "
                "DRA_JUPYTER_BACKEND=local; a cluster: DRA_JUPYTER_BACKEND=kubernetes)"
            )
        return backend

    def health_record(self, command: str) -> HealthRecord:
        """The backend, where it keeps the record of its devices' health (``command``
        begins the error)."""
        backend = health_record_of(self.backend)
        if backend is None:
            raise InvalidInputError(
                f"{command}: {self.backend.capabilities.where} keeps no record of the devices' "
                "health; on a cluster, kubectl get devicetaintrules lists the devices taken out"
            )
        return backend

    def class_names(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.inventory.device_classes]

    def build(
        self, spec: Mapping[str, Any], name: str = "", keywords: Sequence[str] = CLAIM_KEYS
    ) -> dict[str, Any]:
        """The ResourceClaim of ``spec``, labelled with its user, kernel and Jupyter server
        (those of a server's kernel, or of its REST API: ``settings.server_id``) or run (a
        run's launcher: ``dra.claims()`` says ``run NAME``, ``release_all`` leaves it);
        ``keywords``: the caller's, listed when one in ``spec`` is unknown."""
        labels = {USER_LABEL: label_value(self.owner.user)}
        if self.owner.kernel_id:
            labels[KERNEL_LABEL] = label_value(self.owner.kernel_id)
        if self.run_name:
            labels[RUN_LABEL] = label_value(self.run_name)
        if self.settings.server_id:
            labels[SERVER_LABEL] = self.settings.server_id
        return build_claim(
            name,
            spec,
            namespace=self.namespace,
            classes=self.class_names(),
            labels=labels,
            keywords=keywords,
        )

    def request(
        self,
        *,
        timeout: str | float | None = 0,
        lease: str | float | None = None,
        name: str = "",
        apply_env: bool = True,
        on_wait: OnWait | None = None,
        reserve: bool = False,
        restart: bool = False,
        **spec: Any,
    ) -> Claim:
        """Get devices now (``timeout=0``), or wait for them up to ``timeout`` ('5m').
        Kubernetes: ``reserve=True`` allocates the claim at once with our allocator (see
        :mod:`dra_jupyter.kube.reserve` for its risk), instead of when a pod uses it.
        ``restart=True`` (in a notebook's kernel) then restarts the kernel with the devices:
        on Kubernetes in a pod of its own that holds them (:mod:`dra_jupyter.restarts`)."""
        backend = self.backend
        caps = backend.capabilities
        cluster = backend.cluster
        if restart and not caps.devices_here:
            self._restart_in_pod(spec, name, reserve=reserve)
        if reserve and cluster is None:
            raise InvalidInputError(
                "dra.request: reserve=True applies to the Kubernetes backend, where a "
                f"scheduler allocates claims later; {caps.where} allocates at once anyway"
            )
        ProcessEnvironment.of_process().sync()  # claims released elsewhere leave it first
        wait = parse_timeout(timeout)
        lease_s = parse_lease(lease)
        if lease_s is not None and not caps.leases:
            raise InvalidInputError(
                f"dra.request: lease={shown(lease)} does not apply on {caps.where}, whose "
                "claims end when released; release the claim when done (or use a with block)"
            )
        claim = self.build(spec, name, REQUEST_KEYS)
        self.check_possible(spec, claim)
        origin = self.view.origin() if self.settings.rerun_releases else None
        if origin is not None:
            self._release_previous_run(*origin)
        reporter: WaitReporter | None = None
        if not caps.waits:
            wait = 0  # a claim is created at once; kube-scheduler allocates it for a pod
        if on_wait is None and wait != 0:
            on_wait = reporter = self.view.reporter(describe(spec), self.inventory.simulated)
        try:
            record = backend.allocate(
                claim, timeout=wait, lease=lease_s, on_wait=on_wait, checked=True
            )
        except BusyError as err:  # a cell run again and again, say: tell whose claims
            own = own_holders_note(self.owner, backend)
            message = f"{err}\n{own}" if own else str(err)
            if reporter is not None:
                reporter.failed(message)
            if own:
                raise BusyError(message, err.explanation) from None
            raise
        except BaseException as err:  # an interrupt too: a card must not wait forever
            if reporter is not None:
                reporter.failed("interrupted" if isinstance(err, KeyboardInterrupt) else str(err))
            raise
        if reserve and cluster is not None:
            record = cluster.reserve(record)
        result = Claim(self, record)
        if origin is not None:
            _Cells.made[origin[0]][1].append(result)
        result.notes = self._notes_on(result, spec, apply_env=apply_env, reserve=reserve)
        for note in result.notes:
            warnings.warn(note, DraJupyterWarning, stacklevel=caller_level())
        if reporter is not None:
            reporter.allocated(result)
        if restart:
            ask_restart(
                self.owner.kernel_id,
                {"claims": [result.name]},
                f"claim {result.name}: restarting this kernel with its devices; its variables "
                "are lost: run the next cell once the kernel is back",
            )
        return result

    def _notes_on(
        self, result: Claim, spec: Mapping[str, Any], *, apply_env: bool, reserve: bool
    ) -> list[str]:
        """What the user should know of a new claim (its environment; another user on its
        devices; on Kubernetes, that a kernel's devices are its pod's)."""
        caps = self.backend.capabilities
        notes = []
        if apply_env and caps.devices_here:  # a cluster's devices go to its pods, not here
            notes += result.apply_env()
        if caps.devices_here and not caps.every_user and not self.inventory.simulated:
            notes += others_on(self.metrics, result)
        if (
            self.backend.cluster is not None
            and not reserve
            and in_servers_kernel(self.owner.kernel_id)
        ):
            notes.append(waits_for_a_pod(result.name, spec))
        return notes

    def _restart_in_pod(self, spec: dict[str, Any], name: str, *, reserve: bool) -> NoReturn:
        """``restart=True`` on Kubernetes: the kernel moves into a pod whose own claim has
        these devices; the request is checked here first (never possible: said now)."""
        if reserve:
            raise InvalidInputError(
                "dra.request: restart=True moves this kernel into a pod that holds the "
                "devices, and reserve=True reserves them for a pod of yours: choose one"
            )
        claim = self.build(spec, name, REQUEST_KEYS)
        self.check_possible(spec, claim)
        ask_restart(
            self.owner.kernel_id,
            {"claim": claim["spec"], "request": dict(spec)},
            f"restarting this kernel in a pod with {describe(spec)}; its variables are lost: "
            "run the next cell once the kernel is back",
        )

    def _release_previous_run(self, cell: str, run: str) -> None:
        """A cell runs again: release the claims its previous run made (and this process
        still holds), before its new requests; several requests of one run all stay."""
        previous_run, claims = _Cells.made.get(cell, (run, []))
        if previous_run == run:
            _Cells.made.setdefault(cell, (run, claims))
            return
        _Cells.made[cell] = (run, [])
        released = [c.name for c in claims if c.state != "released" and c.release()]
        if released:
            print(
                f"dra: released {', '.join(released)}, made when this cell ran before "
                "(dra.configure(rerun_releases=False) keeps them)"
            )  # information, on stdout: a notebook shows stderr as an error

    def check_possible(
        self, spec: Mapping[str, Any], claim: dict[str, Any], what: str = "dra.request"
    ) -> None:
        """Raise :class:`NeverPossibleError`, in the user's terms where we can (``no device
        with memory >= 200Gi; the largest is ...``), when the claim could never be met;
        ``what``: the caller, as the message names it."""
        try:
            self.backend.check_possible(claim)
        except (AllocationError, ObjectError) as err:
            # ObjectError: the inventory lacks the DeviceClass (a TPU asked of a GPU machine)
            hint = impossible_hint(spec, self.inventory)
            if hint is None:
                raise
            explanation = err.explanation if isinstance(err, AllocationError) else None
            raise NeverPossibleError(f"{what}: {hint}", explanation) from None

    def run(
        self,
        command: Command = None,
        *,
        image: str | None = None,
        name: str | None = None,
        timeout: str | float | None = "5m",
        start_timeout: str | float | EllipsisType | None = ...,  # ...: not given ('5m')
        node_selector: Mapping[str, str] | None = None,
        nodes: int | None = None,
        queue: str | None = None,
        lease: str | float | None = None,
        retries: int = 0,
        wait: bool = False,
        **spec: Any,
    ) -> runstatus.Run:
        """Run ``command`` with devices. Kubernetes: in a pod (see
        :mod:`dra_jupyter.kube.run`): the pod is checked first, then its claim is made (as
        :meth:`request` makes one), then the pod started with it; ``nodes=N`` (or a Kueue
        ``queue``, given or the admin's default) runs it as a Job of N pods, each with the
        devices asked for (see :mod:`dra_jupyter.kube.jobs`). One machine (local,
        service): in the background, as a process of this user that holds its own claim
        (:mod:`dra_jupyter.runner`), its claim ended by ``lease``. Returned at once (once
        a run here has its devices or waits in line for them: ``timeout``), or followed
        until it ends with ``wait=True``. Every backend's run is a
        :class:`dra_jupyter.runstatus.Run` (``status``, ``logs``, ``cancel``, ``wait``)."""
        unknown = sorted(set(spec) - set(CLAIM_KEYS))
        if unknown:
            raise unknown_keyword("dra.run", unknown[0], RUN_KEYS)
        cluster = self.backend.cluster
        same = self._same(spec)
        if same.nodes and (cluster is None or (nodes is None and not queue)):
            where = (
                f"{self.backend.capabilities.where} runs one process: leave it out"
                if cluster is None
                else "without nodes= this run is one pod: give nodes=N (a Job), or leave it out"
            )
            raise InvalidInputError(
                f"dra.run: same={shown(spec['same'])} keeps the pods of a multi-node run on "
                f"nodes that share {', '.join(same.nodes)}; {where}"
            )
        if cluster is None:
            nodes = 1 if nodes is None else _nodes(nodes)  # a cluster's Job checks its own
            pod = {
                "image": image,
                "start_timeout": start_timeout is not ...,  # any value given: refused
                "node_selector": node_selector,
                "queue": queue,
            }
            if retries:
                raise InvalidInputError(
                    f"dra.run: retries= applies to Jobs on Kubernetes; on "
                    f"{self.backend.capabilities.where} a run is one process: leave it out"
                )
            run = self._run_here(command, spec, name, timeout, lease, nodes, pod)
            if wait:
                run.logs(follow=True)
            return run
        place_s = _or_forever(parse_duration(timeout, what="timeout"))
        start_wait = parse_duration(
            START_TIMEOUT if start_timeout is ... else start_timeout, what="start_timeout"
        )
        plan = cluster.plan_run(
            command,
            image=image or self.settings.image or None,
            name=name,
            node_selector=node_selector,
        )
        queue = self.settings.kueue_queue if queue is None else queue
        if nodes is not None or queue:
            # same=: device attributes in each pod's claim, node labels among the pods
            per_pod = {k: v for k, v in spec.items() if k != "same"}
            if same.devices:
                per_pod["same"] = list(same.devices)
            claim_spec = self.build(per_pod, "", RUN_KEYS)
            self.check_possible(per_pod, claim_spec, what="dra.run")
            return cluster.submit(
                plan,
                claim_spec["spec"],
                nodes=nodes if nodes is not None else 1,
                queue=queue,
                lease=parse_lease(lease),
                retries=retries,
                same_nodes=same.nodes,
                follow=place_s if wait else None,
            )
        claim = self.request(apply_env=False, **spec)
        return cluster.launch(plan, claim, timeout=place_s, start_timeout=start_wait)

    def _same(self, spec: Mapping[str, Any]) -> Same:
        """``same=`` of a run split into device attributes and node labels
        (:func:`dra_jupyter.claimspec.parse_same`; the cluster's drivers name attributes)."""
        if spec.get("same") is None:
            return Same()
        drivers = {str(s["spec"]["driver"]) for s in self.inventory.slices}
        return parse_same(spec["same"], where="dra.run", drivers=drivers)

    def _run_here(  # dra.run's keywords, passed on
        self,
        command: Command,
        spec: dict[str, Any],
        name: str | None,
        timeout: str | float | None,
        lease: str | float | None,
        nodes: int,
        pod: Mapping[str, Any],
    ) -> runstatus.Run:
        """``dra.run`` on one machine: everything is checked (the command, the keywords,
        that the claim could ever be met) before the run is recorded and started."""
        where = self.backend.capabilities.where
        if nodes > 1:
            raise InvalidInputError(
                f"dra.run: nodes={nodes} spreads a run over several machines, which needs the "
                f"Kubernetes backend; {where} runs one process: use nodes=1"
            )
        for key, value in pod.items():
            if value:
                raise InvalidInputError(
                    f"dra.run: {key}= applies to pods on Kubernetes; on {where} the command "
                    "runs as your own process: leave it out"
                )
        argv = local_argv(command)
        parse_timeout(timeout)
        if parse_lease(lease) is not None and not self.backend.capabilities.leases:
            raise InvalidInputError(f"dra.run: lease= does not apply on {where}")
        try:
            claim = self.build(spec, "", REQUEST_KEYS)
        except InvalidInputError as err:  # the claim's keywords, said as dra.run's
            if type(err) is not InvalidInputError or not str(err).startswith("dra.request"):
                raise
            raise InvalidInputError(f"dra.run{str(err).removeprefix('dra.request')}") from None
        self.check_possible(spec, claim, what="dra.run")
        wanted = {"argv": argv, "claim": spec, "timeout": timeout, "lease": lease}
        return self._runs.start({**wanted, "cwd": str(Path.cwd())}, name or "")

    @cached_property
    def _runs(self) -> runstatus.Runs:
        return open_runs(self.settings, self.backend)

    def runs(self) -> list[runstatus.Run]:
        """This user's runs, oldest first: a cluster's (``cluster.runs()``), else those of
        the user's ledger on this machine (also those started from another kernel)."""
        cluster = self.backend.cluster
        if cluster is not None:
            return list(cluster.runs())
        return list(self._runs.runs())

    def every_users_runs(self) -> list[tuple[str, runstatus.Run]]:
        """Every user's runs with their users, oldest first: those of this machine's book
        (an admin's view in the lab panel); on a cluster this user's own."""
        if self.backend.cluster is not None:
            return [(self.owner.user, r) for r in self.runs()]
        return list(self._runs.every_users())

    def find_run(self, name: str) -> runstatus.Run:
        """This user's run ``name`` (NotFoundError when there is none)."""
        if self.backend.cluster is None:
            return self._runs.run(name)
        for found in self.runs():
            if found.name == name:
                return found
        plain = name if re.fullmatch(r"[\w.-]{1,253}", name) else shown(name)
        raise NotFoundError(f"no run {plain}; dra.runs() lists yours")

    def devices(self) -> Table[DeviceRow]:
        # read again: a cluster's slices change, and so do the taints of every backend (a
        # GPU the health watcher took out, an admin's taint)
        self._inventory = self.backend.inventory(refresh=True)
        held = self.backend.holders()
        inv = self.inventory
        title = f"{inv.description}" + (" (SIMULATED)" if inv.simulated else "")
        return Table(device_rows(inv.patched_slices, held), DEVICE_COLUMNS, title=title)

    def claims(self, *, all_users: bool = False) -> Table[ClaimRow]:
        backend = self.backend
        if backend.capabilities.claim_states:
            rows = cluster_claim_rows(backend.claims_with_state(all_users=all_users))
            return Table(rows, CLUSTER_CLAIM_COLUMNS, title=f"namespace {backend.namespace}")
        return Table(claim_rows(self.backend.claims(all_users=all_users)), CLAIM_COLUMNS)

    def claim(self, name: str) -> Claim:
        for record in self.backend.claims(all_users=True):
            if record.name == name:
                return Claim(self, record)
        raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")

    def release(self, name: str) -> bool:
        """Release one of this user's claims by name (True); one that does not exist (any
        more) is :class:`ClaimNotFoundError`, ``no claim NAME``, as the magic and the
        command line say."""
        try:
            if not self.backend.release(name):
                plain = name if re.fullmatch(r"[\w.-]{1,253}", name) else shown(name)
                raise ClaimNotFoundError(
                    f"no claim {plain} (already released?); dra.claims() lists yours"
                )
            return True
        finally:
            ProcessEnvironment.of_process().sync()  # its devices leave the environment

    def release_all(self) -> list[str]:
        """Release every claim of this user but those of runs (``dra.run`` on one machine),
        which are released with their run: ``run.cancel()``, or ``dra.release(NAME)``, which
        stops the run's command too; one warning line names those kept. Returns the names
        released."""
        records = self.backend.claims()
        kept = [(r.name, run) for r in records if (run := run_of(r)) is not None]
        names = [r.name for r in records if run_of(r) is None]
        if kept:
            held = ", ".join(f"{claim} of run {run}" for claim, run in kept)
            warnings.warn(
                f"kept claim {held}: a run's claim goes with its run; cancel the run "
                "(dra.runs(), %dra cancel NAME), or release the claim by name, which stops it",
                DraJupyterWarning,
                stacklevel=caller_level(),
            )
        try:
            for name in names:
                self.backend.release(name)
        finally:
            ProcessEnvironment.of_process().sync()
        return names

    # --- the usage book (dra_jupyter.usagebook) -----------------------------------------------

    def usage_book(self, since: str | float = "7d", *, what: str = "dra.usage") -> Book:
        """The book's intervals of the last ``since`` that this user may see."""
        return book_for(self.backend, since, what=what)

    def usage_report(
        self, since: str | float = "7d", by: str = "user"
    ) -> tuple[tuple[str, ...], list[UsageRow]]:
        """The columns of the key (``by``'s dimensions) and a row per key: GPU-seconds
        held, active, idle and unknown, and energy, over the last ``since``."""
        return report_for(self.backend, since, by)

    def usage(self, since: str | float = "7d", by: str = "user") -> pd.DataFrame:
        """GPU usage over the last ``since`` by ``user``, ``group``, ``claim`` or
        ``device``, as a DataFrame (see :func:`dra_jupyter.accounting`)."""
        return frame_for(self.backend, since, by)

    def waiting(self) -> list[Waiter]:
        """The requests waiting in line, in the order they are served, each with its
        position and why there (the service: fair share, then first come first; another
        user's name hidden unless its policy shows it)."""
        return [
            w if w.position else replace(w, position=i)
            for i, w in enumerate(self.backend.waiting(), start=1)
        ]

    def usage_snapshot(self) -> Snapshot:
        """What a Prometheus scrape reads: the whole book, the devices by model and state
        (``held``: in a live claim, else ``free``), the requests waiting in line."""
        return snapshot_for(self)


def _or_forever(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def _nodes(nodes: object) -> int:
    """``nodes=``: a whole number of at least 1 (machines, or pods on a cluster)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InvalidInputError(
            f"dra.run: nodes={shown(nodes)} is not a number of machines; use a whole "
            "number of at least 1 (nodes=1: one machine)"
        )
    return nodes


class _Default:
    """The session behind the module-level functions; made on first use."""

    session: Session | None = None


def default_session() -> Session:
    """The session of :mod:`dra_jupyter`'s functions and the magics (made on first use)."""
    if _Default.session is None:
        _Default.session = Session()
    return _Default.session


def configure(
    *,
    inventory: str | Inventory | None = None,
    ledger: str | Path | None = None,
    strategy: str | None = None,
    backend: str | None = None,
    namespace: str | None = None,
    rerun_releases: bool | None = None,
) -> Session:
    """Start a new default session: another inventory (a name, a file, ``nvml``, or an
    :class:`Inventory`), ledger file, strategy, backend (``local``, ``kubernetes``,
    ``auto``) or namespace; ``rerun_releases=False`` keeps the claims of a notebook cell's
    previous run when it runs again (by default they are released first). Claims already
    made stay where they are."""
    settings = Settings.from_env()
    if backend is not None:
        if backend not in BACKENDS:
            raise InvalidInputError(f"backend {backend!r} is not known; use {BACKENDS}")
        settings = replace(settings, backend=backend)
    if namespace is not None:
        settings = replace(settings, namespace=namespace)
    if rerun_releases is not None:
        settings = replace(settings, rerun_releases=bool(rerun_releases))
    if isinstance(inventory, str):
        settings = replace(settings, inventory=inventory)
    if ledger is not None:
        settings = replace(settings, ledger=Path(ledger))
    if strategy is not None:
        if strategy not in STRATEGIES:
            raise InvalidInputError(f"strategy {strategy!r} is not known; use {STRATEGIES}")
        settings = replace(settings, strategy=strategy)
    _Default.session = Session(
        settings, inventory=inventory if isinstance(inventory, Inventory) else None
    )
    return _Default.session

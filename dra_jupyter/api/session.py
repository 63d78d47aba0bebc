"""A :class:`Session`: settings, an owner and a :class:`~dra_jupyter.types.Backend` for one
user (and optionally one kernel): requests and their claims, the devices and claims as
tables, releases, and the reads of the usage book. ``dra.run`` is delegated to
:class:`~dra_jupyter.api.runs.Launcher`.

It knows neither widgets nor which backend it holds: it asks the backend's
:class:`~dra_jupyter.types.Capabilities`, and shows claims through its
:class:`~dra_jupyter.api.claim.ClaimView`.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from types import EllipsisType
from typing import TYPE_CHECKING, Any, NoReturn

from dra_jupyter.api.claim import (
    Claim,
    ClaimView,
    TextView,
    WaitReporter,
    _Cells,
    release_previous_run,
)
from dra_jupyter.api.devicehistory import device_history, here_only
from dra_jupyter.api.requestnotes import (
    caller_level,
    describe,
    others_on,
    own_holders_note,
    waits_for_a_pod,
)
from dra_jupyter.api.runs import Launcher
from dra_jupyter.api.usagebook import book_for, frame_for, report_for, snapshot_for
from dra_jupyter.backends import open_backend
from dra_jupyter.claimspec import CLAIM_KEYS, REQUEST, REQUEST_KEYS, build_claim
from dra_jupyter.durations import parse_lease, parse_timeout
from dra_jupyter.errors import (
    AllocationError,
    BusyError,
    ClaimNotFoundError,
    DraJupyterWarning,
    InvalidInputError,
    NeverPossibleError,
    ObjectError,
    shown,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_device
from dra_jupyter.kernel.asking import ask_server
from dra_jupyter.kernel.environment import ProcessEnvironment
from dra_jupyter.kernel.restarts import ask_restart, in_servers_kernel
from dra_jupyter.settings import Settings
from dra_jupyter.sharing.joins import claim_problem, name_problem, no_cluster, with_keywords
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
    Command,
    HealthRecord,
    OnWait,
    Owner,
    Tainting,
    Waiter,
    accounting_of,
    health_record_of,
    label_value,
    run_of,
    tainting_of,
    watched_views_of,
)
from dra_jupyter.types import runs as runstatus
from dra_jupyter.verdicts import (
    impossible_hint,
    no_shared_device,
    no_sharing_driver,
    sharing_hint,
)

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.accounting.book import Book, UsageRow
    from dra_jupyter.accounting.prometheus import Snapshot
    from dra_jupyter.metrics.recorder import Recorder

KERNEL_ID_ENV = "DRA_JUPYTER_KERNEL_ID"


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
        (:mod:`dra_jupyter.api.devicehistory`)."""
        here_only(self.backend)
        return device_history(
            self.backend, self.inventory, self.metrics, devices, since=since, last=last, held=held
        )

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
        self,
        spec: Mapping[str, Any],
        name: str = "",
        keywords: Sequence[str] = CLAIM_KEYS,
        caller: str = REQUEST,
        classes: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The ResourceClaim of ``spec``, labelled with its user, kernel and Jupyter server
        (those of a server's kernel, or of its REST API: ``settings.server_id``) or run (a
        run's launcher: ``dra.claims()`` says ``run NAME``, ``release_all`` leaves it);
        ``keywords``: the caller's, listed when one in ``spec`` is unknown; ``caller``: whose
        refusals they are; ``classes``: the cluster's DeviceClass names, where known
        already (else read with the devices)."""
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
            classes=self.class_names() if classes is None else classes,
            labels=labels,
            keywords=keywords,
            caller=caller,
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
        join: str | None = None,
        **spec: Any,
    ) -> Claim:
        """Get devices now (``timeout=0``), or wait for them up to ``timeout`` ('5m').
        Kubernetes: ``reserve=True`` allocates the claim at once with our allocator (see
        :mod:`dra_jupyter.kube.reserve` for its risk), instead of when a pod uses it.
        ``restart=True`` (in a notebook's kernel) then restarts the kernel with the devices:
        on Kubernetes in a pod of its own that holds them (:mod:`dra_jupyter.kernel.restarts`);
        ``join="team-gpu"`` there in a pod that uses that claim (:func:`_join`)."""
        backend = self.backend
        caps = backend.capabilities
        cluster = backend.cluster
        if join is not None:
            _join(self, join, spec, name=name, lease=lease, reserve=reserve)
        if restart and not caps.devices_here:
            _restart_in_pod(self, spec, name, reserve=reserve)
        if reserve and cluster is None:
            raise InvalidInputError(
                "reserve=True applies to the Kubernetes backend, where a scheduler allocates "
                f"claims later; {caps.where} allocates at once anyway"
            ).said_by(REQUEST)
        ProcessEnvironment.of_process().sync()  # claims released elsewhere leave it first
        wait = parse_timeout(timeout)
        lease_s = parse_lease(lease)
        if lease_s is not None and not caps.leases:
            raise InvalidInputError(
                f"lease={shown(lease)} does not apply on {caps.where}, whose claims end when "
                "released; release the claim when done (or use a with block)"
            ).said_by(REQUEST)
        claim = self._checked_claim(spec, name, reserve=reserve)
        origin = self.view.origin() if self.settings.rerun_releases else None
        if origin is not None:
            release_previous_run(*origin)
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
        result.notes = _notes_on(self, result, spec, apply_env=apply_env, reserve=reserve)
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

    def _checked_claim(self, spec: dict[str, Any], name: str, *, reserve: bool) -> dict[str, Any]:
        """The claim of ``spec``, refused here if it could never be met. Where a scheduler
        allocates it later (Kubernetes, without ``reserve``) the kernel's server is asked
        first (:mod:`dra_jupyter.kernel.asking`): what it says is possible is made without
        reading the cluster, what it says could never be met is refused with its line; anything
        else is checked here, reading the cluster's devices, so that a refusal says why as it
        always did."""
        if self.backend.capabilities.allocates_later and not reserve:
            classes, never = ask_server(spec, name)
            if classes is not None:
                return self.build(spec, name, REQUEST_KEYS, classes=classes)
            if never:  # the server's word (a hub's shared view's, where it reads one)
                raise NeverPossibleError(never).said_by(REQUEST)
        claim = self.build(spec, name, REQUEST_KEYS)
        self.check_possible(spec, claim)
        return claim

    def check_possible(
        self,
        spec: Mapping[str, Any],
        claim: dict[str, Any],
        caller: str = REQUEST,
        *,
        why: bool = True,
    ) -> None:
        """Raise :class:`NeverPossibleError`, in the user's terms where we can (``no device
        with memory >= 200Gi; the largest is ...``, said by ``caller``; not ``why``: the
        backend's bare line), when the claim could never be met; InvalidInputError where a
        shared GPU's limit cannot be met (a pinned memory limit above the devices' memory),
        this backend has no driver that shares a GPU (``share="mps"`` on one machine), or no
        device of the class allows several claims (``share="20Gi"``; on one machine as on a
        cluster)."""
        where = None if self.backend.cluster is not None else self.backend.capabilities.where
        hint = sharing_hint(spec, self.inventory) or no_sharing_driver(spec, claim, where)
        if hint is None:  # a cluster's slices from its watched views, or this machine's
            hint = no_shared_device(spec, claim, self.inventory, drivers=where is None)
        if hint is not None:
            raise InvalidInputError(hint).said_by(caller)
        try:
            self.backend.check_possible(claim, explain=why)
        except (AllocationError, ObjectError) as err:
            if not why:
                raise
            # ObjectError: the inventory lacks the DeviceClass (a TPU asked of a GPU machine)
            hint = impossible_hint(spec, self.inventory)
            if hint is None:
                raise
            explanation = err.explanation if isinstance(err, AllocationError) else None
            raise NeverPossibleError(hint, explanation).said_by(caller) from None

    @cached_property
    def _launcher(self) -> Launcher:
        return Launcher(self)

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
        gang_timeout: str | float | EllipsisType | None = ...,  # ...: not given ('1h')
        group: Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> runstatus.Run:
        """Run ``command`` with devices (:meth:`dra_jupyter.api.runs.Launcher.run`): in pods on
        a cluster, in the background on one machine; returned at once, or followed (``wait``)."""
        return self._launcher.run(
            command,
            image=image,
            name=name,
            timeout=timeout,
            start_timeout=start_timeout,
            node_selector=node_selector,
            nodes=nodes,
            queue=queue,
            lease=lease,
            retries=retries,
            wait=wait,
            gang_timeout=gang_timeout,
            group=group,
            **spec,
        )

    def runs(self) -> list[runstatus.Run]:
        """This user's runs, oldest first (also those started from another kernel)."""
        return self._launcher.runs()

    def every_users_runs(self) -> list[tuple[str, runstatus.Run]]:
        """Every user's runs with their users, oldest first (an admin's view)."""
        return self._launcher.every_users_runs()

    def find_run(self, name: str) -> runstatus.Run:
        """This user's run ``name`` (NotFoundError when there is none)."""
        return self._launcher.find_run(name)

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

    # --- the usage book (dra_jupyter.api.usagebook) -----------------------------------------------

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
        (``held``: in a live claim, else ``free``), the requests waiting in line; and the
        counters of the backend's watched views, where it has some. A backend that keeps no
        book (Kubernetes) but watches: its views' counters only."""
        watched = watched_views_of(self.backend)
        views = watched.watch_stats() if watched is not None else []
        if watched is not None and accounting_of(self.backend) is None:
            from dra_jupyter.accounting.prometheus import Snapshot  # noqa: PLC0415

            return Snapshot(None, (), 0, views)
        book = book_for(self.backend, math.inf, what="metrics")
        return replace(snapshot_for(book, self.backend, self.inventory), views=views)


def _restart_in_pod(
    session: Session, spec: dict[str, Any], name: str, *, reserve: bool
) -> NoReturn:
    """``restart=True`` on Kubernetes: the kernel moves into a pod whose own claim has
    these devices; the request is checked here first (never possible: said now)."""
    if reserve:
        raise InvalidInputError(
            "restart=True moves this kernel into a pod that holds the devices, and "
            "reserve=True reserves them for a pod of yours: choose one"
        ).said_by(REQUEST)
    claim = session.build(spec, name, REQUEST_KEYS)
    session.check_possible(spec, claim)
    ask_restart(
        session.owner.kernel_id,
        {"claim": claim["spec"], "request": dict(spec)},
        f"restarting this kernel in a pod with {describe(spec)}; its variables are lost: "
        "run the next cell once the kernel is back",
    )


def _join(session: Session, join: object, spec: Mapping[str, Any], **made: object) -> NoReturn:
    """``join="team-gpu"``: the kernel moves into a pod that uses that claim of the namespace
    (:mod:`dra_jupyter.sharing.joins`); refused in one line first where it cannot: with
    keywords the claim decides (any of ``spec``, a ``made`` one given), off a cluster, a
    claim that is not there."""
    problem = with_keywords(join, [*spec, *(k for k, v in made.items() if v)])
    cluster = session.backend.cluster
    if problem is None and cluster is None:
        problem = no_cluster(join, session.backend.capabilities.where)
    if problem is None and cluster is not None:
        problem = name_problem(join) or claim_problem(
            str(join), session.namespace, cluster.find(str(join))
        )
    if problem is not None:
        raise InvalidInputError(problem).said_by(REQUEST)
    ask_restart(
        session.owner.kernel_id,
        {"join": join},
        f"joining claim {join}: restarting this kernel in a pod that uses it, beside the "
        "other pods that do; its variables are lost: run the next cell once the kernel is back",
    )


def _notes_on(
    session: Session, result: Claim, spec: Mapping[str, Any], *, apply_env: bool, reserve: bool
) -> list[str]:
    """What the user should know of a new claim (its environment; another user on its
    devices; on Kubernetes, that a kernel's devices are its pod's)."""
    caps = session.backend.capabilities
    notes = []
    if apply_env and caps.devices_here:  # a cluster's devices go to its pods, not here
        notes += result.apply_env()
    if caps.devices_here and not caps.every_user and not session.inventory.simulated:
        notes += others_on(session.metrics, result.name, {r.device for r in result.devices})
    if (
        session.backend.cluster is not None
        and not reserve
        and in_servers_kernel(session.owner.kernel_id)
    ):
        notes.append(waits_for_a_pod(result.name, spec))
    return notes

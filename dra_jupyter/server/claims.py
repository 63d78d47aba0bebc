"""What the REST API and the idle monitor do, without Tornado: claims on behalf of the
server's users and kernels, on the server's :class:`~dra_jupyter.types.Backend` (the local
ledger and inventory, or ResourceClaims in a namespace), the one ``dra.request`` in its
kernels uses.

Who sees what: a caller sees and releases the claims made under their user name (the
identity provider's) and the claims of this server's live kernels (whoever can reach the
server can run code in its kernels anyway); with ``admin`` every claim. Claims of other
users are refused (:class:`ForbiddenError`), not hidden, when named directly.

Every call sweeps first (:meth:`ClaimService.live_claims`: what the backend reclaims by
itself is released and announced). Locally that sweep reads the whole ledger, which then
answers, and writes only when something is to be released; on Kubernetes it reads this
server's claims, and the caller's claims in the namespace (or the cluster's holders) are
listed too. Reads never wait for a writer: their sweep (``wait=False``) leaves to a later
one what it cannot release at once.

Errors are those of :mod:`dra_jupyter.errors`; the handlers' one error mapper gives each
class its HTTP status (the table there).
"""

from __future__ import annotations

import math
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from dra_jupyter.accounting.book import Book, Totals, admin_words
from dra_jupyter.api import Session
from dra_jupyter.api.asked import asked
from dra_jupyter.claimspec import class_driver, requested_devices
from dra_jupyter.durations import parse_lease, parse_timeout
from dra_jupyter.errors import (
    AllocationError,
    ClaimNotFoundError,
    ForbiddenError,
    InvalidInputError,
    KernelNotFoundError,
    LimitError,
    NeverPossibleError,
    ObjectError,
    shown,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kernel.environment import environment_for
from dra_jupyter.server.kernelenvs import KernelEnvs
from dra_jupyter.server.models import (
    ClaimModel,
    DeviceModel,
    DevicesResponse,
    GpuActivityModel,
    ReleasedModel,
    UsageResponse,
    WaiterModel,
    check_claim_request,
)
from dra_jupyter.server.sharedcounts import SharedCounts
from dra_jupyter.settings import Settings
from dra_jupyter.tables import device_rows
from dra_jupyter.types import (
    Backend,
    ClaimRecord,
    Ended,
    Owner,
    Select,
    Sweep,
    Waiter,
    process_start_time,
    run_of,
    taking_out_of,
)

# Keywords of POST claims that are not claim keywords (dra.request's own arguments).
_REQUEST_KEYS = ("name", "lease", "timeout", "kernel_id")
# Seconds a cluster's ResourceSlices are reused before they are read again (a board polls).
INVENTORY_MAX_AGE = 10.0
# How long, and how many, released claims stay readable (GET claims/{name}) with their reason.
RELEASED_KEPT = 24 * 3600.0
RELEASED_MAX = 1000

# Why a claim went, for a user: what each reason of the events and the ledger means.
_REASONS = {
    "user": "released by its user",
    "admin": "released by an admin",
    "kernel-shutdown": "its kernel shut down or was restarted (a plain restart gives the "
    "devices back; the card's Restart kernel with these devices keeps them)",
    "expired": "its lease ended",
    "reclaimed": "the process that held it ended",
    "server-stop": "the Jupyter server stopped",
    "limit": "over the per-user device limit",
    "moved": "its kernel moved into a pod with these devices, whose own claim holds them now",
    "device-failed": "its device was taken out of service (NoExecute: a GPU that failed, or "
    "an admin's taint) and its grace ran out (dra-jupyter taint --list, dra-jupyter health "
    "say why)",
    "device-moved": "its kernel moved to an equivalent device, off one taken out of service",
    "fair-share": "another user waited for its devices while it was idle (reclaim under "
    "pressure: dra-jupyter claims shows the warning, dra-jupyter waiting the line)",
    "deleted": "deleted in the cluster, outside dra-jupyter (kubectl, an admin or a script)",
}


NO_GPU_SIGNAL = GpuActivityModel(
    state="unknown", utilization=None, since=None, text="no GPU signal"
)


def spoken_duration(seconds: float) -> str:
    """``40 min``, ``1 min 30 s``, ``2 h``, ``1 h 30 min``, ``45 s``: a duration as a person
    says it, as it is (to the second under an hour, to the minute above)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def release_message(reason: str, idle_timeout: float, gpu_idle_timeout: float = 0) -> str:
    """Why a claim was released, in a user's words (``idle for 40 min``)."""
    if reason == "idle":
        return f"idle for {spoken_duration(idle_timeout)}" if idle_timeout > 0 else "idle"
    if reason == "gpu-idle":
        unused = f" for {spoken_duration(gpu_idle_timeout)}" if gpu_idle_timeout > 0 else ""
        return f"its GPU was not used{unused} (release_gpu_idle)"
    return _REASONS.get(reason, reason)


@dataclass(frozen=True)
class Released:
    """A claim this server saw released: the claim as it was, why, and when."""

    record: ClaimRecord
    reason: str
    time: float
    message: str | None = None  # the words of whoever released it (None: the reason says it)


@dataclass(frozen=True)
class Caller:
    """The authenticated user of a REST call."""

    user: str
    admin: bool = False


class ClaimService:
    """Claims for the server's users and kernels. Blocking (SQLite, the Kubernetes API):
    the app runs the writes on its one writer thread, in batches (:meth:`batch`), and the reads
    (:meth:`devices`, :meth:`claims`, :meth:`claim`, :meth:`kernel_claims`) on reader
    threads, concurrently with the writer."""

    def __init__(
        self,
        settings: Settings,
        *,
        live_kernels: Callable[[], Collection[str]],
        max_devices_per_user: int = 0,
        unattached_lease: float = 0.0,
        watch: bool = True,
    ) -> None:
        pid = os.getpid()
        self.server_owner = Owner(
            user="", host=socket.gethostname(), pid=pid, start_time=process_start_time(pid)
        )
        # a long-lived process: on Kubernetes, the namespace's claims are kept by watching
        self.session = Session(replace(settings, watch=watch), owner=self.server_owner)
        self.live_kernels = live_kernels
        self.max_devices_per_user = max_devices_per_user
        self.unattached_lease = unattached_lease  # of a claim for no kernel that asks none
        self.kernel_envs = KernelEnvs(self.server_owner.pid)  # whose devices kernels have
        # what this service released, and why; the app emits the events on its loop
        self.released: queue.SimpleQueue[tuple[ClaimRecord, str]] = queue.SimpleQueue()
        # the claims released lately, by name, oldest first (see released_claim)
        self.recent: dict[str, Released] = {}
        self._recent_lock = threading.Lock()  # the writer and the readers both release
        self._staged = threading.local()  # releases of this thread's batch, until committed
        self._inventory: Inventory | None = None
        self._inventory_read = 0.0  # time.monotonic() of that read
        # the hub's shared view of the cluster's devices, where configured (Kubernetes)
        self.shared: SharedCounts | None = None
        if settings.shared_view_url and settings.backend == "kubernetes":
            self.shared = SharedCounts(settings.shared_view_url)

    @property
    def backend(self) -> Backend:
        """The server's backend (``settings.backend``), opened on first use."""
        return self.session.backend

    def backend_for(self, user: str, kernel_id: str | None = None) -> Backend:
        """A backend whose new claims belong to ``user`` (and the kernel), held by this
        server's process: they are released when the server is gone."""
        return self.backend.with_owner(replace(self.server_owner, user=user, kernel_id=kernel_id))

    def inventory(self) -> Inventory:
        """The devices: this machine's (found once, with the taints its ledger holds now, or
        its service's, read again once older than :data:`INVENTORY_MAX_AGE`), or the cluster's
        ResourceSlices, DeviceClasses and DeviceTaintRules, read again once older than
        :data:`INVENTORY_MAX_AGE`."""
        now = time.monotonic()
        stale = now - self._inventory_read > INVENTORY_MAX_AGE
        if self.backend.capabilities.devices_here:  # refresh: the service's taints
            self._inventory = self.backend.inventory(refresh=stale and self._inventory is not None)
            if stale:
                self._inventory_read = now
        elif self._inventory is None or stale:
            self._inventory = self.backend.inventory(refresh=self._inventory is not None)
            self._inventory_read = now
        return self._inventory

    # --- reads -------------------------------------------------------------------------------

    def devices(self) -> DevicesResponse:
        """Every device and who holds it (on Kubernetes: every allocated claim of the
        cluster the server may list, else of its namespace), and who waits in line; from a
        hub's shared view, where one is configured: the devices the user's claims hold and
        the cluster's counts per shape (:mod:`.sharedcounts`)."""
        if self.shared is not None:
            self._sweep(wait=False)  # as every read: the namespace's claims kept in order
            return self.shared.devices()
        swept = self._sweep(wait=False)
        inventory = self.inventory()
        held = swept.kept if swept.complete else self.backend.holders()
        # a row's taints are not in the REST contract yet (specification/dra-rest-api.yml
        # and the lab's wire.ts would learn them together): left out of the answer
        rows = [
            DeviceModel(**asdict(r))  # type: ignore[typeddict-item]
            for r in device_rows(inventory.patched_slices, held)
        ]
        waiting = [
            WaiterModel(
                user=w.owner.user,
                kernel_id=w.owner.kernel_id,
                what=w.what,
                since=w.since,
                position=w.position,
                why=w.why,
                holders=waited_on(w, held),
            )
            for w in self.backend.waiting()
        ]
        return DevicesResponse(
            inventory=inventory.description,
            simulated=inventory.simulated,
            devices=rows,
            waiting=waiting,
        )

    def visible(self, caller: Caller, record: ClaimRecord, live: Collection[str]) -> bool:
        return (
            caller.admin
            or record.owner.user == caller.user
            or (record.owner.kernel_id is not None and record.owner.kernel_id in live)
        )

    def claims(self, caller: Caller) -> list[ClaimRecord]:
        """The caller's claims and those of this server's live kernels (an admin's: all)."""
        swept = self._sweep(wait=False)
        listed: list[ClaimRecord] = []
        if not swept.complete:
            listed = (
                self.backend.claims(all_users=True)
                if caller.admin
                else self.backend_for(caller.user).claims()
            )
        live = set(self.live_kernels())
        merged = {r.name: r for r in [*swept.kept, *listed]}  # the sweep's order first
        return [r for r in merged.values() if self.visible(caller, r, live)]

    def claim(self, caller: Caller, name: str) -> ClaimRecord:
        swept = self._sweep(wait=False)
        if swept.complete:
            record = next((r for r in swept.kept if r.name == name), None)
        else:
            record = self.backend.record(name)
        if record is None:
            raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")
        if not self.visible(caller, record, set(self.live_kernels())):
            raise ForbiddenError(
                f"claim {name} belongs to user {record.owner.user}; "
                "only its owner (or an admin) can see or release it"
            )
        return record

    def kernel_claims(self, caller: Caller, kernel_id: str) -> list[ClaimRecord]:
        if kernel_id not in set(self.live_kernels()):
            raise KernelNotFoundError(f"kernel {shown(kernel_id)} is not running on this server")
        return [r for r in self.claims(caller) if r.owner.kernel_id == kernel_id]

    def to_model(
        self,
        record: ClaimRecord,
        idle_deadline: float | None = None,
        *,
        busy: bool = False,
        gpu: GpuActivityModel | None = None,
        released: ReleasedModel | None = None,
    ) -> ClaimModel:
        return ClaimModel(
            name=record.name,
            namespace=record.namespace,
            user=record.owner.user,
            kernel_id=record.owner.kernel_id,
            run=run_of(record),
            devices=record.device_keys,
            env=self.environment([record]),
            created=record.created,
            last_activity=record.last_activity,
            lease_expires=record.lease_expires,
            idle_deadline=idle_deadline,
            busy=busy,
            gpu=gpu or NO_GPU_SIGNAL,
            released=released,
            in_kernel_env=(self.backend.capabilities.devices_here and self.kernel_envs.has(record)),
            used_by=list(record.users),
        )

    def usage(self, caller: Caller, since: str) -> UsageResponse:
        """The caller's usage over the last ``since`` (:func:`usage_of`)."""
        return usage_of(self.session.usage_book(since, what="GET usage"), caller.user, since)

    def counted(self, record: ClaimRecord) -> int:
        """How many devices a claim counts for the per-user limit: those allocated; for one
        not allocated yet (Kubernetes: until a pod uses it) those it asks for
        (:func:`~dra_jupyter.claimspec.requested_devices`), where a request for every
        matching device counts what it would get on idle devices."""
        if record.allocation:
            return len(record.device_keys)
        wanted = requested_devices(record.spec)
        if wanted is not None:
            return wanted
        results = self.backend.allocator([]).allocate([record.spec])
        return sum(len(r.to_dict().get("devices", {}).get("results", [])) for r in results or [])

    # --- writes ------------------------------------------------------------------------------

    def create(self, caller: Caller, body: Any) -> ClaimRecord:
        """Allocate now (``timeout`` 0) what ``body`` asks for, as ``dra.request`` would
        (on Kubernetes: create the claim, pending until a pod uses it)."""
        body = check_claim_request(body)  # types and sizes, before any work
        spec = {k: v for k, v in body.items() if k not in _REQUEST_KEYS}
        wait = parse_timeout(body.get("timeout", 0), what="timeout")
        if wait != 0:
            raise InvalidInputError(
                "timeout: only 0 is supported (fail at once when busy); "
                "retry later, or call dra.request(timeout=...) from a kernel to wait in line"
            )
        lease = parse_lease(body.get("lease"), what="lease")
        caps = self.backend.capabilities
        if lease is not None and not caps.leases:
            raise InvalidInputError(
                f"lease does not apply on {caps.where} (its claims have no "
                "lease); leave it out and release the claim when done"
            )
        name = body.get("name", "")
        kernel_id = body.get("kernel_id")
        if lease is None and kernel_id is None and caps.leases and self.unattached_lease > 0:
            lease = self.unattached_lease  # no kernel's idle release: not held for ever
        if kernel_id is not None and (
            not isinstance(kernel_id, str) or kernel_id not in set(self.live_kernels())
        ):
            raise KernelNotFoundError(f"kernel {shown(kernel_id)} is not running on this server")
        held_now = self._devices_held(caller.user) if self.max_devices_per_user else 0
        if self.max_devices_per_user and held_now >= self.max_devices_per_user:
            raise LimitError(
                f"user {caller.user} holds {held_now} devices, the limit per user is "
                f"{self.max_devices_per_user}; release a claim first"
            )
        backend = self.backend_for(caller.user, kernel_id)
        session = Session(self.session.settings, backend=backend)
        claim = session.build(spec, name)
        if caps.allocates_later:  # a claim that is made now and allocated later: check first
            self._check_possible(session, spec, claim)
            record = backend.allocate(claim, timeout=0, lease=lease, checked=True)
        else:
            # Allocated now or never: what is allocated was possible. Only a request that
            # fails is checked against an idle machine (which costs another allocation), to
            # say "never" (422) rather than "busy" (409).
            try:
                record = backend.allocate(claim, timeout=0, lease=lease, checked=True)
            except (AllocationError, ObjectError):
                self._check_possible(session, spec, claim)
                raise
        count = self.counted(record)
        if self.max_devices_per_user and held_now + count > self.max_devices_per_user:
            backend.release(record.name, "limit", any_owner=True)
            raise LimitError(
                f"claim for user {caller.user} would hold {held_now + count} devices, the "
                f"limit per user is {self.max_devices_per_user}; ask for fewer devices"
            )
        return record

    def possible(self, spec: dict[str, Any], name: str) -> tuple[list[str] | None, str]:
        """``(classes, never)`` for a kernel's question (:func:`dra_jupyter.api.asked.asked`),
        checked on what the server reads of the cluster (its watched views, on Kubernetes;
        never said: the kernel reads the devices to explain a refusal in full), or asked of
        the hub's shared view where the server reads one (it has no view of the cluster's
        devices of its own then, nor its kernels: the view's line is the refusal)."""
        if self.shared is not None:  # neither the server nor its kernels read the devices
            return self.shared.possible(spec, name)
        session = Session(self.session.settings, backend=self.backend)
        return asked(session, spec, name, never=False)  # never: the kernel explains it

    @staticmethod
    def _check_possible(session: Session, spec: dict[str, Any], claim: dict[str, Any]) -> None:
        try:
            session.check_possible(spec, claim)
        except NeverPossibleError as err:
            raise NeverPossibleError(err.message, err.explanation).said_by(err.caller) from None

    def _devices_held(self, user: str) -> int:
        """What the user's claims count (locally every claim of the machine's ledger, on
        Kubernetes every claim of the namespace), see :meth:`counted`."""
        swept = self._sweep()
        if swept.complete:
            held = [r for r in swept.kept if r.owner.user == user]
        else:
            held = self.backend_for(user).claims()
        return sum(self.counted(r) for r in held)

    def release(self, caller: Caller, name: str) -> ClaimRecord:
        """The caller's (``user``); an admin's of another user's claim: ``admin``, named."""
        record = self.claim(caller, name)
        reason = "admin" if caller.admin and record.owner.user != caller.user else "user"
        if not self.backend.release(name, reason, any_owner=True, by=caller.user):
            raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")
        self._note_release(record, reason, message=admin_words(reason, caller.user))
        return record

    def keep(self, caller: Caller, name: str, now: float | None = None) -> ClaimRecord:
        """The "keep" action of the idle warning: record activity on the claim, so its idle
        deadline moves to ``idle_timeout`` from now."""
        self.claim(caller, name)  # exists and is visible to the caller
        now = time.time() if now is None else now
        if not self.backend.touch(name, now):
            raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")
        return self.claim(caller, name)

    def move(self, caller: Caller, name: str, reason: str) -> ClaimRecord:
        """The Move of a claim whose device was taken out of service: a claim asking the
        same (the claim's own spec, for the same kernel, with the lease it has left) made
        now, whose allocation the taint keeps off that device; then the old claim released
        with ``reason``. Nothing changes when no equivalent device is free."""
        record = self.claim(caller, name)
        meta = record.spec.get("metadata") or {}
        fresh: dict[str, Any] = {"name": "", "namespace": meta.get("namespace", record.namespace)}
        if meta.get("labels"):
            fresh["labels"] = dict(meta["labels"])
        claim = {**record.spec, "metadata": fresh}
        left = None if record.lease_expires is None else record.lease_expires - time.time()
        backend = self.backend_for(record.owner.user, record.owner.kernel_id)
        try:
            moved = backend.allocate(claim, timeout=0, lease=left, checked=True)
        except AllocationError as err:
            raise AllocationError(
                f"claim {name}: no equivalent device is free now ({str(err).splitlines()[0]}); "
                "it keeps its "
                "devices: release it, or Move again later"
            ) from None
        self.backend.release(name, reason, any_owner=True)
        self._note_release(record, reason)
        return moved

    def adopt_kernel_claims(self, kernel_id: str) -> list[ClaimRecord]:
        """Before a restart with claims: make this server's process the holder of every
        claim of ``kernel_id`` (:meth:`~dra_jupyter.types.Backend.adopt`), so that the
        restart, which ends the process that held them, does not release them. The server
        then releases them when the kernel shuts down, restarts without claims or dies,
        when it is idle, or when the server stops. Refused where the kernel cannot use its
        claims' devices (Kubernetes: they go to pods)."""
        if kernel_id not in set(self.live_kernels()):
            raise KernelNotFoundError(f"kernel {shown(kernel_id)} is not running on this server")
        swept = self.backend.adopt(kernel_id, self.server_owner, time.time())
        for record, reason in swept.released:
            self._note_release(record, reason)
        return swept.kept

    def environment(self, records: list[ClaimRecord]) -> dict[str, str]:
        """The device environment of all these claims together, for a process here; empty
        where the devices are not this machine's (Kubernetes: a pod gets them)."""
        if not self.backend.capabilities.devices_here:
            return {}
        results = [
            result
            for record in records
            for result in record.allocation.get("devices", {}).get("results", [])
        ]
        inventory = self.inventory()
        return environment_for(results, inventory.slices, simulated=inventory.simulated).env

    def live_claims(
        self, select: Select | None = None, now: float | None = None, *, wait: bool = True
    ) -> list[ClaimRecord]:
        """Every live claim the server watches (:meth:`~dra_jupyter.types.Backend.sweep`),
        after releasing those for which ``select`` names a reason and those the backend
        reclaims by itself. Releases go to :attr:`released`. ``wait=False`` for a read."""
        return self._sweep(select, now, wait=wait).kept

    def release_taken_out(self, grace: float) -> list[tuple[ClaimRecord, str]]:
        """Release the claims on devices tainted ``NoExecute`` whose grace is over, where
        the backend does that (:class:`~dra_jupyter.types.TakingOut`: this machine's
        ledger); announced as every release (:attr:`released`)."""
        taking = taking_out_of(self.backend)
        if taking is None:
            return []
        now = time.time()
        released = taking.release_taken_out(grace, now)
        for record, reason in released:
            self._note_release(record, reason, now)
        return released

    def _sweep(
        self, select: Select | None = None, now: float | None = None, *, wait: bool = True
    ) -> Sweep:
        """The backend's sweep; ``wait=False`` for reads, which must not wait behind a
        writer (:meth:`~dra_jupyter.types.Backend.sweep`)."""
        now = time.time() if now is None else now
        swept = self.backend.sweep(select, now, set(self.live_kernels()), wait=wait)
        for record, reason in swept.released:
            self._note_release(record, reason, now, swept.ended.get(record.name))
        return swept

    def _note_release(
        self,
        record: ClaimRecord,
        reason: str,
        now: float | None = None,
        ended: Ended | None = None,
        message: str | None = None,
    ) -> None:
        """Announce a release (:attr:`released`) and remember it for a while
        (:data:`RELEASED_KEPT`, at most :data:`RELEASED_MAX` claims): with the time and
        words of ``ended``, the account of the process that released it, if another did."""
        now = time.time() if now is None else now
        self._announce(record, reason)
        gone = Released(record, reason, now, message)
        if ended is not None:
            gone = Released(record, reason, ended.time, ended.message)
        with self._recent_lock:
            self.recent.pop(record.name, None)
            self.recent[record.name] = gone
            while self.recent:
                oldest = next(iter(self.recent.values()))
                if len(self.recent) <= RELEASED_MAX and oldest.time > now - RELEASED_KEPT:
                    break
                del self.recent[oldest.record.name]

    def claim_or_released(self, caller: Caller, name: str) -> tuple[ClaimRecord, Released | None]:
        """The live claim, or one released lately (with why and when), by this server or, where
        the backend remembers (the local ledger, the service), by another process: a card
        that polls its claim learns why it went."""
        try:
            return self.claim(caller, name), None
        except ClaimNotFoundError:
            with self._recent_lock:
                gone = self.recent.get(name)
            if gone is None:  # released by another process (the CLI, the service): the backend's
                ended = self.backend.ended(name)
                if ended is not None:
                    gone = Released(ended.record, ended.reason, ended.time, ended.message)
            if gone is None or gone.time <= time.time() - RELEASED_KEPT:
                raise
            if not self.visible(caller, gone.record, set(self.live_kernels())):
                raise ForbiddenError(
                    f"claim {name} belonged to user {gone.record.owner.user}; "
                    "only its owner (or an admin) can see it"
                ) from None
            return gone.record, gone

    def _announce(self, record: ClaimRecord, reason: str) -> None:
        """Queue a release for its event: at once, or inside :meth:`batch` once it is
        committed."""
        staged: list[tuple[ClaimRecord, str]] | None = getattr(self._staged, "releases", None)
        if staged is not None:
            staged.append((record, reason))
        else:
            self.released.put((record, reason))

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run the calls made inside (on this thread) as one write of the backend
        (:meth:`~dra_jupyter.types.Backend.batch`: locally one ledger transaction, one
        fsync), so that the server's writer commits many requests at once. Their releases
        are announced only once that commit succeeded; if it fails, none of them are."""
        if getattr(self._staged, "releases", None) is not None:
            yield  # nested: the outer batch commits and announces
            return
        staged: list[tuple[ClaimRecord, str]] = []
        self._staged.releases = staged
        try:
            with self.backend.batch():
                yield
        finally:
            self._staged.releases = None
        for item in staged:
            self.released.put(item)


def usage_of(book: Book, user: str, since: str) -> UsageResponse:
    """``user``'s usage in ``book`` over the last ``since`` (their own row of the book, as the
    backend shows it to the server's user), and GPU-hours per day of it."""
    from dra_jupyter.accounting.book import MAX_DAILY, daily, window  # noqa: PLC0415

    last = window(since)
    mine = next((r.totals for r in book.report(("user",)) if r.key == (user,)), None)
    totals = mine if mine is not None else Totals()
    share = totals.idle_share
    days = min(MAX_DAILY, max(1, math.ceil(last / 86400)))
    return UsageResponse(
        user=user,
        since=last,
        gpu_hours=totals.held / 3600,
        gpu_seconds=totals.held,
        active_gpu_seconds=totals.active,
        idle_gpu_seconds=totals.idle,
        unknown_gpu_seconds=totals.unknown,
        energy_j=totals.energy,
        idle_share=None if math.isnan(share) else share,
        daily_gpu_hours=daily(book.intervals, user, days, book.now),
    )


def waited_on(waiter: Waiter, held: Collection[ClaimRecord]) -> list[str]:
    """The live claims a waiting request waits on: those that hold devices of the drivers
    it asks for (every claim that holds devices where the backend does not say)."""
    drivers = {class_driver(c) for c in waiter.classes}
    return [
        r.name
        for r in held
        if any(not drivers or key.split("/", 1)[0] in drivers for key in r.device_keys)
    ]

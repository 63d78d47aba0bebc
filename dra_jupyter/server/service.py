"""What the REST API and the idle monitor do, without Tornado: claims on behalf of the
server's users and kernels, over the same ledger and inventory as ``dra.request``.

Who sees what: a caller sees and releases the claims made under their user name (the
identity provider's) and the claims of this server's live kernels (whoever can reach the
server can run code in its kernels anyway); with ``admin`` every claim. Claims of other
users are refused (:class:`ForbiddenError`), not hidden, when named directly.

Errors are those of :mod:`dra_jupyter.errors`; the handlers' one error mapper gives each
class its HTTP status (the table there).
"""

from __future__ import annotations

import os
import queue
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.durations import parse_duration
from dra_jupyter.envvars import environment_for
from dra_jupyter.errors import (
    ClaimNotFoundError,
    ForbiddenError,
    InvalidInputError,
    KernelNotFoundError,
    LimitError,
    NeverPossibleError,
)
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.models import ClaimModel, DeviceModel, DevicesResponse
from dra_jupyter.settings import Settings
from dra_jupyter.tables import device_rows
from dra_jupyter.types import ClaimRecord, Owner, process_start_time

# Keywords of POST claims that are not claim keywords (dra.request's own arguments).
_REQUEST_KEYS = ("name", "lease", "timeout", "kernel_id")


@dataclass(frozen=True)
class Caller:
    """The authenticated user of a REST call."""

    user: str
    admin: bool = False


def devices_of(record: ClaimRecord) -> list[str]:
    return [
        f"{r['driver']}/{r['pool']}/{r['device']}"
        for r in record.allocation.get("devices", {}).get("results", [])
    ]


class ClaimService:
    """Claims for the server's users and kernels. Blocking (SQLite): the app runs every
    call on its one worker thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        live_kernels: Callable[[], Collection[str]],
        max_devices_per_user: int = 0,
    ) -> None:
        pid = os.getpid()
        self.server_owner = Owner(
            user="", host=socket.gethostname(), pid=pid, start_time=process_start_time(pid)
        )
        self.session = Session(settings, owner=self.server_owner)
        self.live_kernels = live_kernels
        self.max_devices_per_user = max_devices_per_user
        # what this service released, and why; the app emits the events on its loop
        self.released: queue.SimpleQueue[tuple[ClaimRecord, str]] = queue.SimpleQueue()

    @property
    def local(self) -> LocalBackend:
        """The server's backend: the local ledger (the only one the REST API serves yet)."""
        backend = self.session.backend
        if not isinstance(backend, LocalBackend):
            raise InvalidInputError(
                "the Jupyter server extension's REST API keeps claims in the local ledger; "
                "set DRA_JUPYTER_BACKEND=local for the server (kernels may use kubernetes)"
            )
        return backend

    @property
    def ledger(self) -> Ledger:
        return self.local.ledger

    def backend_for(self, user: str, kernel_id: str | None = None) -> LocalBackend:
        """A backend whose new claims belong to ``user`` (and the kernel), held by this
        server's process: they are reclaimed if the server dies."""
        return self.local.with_owner(replace(self.server_owner, user=user, kernel_id=kernel_id))

    # --- reads -------------------------------------------------------------------------------

    def devices(self) -> DevicesResponse:
        inventory = self.session.inventory
        held = self.live_claims()
        rows = [DeviceModel(**asdict(r)) for r in device_rows(inventory.slices, held)]  # type: ignore[typeddict-item]
        return DevicesResponse(
            inventory=inventory.description, simulated=inventory.simulated, devices=rows
        )

    def visible(self, caller: Caller, record: ClaimRecord, live: Collection[str]) -> bool:
        return (
            caller.admin
            or record.owner.user == caller.user
            or (record.owner.kernel_id is not None and record.owner.kernel_id in live)
        )

    def claims(self, caller: Caller) -> list[ClaimRecord]:
        live = set(self.live_kernels())
        return [r for r in self.live_claims() if self.visible(caller, r, live)]

    def claim(self, caller: Caller, name: str) -> ClaimRecord:
        for record in self.live_claims():
            if record.name != name:
                continue
            if not self.visible(caller, record, set(self.live_kernels())):
                raise ForbiddenError(
                    f"claim {name} belongs to user {record.owner.user}; "
                    "only its owner (or an admin) can see or release it"
                )
            return record
        raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")

    def kernel_claims(self, caller: Caller, kernel_id: str) -> list[ClaimRecord]:
        if kernel_id not in set(self.live_kernels()):
            raise KernelNotFoundError(f"kernel {kernel_id} is not running on this server")
        return [r for r in self.claims(caller) if r.owner.kernel_id == kernel_id]

    def to_model(self, record: ClaimRecord, idle_deadline: float | None = None) -> ClaimModel:
        results = record.allocation.get("devices", {}).get("results", [])
        return ClaimModel(
            name=record.name,
            namespace=record.namespace,
            user=record.owner.user,
            kernel_id=record.owner.kernel_id,
            devices=devices_of(record),
            env=environment_for(results, self.session.inventory.slices).env,
            created=record.created,
            last_activity=record.last_activity,
            lease_expires=record.lease_expires,
            idle_deadline=idle_deadline,
        )

    # --- writes ------------------------------------------------------------------------------

    def create(self, caller: Caller, body: Any) -> ClaimRecord:
        """Allocate now (``timeout`` 0) what ``body`` asks for, as ``dra.request`` would."""
        if not isinstance(body, dict):
            raise InvalidInputError(
                "POST claims: the body must be a JSON object of dra.request keywords, "
                'e.g. {"gpu": 1}'
            )
        spec = {k: v for k, v in body.items() if k not in _REQUEST_KEYS}
        wait = parse_duration(body.get("timeout", 0), what="timeout")
        if wait != 0:
            raise InvalidInputError(
                "POST claims: only timeout 0 is supported (fail at once when busy); "
                "retry later, or call dra.request(timeout=...) from a kernel to wait in line"
            )
        lease = parse_duration(body.get("lease"), what="lease")
        name = body.get("name", "")
        if not isinstance(name, str):
            raise InvalidInputError(f"POST claims: name must be a string, not {name!r}")
        kernel_id = body.get("kernel_id")
        if kernel_id is not None and (
            not isinstance(kernel_id, str) or kernel_id not in set(self.live_kernels())
        ):
            raise KernelNotFoundError(f"kernel {kernel_id!r} is not running on this server")
        held_now = self._devices_held(caller.user)
        if self.max_devices_per_user and held_now >= self.max_devices_per_user:
            raise LimitError(
                f"user {caller.user} holds {held_now} devices, the limit per user is "
                f"{self.max_devices_per_user}; release a claim first"
            )
        backend = self.backend_for(caller.user, kernel_id)
        session = Session(self.session.settings, backend=backend)
        claim = session.build(spec, name)
        try:
            session.check_possible(spec, claim)
        except NeverPossibleError as err:
            raise NeverPossibleError(
                f"POST claims: {str(err).removeprefix('dra.request: ')}", err.explanation
            ) from None
        record = backend.allocate(claim, timeout=0, lease=lease, checked=True)
        count = len(devices_of(record))
        if self.max_devices_per_user and held_now + count > self.max_devices_per_user:
            backend.release(record.name, "limit", any_owner=True)
            raise LimitError(
                f"claim for user {caller.user} would hold {held_now + count} devices, the "
                f"limit per user is {self.max_devices_per_user}; ask for fewer devices"
            )
        return record

    def _devices_held(self, user: str) -> int:
        held = self.live_claims()
        return sum(len(devices_of(r)) for r in held if r.owner.user == user)

    def release(self, caller: Caller, name: str) -> ClaimRecord:
        record = self.claim(caller, name)
        if not self.local.release(name, "user", any_owner=True):
            raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")
        self.released.put((record, "user"))
        return record

    def keep(self, caller: Caller, name: str, now: float | None = None) -> ClaimRecord:
        """The "keep" action of the idle warning: record activity on the claim, so its idle
        deadline moves to ``idle_timeout`` from now."""
        self.claim(caller, name)  # exists and is visible to the caller
        now = time.time() if now is None else now
        if not self.ledger.touch(name, now):
            raise ClaimNotFoundError(f"claim {name} does not exist (it may have been released)")
        return self.claim(caller, name)

    def adopt_kernel_claims(self, kernel_id: str) -> list[ClaimRecord]:
        """Before a restart with claims: make this server's process the holder of every
        claim of ``kernel_id`` (keeping its user and kernel id), in one ledger transaction.

        A claim made by ``dra.request()`` in the kernel is held by the kernel's process, and
        any process on the ledger reclaims it once that process is gone, which a restart
        makes happen; re-owning after the restart would race with those reclaims. Held by
        the server (as ``POST claims`` with a ``kernel_id`` are), the claim lives while the
        server does, and the server releases it when the kernel shuts down, restarts
        without claims or dies, when it is idle, or when the server stops. A claim whose
        holder is already gone is released (as :meth:`live_claims` would), not adopted."""
        if kernel_id not in set(self.live_kernels()):
            raise KernelNotFoundError(f"kernel {kernel_id} is not running on this server")
        now = time.time()
        adopted = []
        with self.ledger.transaction() as conn:
            for record in Ledger.claims(conn):
                if record.owner.kernel_id != kernel_id:
                    continue
                reason = _reclaim_reason(record, now)
                if reason is not None:
                    Ledger.delete(conn, record, reason, now)
                    self.released.put((record, reason))
                    continue
                owner = replace(self.server_owner, user=record.owner.user, kernel_id=kernel_id)
                if owner != record.owner:
                    # the ledger has no owner update of its own; its claims table keeps the
                    Ledger.set_owner(conn, record.name, owner)
                    record = replace(record, owner=owner)  # noqa: PLW2901
                adopted.append(record)
        return adopted

    def environment(self, records: list[ClaimRecord]) -> dict[str, str]:
        """The device environment of all these claims together."""
        results = [
            result
            for record in records
            for result in record.allocation.get("devices", {}).get("results", [])
        ]
        return environment_for(results, self.session.inventory.slices).env

    def live_claims(
        self, select: Callable[[ClaimRecord], str | None] | None = None, now: float | None = None
    ) -> list[ClaimRecord]:
        """Every live claim, after one ledger transaction that releases those for which
        ``select`` names a reason, and those the ledger would reclaim: an expired lease
        (``expired``), a holder process that is gone (``kernel-shutdown`` for a kernel's
        claim, else ``reclaimed``). Each holder is checked once, so a kernel that dies during
        the transaction cannot be recorded under another reason. Waiters of dead processes
        are left to the allocating processes (``LocalBackend.allocate`` reclaims).
        Releases go to :attr:`released`."""
        now = time.time() if now is None else now
        kept = []
        with self.ledger.transaction() as conn:
            for record in Ledger.claims(conn):
                reason = select(record) if select is not None else None
                if reason is None:
                    reason = _reclaim_reason(record, now)
                if reason is None:
                    kept.append(record)
                    continue
                Ledger.delete(conn, record, reason, now)
                self.released.put((record, reason))
        return kept


def _reclaim_reason(record: ClaimRecord, now: float) -> str | None:
    """Why the ledger would reclaim this claim (``Ledger.reclaim``'s rules), naming a
    kernel's end ``kernel-shutdown``."""
    if record.lease_expires is not None and record.lease_expires <= now:
        return "expired"
    if not record.owner.is_alive():
        return "kernel-shutdown" if record.owner.kernel_id else "reclaimed"
    return None

"""A request's way to its claim on this machine: its tries, each one ledger transaction, and
its wait in line between them (:func:`allocate`, what
:meth:`~dra_jupyter.local.backend.LocalBackend.allocate` runs).

A try reclaims what dead owners and expired leases hold, reads every live claim, allocates
on top of them and writes the new claim. A request that cannot be met now either fails at
once (:func:`busy_error`, with the allocator's explanation) or waits in the FIFO queue of
its shape (:func:`~dra_jupyter.local.shapes.shape_of`). A waiting request tries again when
another process frees devices or the line moves (woken by :mod:`~dra_jupyter.local.wakeup`),
and at the latest every poll interval, or when the first lease of the claims held runs out.
While it waits it takes turns of reclaim under pressure (:mod:`~dra_jupyter.local.pressure`):
idle holders whose release would let it in are warned, then released at their deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from dra_jupyter.allocator import Explanation
from dra_jupyter.errors import PYTHON_WAIT, AllocationError, BusyError
from dra_jupyter.local import pressure
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_of
from dra_jupyter.local.wakeup import Listener
from dra_jupyter.model.objects import Wire
from dra_jupyter.sharing.reclaim import ReclaimSettings
from dra_jupyter.types import ClaimRecord, OnWait, Owner, Waiting, claim_prefix

TURN_EVERY = 1.0  # seconds between a waiting request's turns of reclaim under pressure


class Asker(pressure.Devices, Protocol):
    """What a request's tries read of the backend that asks
    (:class:`~dra_jupyter.local.backend.LocalBackend`), at each try: its owner, its clock
    and sleep (a test sets them), how it waits, and its reclaim under pressure (None: off)."""

    owner: Owner
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wakeup: bool
    poll_interval: float
    reclaim: ReclaimSettings | None


def busy_error(
    explanation: Explanation,
    held: list[ClaimRecord],
    position: int,
    waited: float,
    *,
    named: bool = True,
) -> BusyError:
    """The refusal of a request that found the devices busy: how long it waited and its
    place in line, why the allocator could not serve it, and who holds claims now (those
    in ``held``: all of them here, what the asker may see in the service). ``named``: the
    claim has a name of the user's, said in the explanation."""
    waited_text = f" after waiting {waited:.0f}s" if waited >= 1 else ""
    place = f" (number {position} in the queue)" if position > 1 else ""
    holders = ", ".join(f"{r.name} ({r.owner.user})" for r in held) or "nobody"
    return BusyError(
        f"the devices are busy{waited_text}{place}; {PYTHON_WAIT} to wait in line, "
        "or release claims you no longer need:\n"
        + explanation.summary(named=named)
        + f"\nclaims held now: {holders}",
        explanation,
    )


def allocate(
    backend: Asker,
    claim: Wire,
    *,
    timeout: float | None,
    lease: float | None,
    on_wait: OnWait | None,
) -> ClaimRecord:
    """Allocate ``claim`` for ``backend``'s owner, trying until ``timeout`` (0: one try,
    None: without limit) in the line of its shape (see the module's docstring); the
    wake-up only shortens the sleep between tries, the tries decide."""
    shape = shape_of(claim)
    start = backend.clock()
    waiter: int | None = None
    listener: Listener | None = None
    turned = start - TURN_EVERY  # when it last took a turn of reclaim under pressure
    try:
        while True:
            record, position, held = _attempt(backend, claim, shape, waiter, lease)
            if record is not None:
                waiter = None  # dequeued in the same transaction
                return record
            now = backend.clock()
            waited = now - start
            if timeout is not None and waited >= timeout:
                raise _busy(backend, claim, position, waited, held)
            if waiter is None:
                with backend.ledger.transaction() as conn:
                    waiter = Ledger.enqueue(conn, shape, backend.owner, now)
                    position = Ledger.position(conn, shape, waiter)
                # a sleep of its own (a test's fake clock, set after the start) keeps
                # its time: only a backend that really sleeps listens
                if backend.wakeup and backend.sleep is time.sleep:
                    listener = backend.ledger.bell.listen()
                    if listener is not None:
                        continue  # a release before it listened would not wake it
            if on_wait is not None:
                on_wait(Waiting(position, waited, timeout))
            if backend.reclaim is not None and now - turned >= TURN_EVERY:
                turned = now
                pressure.turn(backend, backend.reclaim, now)
            pause = _pause(backend.poll_interval, held, now)
            if listener is not None:
                listener.wait(pause)
            else:
                backend.sleep(pause)
    finally:
        if listener is not None:
            listener.close()
        if waiter is not None:
            with backend.ledger.transaction() as conn:
                Ledger.dequeue(conn, waiter)


def _pause(poll_interval: float, held: list[ClaimRecord] | None, now: float) -> float:
    """How long a waiting request sleeps before it tries again (unless woken): the poll
    interval, less where a lease of the claims ``held`` runs out first (nobody rings
    for a lease: the next try reclaims it)."""
    leases = [r.lease_expires for r in held or () if r.lease_expires is not None]
    return min([poll_interval, *(max(0.0, t - now) for t in leases)])


def _attempt(
    backend: Asker, claim: Wire, shape: str, waiter: int | None, lease: float | None
) -> tuple[ClaimRecord | None, int, list[ClaimRecord] | None]:
    """One try: the new claim (or None), the place in line, and the claims held then
    (None when earlier requests of the same shape go first: not read)."""
    with backend.ledger.transaction() as conn:
        now = backend.clock()
        Ledger.reclaim(conn, now)
        position = Ledger.position(conn, shape, waiter)
        if position > 1:
            return None, position, None  # earlier requests of the same shape go first
        held = Ledger.claims(conn)
        meta = dict(claim["metadata"])
        if meta.get("name") and any(r.name == meta["name"] for r in held):
            raise AllocationError(
                f"claim {meta['name']} exists already; release it first or use another name"
            )
        probe = {**claim, "metadata": {**meta, "name": meta.get("name") or "new-request"}}
        results = backend.allocator(held).allocate([probe])
        if results is None:
            return None, position, held
        if not meta.get("name"):  # named only once it is allocated
            meta["name"] = Ledger.next_name(conn, claim_prefix(backend.owner.user))
        named = {**claim, "metadata": meta}
        record = ClaimRecord(
            name=meta["name"],
            namespace=meta.get("namespace", "default"),
            owner=backend.owner,
            spec=named,
            allocation=results[0].to_dict(),
            created=now,
            last_activity=now,
            lease_expires=now + lease if lease is not None else None,
        )
        Ledger.insert(conn, record, backend.weights.parts(record.allocation))
        if waiter is not None:
            Ledger.dequeue(conn, waiter)
        return record, position, held


def _busy(
    backend: Asker,
    claim: Wire,
    position: int,
    waited: float,
    held: list[ClaimRecord] | None = None,
) -> BusyError:
    """Why the claim cannot be allocated now, on the claims ``held`` by the attempt that
    failed (read again when it did not read them)."""
    if held is None:
        held = backend.ledger.read_claims()
    name = claim["metadata"].get("name") or "new-request"
    probe = {**claim, "metadata": {**claim["metadata"], "name": name}}
    explanation = backend.allocator(held).explain([probe], bare_namespace=backend.namespace)
    named = bool(claim["metadata"].get("name"))
    return busy_error(explanation, held, position, waited, named=named)

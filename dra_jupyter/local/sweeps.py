"""What a Jupyter server does to the ledger's claims: :func:`sweep` releases those it selects
and those the ledger would reclaim, :func:`adopt` makes a kernel's claims its own
(:meth:`~dra_jupyter.local.backend.LocalBackend.sweep` and
:meth:`~dra_jupyter.local.backend.LocalBackend.adopt` run them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dra_jupyter.local.ledger import Ledger, LedgerBusyError
from dra_jupyter.types import ClaimRecord, Owner, Select, Sweep


def reclaim_reason(record: ClaimRecord, now: float) -> str | None:
    """Why the ledger would reclaim this claim (``Ledger.reclaim``'s rules), naming a
    kernel's end ``kernel-shutdown``."""
    if record.lease_expires is not None and record.lease_expires <= now:
        return "expired"
    if not record.owner.is_alive():
        return "kernel-shutdown" if record.owner.kernel_id else "reclaimed"
    return None


def sweep(
    ledger: Ledger,
    select: Select | None,
    now: float,
    *,
    wait: bool = True,
    message: Callable[[ClaimRecord, str], str | None] | None = None,
) -> Sweep:
    """Every live claim of the ledger, after one transaction that releases those for
    which ``select`` names a reason, and those the ledger would reclaim: an expired
    lease (``expired``), a holder process that is gone (``kernel-shutdown`` for a
    kernel's claim, else ``reclaimed``). Each holder is checked once, so a kernel that
    dies during the transaction cannot be recorded under another reason. Waiters of
    dead processes are left to the allocating processes (an allocation reclaims). The
    result is ``complete``: the ledger holds every claim of the machine.

    The ledger is read first without its write lock; the transaction runs only when
    something is to be released. ``wait=False`` (a read, which must not wait behind
    a writer): if another connection holds the write lock then, nothing is released
    now, and the claims to release are left out of ``kept`` (the next sweep or
    allocation releases them). ``message``: the words the ledger keeps for a release's
    user, by claim and reason (None: the reason says it)."""
    swept = _judge(ledger.read_claims(), select, now)
    if not swept.released:
        return swept
    try:
        with ledger.transaction(wait=wait) as conn:
            swept = _judge(Ledger.claims(conn), select, now)
            for record, reason in swept.released:
                words = message(record, reason) if message is not None else None
                Ledger.delete(conn, record, reason, now, words)
    except LedgerBusyError:
        return Sweep(kept=swept.kept, complete=True)
    return swept


def _judge(held: list[ClaimRecord], select: Select | None, now: float) -> Sweep:
    """Which of ``held`` :func:`sweep` keeps, and which it releases and why."""
    swept = Sweep(complete=True)
    for record in held:
        reason = select(record) if select is not None else None
        if reason is None:
            reason = reclaim_reason(record, now)
        if reason is None:
            swept.kept.append(record)
        else:
            swept.released.append((record, reason))
    return swept


def adopt(ledger: Ledger, kernel_id: str, holder: Owner, now: float) -> Sweep:
    """Make ``holder`` hold every claim of ``kernel_id``, in one ledger transaction.

    A claim made by ``dra.request()`` in the kernel is held by the kernel's process,
    and any process on the ledger reclaims it once that process is gone, which a
    restart makes happen; re-owning after the restart would race with those reclaims.
    A claim whose holder is already gone is released (as :func:`sweep` would)."""
    swept = Sweep()
    with ledger.transaction() as conn:
        for record in Ledger.claims(conn):
            if record.owner.kernel_id != kernel_id:
                continue
            reason = reclaim_reason(record, now)
            if reason is not None:
                Ledger.delete(conn, record, reason, now)
                swept.released.append((record, reason))
                continue
            owner = replace(holder, user=record.owner.user, kernel_id=kernel_id)
            if owner != record.owner:
                Ledger.set_owner(conn, record.name, owner)
                record = replace(record, owner=owner)  # noqa: PLW2901
            swept.kept.append(record)
    return swept

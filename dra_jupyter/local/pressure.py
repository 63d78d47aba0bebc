"""Reclaim under pressure on the embedded ledger: while a request waits, the idle holders
that could free what it needs are warned, then released at the deadline, as the
``dra-jupyter service`` does (:mod:`dra_jupyter.service.pressure`), with no daemon.

What to do is :func:`dra_jupyter.sharing.reclaim.plan`'s; :func:`turn` gathers what it
needs from the ledger and acts on it, in one write transaction, so that two processes that
take a turn at once (the waiting process while it waits, every Jupyter server at each
reclaim check) do it once: the second finds the first's notices. Without a waiter a turn
is one read and nothing else (a warning lives only while its waiter waits).

- The holders: the live claims whose activity a Jupyter server reports
  (:mod:`~dra_jupyter.local.notices`: the server tells the ledger when its kernels' cells
  start and end, :mod:`dra_jupyter.server.reclaims`), idle since their last activity (their
  creation, a Keep, a cell), busy while a cell runs. A claim nobody reports on (a script's,
  the CLI's that lives by its lease) is never reclaimed: its idleness is not known. The
  ledger knows no fair-share standing and no GPU signal: idle holders go, idle the
  longest first.
- The waiters: the first request of each shape in line (the others wait behind it), each
  with whether releasing some claims would let it be allocated (the allocator, its search
  bounded by :data:`TURN_STEPS`).

A warning is a row of ``reclaim_notices``; the holder's Jupyter server reads it
(:meth:`~dra_jupyter.local.backend.LocalBackend.notices`) and tells its user (the
``reclaim_warning`` event). A Keep of a warned claim is allowed ``keeps_under_pressure``
times, then refused in one line (:func:`keep`). At the deadline the claim is released with
reason ``fair-share``, for whom said; the release wakes the waiter.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from dra_jupyter.accounting.weights import Weights
from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import KeepRefusedError
from dra_jupyter.local import notices as _notices
from dra_jupyter.local.claims import DamagedRowError, owner_from
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_words
from dra_jupyter.sharing.reclaim import (
    Frees,
    GpuUse,
    Holder,
    Notice,
    ReclaimSettings,
    Waiter,
    plan,
)
from dra_jupyter.sharing.reclaim import keep as keep_verdict
from dra_jupyter.types import ClaimRecord, ReclaimNotice


class Devices(Protocol):
    """What a turn needs of the backend (:class:`~dra_jupyter.local.backend.LocalBackend`):
    its ledger, its namespace, the devices' worth, an allocator on them."""

    ledger: Ledger
    namespace: str

    @property
    def weights(self) -> Weights: ...

    def allocator(self, held: list[ClaimRecord], *, max_steps: int = ...) -> Allocator: ...


REASON = "fair-share"  # the release's reason in the ledger (the service's)
MOST_WAITERS = 16  # waiters, from the head of the line, that holders are warned for in a turn
TURN_STEPS = 2_000  # steps of each allocation a turn tries (a wider search: not freed)


def turn(backend: Devices, settings: ReclaimSettings, now: float, *, wait: bool = True) -> None:
    """One turn: warn, withdraw, release (module docstring). The released claims' devices
    are free once it commits, which wakes the waiters. ``wait=False``: LedgerBusyError at
    once where another process holds the ledger's write lock."""
    ledger = backend.ledger
    if not ledger.under_pressure():
        return  # without a waiter nothing is reclaimed
    with ledger.transaction(wait=wait) as conn:
        # a gone holder's claim, an expired lease's: the waiter's next try reclaims them as
        # such (their devices count as free here), never under pressure
        records = [r for r in Ledger.claims(conn) if _lives(r, now)]
        activity = _notices.reported(conn)
        holders = [
            _holder(r, activity[r.name], now)
            for r in records
            if r.name in activity and r.owner.pid > 0
        ]
        waiters: list[tuple[Waiter, Frees]] = []
        for key, shape, user, since in _heads(conn)[:MOST_WAITERS]:
            frees = _frees(backend, shape, records)
            if frees is not None and not frees([]):  # one that fits now takes its devices
                waiters.append((Waiter(key, user, what(backend, shape), since), frees))
        decided = plan(now, waiters, holders, _notices.notices(conn), settings)
        for notice in decided.withdraw:
            _notices.withdraw(conn, notice.claim)
        for notice in decided.warn:
            _notices.write(conn, notice)
        due = {n.claim: n for n in decided.release}
        for record in records:
            if record.name in due:
                words = released_words(due[record.name], now)
                Ledger.delete(conn, record, REASON, now, words)


def keep(conn: sqlite3.Connection, name: str, settings: ReclaimSettings, now: float) -> bool:
    """A Keep of the claim ``name`` inside the caller's transaction: False where it is not
    warned (an ordinary Keep); True where it was, and is postponed (not touched: its holder
    stays idle for the next warning); KeepRefusedError, in one line, past
    ``keeps_under_pressure``."""
    notice = _notices.notices(conn).get(name)
    if notice is None:
        return False
    kept = keep_verdict(notice, settings, now)
    if not kept.allowed:
        raise KeepRefusedError(kept.message)
    _notices.write(conn, kept.notice)
    return True


def shown(
    notices: Mapping[str, Notice], settings: ReclaimSettings, now: float
) -> list[tuple[ReclaimNotice, str]]:
    """The warnings in force as their holders read them, each with its holder's user."""
    return [
        (
            ReclaimNotice(
                n.claim,
                n.waiter,
                n.what,
                n.deadline,
                max(0, settings.keeps - n.keeps),
                n.message(now),
                n.warned,
            ),
            n.holder,
        )
        for n in notices.values()
    ]


def released_words(notice: Notice, now: float) -> str:
    """What the ledger keeps for the holder of a claim released under pressure."""
    return (
        f"released for {notice.waiter}, who waited for {notice.what} "
        f"({notice.why}; warned {now - notice.warned:.0f} s before)"
    )


def what(backend: Devices, shape: str) -> str:
    """What a request of ``shape`` asks, in words: the devices it would get on the idle
    machine, by model (``1× NVIDIA H200``), else in ``dra.request``'s words (``gpu=1``)."""
    claim = _probe(backend, shape)
    if claim is not None:
        results = backend.allocator([], max_steps=TURN_STEPS).allocate([claim])
        if results is not None:
            models = Counter(p.model for p in backend.weights.parts(results[0].to_dict()))
            if models and "" not in models:
                return ", ".join(f"{n}× {model}" for model, n in sorted(models.items()))
    return shape_words(shape)


def _lives(record: ClaimRecord, now: float) -> bool:
    """Whether ``record`` is not to be reclaimed: its lease, if any, runs and its holder
    lives (the ledger's own rules, :meth:`~dra_jupyter.local.ledger.Ledger.reclaim`)."""
    lease = record.lease_expires
    return (lease is None or lease > now) and record.owner.is_alive()


def _holder(record: ClaimRecord, busy_until: float | None, now: float) -> Holder:
    busy = busy_until is not None and busy_until > now
    return Holder(
        user=record.owner.user,
        claim=record.name,
        devices=tuple(record.device_keys),
        idle_since=None if busy else record.last_activity,
        gpu=GpuUse.UNKNOWN,
        held_since=record.created,
    )


def _heads(conn: sqlite3.Connection) -> list[tuple[int, str, str, float]]:
    """The first waiter of each shape, in the line's order: ``(id, shape, user, since)``
    (a damaged row, a waiter whose process is gone: left out, for the next reclaim to
    drop)."""
    heads: dict[str, tuple[int, str, str, float]] = {}
    for row in conn.execute("SELECT id, shape, owner, created FROM waiters ORDER BY id"):
        shape = str(row["shape"])
        if shape in heads:
            continue
        try:
            owner = owner_from(row["owner"])
        except DamagedRowError:
            continue
        if not owner.is_alive():
            continue
        user = owner.user
        since = row["created"]
        heads[shape] = (int(row["id"]), shape, user, float(since or 0))
    return list(heads.values())


def _probe(backend: Devices, shape: str) -> dict[str, object] | None:
    """A claim of ``shape`` to try (None: the shape is not a spec)."""
    try:
        spec = json.loads(shape)
    except ValueError:
        return None
    if not isinstance(spec, dict):
        return None
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "new-request", "namespace": backend.namespace},
        "spec": spec,
    }


def _frees(backend: Devices, shape: str, records: list[ClaimRecord]) -> Frees | None:
    """Whether releasing some holders lets a request of ``shape`` be allocated (False where
    the search would be too wide for a turn); None where the shape is not a spec."""
    claim = _probe(backend, shape)
    if claim is None:
        return None

    def frees(holders: Sequence[Holder]) -> bool:
        gone = {h.claim for h in holders}
        held = [r for r in records if r.name not in gone]
        return backend.allocator(held, max_steps=TURN_STEPS).allocate([claim]) is not None

    return frees

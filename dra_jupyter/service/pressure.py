"""Reclaim under pressure, in the daemon: while a request waits, the idle holders that could
free what it needs are warned, then released at the deadline (the policy's ``reclaim``).

What to do is :func:`dra_jupyter.sharing.reclaim.plan`'s; this gathers what it needs and
acts on it, on the daemon's loop, once a second and as soon as a request starts to wait:

- the holders: every live claim held by a process (a claim of the CLI lives by its lease:
  no kernel to be idle), idle since its last activity (its creation, a Keep, its GPU
  active: :mod:`~dra_jupyter.service.gpus`, its kernel's cells as its Jupyter server
  reports them: the ``activity`` op) and busy while a cell runs (:meth:`Pressure.active`),
  its GPU as the sampler sees it (unknown without a signal), and its user's fair-share
  standing (:mod:`~dra_jupyter.service.fairness`);
- the waiters, in the line's order, each with whether releasing some claims would let it
  be allocated (the allocator, bounded as an inline attempt; a waiter that fits now
  needs nobody's release, one whose search is too wide is left to the idle limit).

A warning is a service event (logged: ``reclaim: bob is waiting for 1× NVIDIA H200; your
gpu-3, idle for 3 h, will be released in 5:00``) and a notice the holder reads (the
``notices`` op; a line of ``dra-jupyter claims``); the release at its deadline has reason
``fair-share`` and says for whom. A Keep of a warned claim goes through :meth:`keep`:
allowed ``keeps_under_pressure`` times, each postponing the release by at most
``reclaim_grace``; then refused in one line. The notices live in the daemon's memory: a
restart forgets them (the holders are warned again, with a full grace).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dra_jupyter.errors import LedgerError
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_summary
from dra_jupyter.metrics.activity import GpuState
from dra_jupyter.service.access import Access
from dra_jupyter.service.args import probe
from dra_jupyter.service.line import MOST_SHAPES, Line, Wait
from dra_jupyter.service.peer import Peer
from dra_jupyter.service.work import INLINE_STEPS, Bounded, InlineBudgetError
from dra_jupyter.sharing.fairshare import Standing
from dra_jupyter.sharing.reclaim import (
    Frees,
    GpuUse,
    Holder,
    Kept,
    Notice,
    Waiter,
    keep,
    plan,
)
from dra_jupyter.types import ClaimRecord

if TYPE_CHECKING:
    from dra_jupyter.service.gpus import GpuSampler

log = logging.getLogger("dra_jupyter.service")

REASON = "fair-share"  # the release's reason in the ledger
# seconds a report that a claim's kernel is busy holds without a new one: its server renews
# it while the cell runs (every 30 s, server/reclaims.py); a server that died says nothing
BUSY_HOLD = 120.0
MOST_WAITERS = 16  # waiters, from the head of the line, that holders are warned for in a turn
_GPU_USE = {
    GpuState.ACTIVE: GpuUse.ACTIVE,
    GpuState.INACTIVE: GpuUse.IDLE,
    GpuState.IDLE: GpuUse.IDLE,
    GpuState.UNKNOWN: GpuUse.UNKNOWN,
}


class Pressure:
    """See the module docstring: :attr:`notices` in force, by claim."""

    def __init__(
        self,
        access: Access,
        ledger: Ledger,
        local: LocalBackend,
        line: Line,
        gpus: GpuSampler | None = None,
    ) -> None:
        self.access = access
        self.ledger = ledger
        self.local = local
        self.line = line
        self.gpus = gpus
        self.notices: dict[str, Notice] = {}
        self.busy: dict[str, float] = {}  # claim -> until when its kernel counts as busy
        self._what: dict[str, str] = {}  # a request's shape in words (the inventory is fixed)

    def turn(self, now: float) -> None:
        """One turn: warn, withdraw, release (then serve the line)."""
        policy = self.access.policy
        if not self.notices and (not self.line.waits or not policy.reclaim):
            return  # without a waiter nothing is reclaimed
        records = [
            r for r in self.ledger.read_claims() if r.lease_expires is None or r.lease_expires > now
        ]
        live = {r.name for r in records}
        self.notices = {c: n for c, n in self.notices.items() if c in live}
        self.busy = {c: until for c, until in self.busy.items() if c in live and until > now}
        places = self.line.places()[:MOST_WAITERS] if policy.reclaim else []
        holders_users = {r.owner.user for r in records}
        groups = {w.owner.user: w.conn.peer.groups for w, _ in places}
        table = self.line.fairness.standings(
            [w.owner.user for w, _ in places] + list(holders_users), groups
        )
        holders = [
            self._holder(r, now, table.get(r.owner.user)) for r in records if r.owner.pid > 0
        ]
        waiters = []
        for wait, _ in places:
            frees = self._frees(wait, records)
            if not frees([]):  # one that fits now needs nobody's release: the line serves it
                waiters.append((Waiter(wait, wait.owner.user, self.what(wait), wait.start), frees))
        decided = plan(now, waiters, holders, self.notices, policy.reclaim_settings)
        for notice in decided.withdraw:
            del self.notices[notice.claim]
            log.info(
                "reclaim: claim %s of %s is not released: %s no longer waits for it, or its GPU "
                "works again",
                notice.claim,
                notice.holder,
                notice.waiter,
            )
        for notice in decided.warn:
            self.notices[notice.claim] = notice
            log.warning("reclaim: to %s: %s", notice.holder, notice.message(now))
        if decided.release:
            self._release(decided.release, now)

    def _holder(self, record: ClaimRecord, now: float, standing: Standing | None) -> Holder:
        gpu = GpuUse.UNKNOWN
        if self.gpus is not None and self.gpus.watch.signal:
            gpu = _GPU_USE[self.gpus.watch.activity(record.name, now).state]
        busy = self.busy.get(record.name, 0.0) > now
        return Holder(
            user=record.owner.user,
            claim=record.name,
            devices=tuple(record.device_keys),
            idle_since=None if busy else record.last_activity,
            gpu=gpu,
            held_since=record.created,
            standing=standing,
        )

    def what(self, wait: Wait) -> str:
        """What ``wait`` asks, in words: the devices it would get on the idle machine, by
        model (``1× NVIDIA H200``), else its shape in short (``1 gpu.nvidia.com``)."""
        found = self._what.get(wait.shape)
        if found is None:
            found = shape_summary(wait.shape)
            try:
                bounded = self.local.allocator([], max_steps=INLINE_STEPS, kind=Bounded)
                results = bounded.allocate([probe(wait.claim)])
            except InlineBudgetError:
                results = None
            if results is not None:
                models = Counter(p.model for p in self.local.weights.parts(results[0].to_dict()))
                if models and "" not in models:
                    found = ", ".join(f"{n}× {model}" for model, n in sorted(models.items()))
            if len(self._what) >= MOST_SHAPES:
                self._what.clear()
            self._what[wait.shape] = found
        return found

    def _frees(self, wait: Wait, records: list[ClaimRecord]) -> Frees:
        """Whether releasing some holders lets ``wait`` be allocated (False where the
        search would be too wide for the loop)."""
        claim = probe(wait.claim)

        def frees(holders: Sequence[Holder]) -> bool:
            gone = {h.claim for h in holders}
            held = [r for r in records if r.name not in gone]
            try:
                bounded = self.local.allocator(held, max_steps=INLINE_STEPS, kind=Bounded)
                return bounded.allocate([claim]) is not None
            except InlineBudgetError:
                return False

        return frees

    def _release(self, due: Sequence[Notice], now: float) -> None:
        by_claim = {n.claim: n for n in due}

        def select(record: ClaimRecord) -> str | None:
            return REASON if record.name in by_claim else None

        def words(record: ClaimRecord, reason: str) -> str | None:
            notice = by_claim.get(record.name)
            if reason != REASON or notice is None:
                return None
            return (
                f"released for {notice.waiter}, who waited for {notice.what} "
                f"({notice.why}; warned {now - notice.warned:.0f} s before)"
            )

        try:
            swept = self.local.sweep(select, now, (), message=words)
        except LedgerError as err:
            log.error("%s", err)
            return
        for record, reason in swept.released:
            notice = self.notices.pop(record.name, None)
            if reason == REASON and notice is not None:
                log.info(
                    "reclaim: claim %s of %s released for %s (fair-share)",
                    record.name,
                    record.owner.user,
                    notice.waiter,
                )
        if swept.released:
            self.line.fairness.forget()
            self.line.serve()

    def active(self, claims: Sequence[str], now: float, *, busy: bool) -> None:
        """``claims``' kernel was active at ``now`` (the ledger has it already), and runs a
        cell (``busy``: held for :data:`BUSY_HOLD`, or until a report says it ended). Not a
        Keep: the next turn withdraws a warning of a claim no longer idle."""
        self.busy = {c: until for c, until in self.busy.items() if until > now}
        for claim in claims:
            if busy:
                self.busy[claim] = now + BUSY_HOLD
            else:
                self.busy.pop(claim, None)

    def keep(self, claim: str, now: float) -> Kept | None:
        """A Keep of ``claim``: None where it is not warned (an ordinary Keep); else the
        verdict (:func:`~dra_jupyter.sharing.reclaim.keep`), the notice updated if allowed."""
        notice = self.notices.get(claim)
        if notice is None:
            return None
        kept = keep(notice, self.access.policy.reclaim_settings, now)
        if kept.allowed:
            self.notices[claim] = kept.notice
        log.info("reclaim: Keep of %s: %s", claim, kept.message)
        return kept

    def shown(self, peer: Peer, now: float) -> list[dict[str, Any]]:
        """The notices ``peer`` may read: of its own claims (an admin's: all)."""
        keeps = self.access.policy.keeps_under_pressure
        return [
            {
                "claim": n.claim,
                "holder": n.holder,
                "waiter": n.waiter,
                "what": n.what,
                "why": n.why,
                "warned": n.warned,
                "deadline": n.deadline,
                "keeps_left": max(0, keeps - n.keeps),
                "message": n.message(now),
            }
            for n in self.notices.values()
            if n.holder == peer.user or self.access.admin(peer)
        ]

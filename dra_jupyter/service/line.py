"""The line: requests that wait for devices, the attempts to allocate them under the
caller's limits, and the daemon's tick (expired leases, idle claims, waits that ran out).

The line is served in fair-share order (:mod:`~dra_jupyter.service.fairness`: who has used
less of their share lately first, then first come first), and within one request shape
nobody is served past the first that does not fit. The caller's limits come first: a
request over one is refused, it never waits.

An attempt on the daemon's loop is bounded (:mod:`~dra_jupyter.service.work`); a costly
request is worked out off the loop instead (:meth:`Line.work_off`, a job of
:mod:`~dra_jupyter.service.jobs`) under the policy's ``request_cpu``, and what it found is
committed only if the claims it was given are still all that is held. A costly request does
not wait in line: when the devices are busy it is refused at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dra_jupyter.errors import (
    AllocationError,
    BusyError,
    DraJupyterError,
    InvalidInputError,
    LedgerError,
    LimitError,
    TooCostlyError,
)
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_of
from dra_jupyter.local.waits import busy_error
from dra_jupyter.model.objects import Wire
from dra_jupyter.service import protocol
from dra_jupyter.service.access import Access
from dra_jupyter.service.args import duration_text, percent_text, probe, share_percent
from dra_jupyter.service.connections import Connection, Connections, UserState
from dra_jupyter.service.fairness import Fairness
from dra_jupyter.service.jobs import Job, Jobs, Outcome
from dra_jupyter.service.peer import Peer
from dra_jupyter.service.work import (
    INLINE_STEPS,
    Bounded,
    InlineBudgetError,
    costly,
)
from dra_jupyter.sharing.fairshare import Arrival, Place
from dra_jupyter.types import ClaimRecord, Owner, claim_prefix

log = logging.getLogger("dra_jupyter.service")

MOST_SHAPES = 4096  # shapes kept known possible before they are checked again
MOST_TRIES = 3  # times a costly request is worked out again when the claims changed meanwhile


class StaleError(Exception):
    """What a job found was found on claims that changed since (another was allocated)."""


@dataclass(frozen=True)
class Found:
    """An allocation a job found, on the claims of these ``names`` (all those held then)."""

    allocation: dict[str, Any]
    names: frozenset[str]


@dataclass(eq=False)
class Wait:
    """A request waiting in line for devices (in fair-share order, :meth:`Line.places`)."""

    conn: Connection
    request_id: protocol.RequestId
    claim: dict[str, Any]
    shape: str
    owner: Owner
    lease: float | None
    timeout: float | None
    start: float
    position: int = 0
    job: Job | None = None  # its allocation being worked out off the loop
    tries: int = 0


class Line:
    """The requests waiting for the devices of ``local`` (:attr:`waits`, oldest first), and
    how each is allocated: under the limits of ``access``, answered through
    ``connections``, its holder given to ``watch``."""

    def __init__(
        self,
        access: Access,
        ledger: Ledger,
        local: LocalBackend,
        kinds: dict[str, str],
        capacities: dict[str, dict[str, Fraction]],
        connections: Connections,
        watch: Callable[[Owner], None],
        jobs: Jobs,
    ) -> None:
        self.access = access
        self.jobs = jobs
        self.working: list[Wait] = []  # costly requests being worked out off the loop
        self.ledger = ledger
        self.local = local
        self.kinds = kinds
        self.capacities = capacities
        self.connections = connections
        self._watch = watch
        self.waits: list[Wait] = []
        self._possible: set[str] = set()  # shapes met on the idle machine (check_possible)
        self.fairness = Fairness(access, local)
        self.joined: Callable[[], None] | None = None  # called when a request starts to wait

    def places(self) -> list[tuple[Wait, Place]]:
        """The line in fair-share order, each with its place and why."""
        if not self.waits:
            return []  # nobody waits: no need to read the usage book
        by_key: dict[object, Wait] = {id(w): w for w in self.waits}
        arrivals = [Arrival(id(w), w.owner.user, w.start) for w in self.waits]
        groups = {w.owner.user: w.conn.peer.groups for w in self.waits}
        places, _ = self.fairness.order(arrivals, (), groups)
        return [(by_key[p.arrival.key], p) for p in places]

    def join(
        self,
        conn: Connection,
        request_id: protocol.RequestId,
        claim: dict[str, Any],
        owner: Owner,
        lease: float | None,
        timeout: float | None,
    ) -> Wire | None:
        """The claim allocated now (as it travels), or None when the request waits in line
        (told its place in a ``waiting`` frame; its answer comes later). BusyError when it
        may not wait (``timeout`` 0), LimitError over a limit. A costly request is worked
        out off the loop (:meth:`work_off`): None, answered later."""
        peer = conn.peer
        shape = shape_of(claim)
        wait = Wait(conn, request_id, claim, shape, owner, lease, timeout, time.monotonic())
        if costly(claim, len(self.kinds)):
            self.work_off(wait)
            return None
        ahead = sum(1 for w in self.waits if w.shape == shape)
        try:
            if shape not in self._possible:  # the inventory is fixed: possible once, always
                self.local.check_possible(claim, max_steps=INLINE_STEPS, kind=Bounded)
                if len(self._possible) >= MOST_SHAPES:
                    self._possible.clear()
                self._possible.add(shape)
            if not ahead:
                record = self.attempt(wait, peer.groups)
                if record is not None:
                    return protocol.record_to_wire(record)
        except InlineBudgetError:
            self.work_off(wait)
            return None
        if timeout is not None and timeout <= 0:
            raise self.busy(peer, claim, ahead + 1, 0.0)
        state = self.connections.user(peer.uid)
        queue_per_user = self.access.policy.queue_per_user
        if state.waiting >= queue_per_user:
            raise LimitError(
                f"user {peer.user}: limit {queue_per_user} requests waiting in "
                f"line (queue_per_user), has {state.waiting}; wait for those first"
            )
        state.waiting += 1
        self.waits.append(wait)
        same = [w for w, _ in self.places() if w.shape == shape]
        wait.position = same.index(wait) + 1
        log.info("a request of %s waits in line (number %d)", peer.user, wait.position)
        self.connections.send(conn, protocol.waiting(request_id, wait.position, 0.0, timeout))
        if self.joined is not None:
            self.joined()
        return None

    def forget(self, conn: Connection, state: UserState) -> None:
        """The waits of ``conn`` (closed) leave the line; its jobs are stopped."""
        for wait in [w for w in self.waits if w.conn is conn]:
            self.waits.remove(wait)
            state.waiting -= 1
        for wait in [w for w in self.working if w.conn is conn]:
            self.working.remove(wait)
            if wait.job is not None:
                self.jobs.cancel(wait.job)

    def work_off(self, wait: Wait) -> None:
        """Work out the allocation of a costly request off the loop, on the claims held
        now, under the policy's ``request_cpu``; its answer comes once that is done
        (:meth:`_worked`). LimitError while the caller has one such request worked out
        already, or ``costly_at_once`` of them are."""
        peer = wait.conn.peer
        policy = self.access.policy
        self._may_work_off(peer)
        now = time.time()
        held = [r for r in self.ledger.read_claims() if not _expired(r, now)]
        shown = self.access.shown(peer, held)
        names = frozenset(r.name for r in held)
        claim = probe(wait.claim)
        local = self.local

        def work() -> Wire:  # in the job's process
            local.check_possible(wait.claim)
            results = local.allocator(held).allocate([claim])
            if results is not None:
                return {"allocation": results[0].to_dict()}
            busy = busy_error(local.allocator(shown).explain([claim]), shown, 1, 0.0)
            return {"busy": protocol.error_to_wire(busy)}

        wait.tries += 1
        wait.job = self.jobs.start(
            peer.uid, policy.request_cpu, work, lambda outcome: self._worked(wait, names, outcome)
        )
        self.working.append(wait)
        log.info(
            "a costly request of %s is worked out off the loop (job %d)", peer.user, wait.job.pid
        )

    def explain_off(
        self,
        conn: Connection,
        request_id: protocol.RequestId,
        claim: dict[str, Any],
        held: list[ClaimRecord],
    ) -> None:
        """Why a costly claim could or could not be allocated on ``held``, worked out off
        the loop as :meth:`work_off` does; answered once that is done."""
        self._may_work_off(conn.peer)
        local, asked = self.local, probe(claim)

        def work() -> Wire:  # in the job's process
            explained: Wire = local.allocator(held).explain([asked]).to_dict()
            return explained

        def done(outcome: Outcome) -> None:
            try:
                if outcome.spent:
                    raise self.too_costly()
                if outcome.error is not None:
                    raise protocol.error_from_wire(outcome.error)
                answer = protocol.answer(request_id, outcome.ok)
            except DraJupyterError as err:
                answer = protocol.refusal(request_id, err)
            self.connections.send(conn, answer)

        self.jobs.start(conn.peer.uid, self.access.policy.request_cpu, work, done)

    def _may_work_off(self, peer: Peer) -> None:
        """LimitError while ``peer``'s user has a costly request worked out already, or
        ``costly_at_once`` of them are."""
        if self.jobs.of(peer.uid):
            raise LimitError(
                f"user {peer.user}: limit 1 costly request worked out at a time; "
                "wait for the answer of the one being worked out"
            )
        at_once = self.access.policy.costly_at_once
        if len(self.jobs.running) >= at_once:
            raise LimitError(
                f"limit {at_once} costly requests worked out at once (costly_at_once), "
                "reached by others; try again in a few seconds"
            )

    def _worked(self, wait: Wait, names: frozenset[str], outcome: Outcome) -> None:
        """The job of ``wait`` ended: its claim committed (if the claims it was given are
        still all that is held; else it is worked out again), or its refusal."""
        if wait in self.working:
            self.working.remove(wait)
        wait.job = None
        conn = wait.conn
        if conn.sock.fileno() < 0:
            return
        answer: bytes
        try:
            if outcome.spent:
                raise self.too_costly()
            if outcome.error is not None:
                raise protocol.error_from_wire(outcome.error)
            found = outcome.ok if isinstance(outcome.ok, dict) else {}
            if "allocation" not in found:
                raise protocol.error_from_wire(found.get("busy"))
            try:
                record = self.attempt(wait, conn.peer.groups, Found(found["allocation"], names))
            except StaleError:
                if wait.tries >= MOST_TRIES:
                    raise BusyError(
                        "the devices changed each time the allocation of this costly request "
                        "was worked out; try again"
                    ) from None
                self.work_off(wait)
                return
            assert record is not None
            answer = protocol.answer(wait.request_id, protocol.record_to_wire(record))
        except DraJupyterError as err:
            answer = protocol.refusal(wait.request_id, err)
        self.connections.send(conn, answer)

    def too_costly(self) -> TooCostlyError:
        cpu = self.access.policy.request_cpu
        return TooCostlyError(
            f"request: working out its allocation took more than {cpu:g}s of CPU, the "
            "service's budget per request (request_cpu); ask for fewer requests or devices, "
            "or use simpler selectors (no loops over long lists)"
        )

    def attempt(
        self, wait: Wait, groups: tuple[str, ...] | None, found: Found | None = None
    ) -> ClaimRecord | None:
        """Allocate ``wait`` now if the devices are free and the owner's limits allow; None
        when the devices are busy. Raises LimitError over a limit. One ledger transaction:
        expired leases go, the live claims are read, the allocator decides (within
        :data:`~dra_jupyter.service.work.INLINE_STEPS`, else :class:`InlineBudgetError`) or a job
        decided (``found``: :class:`StaleError` if a claim was allocated since), the limits are
        checked, the claim is written (dead holders need no check here: their pidfds
        released their claims when they exited)."""
        now = time.time()
        user = wait.owner.user
        meta = dict(wait.claim["metadata"])
        claims_per_user = self.access.policy.claims_per_user
        with self.ledger.transaction() as tx:
            held = []
            for record in Ledger.claims(tx):
                if record.lease_expires is not None and record.lease_expires <= now:
                    Ledger.delete(tx, record, "expired", now)
                else:
                    held.append(record)
            if meta.get("name") and any(r.name == meta["name"] for r in held):
                raise AllocationError(
                    f"claim {meta['name']} exists already; release it first or use another name"
                )
            if found is not None:
                if not {r.name for r in held} <= found.names:
                    raise StaleError
                allocation = found.allocation
            else:
                bounded = self.local.allocator(held, max_steps=INLINE_STEPS, kind=Bounded)
                results = bounded.allocate([probe(wait.claim)])
                if results is None:
                    return None
                allocation = results[0].to_dict()
            if not allocation.get("devices", {}).get("results"):
                raise InvalidInputError("request: the claim holds no device; ask for at least one")
            claims = sum(1 for r in held if r.owner.user == user)
            if claims >= claims_per_user:
                raise LimitError(
                    f"user {user}: limit {claims_per_user} claims (claims_per_user), "
                    f"holds {claims}; release some first"
                )
            self._check_limits(user, groups, held, allocation)
            if not meta.get("name"):
                meta["name"] = Ledger.next_name(tx, claim_prefix(user))
            record = ClaimRecord(
                name=meta["name"],
                namespace=meta.get("namespace") or "default",
                owner=wait.owner,
                spec={**wait.claim, "metadata": meta},
                allocation=allocation,
                created=now,
                last_activity=now,
                lease_expires=now + wait.lease if wait.lease is not None else None,
            )
            Ledger.insert(tx, record, self.local.weights.parts(record.allocation))
        log.info("claim %s allocated to %s: %s", record.name, user, ", ".join(record.device_keys))
        self._watch(wait.owner)  # a holder that is gone already: released at once
        return record

    def _check_limits(
        self,
        user: str,
        groups: tuple[str, ...] | None,
        held: list[ClaimRecord],
        allocation: dict[str, Any],
    ) -> None:
        limits = self.access.limits_of(user, groups)
        if not (limits.gpus.value or limits.mig.value or limits.gpu_share.value):
            return
        mine: set[str] = set()
        mine_shared = 0.0  # percent of a GPU, summed over the user's shares
        for record in held:
            if record.owner.user == user:
                mine.update(record.device_keys)
                mine_shared += self._shared(record.allocation)
        results = allocation.get("devices", {}).get("results", [])
        share = limits.gpu_share
        asks_shared = self._shared(allocation)
        if share.value and asks_shared and mine_shared + asks_shared > share.value + 1e-9:
            raise LimitError(
                f"user {user}: limit {percent_text(share.value)} of a GPU ({share.source}), "
                f"holds {percent_text(mine_shared)}; the request needs "
                f"{percent_text(asks_shared)} more"
            )
        new = {f"{r['driver']}/{r['pool']}/{r['device']}" for r in results} - mine
        for key, noun, limit in (("gpu", "GPU", limits.gpus), ("mig", "MIG slice", limits.mig)):
            if not limit.value:
                continue
            holds = sum(1 for d in mine if self._kind(d) == key)
            asks = sum(1 for d in new if self._kind(d) == key)
            if asks and holds + asks > limit.value:
                plural = "s" if limit.value != 1 else ""
                raise LimitError(
                    f"user {user}: limit {int(limit.value)} {noun}{plural} ({limit.source}), "
                    f"holds {holds}; the request needs {asks} more"
                )

    def _shared(self, allocation: dict[str, Any]) -> float:
        """Percent of a GPU the shares of an allocation hold (whole devices: 0)."""
        return sum(
            share_percent(r, self.capacities.get(f"{r['driver']}/{r['pool']}/{r['device']}", {}))
            for r in allocation.get("devices", {}).get("results", [])
        )

    def _kind(self, device_key: str) -> str:
        return "mig" if self.kinds.get(device_key) == "mig" else "gpu"

    def busy(self, peer: Peer, claim: dict[str, Any], position: int, waited: float) -> BusyError:
        """The refusal of a request that found the devices busy, with who holds them (as
        ``peer`` may see them) and why the allocator could not serve it."""
        held = self.access.shown(peer, self.ledger.read_claims())
        explanation = self.local.allocator(held, max_steps=INLINE_STEPS).explain([probe(claim)])
        named = bool(claim["metadata"].get("name"))
        return busy_error(explanation, held, position, waited, named=named)

    def serve(self) -> None:
        """Give freed devices to the requests in line, in fair-share order, none past the
        first of its shape that does not fit; tell each waiting one its new place, and
        refuse those whose wait ran out."""
        now = time.monotonic()
        blocked: set[str] = set()
        places: dict[str, int] = {}
        for wait, _ in self.places():
            if wait.conn.sock.fileno() < 0:
                continue
            waited = now - wait.start
            done: bytes | None = None
            if wait.shape not in blocked:
                try:
                    record = self.attempt(wait, wait.conn.peer.groups)
                except InlineBudgetError:  # a wide search now: not served this time
                    record = None
                except DraJupyterError as err:
                    done = protocol.refusal(wait.request_id, err)
                else:
                    if record is not None:
                        done = protocol.answer(wait.request_id, protocol.record_to_wire(record))
            if done is None and wait.timeout is not None and waited >= wait.timeout:
                position = places.get(wait.shape, 0) + 1
                done = protocol.refusal(
                    wait.request_id, self.busy(wait.conn.peer, wait.claim, position, waited)
                )
            if done is not None:
                self.waits.remove(wait)
                self.connections.user(wait.conn.peer.uid).waiting -= 1
                self.connections.send(wait.conn, done)
                continue
            blocked.add(wait.shape)
            places[wait.shape] = position = places.get(wait.shape, 0) + 1
            if position != wait.position:
                wait.position = position
                self.connections.send(
                    wait.conn, protocol.waiting(wait.request_id, position, waited, wait.timeout)
                )

    def tick(self) -> None:
        """Once a second: expired leases, idle claims, waits that ran out, jobs that ran
        out of time."""
        self.jobs.tick()
        now = time.time()

        def idle(record: ClaimRecord) -> str | None:
            if record.owner.pid <= 0:
                return None  # a detached claim lives by its lease
            limit = self.access.limits_of(record.owner.user).idle.value
            return "idle" if limit and now - record.last_activity >= limit else None

        def words(record: ClaimRecord, reason: str) -> str | None:
            if reason != "idle":
                return None
            return f"idle for {duration_text(self.access.limits_of(record.owner.user).idle.value)}"

        try:
            swept = self.local.sweep(idle, now, (), message=words)
        except LedgerError as err:
            log.error("%s", err)
            return
        for record, reason in swept.released:
            log.info("claim %s of %s released: %s", record.name, record.owner.user, reason)
        if swept.released or self.waits:
            self.serve()


def _expired(record: ClaimRecord, now: float) -> bool:
    return record.lease_expires is not None and record.lease_expires <= now

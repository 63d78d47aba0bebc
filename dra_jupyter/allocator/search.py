"""The search: upstream's depth-first ``allocateOne``, with the same order and first answer.

Claims in order, requests in spec order, ``firstAvailable`` alternatives in order,
devices of a request as combinations in pool/slice/device order; the first complete
solution wins. Three things keep the time bounded without changing that answer:

* per request, the eligible devices are listed once before the search (class and
  request selectors, node selection, static capacity, taints), so the search never
  looks at a device that cannot serve the request; a CEL error found while listing is
  kept in place and raised only if the search reaches that device, as upstream would;
* a branch stops as soon as too few candidates remain for the devices still needed;
* failed sub-searches are remembered by the state that decides them (devices in use,
  shared capacity in use, constraint values, position), so an equivalent state is
  never searched twice. Only failures are remembered, so the first solution is the same.

A step budget is the last guard: past it the search gives up and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

from dra_jupyter.allocator.bounds import room
from dra_jupyter.allocator.capacity import CapacityProblem, Consumed, consumed_capacity, fits
from dra_jupyter.allocator.constraints import (
    ConstraintState,
    Typed,
    lookup_attribute,
    typed_values,
)
from dra_jupyter.allocator.pools import Pool, usable_devices
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.errors import InvalidInputError, ObjectError
from dra_jupyter.model.limits import MAX_RESULTS_PER_CLAIM
from dra_jupyter.model.nodes import selection_matches
from dra_jupyter.model.objects import (
    Device,
    DeviceClass,
    DeviceID,
    DeviceRequest,
    ExactRequest,
    Node,
    PoolID,
    ResourceClaim,
    ResourceSlice,
)
from dra_jupyter.model.quantity import Quantity

CounterTotals = dict[str, dict[str, Fraction | int]]
"""Per counter set and counter, an amount: an ``int`` where it is whole (integer arithmetic is
many times faster than ``Fraction``'s, and compares the same)."""
"""Counter values per counter set, per counter."""

Matcher = Callable[[DeviceClass, ExactRequest, ResourceClaim, Device, DeviceID], bool]
"""Whether a device passes a class's and a request's selectors; raises SelectorError."""


class Outcome(Enum):
    FAIL = 0
    DONE = 1
    MAX_SIZE = 2  # upstream errAllocationResultMaxSizeExceeded


class SearchBudgetError(Exception):
    """The search took more steps than its budget allows."""


@dataclass(slots=True)
class Candidate:
    id: DeviceID
    device: Device
    slice: ResourceSlice
    pool: Pool
    consumed: Consumed | None = None  # what the request consumes of a shared device
    error: InvalidInputError | None = None  # raised if the search reaches this device


@dataclass(slots=True)
class RequestData:
    request: ExactRequest
    parent: DeviceRequest | None
    device_class: DeviceClass
    num_devices: int
    candidates: list[Candidate] = field(default_factory=list)
    all_devices: list[Candidate] | None = None
    selected_sub: int = 0

    @property
    def name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


@dataclass(slots=True)
class Pick:
    request_data: RequestData
    candidate: Candidate
    consumed: Consumed | None  # set for shared devices


def _add_counters(
    totals: CounterTotals, device: Device, sign: int, *, only_known: bool = False
) -> None:
    for use in device.consumes_counters:
        if only_known and use.counter_set not in totals:
            continue
        counters = totals.setdefault(use.counter_set, {})
        for name, q in use.counters.items():
            if only_known and name not in counters:
                continue
            counters[name] = counters.get(name, 0) + sign * q.whole


def available_counters(pool: Pool, state: AllocatedState) -> CounterTotals:
    """The pool's counters less what allocated claims' devices consume."""
    left: CounterTotals = {
        name: {c: q.whole for c, q in cs.counters.items()} for name, cs in pool.counter_sets.items()
    }
    dedicated, shared = state.dedicated, state.shared
    if not dedicated and not shared:
        return left  # nothing is held anywhere
    for slice_ in (*pool.slices, *pool.other_slices):
        driver, name = slice_.driver, slice_.pool
        for device in slice_.devices:
            if not device.consumes_counters:
                continue
            dev_id = DeviceID(driver, name, device.name)
            if dev_id not in dedicated and dev_id not in shared:  # state.consumes_counters
                continue
            for use in device.consumes_counters:  # _add_counters(-1, only_known=True)
                counters = left.get(use.counter_set)
                if counters is None:
                    continue
                for counter, q in use.counters.items():
                    if counter in counters:
                        counters[counter] -= q.whole
    return left


def counters_fit(device: Device, available: CounterTotals) -> bool:
    """Whether the device alone fits in the counters left (as :meth:`Search._take_counters`
    checks it: only the counters the pool defines)."""
    for use in device.consumes_counters:
        left = available.get(use.counter_set)
        if left is None:
            continue
        for name, q in use.counters.items():
            if name in left and left[name] < q.whole:
                return False
    return True


def taint_prevents(device: Device, request: ExactRequest) -> bool:
    return any(
        taint.effect in ("NoSchedule", "NoExecute")
        and not any(t.tolerates(taint) for t in request.tolerations)
        for taint in device.taints
    )


class Search:
    """One ``Allocate(node, claims)`` call."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        pools: list[Pool],
        node: Node | None,
        state: AllocatedState,
        data: dict[tuple[int, int, int], RequestData],
        max_steps: int,
    ) -> None:
        self.claims = claims
        self.pools = pools
        self.node = node
        self.state = state
        self.data = data
        self.max_steps = max_steps
        self.steps = 0
        self.constraints = [[ConstraintState(c) for c in claim.constraints] for claim in claims]
        self.results: list[list[Pick]] = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, list[Consumed]] = {}
        self.available_counters: dict[PoolID, CounterTotals] = {}
        self.consumed_counters: dict[PoolID, CounterTotals] = {}
        self.memo: dict[object, Outcome] = {}

    # --- state -------------------------------------------------------------------------------

    def in_use(self, device: DeviceID) -> bool:
        return device in self.state.dedicated or bool(self.allocating.get(device))

    def capacity_in_use(self, device: DeviceID) -> bool:
        """Whether a shared device already has shares (whose counters are then taken)."""
        return device in self.state.shared or bool(self.allocating_capacity.get(device))

    def _available(self, pool: Pool) -> CounterTotals:
        """The pool's counters less what allocated claims' devices consume."""
        cached = self.available_counters.get(pool.id)
        if cached is None:
            cached = self.available_counters[pool.id] = available_counters(pool, self.state)
        return cached

    def _take_counters(self, cand: Candidate) -> bool:
        available = self._available(cand.pool)
        consumed = self.consumed_counters.setdefault(cand.pool.id, {})
        _add_counters(consumed, cand.device, 1)
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, value in counters.items():
                if value < used.get(name, 0):
                    _add_counters(consumed, cand.device, -1)
                    return False
        return True

    def _release_counters(self, cand: Candidate) -> None:
        _add_counters(self.consumed_counters[cand.pool.id], cand.device, -1)

    # --- one device --------------------------------------------------------------------------

    def allocate_device(
        self, claim_index: int, rd: RequestData, cand: Candidate, *, must: bool
    ) -> Callable[[], None] | None:
        """Tentatively give ``cand`` to the request; the undo function, or None if it cannot."""
        request = rd.request
        device, dev_id = cand.device, cand.id
        shared = device.allow_multiple_allocations
        if not shared and request.admin_access and claim_index in self.allocating.get(dev_id, ()):
            return None
        if not request.admin_access and self.in_use(dev_id):
            return None
        takes_counters = bool(device.consumes_counters) and not (
            shared and self.capacity_in_use(dev_id)
        )
        if takes_counters and not self._take_counters(cand):
            return None
        if taint_prevents(device, request):
            if takes_counters:
                self._release_counters(cand)
            return None
        base, sub = (rd.parent.name, request.name) if rd.parent else (request.name, "")
        added: list[ConstraintState] = []
        for constraint in self.constraints[claim_index]:
            if not constraint.applies(base, sub):
                continue
            value = lookup_attribute(device, dev_id, constraint.constraint.attribute)
            if not constraint.add(None if value is None else typed_values(value)):
                if must:
                    raise InvalidInputError(
                        f"claim {self.claims[claim_index].key}, request {rd.name}: cannot add "
                        f"device {dev_id} because a claim constraint would not be satisfied"
                    )
                for c in reversed(added):
                    c.remove()
                if takes_counters:
                    self._release_counters(cand)
                return None
            added.append(constraint)
        consumed: Consumed | None = None
        if shared:
            consumed = cand.consumed
            if consumed is None or not fits(
                device,
                consumed,
                self.state.capacity.get(dev_id),
                *self.allocating_capacity.get(dev_id, ()),
            ):
                for c in reversed(added):
                    c.remove()
                if takes_counters:
                    self._release_counters(cand)
                return None
            self.allocating_capacity.setdefault(dev_id, []).append(consumed)
        else:
            self.allocating.setdefault(dev_id, set()).add(claim_index)
        picks = self.results[claim_index]
        picks.append(Pick(rd, cand, consumed))

        def undo() -> None:
            picks.pop()
            if shared:
                self.allocating_capacity[dev_id].pop()
            else:
                self.allocating[dev_id].discard(claim_index)
            for c in reversed(added):
                c.remove()
            if takes_counters:
                self._release_counters(cand)

        return undo

    # --- the recursion -----------------------------------------------------------------------

    def run(self) -> bool:
        return self.one(0, 0, 0, 0, False, 0) is Outcome.DONE

    def _memo_key(self, ci: int, ri: int, si: int, di: int, start: int, in_sub: bool) -> object:
        shared = frozenset(
            (dev, tuple(sorted((k, v.value) for c in uses for k, v in c.items())))
            for dev, uses in self.allocating_capacity.items()
            if uses
        )
        return (
            ci,
            ri,
            si,
            di,
            start,
            in_sub,
            len(self.results[ci]),
            frozenset(d for d, users in self.allocating.items() if users),
            frozenset(p.candidate.id for p in self.results[ci]),
            shared,
            tuple(c.current for c in self.constraints[ci]),
        )

    def one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> Outcome:
        self.steps += 1
        if self.steps > self.max_steps:
            raise SearchBudgetError
        if ci >= len(self.claims):
            return Outcome.DONE
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            outcome = self.one(ci + 1, 0, 0, 0, False, 0)
            return Outcome.FAIL if outcome is Outcome.MAX_SIZE else outcome
        rd = self.data[(ci, ri, si)]
        if di == 0 and not in_sub and not self.constraints_feasible(ci, ri):
            # upstream still looks at this request's devices (each alternative in turn)
            # and stops with the first CEL error among those not in use
            sub = 0
            while (ci, ri, sub) in self.data:
                alt = self.data[(ci, ri, sub)]
                if alt.all_devices is None:
                    self._raise_unreachable_error(ci, alt.candidates, 0, alt.request.admin_access)
                sub += 1
            return Outcome.FAIL
        if not in_sub and rd.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.data:
                outcome = self.one(ci, ri, sub, di, True, 0)
                if outcome is Outcome.MAX_SIZE:
                    sub += 1
                    continue
                all_exceeded = False
                if outcome is Outcome.DONE:
                    self.data[(ci, ri, 0)].selected_sub = sub
                    return Outcome.DONE
                sub += 1
            return Outcome.MAX_SIZE if all_exceeded else Outcome.FAIL

        all_mode = rd.all_devices is not None
        if all_mode and not rd.all_devices:
            return Outcome.FAIL
        if di >= rd.num_devices:
            return self.one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + rd.num_devices - di > MAX_RESULTS_PER_CLAIM:
            return Outcome.MAX_SIZE

        if rd.all_devices is not None:
            undo = self.allocate_device(ci, rd, rd.all_devices[di], must=True)
            if undo is None:
                return Outcome.FAIL
            outcome = self.one(ci, ri, si, di + 1, in_sub, 0)
            if outcome is not Outcome.DONE:
                undo()
            return outcome

        key = self._memo_key(ci, ri, si, di, start, in_sub)
        known = self.memo.get(key)
        if known is not None:
            return known
        outcome = self._try_candidates(ci, ri, si, di, in_sub, start, rd)
        if outcome is not Outcome.DONE:
            self.memo[key] = outcome
        return outcome

    def constraints_feasible(self, ci: int, ri: int) -> bool:
        """Whether the claim's constraints can still hold for requests ``ri`` onwards.

        A cheap upper bound, checked when a request starts: the devices still usable by
        the remaining covered requests must offer one shared value for ``matchAttribute``
        and enough unused values for ``distinctAttribute``. It only cuts branches without
        a solution, so it never changes which solution is found first.
        """
        return self._bound_counters(ci, ri) and all(
            self._bound_constraint(state, ci, ri) for state in self.constraints[ci]
        )

    def _bound_counters(self, ci: int, ri: int) -> bool:
        """Whether the counters left could hold the devices requests ``ri`` onwards still
        need (:mod:`~dra_jupyter.allocator.bounds`); True where no bound applies."""
        claim = self.claims[ci]
        need = 0
        devices: dict[DeviceID, Candidate] = {}
        for rj in range(ri, len(claim.requests)):
            alts = [self.data[(ci, rj, s)] for s in range(len(claim.requests[rj].alternatives))]
            for rd in alts:
                if rd.all_devices is not None or rd.request.admin_access:
                    return True
                for cand in rd.candidates:
                    if cand.error is not None or cand.device.allow_multiple_allocations:
                        return True  # upstream may reach the error; a shared device serves many
                    if cand.id not in devices and not self.in_use(cand.id):
                        devices[cand.id] = cand
            need += min(rd.num_devices for rd in alts)
        if need == 0 or len(self.results[ci]) + need > MAX_RESULTS_PER_CLAIM:
            return True  # nothing to bound, or upstream's own error about the size comes first
        if len(devices) < need:
            return False
        return (
            room(
                ((c.id, c.device, c.pool) for c in devices.values()),
                self._available,
                self.consumed_counters,
            )
            >= need
        )

    def _bound_constraint(self, state: ConstraintState, ci: int, ri: int) -> bool:
        """The bound of one constraint (True when it cannot rule the branch out)."""
        claim = self.claims[ci]
        need = 0
        values: dict[DeviceID, frozenset[Typed]] = {}
        for rj in range(ri, len(claim.requests)):
            request = claim.requests[rj]
            alts = [self.data[(ci, rj, s)] for s in range(len(request.alternatives))]
            if any(cand.error is not None for rd in alts for cand in rd.candidates):
                # upstream's search may reach this CEL error (on a request the constraint
                # covers or on one before): so must this one
                return True
            covered = [
                rd
                for rd in alts
                if state.applies(request.name, rd.request.name if rd.parent else "")
            ]
            if len(covered) < len(alts):
                continue  # an alternative outside the constraint: no bound from it
            if any(rd.all_devices is not None or rd.request.admin_access for rd in covered):
                return True  # "All" must reach its own error; admin access may reuse devices
            need += min(rd.num_devices for rd in covered)
            for rd in covered:
                pool = rd.all_devices if rd.all_devices is not None else rd.candidates
                for cand in pool:
                    if cand.device.allow_multiple_allocations:
                        return True  # one shared device can serve several requests
                    if cand.id in values or (not rd.request.admin_access and self.in_use(cand.id)):
                        continue
                    value = lookup_attribute(cand.device, cand.id, state.constraint.attribute)
                    if value is not None:
                        values[cand.id] = typed_values(value)
        if need == 0:
            return True
        current = state.current
        if state.constraint.match_attribute is not None:
            counts: dict[Typed, int] = {}
            for vals in values.values():
                for v in vals if current is None else vals & current:
                    counts[v] = counts.get(v, 0) + 1
            return max(counts.values(), default=0) >= need
        unused = set().union(*values.values()) - (current or frozenset())
        return len(unused) >= need

    def _raise_unreachable_error(
        self, ci: int, candidates: Sequence[Candidate], start: int, admin: bool
    ) -> None:
        def free(cand: Candidate) -> bool:
            if admin:
                return ci not in self.allocating.get(cand.id, ())
            return not self.in_use(cand.id)

        error = _first_error(candidates, start, free)
        if error is not None:
            raise error

    def _try_candidates(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: RequestData
    ) -> Outcome:
        request = rd.request
        candidates = rd.candidates
        needed = rd.num_devices - di
        for index in range(start, len(candidates)):
            if len(candidates) - index < needed:
                # too few left to succeed; upstream still looks at each of them and stops
                # with the first CEL error among those not in use
                self._raise_unreachable_error(ci, candidates, index, request.admin_access)
                break
            cand = candidates[index]
            if request.admin_access:
                if ci in self.allocating.get(cand.id, ()):
                    continue
            elif self.in_use(cand.id):
                continue
            if cand.error is not None:
                raise cand.error
            undo = self.allocate_device(ci, rd, cand, must=False)
            if undo is None:
                continue
            outcome = self.one(ci, ri, si, di + 1, in_sub, index + 1)
            if outcome is Outcome.DONE:
                return outcome
            undo()
            if outcome is Outcome.MAX_SIZE:
                return outcome
        return Outcome.FAIL


def _first_error(
    candidates: Sequence[Candidate], start: int, free: Callable[[Candidate], bool]
) -> InvalidInputError | None:
    for cand in candidates[start:]:
        if cand.error is not None and free(cand):
            return cand.error
    return None


def list_candidates(
    rd: RequestData,
    claim: ResourceClaim,
    pools: list[Pool],
    node: Node | None,
    state: AllocatedState,
    matches: Matcher,
) -> list[Candidate]:
    """Devices that could ever serve the request on this node, in upstream's order."""
    out: list[Candidate] = []
    request = rd.request
    for pool, slice_, device, dev_id in usable_devices(pools):
        if not request.admin_access and dev_id in state.dedicated:
            continue  # in use for the whole search: upstream never evaluates it
        cand = Candidate(dev_id, device, slice_, pool)
        try:
            if not selectable(rd, claim, slice_, device, dev_id, node, matches):
                continue
        except InvalidInputError as err:
            cand.error = err
            out.append(cand)
            continue
        try:
            consumed = consumed_capacity(request.capacity_requests, device)
        except CapacityProblem as problem:
            cand.error = capacity_error(claim, rd, dev_id, problem)
            out.append(cand)
            continue
        if consumed is None or taint_prevents(device, request):
            continue
        if device.allow_multiple_allocations:
            cand.consumed = consumed
        out.append(cand)
    return out


def request_path(claim: ResourceClaim, request: ExactRequest) -> str:
    """The field path of a request or subrequest: ``spec.devices.requests[0].exactly``."""
    for i, r in enumerate(claim.requests):
        if r.exactly is request:
            return f"spec.devices.requests[{i}].exactly"
        for j, sub in enumerate(r.first_available):
            if sub is request:
                return f"spec.devices.requests[{i}].firstAvailable[{j}]"
    return f"request {request.name}"


def capacity_error(
    claim: ResourceClaim, rd: RequestData, dev_id: DeviceID, problem: CapacityProblem
) -> ObjectError:
    """What stops the allocation when the search meets a device whose capacity the request
    cannot be consumed from (upstream: "checking capacity for device ...")."""
    return ObjectError(
        f"ResourceClaim {claim.key}",
        f"{request_path(claim, rd.request)}.capacity.requests",
        f"request {rd.name}: checking capacity for device {dev_id}: {problem}",
        "ask for a non-negative amount that the device's request policy can round within "
        "9223372036854775807",
    )


def selectable(
    rd: RequestData,
    claim: ResourceClaim,
    slice_: ResourceSlice,
    device: Device,
    dev_id: DeviceID,
    node: Node | None,
    matches: Matcher,
) -> bool:
    """Upstream ``isSelectable``: selectors of class and request, then per-device node selection."""
    if not matches(rd.device_class, rd.request, claim, device, dev_id):
        return False
    if slice_.per_device_node_selection:
        return device.node_selection is not None and selection_matches(device.node_selection, node)
    return True


def shared_total(uses: Sequence[Consumed]) -> dict[str, Quantity]:
    total: dict[str, Quantity] = {}
    for use in uses:
        for name, q in use.items():
            total[name] = total[name] + q if name in total else q
    return total

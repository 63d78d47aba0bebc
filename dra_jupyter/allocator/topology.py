"""The ``topology`` strategy: the same search, tried in a better order.

First-fit takes the first devices that fit, which scatters multi-device claims over
PCIe roots and NUMA nodes, breaks up whole nodes that 8-GPU claims need and carves MIG
slices out of whole GPUs. ``topology`` keeps every rule of the search and changes only
the order in which it tries nodes and devices, so it finds a valid allocation whenever
first-fit does, in the same bounded time, and the same input gives the same answer.

**Nodes** are ranked by a count that needs no selector (:func:`node_capacity`), by these
keys in turn (:func:`node_order`):

1. nodes with fewer free devices than the claims need at least go last;
2. nodes with something in use come before untouched nodes: a claim breaks a wholly free
   node only when no used node can take it, which keeps whole nodes for 8-GPU claims;
3. locality: for a claim whose largest request asks for ``k`` devices, nodes where ``k``
   free whole devices share a ``pcieRoot`` come first, then nodes where they share a
   ``numaNode``, then the rest;
4. best fit: the fewest free GPU-equivalents (a free device counts 1, a device with
   shares the part of its capacity left, a counter set — a MIG-capable GPU — the part of
   its counters left), so claims fill the fullest node that can hold them;
5. the node's name.

The search then plans nodes one by one in this order and stops at the first that fits.

**Devices** of a request (:func:`order_candidates`) are ranked by:

1. packing: devices already in use (a device with shares, a GPU with MIG slices taken)
   before untouched ones, so shares and slices fill GPUs already started;
2. locality, best fit: devices in a ``pcieRoot`` with at least ``count`` candidates
   first, the root with the fewest first, then (within it) the ``numaNode`` with the
   fewest; else devices in the smallest ``numaNode`` that holds ``count``; else the
   biggest NUMA node first. One group's devices stay together, so the ``count`` devices
   of one request share a root or NUMA node whenever possible, without a constraint;
3. for partitionable devices (MIG), the placement that blocks the fewest other devices of
   the same counter set that fit now: a 1g goes where it keeps a 3g placement (start 0 or
   4 on an H200) open;
4. for shared devices, the most capacity already consumed;
5. upstream's order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.search import Candidate, RequestData
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.model.objects import Device, DeviceID, ResourceClaim

ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
LOCALITY_ATTRIBUTES = (ROOT, NUMA)

CounterKey = tuple[str, str]  # (counter set, counter)


# --- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeCapacity:
    """What is free on one node, counted without evaluating any selector."""

    free: int  # devices not held whole (MIG placements and shared devices included)
    whole: float  # free GPU-equivalents: free devices, parts of shared devices and counter sets
    untouched: bool  # nothing on the node is in use
    flexible: bool  # some device is partitionable or shared (MIG, consumable capacity)
    roots: Counter[object] = field(default_factory=Counter)  # free whole devices per pcieRoot
    numas: Counter[object] = field(default_factory=Counter)  # ... per numaNode


def _counter_totals(pool: Pool) -> dict[CounterKey, Fraction]:
    return {
        (cs.name, name): q.value
        for cs in pool.counter_sets.values()
        for name, q in cs.counters.items()
    }


def _needs(device: Device) -> dict[CounterKey, Fraction]:
    return {
        (use.counter_set, name): q.value
        for use in device.consumes_counters
        for name, q in use.counters.items()
    }


def _counters_left(pool: Pool, state: AllocatedState) -> dict[CounterKey, Fraction]:
    """The pool's counters less what the devices in use consume."""
    left = _counter_totals(pool)
    for slice_ in (*pool.slices, *pool.other_slices):
        for device in slice_.devices:
            if device.consumes_counters and state.consumes_counters(
                DeviceID(slice_.driver, slice_.pool, device.name)
            ):
                for key, value in _needs(device).items():
                    if key in left:
                        left[key] -= value
    return left


def _share_left(device: Device, dev_id: DeviceID, state: AllocatedState) -> float:
    """The part of a shared device's capacity not consumed yet (mean over its capacities)."""
    used = state.capacity.get(dev_id, {})
    parts = [
        1 - float(used[name].value / cap.value.value) if name in used else 1.0
        for name, cap in device.capacity.items()
        if cap.value.value > 0
    ]
    return sum(parts) / len(parts) if parts else 1.0


def node_capacity(pools: Sequence[Pool], state: AllocatedState) -> NodeCapacity:
    """Free devices and GPU-equivalents of a node's usable pools, and where whole ones sit."""
    free, whole, untouched, flexible = 0, 0.0, True, False
    roots: Counter[object] = Counter()
    numas: Counter[object] = Counter()
    for pool in pools:
        if not pool.usable:
            continue
        partitioned = False
        for slice_ in pool.slices:
            for device in slice_.devices:
                dev_id = DeviceID(slice_.driver, slice_.pool, device.name)
                if dev_id in state.dedicated:
                    untouched = False
                    continue
                free += 1
                if device.consumes_counters:
                    partitioned = flexible = True
                    continue
                flexible = flexible or device.allow_multiple_allocations
                if dev_id in state.shared:
                    untouched = False
                    whole += _share_left(device, dev_id, state)
                    continue
                whole += 1
                roots[device.attributes.get(ROOT)] += 1
                numas[device.attributes.get(NUMA)] += 1
        if partitioned:
            w, fresh = _partitioned(pool, state)
            whole += w
            untouched = untouched and fresh
            for device in _whole_free(pool, state):
                roots[device.attributes.get(ROOT)] += 1
                numas[device.attributes.get(NUMA)] += 1
    roots.pop(None, None)
    numas.pop(None, None)
    return NodeCapacity(free, whole, untouched, flexible, roots, numas)


def _partitioned(pool: Pool, state: AllocatedState) -> tuple[float, bool]:
    """The counter sets' free part (each set counts 1 when nothing of it is used)."""
    totals = _counter_totals(pool)
    left = _counters_left(pool, state)
    by_set: dict[str, list[float]] = {}
    for key, total in totals.items():
        if total > 0:
            by_set.setdefault(key[0], []).append(float(left[key] / total))
    parts = [sum(v) / len(v) for v in by_set.values()]
    return sum(parts), all(p == 1.0 for p in parts)


def _whole_free(pool: Pool, state: AllocatedState) -> Iterable[Device]:
    """Devices that take all of a counter set (a whole MIG-capable GPU) whose set is unused."""
    totals = _counter_totals(pool)
    left = _counters_left(pool, state)
    untouched_sets = {k[0] for k in totals} - {k[0] for k, v in left.items() if v != totals[k]}
    for slice_ in pool.slices:
        for device in slice_.devices:
            needs = _needs(device)
            sets = {k[0] for k in needs}
            if (
                len(sets) == 1
                and sets <= untouched_sets
                and all(needs.get(k, Fraction(0)) >= v for k, v in totals.items() if k[0] in sets)
            ):
                yield device


def claims_need(claims: Sequence[ResourceClaim]) -> tuple[int, int]:
    """Devices the claims need at least, and the largest count one request asks for."""
    needed, largest = 0, 1
    for claim in claims:
        for r in claim.requests:
            counts = [a.count if a.allocation_mode == "ExactCount" else 1 for a in r.alternatives]
            needed += min(counts)
            largest = max(largest, counts[0])
    return needed, largest


def _locality(cap: NodeCapacity, count: int) -> int:
    if count <= 1 or max(cap.roots.values(), default=0) >= count:
        return 0
    return 1 if max(cap.numas.values(), default=0) >= count else 2


def node_order(
    capacities: dict[str | None, NodeCapacity], claims: Sequence[ResourceClaim]
) -> list[str | None]:
    """The nodes to try, best first (see the module's docstring)."""
    needed, largest = claims_need(claims)

    def key(name: str | None) -> tuple[bool, bool, bool, bool, int, float, str]:
        cap = capacities[name]
        locality = _locality(cap, largest)
        return (
            cap.free < needed,
            locality == 2,
            cap.untouched,
            cap.flexible,
            locality,
            cap.whole,
            name or "",
        )

    return sorted(capacities, key=key)


# --- devices ---------------------------------------------------------------------------------


def _groups(candidates: Sequence[Candidate], attribute: str) -> list[list[int]]:
    """For each candidate, the members of its group (candidates with the same value)."""
    members: dict[object, list[int]] = {}
    for i, cand in enumerate(candidates):
        value = cand.device.attributes.get(attribute)
        if value is not None:
            members.setdefault(value, []).append(i)
    empty: list[int] = []
    return [
        members.get(v, empty) if (v := c.device.attributes.get(attribute)) is not None else empty
        for c in candidates
    ]


def _locality_key(root: list[int], numa: list[int], count: int) -> tuple[int, int, int, int, int]:
    first_root = root[0] if root else -1
    first_numa = numa[0] if numa else -1
    if len(root) >= count:
        return (0, len(root), len(numa), first_numa, first_root)
    if len(numa) >= count:
        return (1, len(numa), 0, first_numa, first_root)
    return (2, -len(numa), 0, first_numa, first_root)


def _blocking(candidates: Sequence[Candidate], state: AllocatedState) -> list[int]:
    """For each partitionable candidate: how many devices of its counter sets that fit now
    would no longer fit once it is taken (0 for devices without counters)."""
    out = [0] * len(candidates)
    left_by_pool: dict[object, dict[CounterKey, Fraction]] = {}
    fitting_by_set: dict[tuple[object, str], list[dict[CounterKey, Fraction]]] = {}
    for i, cand in enumerate(candidates):
        needs = _needs(cand.device)
        if not needs:
            continue
        pool = cand.pool
        left = left_by_pool.get(pool.id)
        if left is None:
            left = left_by_pool[pool.id] = _counters_left(pool, state)
        blocked = 0
        for set_name in {k[0] for k in needs}:
            fitting = fitting_by_set.get((pool.id, set_name))
            if fitting is None:
                fitting = fitting_by_set[(pool.id, set_name)] = _fitting(pool, set_name, left)
            for other in fitting:
                if any(
                    key in needs and left.get(key, Fraction(0)) - needs[key] < value
                    for key, value in other.items()
                ):
                    blocked += 1
        out[i] = blocked
    return out


def _fitting(
    pool: Pool, set_name: str, left: dict[CounterKey, Fraction]
) -> list[dict[CounterKey, Fraction]]:
    """What each device of the pool that consumes ``set_name`` and fits now needs."""
    out = []
    for slice_ in pool.slices:
        for device in slice_.devices:
            needs = _needs(device)
            if any(k[0] == set_name for k in needs) and all(
                left.get(k, Fraction(0)) >= v for k, v in needs.items()
            ):
                out.append(needs)
    return out


def _touched(cand: Candidate, state: AllocatedState, left: dict[object, bool]) -> bool:
    """Whether the device is already partly in use: shares held, or its counters started."""
    if cand.id in state.shared:
        return True
    if not cand.device.consumes_counters:
        return False
    sets = tuple(use.counter_set for use in cand.device.consumes_counters)
    key = (cand.pool.id, sets)
    found = left.get(key)
    if found is None:
        totals = _counter_totals(cand.pool)
        counters = _counters_left(cand.pool, state)
        found = left[key] = any(
            counters[k] != v for k, v in totals.items() if k[0] in sets and k in counters
        )
    return found


def order_candidates(rd: RequestData, state: AllocatedState) -> list[Candidate]:
    """The request's candidates, best first (see the module's docstring)."""
    candidates = rd.candidates
    if len(candidates) < 2:
        return candidates
    count = max(rd.num_devices, 1)
    roots = _groups(candidates, ROOT)
    numas = _groups(candidates, NUMA)
    blocking = _blocking(candidates, state)
    touched_cache: dict[object, bool] = {}
    consumed = [
        -sum(float(q.value) for q in state.capacity.get(c.id, {}).values()) for c in candidates
    ]
    keys = [
        (
            not _touched(c, state, touched_cache),
            _locality_key(roots[i], numas[i], count),
            blocking[i],
            consumed[i],
            i,
        )
        for i, c in enumerate(candidates)
    ]
    return [candidates[i] for i in sorted(range(len(candidates)), key=keys.__getitem__)]

"""The ``topology`` strategy: the same search, tried in a better order.

First-fit takes the first devices that fit, which scatters multi-device claims over
PCIe roots and NUMA nodes, breaks up whole nodes that 8-GPU claims need and carves MIG
slices out of whole GPUs. ``topology`` keeps every rule of the search and changes only
the order in which it tries nodes and devices, so it finds a valid allocation whenever
first-fit does, in the same bounded time, and the same input gives the same answer.

**Nodes** are ranked by what is in use on them, counted without any selector
(:func:`node_capacity`), by these keys in turn (:func:`node_order`):

1. nodes with fewer free devices than the claims need at least go last (unless one of them
   allows several allocations: it may serve several requests);
2. nodes with something in use come before untouched nodes: a claim breaks a wholly free
   node only when no used node can take it, which keeps whole nodes for 8-GPU claims. A
   node with partitionable or shared devices ranks as untouched, though, for a claim that
   nodes without them could serve, when it would take the node's last free whole device
   (a GPU with no MIG slice or share in use): whole-GPU claims fill MIG and shared nodes
   in use only while a whole GPU stays free there for the claims that only those nodes can
   serve (without it, a burst of 3g claims finds every MIG GPU taken or cut up);
3. nodes without partitionable or shared devices first, so whole-GPU claims leave MIG
   and shared GPUs to the claims that need them (read from the node's slices, so it is
   known before the node is counted: a claim that only such devices can serve skips the
   other nodes without counting any MIG node but the one it takes);
4. locality: for a claim whose largest request asks for ``k`` devices, nodes where ``k``
   free whole devices share a ``pcieRoot`` come first, then nodes where they share a
   ``numaNode``, then the rest (an untouched node counts as local);
5. the node's name: among equals, nodes fill in one fixed order, as first-fit's name order
   does, so the last nodes stay empty longest. (Best fit by free devices here served fewer
   8-GPU claims in the placement benchmark: BENCHMARKS.md.)

The search then plans nodes one by one in this order and stops at the first that fits.
The order is worked out only as far as the search reads it (:class:`LazyOrder`): nodes
start at a rank none of them can beat, and a node is counted only when it could come next,
so a claim that the first nodes take does not count every node of a large cluster.

**Devices** of a request (:func:`order_candidates`) are ranked by:

1. packing: devices already in use (a device with shares, a GPU with MIG slices taken)
   before untouched ones, so shares and slices fill GPUs already started;
2. for partitionable devices (MIG), the placement that blocks the fewest other devices of
   the same counter set that fit now: a 1g goes where it keeps a 3g placement (start 0 or
   4 on an H200) open;
3. locality, best fit: devices in a ``pcieRoot`` with at least ``count`` candidates
   first, the root with the fewest first, then (within it) the ``numaNode`` with the
   fewest; else devices in the smallest ``numaNode`` that holds ``count``; else the
   biggest NUMA node first. One group's devices stay together, so the ``count`` devices
   of one request share a root or NUMA node whenever possible, without a constraint;
4. for shared devices, the most capacity already consumed;
5. upstream's order.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from dra_jupyter.allocator.placements import Counters
from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.search import Candidate, RequestData
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.model.objects import Device, DeviceID, ResourceClaim

ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
LOCALITY_ATTRIBUTES = (ROOT, NUMA)

# --- nodes -----------------------------------------------------------------------------------


@dataclass
class NodeCapacity:
    """What is free on one node, counted without evaluating any selector."""

    free: int  # devices not held whole (MIG placements and shared devices included)
    untouched: bool  # nothing on the node is in use
    flexible: bool  # the node publishes partitionable or shared devices (MIG, shares)
    pools: Sequence[Pool] = ()
    state: AllocatedState | None = None
    shareable: bool = False  # a free device allows several allocations: it may serve many
    _found: tuple[Counter[object], Counter[object], int] | None = None

    def groups(self) -> tuple[Counter[object], Counter[object]]:
        """Free whole devices per ``pcieRoot`` and per ``numaNode`` (computed when needed)."""
        return self._count()[:2]

    def whole(self) -> int:
        """Free whole devices (computed when needed)."""
        return self._count()[2]

    def _count(self) -> tuple[Counter[object], Counter[object], int]:
        if self._found is None:
            roots: Counter[object] = Counter()
            numas: Counter[object] = Counter()
            whole = 0
            state = self.state or AllocatedState()
            for device in _free_whole(self.pools, state):
                roots[device.attributes.get(ROOT)] += 1
                numas[device.attributes.get(NUMA)] += 1
                whole += 1
            roots.pop(None, None)
            numas.pop(None, None)
            self._found = (roots, numas, whole)
        return self._found


def node_capacity(pools: Sequence[Pool], state: AllocatedState, flexible: bool) -> NodeCapacity:
    """Free devices of a node's usable pools, and whether anything there is in use.
    ``flexible``: whether the node's slices publish partitionable or shared devices
    (:meth:`~dra_jupyter.allocator.pools.SliceIndex.flexible`, known without the pools)."""
    free, untouched, shareable = 0, True, False
    dedicated, shared = state.dedicated, state.shared
    if not dedicated and not shared:  # nothing held anywhere: every device is free
        for pool in pools:
            if pool.usable:
                for slice_ in pool.slices:
                    free += len(slice_.devices)
                    shareable = shareable or any(
                        d.allow_multiple_allocations for d in slice_.devices
                    )
        return NodeCapacity(free, untouched, flexible, pools, state, shareable)
    for pool in pools:
        if not pool.usable:
            continue
        for slice_ in pool.slices:
            driver, name = slice_.driver, slice_.pool
            for device in slice_.devices:
                dev_id = DeviceID(driver, name, device.name)
                if dev_id in dedicated:
                    untouched = False
                    continue
                free += 1
                if dev_id in shared:
                    untouched = False
                shareable = shareable or device.allow_multiple_allocations
    return NodeCapacity(free, untouched, flexible, pools, state, shareable)


def _free_whole(pools: Sequence[Pool], state: AllocatedState) -> Iterable[Device]:
    """Free devices that are whole: neither shared now nor a part of a counter set, or
    taking all of a counter set (a whole MIG-capable GPU) that is unused."""
    for pool in pools:
        if not pool.usable:
            continue
        partitioned = False
        for slice_ in pool.slices:
            for device in slice_.devices:
                if device.consumes_counters:
                    partitioned = True
                    continue
                dev_id = DeviceID(slice_.driver, slice_.pool, device.name)
                if dev_id not in state.dedicated and dev_id not in state.shared:
                    yield device
        if partitioned:
            yield from Counters(pool, state).whole_free()


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
    """0: ``count`` free whole devices share a root; 1: a NUMA node; 2: neither. An
    untouched node counts 0: nothing fragments it (and its groups need not be counted)."""
    if count <= 1 or cap.untouched:
        return 0
    roots, numas = cap.groups()
    if max(roots.values(), default=0) >= count:
        return 0
    return 1 if max(numas.values(), default=0) >= count else 2


NodeKey = tuple[bool, bool, bool, int, str]


def node_key(
    cap: NodeCapacity, needed: int, largest: int, name: str | None, plain: bool = False
) -> NodeKey:
    """A node's rank (see the module's docstring): smaller is tried first. ``plain``: the
    claims could be served by nodes without partitionable or shared devices."""
    kept = cap.untouched or (plain and cap.flexible and cap.whole() <= needed)
    # a device that allows several allocations can serve several requests of the claims
    short = cap.free < needed and not cap.shareable
    return (short, kept, cap.flexible, _locality(cap, largest), name or "")


def node_bound(name: str | None, untouched: bool, flexible: bool) -> NodeKey:
    """A rank no node can beat: :func:`node_key` is never smaller. ``untouched`` only when
    nothing the node could use is in use (then its key's ``untouched`` is true too);
    ``flexible`` as its key has it (read from the slices alone)."""
    return (False, untouched, flexible, 0, name or "")


BoundPrefix = tuple[bool, bool, bool, int]
"""A :func:`node_bound` less the node's name: nodes with the same prefix rank by name."""


def node_runs(
    names: Sequence[str | None],
    flexible: Callable[[str | None], bool],
    touched: Callable[[str | None], bool] | None,
) -> list[tuple[BoundPrefix, list[str | None]]]:
    """The nodes by the prefix of their :func:`node_bound`, prefixes in order, each run's
    nodes in the order given: with ``names`` in name order (as the allocator lists them),
    the runs one after the other are the nodes in the order of their bounds, without a sort
    or a heap of every node (a cold call on 1,000 nodes makes them). ``touched`` says
    whether something the node could use may be in use (None: nothing anywhere is)."""
    runs: dict[BoundPrefix, list[str | None]] = {}
    if touched is None:
        flags = list(map(flexible, names))
        if not any(flags):  # the commonest cluster: no MIG or shared devices, nothing held
            return [((False, True, False, 0), list(names))]
        for name, flag in zip(names, flags, strict=True):
            runs.setdefault((False, True, flag, 0), []).append(name)
    else:
        for name in names:
            runs.setdefault((False, not touched(name), flexible(name), 0), []).append(name)
    return sorted(runs.items())


def node_order(
    capacities: dict[str | None, NodeCapacity],
    claims: Sequence[ResourceClaim],
    plain: bool = False,
) -> list[str | None]:
    """The nodes to try, best first (see the module's docstring and :func:`node_key`)."""
    needed, largest = claims_need(claims)
    return sorted(
        capacities, key=lambda name: node_key(capacities[name], needed, largest, name, plain)
    )


class LazyOrder:
    """The order of :func:`node_order`, worked out only as far as callers read it.

    Every node starts pending at its :func:`node_bound`, in the order of the bounds (the
    runs of :func:`node_runs`); a pending node that comes next is counted and moves to a
    heap at its :func:`node_key`; a node at the top of the heap comes next once no pending
    node's bound is below its key, since every other node's key is at least its bound. So
    the nodes come in exactly ``node_order``'s order (less those left out), and a claim
    that the first nodes take counts only those. Safe to share between threads.
    """

    def __init__(self, runs: Iterable[tuple[BoundPrefix, Sequence[str | None]]]) -> None:
        self._runs = [(prefix, names) for prefix, names in runs if names]
        self._run, self._at = 0, 0  # the next pending node: self._runs[_run][1][_at]
        self._heap: list[tuple[NodeKey, str | None]] = []  # counted nodes, by key
        self._done: list[str | None] = []
        self._lock = threading.Lock()

    def _pending(self) -> tuple[NodeKey, str | None] | None:
        """The next pending node at its bound, or None when none is left."""
        if self._run >= len(self._runs):
            return None
        prefix, names = self._runs[self._run]
        name = names[self._at]
        return (*prefix, name or ""), name

    def _advance(self) -> None:
        self._at += 1
        if self._at >= len(self._runs[self._run][1]):
            self._run, self._at = self._run + 1, 0

    def names(
        self,
        key: Callable[[str | None], NodeKey],
        keep: Callable[[str | None], bool],
        drop: Callable[[str | None], bool] = lambda name: False,
    ) -> Iterator[str | None]:
        """The nodes in order, less those ``keep`` says no to. ``drop``, a cheaper test that
        says yes only where ``keep`` says no, is asked before counting a node. All three must
        give the same answers on every call."""
        i = 0
        while True:
            with self._lock:
                heap, done = self._heap, self._done
                while i >= len(done):
                    pending = self._pending()
                    if heap and (pending is None or heap[0][0] < pending[0]):
                        name = heap[0][1]
                        if keep(name):  # asked before popping: an error leaves it there
                            done.append(name)
                        heapq.heappop(heap)
                    elif pending is not None:
                        name = pending[1]
                        counted = None if drop(name) else (key(name), name)
                        self._advance()  # after both: an error leaves the node pending
                        if counted is not None:
                            heapq.heappush(heap, counted)
                    else:
                        return
                name = done[i]
            yield name
            i += 1


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


def order_candidates(rd: RequestData, state: AllocatedState) -> list[Candidate]:
    """The request's candidates, best first (see the module's docstring)."""
    candidates = rd.candidates
    if len(candidates) < 2:
        return candidates
    count = max(rd.num_devices, 1)
    roots = _groups(candidates, ROOT)
    numas = _groups(candidates, NUMA)
    pools: dict[object, Counters] = {}
    capacity = state.capacity
    keys = []
    for i, c in enumerate(candidates):
        uses = c.device.consumes_counters
        if uses:
            counters = pools.get(c.pool.id)
            if counters is None:
                counters = pools[c.pool.id] = Counters(c.pool, state)
            if len(uses) == 1:
                touched = not counters.untouched(uses[0].counter_set)
            else:
                touched = not all(counters.untouched(u.counter_set) for u in uses)
            # a MIG placement (count 1) is placed by what it blocks, before locality
            first = counters.blocking(c.device)
        else:
            touched, first = c.id in state.shared, 0
        held = capacity.get(c.id) if capacity else None
        consumed = -sum(float(q.value) for q in held.values()) if held else 0
        keys.append((not touched, first, _locality_key(roots[i], numas[i], count), 0, consumed, i))
    return [candidates[i] for i in sorted(range(len(candidates)), key=keys.__getitem__)]

"""Which pools and devices a node can use: upstream ``GatherPools`` (1.37, incubating).

Pools are sorted by driver then pool name, slices in a pool by name, and pools with
binding-condition devices go last: that order decides which device first-fit picks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter

from dra_jupyter.model.nodes import selection_matches
from dra_jupyter.model.objects import CounterSet, Device, DeviceID, Node, PoolID, ResourceSlice

_LOCAL_NODE = attrgetter("local_node")
_FLEXIBLE = attrgetter("flexible")
_GROUPS = attrgetter("compatibility_groups")
_POOL_ID = attrgetter("pool_id")


@dataclass
class Pool:
    id: PoolID
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)  # device slices usable on the node
    other_slices: list[ResourceSlice] = field(default_factory=list)  # same pool, other nodes
    counter_sets: dict[str, CounterSet] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not (self.incomplete or self.invalid)


def usable_devices(pools: Sequence[Pool]) -> Iterator[tuple[Pool, ResourceSlice, Device, DeviceID]]:
    """Every device of the complete, valid pools, in upstream's order."""
    for pool in pools:
        if not pool.usable:
            continue
        for slice_ in pool.slices:
            for device in slice_.devices:
                yield pool, slice_, device, DeviceID(slice_.driver, slice_.pool, device.name)


class SliceIndex:
    """Slices split as upstream's ``NewAllocator`` does: node-local ones by node name, the
    node-independent ones that every node looks at, and the slices of shared counters, which
    every node sees. Built once, so finding a node's pools does not scan every slice of the
    cluster."""

    def __init__(self, slices: Sequence[ResourceSlice]) -> None:
        self.slices = slices
        if any(map(_GROUPS, slices)):
            # DRADeviceCompatibilityGroups is off (1.37): upstream's GatherPools ignores a
            # slice whose devices name compatibility groups, so its pool is incomplete (its
            # other devices unusable too) unless all of the pool's slices are ignored; they
            # still count for a newer generation (:attr:`by_pool`)
            slices = [s for s in slices if not s.compatibility_groups]
        self.local: dict[str, Sequence[ResourceSlice]] = {}
        self.shared: list[ResourceSlice] = []  # device slices usable on more than one node
        self.counters: dict[PoolID, list[ResourceSlice]] = {}  # every counter slice, by pool
        # the counter slices by the nodes they name (nodeName), and the others (a node
        # selector, allNodes): as upstream 1.37's NewAllocator splits them, a node sees those
        # that name it or select it
        self.local_counters: dict[str, list[ResourceSlice]] = {}
        self.shared_counters: list[ResourceSlice] = []
        self._shared_flexible = False  # a device slice of no one node has flexible devices
        # the nodes whose own device slices have some
        self._flexible_nodes: set[str | None] = set()
        # as little as possible per slice: a cold call on 1,000 nodes pays this for every
        # slice, where upstream's NewAllocator only keeps the list. The commonest cluster, one
        # device slice a node, is indexed without a Python step per slice.
        names = list(map(_LOCAL_NODE, slices))
        distinct = set(names)
        if None not in distinct and len(distinct) == len(names):
            self.local = dict(zip(names, zip(slices), strict=True))
            self._flexible_nodes = set(compress(names, map(_FLEXIBLE, slices)))
        else:
            self._index_each(slices)
        self._by_pool: dict[PoolID, list[ResourceSlice]] | None = None
        self._device_slices: dict[PoolID, list[ResourceSlice]] | None = None
        # per device slice and the counter sets it was checked against: its problem, so a
        # pool seen through its counter slices and then by its node is checked once
        self.problems: dict[tuple[int, frozenset[tuple[str, int]]], str] = {}
        self._plain_shapes: tuple[dict[object, list[ResourceSlice]], list[ResourceSlice]] | None
        self._plain_shapes = None

    def _index_each(self, slices: Sequence[ResourceSlice]) -> None:
        """The index, slice by slice (several slices a node, shared or counter slices)."""
        local: dict[str, list[ResourceSlice]] = {}
        shared, counters = self.shared, self.counters
        flexible = self._flexible_nodes
        for s in slices:
            name = s.local_node
            if name is not None:  # most slices: the devices of one node
                group = local.get(name)
                if group is None:
                    local[name] = [s]
                else:
                    group.append(s)
                if s.flexible:
                    flexible.add(name)
            elif s.shared_counters:
                found = counters.get(s.pool_id)
                if found is None:
                    counters[s.pool_id] = [s]
                else:
                    found.append(s)
                named = s.node_selection.node_name if s.node_selection is not None else None
                if named is not None:
                    self.local_counters.setdefault(named, []).append(s)
                elif s.node_selection is not None:  # per-device selection: no device, no node
                    self.shared_counters.append(s)
            else:
                shared.append(s)
                self._shared_flexible = self._shared_flexible or s.flexible
        self.local = dict(local)

    @property
    def by_pool(self) -> dict[PoolID, list[ResourceSlice]]:
        """Every slice by pool, in the order given; built on first use (an incomplete pool,
        the scan's counters)."""
        if self._by_pool is None:
            by_pool: dict[PoolID, list[ResourceSlice]] = {}
            for s in self.slices:
                by_pool.setdefault(s.pool_id, []).append(s)
            self._by_pool = by_pool
        return self._by_pool

    @property
    def device_slices(self) -> dict[PoolID, list[ResourceSlice]]:
        """:attr:`by_pool` less the counter slices; built on first use (the scan)."""
        if self._device_slices is None:
            devices: dict[PoolID, list[ResourceSlice]] = {}
            for s in self.slices:
                if not s.shared_counters and not s.compatibility_groups:
                    devices.setdefault(s.pool_id, []).append(s)
            self._device_slices = devices
        return self._device_slices

    def plain_shapes(self) -> tuple[dict[object, list[ResourceSlice]], list[ResourceSlice]]:
        """The device slices of the nodes without flexible devices, by the shape of the
        devices they offer (:meth:`ResourceSlice.device_shape`) where a slice is its pool's
        only slice, and the others; made once. A selector that tells one slice of a shape
        that none of its devices match tells it of all of them: a MIG claim rules out a
        cluster's plain nodes by asking one slice per shape, not one per node."""
        if self._plain_shapes is None:
            per_pool = Counter(map(_POOL_ID, self.slices))  # counted in C
            shapes: dict[object, list[ResourceSlice]] = {}
            others: list[ResourceSlice] = []
            flexible = self._flexible_nodes
            for name, group in self.local.items():
                if name in flexible or not name:  # node "": no node (Catalog.node_names)
                    continue
                for s in group:
                    if per_pool[s.pool_id] == 1 and s.devices:
                        shapes.setdefault(s.device_shape(), []).append(s)
                    else:
                        others.append(s)
            self._plain_shapes = (shapes, others)
        return self._plain_shapes

    def flexible(self, name: str | None) -> bool:
        """Whether the node's slices, or the device slices of no one node, publish a device
        that consumes counters (a MIG placement, or a GPU that can be split) or allows
        several allocations (shared capacity): read from the slices alone, without
        gathering the node's pools."""
        return self._shared_flexible or name in self._flexible_nodes


def _relevant(slice_: ResourceSlice, node: Node | None) -> bool:
    """Whether a device slice is relevant to the node (counter slices: _node_counters)."""
    if slice_.node_selection is not None:
        return selection_matches(slice_.node_selection, node)
    if slice_.per_device_node_selection:
        return any(
            d.node_selection is not None and selection_matches(d.node_selection, node)
            for d in slice_.devices
        )
    return False


def _node_counters(index: SliceIndex, node: Node | None) -> list[ResourceSlice]:
    """The counter slices relevant to the node: those that name it, and those whose node
    selector (or allNodes) selects it (upstream 1.37 ``GatherPools``: a counter slice for
    another node is not the node's; where its pool needs it, the check of the whole pool
    finds it)."""
    name = node.name if node is not None else None
    own = index.local_counters.get(name, []) if name is not None else []
    return [
        *own,
        *(
            s
            for s in index.shared_counters
            if s.node_selection is not None and selection_matches(s.node_selection, node)
        ),
    ]


def gather_pools(index: SliceIndex, node: Node | None) -> list[Pool]:
    """The pools a node can use, in upstream's order (see the module's docstring)."""
    own, touched = gather_own_pools(index, node)
    return with_counter_only(index, own, touched, node)


def gather_own_pools(index: SliceIndex, node: Node | None) -> tuple[list[Pool], set[PoolID]]:
    """:func:`gather_pools` less the pools the node sees only through their counter slices
    (never usable there: they matter only to a request for all devices), and the pools of
    the slices relevant to the node. Every usable pool of :func:`gather_pools` is here, in
    the same order, without checking every pool of shared counters of the cluster."""
    name = node.name if node is not None else None
    candidates = [
        s for s in (index.local.get(name, []) if name is not None else []) if _relevant(s, node)
    ]
    candidates.extend(s for s in index.shared if _relevant(s, node))
    touched = {s.pool_id for s in candidates}
    if index.counters:
        candidates.extend(s for s in _node_counters(index, node) if s.pool_id in touched)
    return _ordered(_group(candidates, index)), touched


def with_counter_only(
    index: SliceIndex, own: list[Pool], touched: set[PoolID], node: Node | None
) -> list[Pool]:
    """``own`` (from :func:`gather_own_pools`) with the unusable pools (incomplete, invalid)
    the node sees only through counter slices relevant to it, in upstream's order. A
    complete, valid one holds no device usable there and is left out."""
    if not index.counters:
        return list(own)
    alone = [s for s in _node_counters(index, node) if s.pool_id not in touched]
    extra = [p for p in _group(alone, index) if not p.usable] if alone else []
    return _ordered([*own, *extra]) if extra else list(own)


def _ordered(pools: list[Pool]) -> list[Pool]:
    plain = [p for p in pools if not _has_binding(p)]
    binding = [p for p in pools if _has_binding(p)]
    plain.sort(key=lambda p: (p.id.driver, p.id.pool))
    binding.sort(key=lambda p: (p.id.driver, p.id.pool))
    return plain + binding


def _has_binding(pool: Pool) -> bool:
    return any(d.binding_conditions for s in pool.slices for d in s.devices)


def _group(candidates: Sequence[ResourceSlice], index: SliceIndex) -> list[Pool]:
    """Pools from the slices relevant to a node: the highest generation of each, checked
    for completeness against every slice of the pool."""
    grouped: dict[PoolID, list[ResourceSlice]] = {}
    for s in candidates:
        current = grouped.get(s.pool_id)
        if current is None or s.generation > current[0].generation:
            grouped[s.pool_id] = [s]
        elif s.generation == current[0].generation:
            current.append(s)
    out: list[Pool] = []
    for pool_id, pool_slices in grouped.items():
        expected = pool_slices[0].resource_slice_count
        all_for_pool: list[ResourceSlice] | None = None
        if len(pool_slices) != expected:
            generation = pool_slices[0].generation
            same = index.by_pool.get(pool_id, [])
            if any(s.generation > generation for s in same):
                continue  # obsolete: a newer generation is being published elsewhere
            all_for_pool = [
                s for s in same if s.generation == generation and not s.compatibility_groups
            ]
            if len(all_for_pool) != expected:
                out.append(Pool(pool_id, incomplete=True))
                continue
        out.append(_build_pool(pool_id, pool_slices, all_for_pool, index.problems))
    return out


def _build_pool(
    pool_id: PoolID,
    pool_slices: list[ResourceSlice],
    all_for_pool: list[ResourceSlice] | None,
    problems: dict[tuple[int, frozenset[tuple[str, int]]], str],
) -> Pool:
    ordered = sorted(pool_slices, key=lambda s: s.name)
    device_slices = [s for s in ordered if not s.shared_counters]
    other: list[ResourceSlice] = []  # the pool's slices not relevant to the node
    if all_for_pool is not None and len(all_for_pool) != len(pool_slices):
        local_names = {s.name for s in pool_slices}
        other = [s for s in all_for_pool if s.name not in local_names]
    names: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in names:
                return Pool(pool_id, invalid=True, invalid_reason=f"duplicate device name {d.name}")
            names.add(d.name)
    counter_sets: dict[str, CounterSet] = {}
    # the counter sets of the node's counter slices, then of the pool's others (upstream
    # 1.37 buildPool: a counter slice for another node still defines the pool's counters)
    for s in (*ordered, *(o for o in other if o.shared_counters)):
        for cs in s.shared_counters:
            if cs.name in counter_sets:
                return Pool(
                    pool_id, invalid=True, invalid_reason=f"duplicate counter set name {cs.name}"
                )
            counter_sets[cs.name] = cs
    problem = _counter_problem(counter_sets, ordered, problems)
    if problem:
        return Pool(pool_id, invalid=True, invalid_reason=problem)
    if other:
        problem = _counter_problem(counter_sets, other, problems)
        if problem:
            return Pool(pool_id, invalid=True, invalid_reason=problem)
    return Pool(pool_id, slices=device_slices, other_slices=other, counter_sets=counter_sets)


def _counter_problem(
    counter_sets: dict[str, CounterSet],
    slices: Sequence[ResourceSlice],
    problems: dict[tuple[int, frozenset[tuple[str, int]]], str],
) -> str:
    """The first device of ``slices`` that uses a counter set or counter not defined, said;
    "" when none. Kept per slice and counter set objects in ``problems`` (whose owner keeps
    the slices alive, so the ids stay theirs)."""
    sets = frozenset((name, id(cs)) for name, cs in counter_sets.items())
    for s in slices:
        key = (id(s), sets)
        problem = problems.get(key)
        if problem is None:
            problem = problems[key] = _slice_problem(counter_sets, s)
        if problem:
            return problem
    return ""


def _slice_problem(counter_sets: dict[str, CounterSet], slice_: ResourceSlice) -> str:
    for d in slice_.devices:
        for use in d.consumes_counters:
            cs = counter_sets.get(use.counter_set)
            if cs is None:
                return f"counter set {use.counter_set} not found"
            if use.counters.keys() <= cs.counters.keys():
                continue
            for name in use.counters:
                if name not in cs.counters:
                    return f"counter {name} not found in counter set {cs.name}"
    return ""

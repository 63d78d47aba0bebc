"""How many requests of one kind of device could be allocated now: counted over a cluster's
(or one machine's) ResourceSlices, DeviceClasses and allocated claims, with our allocator.
Pure: objects in, numbers out.

A claim is allocated on one node, from that node's pools, so what requests of N devices can
get is summed node by node: a node where F one-device requests of the kind still fit takes
``F // N`` requests of N. F is counted in two ways (:mod:`dra_jupyter.hub.layout` tells the
devices apart once per inventory):

* **whole devices** (no counters, no shares, no taints, no binding conditions): one fits on
  each device of the kind that no claim holds. Whether a device is of the kind is the
  allocator's own answer (the DeviceClass's and the request's selectors), asked once per
  sort of device.
* **units** (a GPU with its MIG placements, which draw on its counters; a device several
  claims may share; a tainted device): how many one-device requests a unit still takes is
  found by allocating the request again and again with
  :class:`~dra_jupyter.allocator.Allocator` on that unit alone, until it fails. Units of one
  structure and holdings share that answer, kept in the :class:`ChoiceCache`.

The allocator counts the rest by allocating again and again, up to :data:`MAX_COUNT`: on the
whole node where a pool's slices are not all that node's or not one complete generation, or
where requests of several devices meet shared devices; on the whole cluster where slices
serve many nodes.

What depends only on the slices and classes (the layout, and what idle devices would take)
is kept in the cache while the very same slice objects come again, as
:class:`~dra_jupyter.allocator.cache.AllocatorCache` keeps its catalog; a call then reads the
claims alone.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache, Catalog
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.hub.layout import (
    NAMESPACE,
    Layout,
    Shape,
    build_layout,
    shape_claim,
)
from dra_jupyter.model.objects import (
    AllocationResult,
    DeviceClass,
    DeviceID,
    DeviceResult,
    Node,
    PoolID,
    ResourceClaim,
    ResourceSlice,
)
from dra_jupyter.model.quantity import Quantity

MAX_COUNT = 256
"""The most requests counted where the allocator counts by allocating (on a unit, a node, or
the whole cluster): a count that reaches it reads as "at least"."""
MAX_DEVICES_PER_CLAIM = 32  # dra.request's limit (claimspec): the largest count offered
LADDER = (1, 2, 4, 8, 16, 32)

Pattern = tuple[tuple[int, bool, bool, tuple[tuple[str, int, int], ...]], ...]
"""What claims hold of a unit: per position of a held device, whether it is held whole,
whether it is shared, and the capacity its shares consume (name, numerator, denominator)."""


@dataclass(frozen=True)
class World:
    """What choices are counted on: the allocator's inputs (wire dicts or
    :mod:`dra_jupyter.model` objects, never changed in place: a changed object is a new one),
    and when each allocated claim got its devices (``since``: claim key ``namespace/name``
    -> seconds since the epoch; a claim not named there counts from its
    ``metadata.creationTimestamp``, if it has one)."""

    slices: Sequence[Mapping[str, Any] | ResourceSlice]
    device_classes: Sequence[Mapping[str, Any] | DeviceClass]
    claims: Sequence[Mapping[str, Any] | ResourceClaim] = ()
    since: Mapping[str, float] = field(default_factory=dict)
    nodes: Sequence[Mapping[str, Any] | Node] = ()


@dataclass(frozen=True)
class Count:
    """What one choice, ``count`` devices of ``shape``, can get."""

    shape: Shape
    count: int
    available: int  # requests that could be allocated now
    possible: int  # requests idle devices would take (0: never possible)
    at_least: bool  # ``available`` (or ``possible``) stopped at MAX_COUNT
    places: int  # one-device requests of the shape idle devices would take
    free: int  # of those, the ones that fit now
    best_node: str | None  # the node where the most fit now (None: no node)
    best_free: int  # how many fit there
    changed: float | None  # seconds since the epoch: the latest claim holding such devices


@dataclass
class Counting:
    """The counts of one call, and the allocator they were made with (for explanations)."""

    counts: list[Count]
    allocator: Allocator
    layout: Layout
    since: Mapping[str, float] = field(default_factory=dict)
    reasons: dict[tuple[str, int], str] = field(default_factory=dict)  # kept by the caller


class ChoiceCache:
    """What counting keeps between calls: an :class:`AllocatorCache`, the layout of the
    latest slices and classes with what idle devices would take, and the counts of units by
    structure and holdings. Keep one per cluster (or machine) in a long-running process and
    pass the same slice objects while they do not change; safe to share between threads."""

    def __init__(self) -> None:
        self.allocators = AllocatorCache()
        self.units: dict[tuple[int, Pattern, int], tuple[int, bool]] = {}
        self._layout: tuple[Catalog, Strategy, Layout] | None = None
        self._lock = threading.Lock()
        self.layouts_built = 0  # how many times slices were laid out (a new inventory)
        self._holding: tuple[Layout, _Holding] | None = None
        self.counted: Counting | None = None  # the last call's counts
        # per claim object of the last call: it, its creation time, the shapes it holds
        self.claim_shapes: dict[int, tuple[ResourceClaim, float | None, tuple[int, ...]]] = {}
        self.claim_layout: Layout | None = None

    def layout(self, allocator: Allocator, strategy: Strategy) -> Layout:
        """The layout of the allocator's catalog, built (and idle devices counted) once."""
        with self._lock:
            found = self._layout
            if found is not None and found[0] is allocator.catalog and found[1] == strategy:
                return found[2]
            self.units = {}
            layout = build_layout(allocator)
            _count_idle(layout, allocator, strategy, self)
            self._layout = (allocator.catalog, strategy, layout)
            self.layouts_built += 1
            return layout

    def holding(self, layout: Layout, state: AllocatedState, strategy: Strategy) -> _Holding:
        """What ``state`` holds (:func:`_fewer`), counted from the last call's holding."""
        with self._lock:
            last = self._holding
            if last is not None and last[0] is layout and last[1].state is state:
                return last[1]
            found = _fewer(
                layout, state, strategy, self, last[1] if last and last[0] is layout else None
            )
            self._holding = (layout, found)
            return found

    def unit_count(
        self, layout: Layout, u: int, pattern: Pattern, s: int, strategy: Strategy
    ) -> tuple[int, bool]:
        unit = layout.units[u]
        key = (unit.structure, pattern, s)
        found = self.units.get(key)
        if found is None:
            held = [_held_claim(layout, u, pattern)] if pattern else []
            found = _greedy(unit.as_pool(), layout.classes, held, layout.claims[s], strategy)
            self.units[key] = found
        return found


def count(
    world: World, *, strategy: Strategy = "first-fit", cache: ChoiceCache | None = None
) -> Counting:
    """For every shape the inventory offers and each number of its devices one node holds
    (1, 2, 4, ... and the most): how many such requests could be allocated now, and how
    many on idle devices. A choice idle devices cannot take at all is left out."""
    cache = cache or ChoiceCache()
    allocator = Allocator(
        world.slices,
        world.device_classes,
        world.claims,
        strategy,
        nodes=world.nodes,
        cache=cache.allocators,
    )
    layout = cache.layout(allocator, strategy)
    last = cache.counted
    if (
        last is not None
        and last.layout is layout
        and last.allocator.state is allocator.state
        and last.since == world.since
    ):
        return last  # nothing changed since the last call
    fewer = cache.holding(layout, allocator.state, strategy).fewer
    changed = _changed(layout, allocator, world.since, cache)
    out: list[Count] = []
    for s, shape in enumerate(layout.shapes):
        idle = layout.idle_per_node[s]
        less = fewer[s]
        places = sum(idle.values())
        best_node, best_free = _best(idle, less)
        for k in layout.ladders[s]:
            possible, capped = layout.possible[(s, k)]
            if possible == 0:
                continue
            if layout.everywhere:
                available, at_least = _everywhere(allocator, layout, s, k, strategy)
            else:
                available, at_least = layout.modelled[(s, k)], capped
                for node, d in less.items():
                    if k == 1 or node not in layout.shared_nodes[s]:
                        n = idle.get(node, 0)
                        available -= n // k - (n - d) // k
                for node in _counted_on_node(layout, s, k):
                    got, more = _on_node(allocator, layout, s, k, node, strategy)
                    available, at_least = available + got, at_least or more
            out.append(
                Count(
                    shape=shape,
                    count=k,
                    available=available,
                    possible=possible,
                    at_least=at_least,
                    places=places,
                    free=places - sum(less.values()),
                    best_node=best_node,
                    best_free=best_free,
                    changed=changed.get(s),
                )
            )
    cache.counted = found = Counting(out, allocator, layout, dict(world.since))
    return found


def _best(idle: Mapping[str, int], less: Mapping[str, int]) -> tuple[str | None, int]:
    """The node where the most one-device requests fit now (the first in name order of
    those; ``idle`` is in name order)."""
    best: str | None = None
    most = -1
    for node, n in idle.items():
        if n > most:
            left = n - less.get(node, 0)
            if left > most:
                best, most = node, left
    return best, max(most, 0)


def _counted_on_node(layout: Layout, s: int, k: int) -> list[str]:
    """The nodes where the allocator counts requests of ``k`` devices of shape ``s`` by
    allocating on the node: those this module does not model, and (for several devices)
    those with shared devices of the shape."""
    if k == 1:
        return layout.odd_nodes
    return [*layout.odd_nodes, *sorted(layout.shared_nodes[s])]


# --- what idle devices take (once per layout) ------------------------------------------------


def _count_idle(
    layout: Layout, allocator: Allocator, strategy: Strategy, cache: ChoiceCache
) -> None:
    """Per shape: what idle devices take per node, the counts offered (1, 2, 4, ... up to
    the most devices of the shape on one node, and that most), and per count what idle
    devices would take in all (0: the choice is never possible)."""
    idle: list[Allocator] = []

    def without_claims() -> Allocator:
        """An allocator on the same slices with nothing allocated, made on first use."""
        if not idle:
            idle.append(
                Allocator(
                    allocator.slices,
                    list(layout.classes),
                    (),
                    strategy,
                    nodes=list(allocator.nodes.values()),
                )
            )
        return idle[0]

    for s, shape in enumerate(layout.shapes):
        per_node = dict(layout.whole_per_node[s])
        devices = dict(per_node)
        taken = layout.shape_sorts[s]
        of_structure: dict[int, tuple[int, int]] = {}  # fits, devices of the shape
        for u in layout.shape_units[s]:
            unit = layout.units[u]
            found = of_structure.get(unit.structure)
            if found is None:
                n, _ = cache.unit_count(layout, u, (), s, strategy)
                found = of_structure[unit.structure] = (n, sum(k in taken for k in unit.sorts))
            node = unit.node
            if found[0]:
                per_node[node] = per_node.get(node, 0) + found[0]
            devices[node] = devices.get(node, 0) + found[1]
        for node in layout.odd_nodes:
            devices[node] = _listed_on(without_claims(), layout.claims[s], node)
        # what one node could give one claim: its devices of the shape that idle fit
        most = max((min(n, per_node.get(node, n)) for node, n in devices.items()), default=0)
        most = min(most, MAX_DEVICES_PER_CLAIM)
        if layout.everywhere:
            most = MAX_DEVICES_PER_CLAIM
        ladder = [k for k in LADDER if k <= most] if shape.count_key else [1]
        if shape.count_key and most and most not in ladder:
            ladder.append(most)
        shared = frozenset(
            layout.units[u].node for u in layout.shape_units[s] if layout.units[u].multiple
        )
        layout.idle_per_node.append(dict(sorted(per_node.items())))
        layout.ladders.append(tuple(ladder))
        layout.shared_nodes.append(shared)
        for k in ladder:
            if layout.everywhere:
                layout.possible[(s, k)] = _everywhere(without_claims(), layout, s, k, strategy)
                layout.modelled[(s, k)] = 0
                continue
            ours = sum(n // k for node, n in per_node.items() if k == 1 or node not in shared)
            total, capped = ours, False
            for node in _counted_on_node(layout, s, k):
                got, more = _on_node(without_claims(), layout, s, k, node, strategy)
                total, capped = total + got, capped or more
            layout.modelled[(s, k)] = ours
            layout.possible[(s, k)] = (total, capped)


def _listed_on(allocator: Allocator, claim: ResourceClaim, node: str) -> int:
    """How many devices of the node could serve the claim's request (nothing allocated)."""
    data = allocator.plan([claim], node).data.get((0, 0, 0))
    return len(data.candidates) if data is not None else 0


# --- what claims hold now ----------------------------------------------------------------------


@dataclass
class _Holding:
    """What the claims of one call hold, as counting sees it: per shape and node how many
    fewer one-device requests fit than on idle devices (only nodes with something held of
    the shape), and what is held of each unit. The next call starts from it and counts
    again only the devices whose holding changed."""

    state: AllocatedState
    fewer: list[dict[str, int]]
    patterns: dict[int, Pattern]


def _fewer(
    layout: Layout,
    state: AllocatedState,
    strategy: Strategy,
    cache: ChoiceCache,
    last: _Holding | None,
) -> _Holding:
    """The holding of ``state``: from ``last`` (of the same layout) when there is one,
    counting again only the devices whose holding changed since."""
    changed: set[DeviceID]
    if last is None:
        changed = state.dedicated | state.shared | state.capacity.keys()
        fewer: list[dict[str, int]] = [{} for _ in layout.shapes]
        patterns: dict[int, Pattern] = {}
        before = AllocatedState()
    else:
        before = last.state
        changed = state.dedicated ^ before.dedicated
        changed |= state.shared ^ before.shared
        changed.update(
            d
            for d in state.capacity.keys() | before.capacity.keys()
            if state.capacity.get(d) != before.capacity.get(d)
        )
        fewer = [dict(f) for f in last.fewer]
        patterns = dict(last.patterns)
    whole, unit_at, sort_shapes = layout.whole, layout.unit_at, layout.sort_shapes
    units: set[int] = set()
    for device in changed:
        found = whole.get(device)
        if found is not None:
            if (device in state.dedicated) != (device in before.dedicated):
                node, k = found
                step = 1 if device in state.dedicated else -1
                for s in sort_shapes[k]:
                    _add(fewer[s], node, step)
            continue
        at = unit_at.get(device)
        if at is not None:
            units.add(at[0])
    for u in units:
        unit = layout.units[u]
        old = patterns.get(u, ())
        new = _pattern(layout, u, state)
        if new:
            patterns[u] = new
        else:
            patterns.pop(u, None)
        for s in layout.unit_shapes[u]:
            idle, _ = cache.unit_count(layout, u, (), s, strategy)
            was, _ = cache.unit_count(layout, u, old, s, strategy) if old else (idle, False)
            now, _ = cache.unit_count(layout, u, new, s, strategy) if new else (idle, False)
            if was != now:
                _add(fewer[s], unit.node, was - now)
    return _Holding(state, fewer, patterns)


def _add(counts: dict[str, int], node: str, step: int) -> None:
    n = counts.get(node, 0) + step
    if n:
        counts[node] = n
    else:
        counts.pop(node, None)


def _pattern(layout: Layout, u: int, state: AllocatedState) -> Pattern:
    """What the claims of ``state`` hold of unit ``u``."""
    unit = layout.units[u]
    driver, pool = unit.pool
    out = []
    for pos, device in enumerate(unit.devices):
        key = DeviceID(driver, pool, device.name)
        whole = key in state.dedicated
        shared = key in state.shared
        used = state.capacity.get(key)
        if whole or shared or used:
            capacity = tuple(
                (name, q.value.numerator, q.value.denominator) for name, q in (used or {}).items()
            )
            out.append((pos, whole, shared, capacity))
    return tuple(out)


def _held_claim(layout: Layout, u: int, pattern: Pattern) -> ResourceClaim:
    """One allocated claim that holds of the unit what ``pattern`` says."""
    unit = layout.units[u]
    results = []
    for pos, whole, shared, capacity in pattern:
        device = DeviceID(unit.pool.driver, unit.pool.pool, unit.devices[pos].name)
        if whole:
            results.append(DeviceResult(request="held", device=device))
        if shared or capacity:
            consumed = {
                name: Quantity.from_value(Fraction(num, den)) for name, num, den in capacity
            }
            results.append(
                DeviceResult(
                    request="held",
                    device=device,
                    share_id=f"held-{pos}",
                    consumed_capacity=consumed or None,
                )
            )
    return ResourceClaim(
        name="held", namespace=NAMESPACE, allocation=AllocationResult(results=tuple(results))
    )


# --- the allocator, again and again ----------------------------------------------------------


def _greedy(
    slices: Sequence[ResourceSlice],
    classes: Sequence[DeviceClass],
    held: list[ResourceClaim],
    claim: ResourceClaim,
    strategy: Strategy,
    node: str | None = None,
) -> tuple[int, bool]:
    """How many times the allocator allocates ``claim`` (on ``node``; None: where it likes)
    one after the other, each allocation held by the next; at most :data:`MAX_COUNT`."""
    cache = AllocatorCache()
    claims = list(held)
    for n in range(MAX_COUNT):
        found = Allocator(slices, classes, claims, strategy, cache=cache).allocate(
            [claim], node=node
        )
        if found is None:
            return n, False
        claims.append(ResourceClaim(name=f"taken-{n}", namespace=NAMESPACE, allocation=found[0]))
    return MAX_COUNT, True


def _on_node(
    allocator: Allocator, layout: Layout, s: int, k: int, node: str, strategy: Strategy
) -> tuple[int, bool]:
    """Requests of ``k`` devices of shape ``s`` allocated one after the other on ``node``,
    by the allocator on the node's pools (every slice of each) and what is held of them."""
    index = allocator.catalog.index
    pools = {s_.pool_id for s_ in index.local.get(node, ())}
    slices = [s_ for pool in pools for s_ in index.by_pool.get(pool, ())]
    held = _claims_in(allocator.allocated, pools)
    claim = layout.claims[s] if k == 1 else shape_claim(layout.shapes[s], k, layout.classes)
    return _greedy(slices, layout.classes, held, claim, strategy, node)


def _claims_in(claims: Iterable[ResourceClaim], pools: set[PoolID]) -> list[ResourceClaim]:
    """The claims' allocations in ``pools`` (as claims of their own)."""
    out = []
    for claim in claims:
        if claim.allocation is None:
            continue
        results = tuple(r for r in claim.allocation.results if r.device[:2] in pools)
        if results:
            out.append(
                ResourceClaim(
                    name=claim.name,
                    namespace=claim.namespace,
                    allocation=AllocationResult(results=results),
                )
            )
    return out


def _everywhere(
    allocator: Allocator, layout: Layout, s: int, k: int, strategy: Strategy
) -> tuple[int, bool]:
    """Requests of ``k`` devices of shape ``s`` allocated one after the other anywhere in
    the cluster (slices for many nodes make nodes share pools)."""
    claim = layout.claims[s] if k == 1 else shape_claim(layout.shapes[s], k, layout.classes)
    return _greedy(allocator.slices, layout.classes, list(allocator.allocated), claim, strategy)


# --- when it changed -------------------------------------------------------------------------


def _changed(
    layout: Layout, allocator: Allocator, since: Mapping[str, float], cache: ChoiceCache
) -> dict[int, float]:
    """Per shape, when the latest claim that holds one of its devices (or part of a unit
    with one) got them. What each claim holds is found once per claim object."""
    known = cache.claim_shapes if cache.claim_layout is layout else {}
    kept: dict[int, tuple[ResourceClaim, float | None, tuple[int, ...]]] = {}
    out: dict[int, float] = {}
    for claim in allocator.allocated:
        found = known.get(id(claim))
        if found is None or found[0] is not claim:
            found = (claim, _created(claim), _shapes_held(layout, claim))
        kept[id(claim)] = found
        when = since.get(claim.key, found[1])
        if when is None:
            continue
        for s in found[2]:
            if when > out.get(s, 0.0):
                out[s] = when
    cache.claim_shapes, cache.claim_layout = kept, layout
    return out


def _shapes_held(layout: Layout, claim: ResourceClaim) -> tuple[int, ...]:
    """The shapes of the devices the claim holds, and of the units it holds part of."""
    if claim.allocation is None:
        return ()
    shapes: set[int] = set()
    for result in claim.allocation.results:
        if result.admin_access:
            continue
        found = layout.whole.get(result.device)
        if found is not None:
            shapes.update(layout.sort_shapes[found[1]])
            continue
        at = layout.unit_at.get(result.device)
        if at is not None:
            shapes.update(layout.unit_shapes[at[0]])
    return tuple(sorted(shapes))


def _created(claim: ResourceClaim) -> float | None:
    """``metadata.creationTimestamp`` in seconds since the epoch, if the claim has one."""
    stamp = (claim.raw.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

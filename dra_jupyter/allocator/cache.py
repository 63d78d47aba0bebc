"""What ``Allocator`` calls can share, so a long-running process does not redo it per call.

Two layers, each rebuilt only when its input changes:

* a :class:`Catalog` holds what depends only on the ResourceSlices, DeviceClasses and
  Nodes: the parsed objects, the slices indexed by node and pool, each node's pools, the
  CEL views of devices, every selector's result per device, and per request shape and node
  the devices that could ever serve it (before looking at what is allocated);
* a :class:`Holdings` holds what depends on the allocated claims as well: the parsed
  claims, the :class:`~dra_jupyter.allocator.state.AllocatedState`, and per node what is
  free (for the quick rejection of nodes and for ``topology``'s node order).

An :class:`AllocatorCache` keeps the latest of each. Inputs are compared as tuples, item
by item, by identity first (in C): the same slice objects, or objects equal to them (the
same slices read again), reuse the catalog, and a claim object seen in the last call is not
parsed again. The objects must therefore not be changed in place: a slice or claim that
changes must be a new object (as a Kubernetes informer or a ledger read gives them).
Without a cache, every ``Allocator`` builds its own, used for that allocator only.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dra_jupyter.allocator.pools import Pool, SliceIndex, gather_own_pools, with_counter_only
from dra_jupyter.allocator.search import Candidate, CounterTotals
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.errors import ObjectError
from dra_jupyter.model.objects import (
    DeviceClass,
    ExactRequest,
    Node,
    PoolID,
    ResourceClaim,
    ResourceSlice,
    Toleration,
)
from dra_jupyter.model.parse import (
    parse_device_class,
    parse_many,
    parse_node,
    parse_resource_claim,
    parse_resource_slice,
)
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors import CompiledSelector, DeviceView

if TYPE_CHECKING:
    from dra_jupyter.allocator.scan import PoolScans
    from dra_jupyter.allocator.topology import LazyOrder, NodeCapacity

_NAME = operator.attrgetter("name")

Shape = tuple[str, tuple[str, ...], bool, tuple[Toleration, ...], tuple[tuple[str, Quantity], ...]]
"""What decides which devices could serve a request, apart from the node: its class,
selectors, admin access, tolerations and capacity requests."""


def request_shape(request: ExactRequest) -> Shape:
    return (
        request.device_class_name,
        request.selectors,
        request.admin_access,
        request.tolerations,
        tuple(sorted(request.capacity_requests.items(), key=lambda kv: kv[0])),
    )


def claims_shape(claims: Sequence[ResourceClaim]) -> object:
    """What decides whether claims can fit on a node, apart from the node and allocations:
    per claim, its requests (names, and per alternative its name, shape and count) and its
    constraints."""
    return tuple(
        (
            tuple(
                (
                    r.name,
                    r.exactly is None,
                    tuple((a.name, request_shape(a), a.count) for a in r.alternatives),
                )
                for r in claim.requests
            ),
            claim.constraints,
        )
        for claim in claims
    )


@dataclass
class Listed:
    """The devices of one node that could ever serve requests of one shape, in upstream's
    order: their selectors hold (or fail with a CEL error, ``failed``), capacity and taints
    allow it. Allocations are not looked at; the caller leaves out the devices in use."""

    candidates: list[Candidate]
    failed: list[bool]

    @property
    def errors(self) -> bool:
        return any(self.failed)


class Catalog:
    """Work that depends only on the slices, device classes and nodes."""

    def __init__(
        self,
        slices: Sequence[Mapping[str, Any] | ResourceSlice],
        device_classes: Sequence[Mapping[str, Any] | DeviceClass],
        nodes: Sequence[Mapping[str, Any] | Node],
    ) -> None:
        self.sources = (tuple(slices), tuple(device_classes), tuple(nodes))
        self.slices: list[ResourceSlice] = parse_many(slices, parse_resource_slice, ResourceSlice)
        names = list(map(_NAME, self.slices))
        if len(set(names)) != len(names):  # the API server keeps one object per name
            seen: set[str] = set()
            for name in names:
                if name in seen:
                    raise ObjectError(
                        f"ResourceSlice {name}",
                        "metadata.name",
                        "is defined twice (kube-apiserver keeps one object per name)",
                        "remove the copy, or give one of them another name",
                    )
                seen.add(name)
        self.index = SliceIndex(self.slices)
        self.classes: dict[str, DeviceClass] = {}
        for cls in parse_many(device_classes, parse_device_class, DeviceClass):
            if cls.name in self.classes:
                raise ObjectError(f"DeviceClass {cls.name}", "metadata.name", "is defined twice")
            self.classes[cls.name] = cls
        parsed_nodes = parse_many(nodes, parse_node, Node)
        self.nodes: dict[str, Node] = dict(zip(map(_NAME, parsed_nodes), parsed_nodes, strict=True))
        self.views: dict[int, DeviceView] = {}
        self.results: dict[tuple[str, int], bool | str] = {}  # selector, id(device) -> result
        self.by_values: dict[tuple[object, ...], bool | str] = {}  # selector, what it reads
        self.compiled: dict[str, CompiledSelector] = {}
        self.listed: dict[tuple[Shape, str | None], Listed] = {}
        self._pools: dict[str | None, list[Pool]] = {}
        self._own_pools: dict[str | None, tuple[list[Pool], set[PoolID]]] = {}
        self.pool_nodes: dict[PoolID, set[str | None]] = {}  # nodes whose pools are known
        self._names: list[str] | None = None
        # Per shape, over every node of node_names(): the most devices one node lists, and
        # whether any listed device fails with a CEL error. Known once every node is listed.
        self.most: dict[Shape, int] = {}
        self.any_errors: dict[Shape, bool] = {}
        self._listed_nodes: dict[Shape, set[str | None]] = {}
        self._pool_ids: dict[str | None, frozenset[PoolID]] = {}
        self.pool_scans: dict[Shape, PoolScans] = {}  # per shape, the scan pool by pool
        # per shape: whether a node without partitionable or shared devices has a device
        self.plain_match: dict[Shape, bool] = {}
        self._shared_ids: frozenset[PoolID] | None = None
        self._users: dict[PoolID, set[str | None]] | None = None  # see nodes_using

    def same_inputs(self, *given: Sequence[object]) -> bool:
        """Whether ``(slices, classes, nodes)`` are the objects this catalog was built from.

        Tuples compare their items by identity first, in C, so the same objects are
        recognised without a Python step per item; an object that is not the same one
        but equal to it (the same slice read again) counts as the same, which it is."""
        return self.sources == tuple(map(tuple, given))

    def node_names(self) -> list[str]:
        """Candidate nodes, in name order: nodes with node-local slices, and known Node objects."""
        if self._names is None:
            # the node-local device slices' nodes (the index's keys), and the nodes named by
            # devices of slices with perDeviceNodeSelection (the index's shared slices: the
            # parser refuses a device's node selection in a slice of one node)
            local = self.index.local
            if not self.index.shared and "" not in local and local.keys() >= self.nodes.keys():
                # the commonest case: every node has its slices (and no others are known).
                # In the order given, often name order already: sorting then takes one pass
                # (a set's order would make it a full sort of 1,000 names)
                self._names = sorted(local)
                return self._names
            names = dict.fromkeys(local)
            names.pop("", None)  # a slice of node "" (made by hand): no node
            names.update(
                dict.fromkeys(
                    d.node_selection.node_name
                    for s in self.index.shared
                    for d in s.devices
                    if d.node_selection is not None and d.node_selection.node_name
                )
            )
            names.update(dict.fromkeys(self.nodes))
            self._names = sorted(names)
        return self._names

    def node(self, name: str | None) -> Node | None:
        if name is None:
            return None
        return self.nodes.get(name) or Node(name=name)

    def pools(self, name: str | None) -> list[Pool]:
        """The node's pools, as upstream's ``GatherPools`` gives them."""
        pools = self._pools.get(name)
        if pools is None:
            own, touched = self._own(name)
            pools = self._pools[name] = with_counter_only(self.index, own, touched, self.node(name))
            for pool in pools:
                self.pool_nodes.setdefault(pool.id, set()).add(name)
        return pools

    def own_pools(self, name: str | None) -> list[Pool]:
        """:meth:`pools` less the unusable pools the node sees only through their counter
        slices (only a request for all devices looks at them): the same usable pools, in
        the same order, without checking every pool of shared counters of the cluster."""
        return self._own(name)[0]

    def _own(self, name: str | None) -> tuple[list[Pool], set[PoolID]]:
        found = self._own_pools.get(name)
        if found is None:
            found = self._own_pools[name] = gather_own_pools(self.index, self.node(name))
            for pool in found[0]:
                self.pool_nodes.setdefault(pool.id, set()).add(name)
        return found

    def pool_ids(self, name: str | None) -> frozenset[PoolID]:
        """The pools whose devices the node could use: those of its own slices and of the
        device slices of no one node (a superset of its usable pools, without gathering)."""
        found = self._pool_ids.get(name)
        if found is None:
            if self._shared_ids is None:
                self._shared_ids = frozenset(s.pool_id for s in self.index.shared)
            local = self.index.local.get(name, ()) if name is not None else ()
            found = self._pool_ids[name] = self._shared_ids.union(s.pool_id for s in local)
        return found

    def nodes_using(self, pool: PoolID) -> set[str | None]:
        """Every node whose answers may depend on the pool: the nodes of its slices, every
        node (and ``None``) for a pool of slices of no one node, and the nodes whose gathered
        pools hold it (a pool seen through its counter slices)."""
        if self._users is None:
            users: dict[PoolID, set[str | None]] = {}
            for name, slices in self.index.local.items():
                for s in slices:
                    users.setdefault(s.pool_id, set()).add(name)
            everyone: set[str | None] = {*self.node_names(), None}
            for s in self.index.shared:
                users[s.pool_id] = everyone
            self._users = users
        return self._users.get(pool, set()) | self.pool_nodes.get(pool, set())

    def remember(self, shape: Shape, name: str | None, listed: Listed) -> None:
        """Keep a node's list, and the bound over nodes once every node is listed."""
        self.listed[(shape, name)] = listed
        if name is None or name not in self.node_names():
            return
        seen = self._listed_nodes.setdefault(shape, set())
        seen.add(name)
        self.most[shape] = max(self.most.get(shape, 0), len(listed.candidates))
        self.any_errors[shape] = self.any_errors.get(shape, False) or listed.errors

    def never_enough(self, shape: Shape, count: int) -> bool | None:
        """Whether no node lists ``count`` devices for the shape (and none fails with a CEL
        error); None while some node is not listed yet."""
        names = self.node_names()
        if not names or len(self._listed_nodes.get(shape, ())) < len(names):
            return None
        return self.most.get(shape, 0) < count and not self.any_errors.get(shape, False)


@dataclass
class Holdings:
    """Work that depends on the allocated claims too."""

    catalog: Catalog
    sources: tuple[object, ...]
    claims: list[ResourceClaim]
    state: AllocatedState
    free: dict[tuple[Shape, str | None], int] = field(default_factory=dict)
    hopeless: dict[tuple[object, str | None], bool] = field(default_factory=dict)
    counters: dict[PoolID, CounterTotals] = field(default_factory=dict)  # left per pool
    orders: dict[tuple[object, str | None], LazyOrder] = field(default_factory=dict)
    capacities: dict[str | None, NodeCapacity] = field(default_factory=dict)  # topology's count
    # topology's order of a request's candidates, per request shape, count and node
    ordered: dict[tuple[Shape, int, str | None], list[Candidate]] = field(default_factory=dict)
    # of the scan, per shape: free devices per pool (-1: a CEL error), None: in all pools
    pool_free: dict[Shape, dict[PoolID | None, int]] = field(default_factory=dict)
    pool_rough: dict[Shape, dict[PoolID | None, int]] = field(default_factory=dict)  # no counters
    raw_counters: dict[PoolID, CounterTotals] = field(default_factory=dict)  # for the scan
    _held_pools: frozenset[tuple[str, ...]] | None = None

    def held_pools(self) -> frozenset[tuple[str, ...]]:
        """The pools of the devices that allocated claims hold (whole or shared), as
        ``(driver, pool)`` tuples (equal to their :class:`PoolID`)."""
        if self._held_pools is None:
            held = itertools.chain(self.state.dedicated, self.state.shared)
            self._held_pools = frozenset(d[:2] for d in held)
        return self._held_pools


class AllocatorCache:
    """The latest :class:`Catalog` and :class:`Holdings`, reused while their inputs are the
    same objects. Keep one per inventory in a long-running process (a server, a backend)
    and pass it to every ``Allocator``; safe to share between threads."""

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self._holdings: Holdings | None = None
        self._lock = threading.Lock()

    def catalog(
        self,
        slices: Iterable[Mapping[str, Any] | ResourceSlice],
        device_classes: Iterable[Mapping[str, Any] | DeviceClass],
        nodes: Iterable[Mapping[str, Any] | Node] = (),
    ) -> Catalog:
        given = (tuple(slices), tuple(device_classes), tuple(nodes))
        with self._lock:
            current = self._catalog
            if current is not None and current.same_inputs(*given):
                return current
            current = Catalog(*given)
            self._catalog = current
            self._holdings = None
            return current

    def holdings(
        self, claims: Iterable[Mapping[str, Any] | ResourceClaim], catalog: Catalog
    ) -> Holdings:
        """What depends on the allocated claims, for allocators on ``catalog``."""
        given = tuple(claims)
        with self._lock:
            return self._holdings_for(given, catalog)

    def _holdings_for(
        self, given: tuple[Mapping[str, Any] | ResourceClaim, ...], catalog: Catalog
    ) -> Holdings:
        current = self._holdings
        if current is not None and current.catalog is not catalog:
            current = None  # made for other slices: nothing of it holds
        if (
            current is not None
            and current.sources == given  # by identity first, in C (see same_inputs)
        ):
            return current
        known = (
            {id(src): parsed for src, parsed in zip(current.sources, current.claims, strict=True)}
            if current is not None
            else {}
        )
        parsed = [
            known.get(id(c)) or parse_many([c], parse_resource_claim, ResourceClaim)[0]
            for c in given
        ]
        new = Holdings(catalog, given, parsed, AllocatedState.from_claims(parsed))
        if current is not None:
            _carry_over(current, new, catalog)
        self._holdings = new
        return new


def _changed_pools(old: AllocatedState, new: AllocatedState) -> set[PoolID]:
    """The pools with a device whose holding differs between the two states."""
    devices = old.dedicated ^ new.dedicated
    devices |= old.shared ^ new.shared
    devices.update(
        d
        for d in old.capacity.keys() | new.capacity.keys()
        if old.capacity.get(d) != new.capacity.get(d)
    )
    return {PoolID(d.driver, d.pool) for d in devices}


def _carry_over(old: Holdings, new: Holdings, catalog: Catalog) -> None:
    """Keep what was counted per node in ``old`` for the nodes whose pools did not change:
    after one claim comes or goes, only the nodes of its devices are counted again."""
    affected: set[str | None] = set()
    changed = _changed_pools(old.state, new.state)
    for pool in changed:
        affected |= catalog.nodes_using(pool)
    new.counters = {k: v for k, v in dict(old.counters).items() if k not in changed}
    new.raw_counters = {k: v for k, v in dict(old.raw_counters).items() if k not in changed}
    new.pool_free = _unchanged_pools(old.pool_free, changed)
    new.pool_rough = _unchanged_pools(old.pool_rough, changed)
    # dict() copies first: another thread may be adding to old's entries meanwhile.
    new.capacities = {n: c for n, c in dict(old.capacities).items() if n not in affected}
    new.free = {k: v for k, v in dict(old.free).items() if k[1] not in affected}
    new.hopeless = {k: v for k, v in dict(old.hopeless).items() if k[1] not in affected}
    new.ordered = {k: v for k, v in dict(old.ordered).items() if k[2] not in affected}


def _unchanged_pools(
    counts: dict[Shape, dict[PoolID | None, int]], changed: set[PoolID]
) -> dict[Shape, dict[PoolID | None, int]]:
    """Per shape, the counts of the pools that did not change (not the total of all pools)."""
    return {
        shape: {k: v for k, v in dict(per_pool).items() if k is not None and k not in changed}
        for shape, per_pool in dict(counts).items()
    }

"""The embedded allocator: :class:`Allocator`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from dra_jupyter.allocator.cache import AllocatorCache, Listed, claims_shape
from dra_jupyter.allocator.explain import Explanation, explain
from dra_jupyter.allocator.listing import Listing
from dra_jupyter.allocator.matching import SelectorResults
from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.prefilter import NodeFilter
from dra_jupyter.allocator.results import allocation_result
from dra_jupyter.allocator.scan import Test
from dra_jupyter.allocator.search import RequestData, Search, SearchBudgetError
from dra_jupyter.allocator.topology import (
    LazyOrder,
    NodeCapacity,
    NodeKey,
    claims_need,
    node_capacity,
    node_key,
    node_order,
    node_runs,
)
from dra_jupyter.errors import InvalidInputError, NeverPossibleError, ObjectError
from dra_jupyter.model.limits import MAX_RESULTS_PER_CLAIM
from dra_jupyter.model.objects import (
    AllocationResult,
    Device,
    DeviceClass,
    DeviceID,
    ExactRequest,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from dra_jupyter.model.parse import parse_many, parse_resource_claim
from dra_jupyter.selectors import CompiledSelector, compile_selector

Strategy = Literal["first-fit", "topology"]


class Plan(NamedTuple):
    node: Node | None
    pools: list[Pool]
    data: dict[tuple[int, int, int], RequestData]


STRATEGIES: tuple[Strategy, ...] = ("first-fit", "topology")
DEFAULT_MAX_STEPS = 200_000
SCAN_AFTER = 16
"""Nodes an allocator lists one by one before it counts a request's devices pool by pool
(:mod:`~dra_jupyter.allocator.scan`): a claim that the first nodes take never pays for the
scan; one that no node can take pays for one pass over the inventory instead of listing
every node. (``topology`` on a cluster of more nodes may scan first, or after its first
node, when a claim only partitionable or shared devices serve: see ``_topology_order``.)"""


class Allocator:
    """Decides which devices ResourceClaims get, exactly as the Kubernetes 1.37 scheduler would.

    Pure and thread-safe: it reads the objects it is given and writes nothing; the
    caller persists allocations. Objects may be wire dicts (as ``kubectl get -o yaml``
    shows them) or objects from :mod:`dra_jupyter.model`.

    ``strategy="first-fit"`` reproduces upstream's choice: nodes in name order, and on
    a node the first solution of upstream's depth-first search. ``"topology"`` ranks
    the candidate nodes and solutions by locality and packing instead.

    ``scan_after``: how many nodes to list one by one before counting a request's devices
    over the whole inventory at once (:data:`SCAN_AFTER`; the answer is the same).

    ``cache``: an :class:`~dra_jupyter.allocator.cache.AllocatorCache` that a long-running
    caller keeps and passes to each allocator it makes, so that what depends only on the
    slices (and on unchanged allocated claims) is computed once. Inputs are compared by
    identity first, then equality: pass new objects when slices or claims change, never
    change them in place.
    """

    def __init__(
        self,
        slices: Iterable[Mapping[str, Any] | ResourceSlice],
        device_classes: Iterable[Mapping[str, Any] | DeviceClass],
        allocated_claims: Iterable[Mapping[str, Any] | ResourceClaim] = (),
        strategy: Strategy = "first-fit",
        *,
        nodes: Iterable[Mapping[str, Any] | Node] = (),
        share_id_factory: Callable[[], str] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        cache: AllocatorCache | None = None,
        scan_after: int = SCAN_AFTER,
    ) -> None:
        if strategy not in STRATEGIES:
            raise InvalidInputError(
                f"strategy {strategy!r} is not known; use one of {', '.join(STRATEGIES)}"
            )
        self.strategy: Strategy = strategy
        cache = cache or AllocatorCache()
        self.catalog = cache.catalog(slices, device_classes, nodes)
        self.slices: list[ResourceSlice] = self.catalog.slices
        self.classes: dict[str, DeviceClass] = self.catalog.classes
        self.nodes: dict[str, Node] = self.catalog.nodes
        self.holdings = cache.holdings(allocated_claims, self.catalog)
        self.allocated: list[ResourceClaim] = self.holdings.claims
        self.state = self.holdings.state
        self.share_id_factory = share_id_factory or (lambda: str(uuid.uuid4()))
        self.max_steps = max_steps
        self.scan_after = scan_after
        self.selectors = SelectorResults(self.catalog)  # the selectors' results on devices
        # per request, the devices that could serve it: what the search is given
        self.listing = Listing(
            self.catalog, self.holdings, self.selectors, ordered=strategy == "topology"
        )
        self.node_filter = NodeFilter(self)  # the nodes ruled out before they are searched

    # --- public ------------------------------------------------------------------------------

    def node_names(self) -> list[str]:
        """Candidate nodes, in name order: nodes with node-local slices, and known Node objects."""
        return list(self.catalog.node_names())

    def allocate(
        self, claims: Iterable[Mapping[str, Any] | ResourceClaim], node: str | None = None
    ) -> list[AllocationResult] | None:
        """Allocate all ``claims`` together on one node; ``None`` when no allocation exists.

        With ``node``, only that node is considered. Raises
        :class:`~dra_jupyter.errors.InvalidInputError` for input that can never work
        (unknown DeviceClass, bad CEL, a CEL error on a device, too many devices).
        """
        parsed = self._prepare(claims)
        quick = exact_counts(parsed)
        ruled = self.node_filter
        if quick and node is None and (ruled.never_enough(parsed) or ruled.scanned_short(parsed)):
            return None
        for name in self._search_order(parsed, node, quick):
            found, _ = self.search_on(parsed, name)
            if found is not None:
                return found
        return None

    def search_order(
        self, claims: Iterable[Mapping[str, Any] | ResourceClaim], node: str | None = None
    ) -> list[str | None]:
        """The nodes :meth:`allocate` plans, in its order, if none of them fits: the
        strategy's order less the nodes where the search must fail at once."""
        parsed = self._prepare(claims)
        quick = exact_counts(parsed)
        return list(self._search_order(parsed, node, quick))

    def _search_order(
        self, claims: list[ResourceClaim], node: str | None, quick: bool
    ) -> Iterator[str | None]:
        every = self._nodes_to_try(node)
        shape = claims_shape(claims) if quick else None
        if self.strategy == "topology" and len(every) > 1:
            return self._topology_order(claims, shape, node, every)
        if shape is not None:
            return (name for name in every if not self.node_filter.hopeless(claims, shape, name))
        return iter(every)

    def _topology_order(
        self,
        claims: list[ResourceClaim],
        shape: object | None,
        node: str | None,
        every: list[str | None],
    ) -> Iterator[str | None]:
        """``topology``'s node order, less the nodes where the search must fail, counted
        only as far as it is read (:class:`~dra_jupyter.allocator.topology.LazyOrder`) and
        kept per claim shape while the allocations are the same."""
        order = self.holdings.orders.get((shape, node)) if shape is not None else None
        if order is None:
            if (
                shape is not None
                and len(every) > self.scan_after
                and self.node_filter.plain_nodes_hopeless(claims)
            ):
                kept = [name for name in every if self.node_filter.flexible(name)]
                if len(kept) < len(every):  # their pools are scanned: count the others so too
                    self.node_filter.scanning = True
                else:  # none scanned: count by the scan once one node was listed in vain
                    self.node_filter.scan_early = True
                every = kept
            touched = self.node_filter.maybe_touched if self.holdings.held_pools() else None
            order = LazyOrder(node_runs(every, self.catalog.index.flexible, touched))
            if shape is not None:
                order = self.holdings.orders.setdefault((shape, node), order)
        needed, largest = claims_need(claims)
        plain = shape is not None and not self.node_filter.plain_nodes_hopeless(claims)

        def key(name: str | None) -> NodeKey:
            return node_key(self._node_capacity(name), needed, largest, name, plain)

        def keep(name: str | None) -> bool:
            return shape is None or not self.node_filter.hopeless(claims, shape, name)

        def drop(name: str | None) -> bool:
            """Before counting a node: the first nodes are listed (as ``keep`` does), the
            others are tested against the scan of their pools only, unless a request
            asks for several devices: then counting the node means counting its free devices
            per PCIe root and NUMA node, dearer than listing it (as ``keep`` does)."""
            if shape is None:
                return False
            known = self.holdings.hopeless.get((shape, name))
            if known is not None:
                return known
            if not self.node_filter.scan_begun() or largest > 1:
                return self.node_filter.hopeless(claims, shape, name)
            return self.node_filter.scan_too_few(claims, name)

        return order.names(key, keep, drop)

    def node_order(self, claims: list[ResourceClaim], node: str | None) -> list[str | None]:
        """The nodes to try, in the strategy's order."""
        names = self._nodes_to_try(node)
        if self.strategy == "topology" and len(names) > 1:
            return self._best_fit_nodes(claims, names)
        return names

    def _best_fit_nodes(
        self, claims: list[ResourceClaim], names: list[str | None]
    ) -> list[str | None]:
        """Order nodes by a cheap count, without evaluating any selector (``topology``'s
        :func:`~dra_jupyter.allocator.topology.node_order`); the search then plans nodes
        one by one in this order and stops at the first that fits, as first-fit does in
        name order."""
        capacities = {name: self._node_capacity(name) for name in names}
        plain = exact_counts(claims) and not self.node_filter.plain_nodes_hopeless(claims)
        return node_order(capacities, claims, plain)

    def _node_capacity(self, name: str | None) -> NodeCapacity:
        """What is free on the node, kept while the slices and allocated claims are the same."""
        found = self.holdings.capacities.get(name)
        if found is None:
            found = node_capacity(
                self.catalog.own_pools(name), self.state, self.node_filter.flexible(name)
            )
            self.holdings.capacities[name] = found
        return found

    def explain(
        self,
        claims: Iterable[Mapping[str, Any] | ResourceClaim],
        node: str | None = None,
        *,
        bare_namespace: str | None = None,
    ) -> Explanation:
        """Why the claims can or cannot be allocated, node by node and request by request.
        ``bare_namespace``: the claims holding devices in it are named without it (one
        machine's ledger, where the namespace means nothing)."""
        return explain(self, self._prepare(claims), node, bare_namespace=bare_namespace)

    def check_idle(
        self,
        claim: Mapping[str, Any],
        where: str,
        *,
        explain: bool = True,
        bare_namespace: str | None = None,
    ) -> None:
        """Raise NeverPossibleError where ``claim`` fits nowhere on these devices (an
        allocator of idle ones: it could never be met on ``where``), with why, unless not
        ``explain`` (:meth:`explain`'s ``bare_namespace``)."""
        name = claim["metadata"].get("name") or ""
        probe = {**claim, "metadata": {**claim["metadata"], "name": name or "new-request"}}
        if self.allocate([probe]) is not None:
            return
        never = f"the request can never be met on {where}"
        if not explain:
            raise NeverPossibleError(never)
        explanation = self.explain([probe], bare_namespace=bare_namespace)
        raise NeverPossibleError(f"{never}:\n" + explanation.summary(named=bool(name)), explanation)

    def search_on(
        self, claims: list[ResourceClaim], node_name: str | None
    ) -> tuple[list[AllocationResult] | None, bool]:
        """Allocate prepared claims on one node; also says whether the step budget ran out."""
        try:
            return self._allocate_on(claims, node_name), False
        except SearchBudgetError:
            return None, True

    def plan(self, claims: list[ResourceClaim], node_name: str | None) -> Plan:
        """The node's pools and, per request, the devices that could serve it."""
        node = self.node(node_name)
        pools = self.pools_for_claims(claims, node_name)
        return Plan(node, pools, self.request_data(claims, pools, node))

    # --- preparation -------------------------------------------------------------------------

    def _nodes_to_try(self, node: str | None) -> list[str | None]:
        if node is not None:
            known = self.node_names()
            reachable = any(
                s.per_device_node_selection
                or (s.node_selection is not None and s.node_selection.node_name is None)
                for s in self.slices
                if not s.shared_counters
            )
            if node not in known and not reachable:
                raise InvalidInputError(
                    f"node {node!r} has no ResourceSlices and no Node object was given; "
                    f"nodes with devices: {', '.join(known) or 'none'}"
                )
            return [node]
        names: list[str | None] = list(self.catalog.node_names())
        return names or [None]

    def node(self, name: str | None) -> Node | None:
        return self.catalog.node(name)

    def _prepare(self, claims: Iterable[Mapping[str, Any] | ResourceClaim]) -> list[ResourceClaim]:
        parsed = parse_many(claims, parse_resource_claim, ResourceClaim)
        for claim in parsed:
            where = f"ResourceClaim {claim.key}"
            for i, request in enumerate(claim.requests):
                for j, alt in enumerate(request.alternatives):
                    path = (
                        f"spec.devices.requests[{i}].exactly"
                        if request.exactly is not None
                        else f"spec.devices.requests[{i}].firstAvailable[{j}]"
                    )
                    cls = self.classes.get(alt.device_class_name)
                    if cls is None:
                        known = ", ".join(sorted(self.classes)) or "none are defined"
                        raise ObjectError(
                            where,
                            f"{path}.deviceClassName",
                            f"device class {alt.device_class_name!r} does not exist",
                            f"use one of the DeviceClasses given ({known})",
                        )
                    for k, expr in enumerate(cls.selectors):
                        self._compile(expr, f"DeviceClass {cls.name}, spec.selectors[{k}]")
                    for k, expr in enumerate(alt.selectors):
                        self._compile(expr, f"{where}, {path}.selectors[{k}]")
            minimum = sum(
                min((a.count if a.allocation_mode == "ExactCount" else 0) for a in r.alternatives)
                for r in claim.requests
            )
            if minimum > MAX_RESULTS_PER_CLAIM:
                raise ObjectError(
                    where,
                    "spec.devices.requests",
                    f"the number of requested devices {minimum} exceeds the claim limit of "
                    f"{MAX_RESULTS_PER_CLAIM}",
                    "split the request over several claims",
                )
        return parsed

    @staticmethod
    def _compile(expression: str, where: str) -> CompiledSelector:
        return compile_selector(expression, where=where)

    # --- selectors: SelectorResults (matching) -----------------------------------------------

    def scan_test(
        self,
        expression: str,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> Test:
        """The test of one selector of a class (``request`` None) or of a request, as the
        scan and the lists run it on a device, shared by devices of the same values read."""
        return self.selectors.scan_test(expression, owner, request, index)

    def selector_holds(
        self,
        expression: str,
        device: Device,
        dev_id: DeviceID,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> bool:
        """Whether selector ``index`` of a class (or of a claim's request) holds for a device;
        a CEL runtime error raises :class:`SelectorError`."""
        return self.selectors.selector_holds(expression, device, dev_id, owner, request, index)

    def matches(
        self,
        cls: DeviceClass,
        request: ExactRequest,
        claim: ResourceClaim,
        device: Device,
        dev_id: DeviceID,
    ) -> bool:
        """Whether every selector of the class and of the request holds for the device."""
        return self.selectors.matches(cls, request, claim, device, dev_id)

    # --- one node ----------------------------------------------------------------------------

    def pools_for(self, node: Node | None) -> list[Pool]:
        return self.catalog.pools(node.name if node is not None else None)

    def pools_for_claims(self, claims: Sequence[ResourceClaim], name: str | None) -> list[Pool]:
        """The node's pools, less those it sees only through their counter slices unless a
        request asks for all devices (the only one that looks at an unusable pool)."""
        if any(
            alt.allocation_mode == "All"
            for claim in claims
            for request in claim.requests
            for alt in request.alternatives
        ):
            return self.catalog.pools(name)
        return self.catalog.own_pools(name)

    def request_data(
        self,
        claims: Sequence[ResourceClaim],
        pools: list[Pool],
        node: Node | None,
        *,
        ordered: bool = True,
    ) -> dict[tuple[int, int, int], RequestData]:
        """Per request and alternative, the devices that could serve it, in the order the
        search tries them (upstream's order unless ``ordered`` and the strategy says else:
        :class:`~dra_jupyter.allocator.listing.Listing`)."""
        return self.listing.request_data(claims, pools, node, ordered=ordered)

    def listed(self, request: ExactRequest, claim: ResourceClaim, name: str | None) -> Listed:
        """The node's devices that could ever serve requests of this shape (cached)."""
        return self.listing.listed(request, claim, name)

    def _allocate_on(
        self, claims: list[ResourceClaim], node_name: str | None
    ) -> list[AllocationResult] | None:
        node, pools, data = self.plan(claims, node_name)
        search = Search(claims, pools, node, self.state, data, self.max_steps)
        if not search.run():
            return None
        out = []
        for ci, claim in enumerate(claims):
            chosen = []
            for ri, request in enumerate(claim.requests):
                rd = data[(ci, ri, 0)]
                if request.exactly is None:
                    rd = data[(ci, ri, rd.selected_sub)]
                chosen.append(rd)
            out.append(
                allocation_result(
                    claim, search.results[ci], chosen, node_name, self.share_id_factory
                )
            )
        return out


def exact_counts(claims: Sequence[ResourceClaim]) -> bool:
    """Whether every request of the claims asks for an exact count of devices (none for all
    devices): only then can a node be ruled out by counting."""
    return all(
        alt.allocation_mode == "ExactCount"
        for claim in claims
        for request in claim.requests
        for alt in request.alternatives
    )

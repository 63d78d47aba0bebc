"""Ruling nodes out before planning them: what :class:`~dra_jupyter.allocator.core.Allocator`
asks before it searches a node.

A node is *hopeless* for claims when the search there must fail at once: a request has fewer
free devices on the node than it needs (before any request whose devices could fail with a
CEL error), or a claim's constraints cannot hold. Two ways to find it out, with the same
answers:

* **listing** the node (``_too_few``): its pools gathered, every device's selectors checked;
  exact, and kept per request shape and node;
* **the scan** (:mod:`~dra_jupyter.allocator.scan`), pool by pool: an upper bound on what the
  node's pools hold free, so a node it rules out could never take the request. It begins
  after ``scan_after`` nodes were listed, and answers for the whole inventory at once when no
  pools hold enough (an unsatisfiable claim), or for the nodes without MIG or shared devices
  at once when none of them has a device for the claim (a MIG claim under ``topology``).

All of it is kept per inventory (what matches) and per set of allocated claims (what is
free) in the allocator's cache. Each allocator has a :class:`NodeFilter`, which reads what
:class:`NodeSource` says from it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Protocol

from dra_jupyter.allocator.cache import Catalog, Holdings, Listed, request_shape
from dra_jupyter.allocator.capacity import CapacityProblem, consumed_capacity
from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.scan import PoolScans, Scan, SharedTest, Test
from dra_jupyter.allocator.search import (
    CounterTotals,
    RequestData,
    Search,
    available_counters,
    counters_fit,
)
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.model.objects import (
    CounterSet,
    Device,
    DeviceClass,
    ExactRequest,
    Node,
    PoolID,
    ResourceClaim,
)
from dra_jupyter.model.quantity import Quantity


class NodeSource(Protocol):
    """What a :class:`NodeFilter` reads from the allocator it tests nodes for
    (:class:`~dra_jupyter.allocator.core.Allocator`): its caches and limits, and how it
    lists a node's devices, gathers its pools and prepares a search there."""

    catalog: Catalog
    holdings: Holdings
    state: AllocatedState
    classes: dict[str, DeviceClass]
    max_steps: int
    scan_after: int

    def node(self, name: str | None) -> Node | None: ...

    def listed(self, request: ExactRequest, claim: ResourceClaim, name: str | None) -> Listed: ...

    def pools_for_claims(self, claims: Sequence[ResourceClaim], name: str | None) -> list[Pool]: ...

    def request_data(
        self,
        claims: Sequence[ResourceClaim],
        pools: list[Pool],
        node: Node | None,
        *,
        ordered: bool = True,
    ) -> dict[tuple[int, int, int], RequestData]: ...

    def scan_test(
        self,
        expression: str,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> Test: ...


class NodeFilter:
    """The node tests of an allocator (see the module's docstring), one per allocator."""

    def __init__(self, source: NodeSource) -> None:
        # what the source holds for its life, read once; the source itself weakly, since it
        # holds this filter: no reference cycle, so the allocator and its caches go with
        # its last reference, not at the collector's next full pass
        self.catalog = source.catalog
        self.holdings = source.holdings
        self.state = source.state
        self.classes = source.classes
        self.max_steps = source.max_steps
        self.scan_after = source.scan_after
        self._source: NodeSource = weakref.proxy(source)
        self._listings = 0  # nodes listed by _too_few in the allocator's calls
        self.scanning = False  # whether a scan began before scan_after nodes were listed
        self.scan_early = False  # whether a scan begins once one node was listed
        # the claims of the latest call, and whether no pools have enough for them
        self._nowhere: tuple[list[ResourceClaim], bool] | None = None
        # per request object: the request and its scan
        self._scans: dict[int, tuple[ExactRequest, Scan]] = {}

    # --- the tests ----------------------------------------------------------------------------

    def scan_begun(self) -> bool:
        """Whether nodes are tested against the scan (instead of listed one by one)."""
        after = min(self.scan_after, 1) if self.scan_early else self.scan_after
        return self.scanning or self._listings >= after

    def flexible(self, name: str | None) -> bool:
        return self.catalog.index.flexible(name)

    def plain_nodes_hopeless(self, claims: list[ResourceClaim]) -> bool:
        """Whether the first request has no device, and no CEL error, in any pool of the
        nodes without partitionable or shared devices (and no slice serves every node):
        then those nodes must all fail at once. ``topology`` tries them first, so a claim
        for MIG slices or shares would otherwise rule them out one by one."""
        if not claims or not claims[0].requests or self.catalog.index.shared:
            return False
        claim = claims[0]
        return not any(
            alt.count < 1 or self._plain_match(alt, claim) for alt in claim.requests[0].alternatives
        )

    def _plain_match(self, request: ExactRequest, claim: ResourceClaim) -> bool:
        """Whether a pool of a node without partitionable or shared devices has a device
        for the request (or one whose selector fails with a CEL error); kept per shape."""
        shape = request_shape(request)
        found = self.catalog.plain_match.get(shape)
        if found is None:
            # A device listed on the first such node settles it without the scan of the
            # inventory (a listed device is one the scan of its pool keeps, and its pool is
            # one of the node's): the node is listed first anyway, by topology's order.
            first = next((n for n in self.catalog.node_names() if not self.flexible(n)), None)
            if first is None:  # no such node: no pool to scan
                self.catalog.plain_match[shape] = False
                return False
            if self._source.listed(request, claim, first).candidates:
                self.catalog.plain_match[shape] = True
                return True
            scan = self._scan(request, claim)
            first_test = scan.tests[0] if scan.tests else None
            if isinstance(first_test, SharedTest) and not self._shared_slices():
                # by the shapes of the devices the plain nodes offer: a shape whose first
                # selector one slice rules out is ruled out for all of its slices (each its
                # pool's only slice); the others are scanned as below
                shapes, others = self.catalog.index.plain_shapes()
                found = any(
                    first_test.for_slice(group[0]) is not False
                    and any(scan.pool(s.pool_id).devices for s in group)
                    for group in shapes.values()
                ) or any(scan.pool(s.pool_id).devices for s in others)
            else:
                found = any(
                    scan.pool(pool).devices
                    for name in self.catalog.node_names()
                    if not self.flexible(name)
                    for pool in self.catalog.pool_ids(name)
                )
            self.catalog.plain_match[shape] = found
        return found

    def _shared_slices(self) -> bool:
        """Whether some device slice serves more than one node (then every node's pools
        include it, and the shapes of the plain nodes' own slices are not all)."""
        return bool(self.catalog.index.shared)

    def maybe_touched(self, name: str | None) -> bool:
        """Whether something the node could use may be in use: false only when no pool of
        its slices (or of the slices of no one node) holds an allocated device."""
        held = self.holdings.held_pools()
        return bool(held) and not held.isdisjoint(self.catalog.pool_ids(name))

    def never_enough(self, claims: list[ResourceClaim]) -> bool:
        """Whether some request has too few devices on every node, ignoring allocations:
        known once each node has been listed for the request's shape, so an impossible
        request fails in one step from the second time on."""
        shapes = [
            [(request_shape(alt), alt.count) for alt in request.alternatives]
            for claim in claims
            for request in claim.requests
        ]
        if any(self.catalog.any_errors.get(shape, True) for alts in shapes for shape, _ in alts):
            return False  # not every node is listed yet, or a CEL error must be reached
        return any(
            all(self.catalog.never_enough(shape, count) for shape, count in alts) for alts in shapes
        )

    def hopeless(self, claims: list[ResourceClaim], shape: object, name: str | None) -> bool:
        """:meth:`_too_few`, kept per claim shape and node while the allocations are the same."""
        key = (shape, name)
        found = self.holdings.hopeless.get(key)
        if found is None:
            found = self.holdings.hopeless[key] = self._too_few(claims, name)
        return found

    def _too_few(self, claims: list[ResourceClaim], name: str | None) -> bool:
        """Whether the search must fail on the node because, before any request whose
        devices could fail with a CEL error, a request has fewer free devices than it needs
        in each of its alternatives, or (no such device at all) a claim's constraints cannot
        hold: the search would stop there at once."""
        if self.scan_too_few(claims, name):
            return True
        self._listings += 1
        for claim in claims:
            for request in claim.requests:
                enough = False
                for alt in request.alternatives:
                    listed = self._source.listed(alt, claim, name)
                    if listed.errors:
                        return False
                    if self._free(alt, listed, name) >= alt.count:
                        enough = True
                if not enough:
                    return True
        return self._constraints_fail(claims, name)

    def scan_too_few(self, claims: list[ResourceClaim], name: str | None) -> bool:
        """:meth:`_too_few`'s first answer, from the scan instead of the node's list: a
        request has fewer free devices in the node's pools, or in all pools, than it needs,
        and no request before it has a device with a CEL error there. The scan begins once
        ``scan_after`` nodes were listed; until then, false."""
        if not self.scan_begun():
            return False
        known = self._nowhere  # the same test over every pool, for the claims of this call
        if known is None or known[0] is not claims:
            known = self._nowhere = (claims, self._scan_short(claims, None))
        return known[1] or self._scan_short(claims, self.catalog.pool_ids(name))

    def scanned_short(self, claims: list[ResourceClaim]) -> bool:
        """Whether an earlier scan of the whole inventory (for every request of the claims)
        says that no pools have enough: a claim no node can take fails in one step when it
        comes again."""
        pool_scans = self.catalog.pool_scans
        for claim in claims:
            for request in claim.requests:
                for alt in request.alternatives:
                    found = pool_scans.get(request_shape(alt))
                    if found is None or not found.complete:
                        return False
        return self._scan_short(claims, None)

    def _scan_short(self, claims: list[ResourceClaim], pools: frozenset[PoolID] | None) -> bool:
        """Whether, by the scan, a request has fewer free devices in ``pools`` (None: all)
        than it needs, and no request before it a device with a CEL error there.

        Over all pools, the count of an alternative stops as soon as it has enough (so a
        claim that some pools can take scans only as many): then the pools left unscanned
        might hold a CEL error, and a later request found short proves nothing."""
        unsure = False
        for claim in claims:
            for request in claim.requests:
                enough = False
                for alt in request.alternatives:
                    found = self._scan(alt, claim)
                    need = alt.count
                    if pools is None and found.complete and None in found.free:
                        total = found.free[None]  # every pool counted before
                    elif pools is None:
                        total = 0
                        for pool in found.pools():
                            n = self._pool_free(alt, found, pool, exact=True)
                            if n < 0:
                                return False  # the pool has a CEL error
                            total += n
                            if total >= need:
                                unsure = True
                                break
                        else:
                            found.free[None] = total
                    else:  # counted first without counters, which only lower the count
                        total = 0
                        for exact in (False, True):
                            counts = [self._pool_free(alt, found, pool, exact) for pool in pools]
                            if any(n < 0 for n in counts):
                                return False  # a pool has a CEL error
                            total = sum(counts)
                            if total < need:
                                break
                    if total >= need:
                        enough = True
                if not enough:
                    return not unsure
        return False

    def _scan(self, request: ExactRequest, claim: ResourceClaim) -> Scan:
        """The devices the request's selectors could take, pool by pool (the results kept
        per shape in the catalog), and its free devices per pool (:meth:`_pool_free`, kept
        per shape in the holdings); found once per allocator for each request object."""
        found = self._scans.get(id(request))
        if found is None or found[0] is not request:
            shape = request_shape(request)
            pool_scans = self.catalog.pool_scans.get(shape)
            if pool_scans is None:
                pool_scans = PoolScans(self.catalog.index.device_slices)
                pool_scans = self.catalog.pool_scans.setdefault(shape, pool_scans)
            free = self.holdings.pool_free.get(shape)
            if free is None:
                free = self.holdings.pool_free.setdefault(shape, {})
            rough = self.holdings.pool_rough.get(shape)
            if rough is None:
                rough = self.holdings.pool_rough.setdefault(shape, {})
            cls = self.classes[request.device_class_name]
            tests = tuple(
                self._source.scan_test(expr, owner, None if owner is cls else request, i)
                for owner, selectors in ((cls, cls.selectors), (claim, request.selectors))
                for i, expr in enumerate(selectors)
            )
            if request.capacity_requests:
                tests += (_capacity_test(request.capacity_requests),)
            found = self._scans[id(request)] = (request, Scan(pool_scans, tests, free, rough))
        return found[1]

    def _pool_free(self, request: ExactRequest, found: Scan, pool: PoolID, exact: bool) -> int:
        """The pool's scanned devices that are free (-1: a CEL error), kept per pool: not held
        whole and, if ``exact`` and the pool's counters can be read from its slices alone,
        with their counters left (all of them for admin access). Never fewer than a node that
        lists the pool counts as free; without ``exact``, never fewer than with it."""
        kept = found.free if exact else found.rough
        count = kept.get(pool)
        if count is not None:
            return count
        scanned = found.pool(pool)
        if scanned.errors:
            count = -1
        elif request.admin_access:
            count = len(scanned.devices)
        else:
            dedicated, shared = self.state.dedicated, self.state.shared
            left: CounterTotals | None = None
            count = 0
            for dev_id, device in scanned.devices:
                if dev_id in dedicated:
                    continue
                if (
                    exact
                    and device.consumes_counters
                    and not (device.allow_multiple_allocations and dev_id in shared)
                ):
                    if left is None:
                        left = self._raw_counters_left(pool)
                    if left and not counters_fit(device, left):
                        continue  # as _free: the search could not take it
                count += 1
        kept[pool] = count
        return count

    def _raw_counters_left(self, pool_id: PoolID) -> CounterTotals:
        """The pool's counters less what allocated claims consume, from its slices without
        gathering the pool; empty (nothing known) when its slices are not one generation,
        not as many as the pool says it has, or define a counter set twice (a node listing
        the pool could then see other slices, or none)."""
        left = self.holdings.raw_counters.get(pool_id)
        if left is None:
            slices = self.catalog.index.by_pool.get(pool_id, [])
            sets: dict[str, CounterSet] = {}
            # one generation, complete as published: then a node listing the pool sees all
            # of its slices (its own, and the others as other_slices), so the same counters
            usable = len({s.generation for s in slices}) == 1 and all(
                s.resource_slice_count == len(slices) for s in slices
            )
            for s in slices:
                for cs in s.shared_counters:
                    usable = usable and cs.name not in sets
                    sets[cs.name] = cs
            left = {}
            if usable and sets:
                devices = self.catalog.index.device_slices.get(pool_id, [])
                raw = Pool(pool_id, slices=devices, counter_sets=sets)
                left = available_counters(raw, self.state)
            self.holdings.raw_counters[pool_id] = left
        return left

    def _constraints_fail(self, claims: list[ResourceClaim], name: str | None) -> bool:
        """Whether a claim's constraints cannot hold on the node even before anything is
        chosen: the bound the search checks when a claim starts, taken before planning."""
        if not any(claim.constraints for claim in claims):
            return False
        node = self._source.node(name)
        pools = self._source.pools_for_claims(claims, name)
        data = self._source.request_data(claims, pools, node, ordered=False)
        search = Search(claims, pools, node, self.state, data, self.max_steps)
        return not all(search.constraints_feasible(ci, 0) for ci in range(len(claims)))

    def _free(self, request: ExactRequest, listed: Listed, name: str | None) -> int:
        """How many of the listed devices are free: not held whole, and with their counters
        left (all of them for admin access)."""
        if request.admin_access:
            return len(listed.candidates)
        key = (request_shape(request), name)
        free = self.holdings.free.get(key)
        if free is None:
            dedicated, shared = self.state.dedicated, self.state.shared
            free = 0
            for c in listed.candidates:
                if c.id in dedicated:
                    continue
                device = c.device
                if (
                    device.consumes_counters
                    and not (device.allow_multiple_allocations and c.id in shared)
                    and not counters_fit(device, self._counters_left(c.pool))
                ):
                    continue  # its counters are used up: the search could not take it
                free += 1
            self.holdings.free[key] = free
        return free

    def _counters_left(self, pool: Pool) -> CounterTotals:
        left = self.holdings.counters.get(pool.id)
        if left is None:
            left = self.holdings.counters[pool.id] = available_counters(pool, self.state)
        return left


def _capacity_test(requests: Mapping[str, Quantity]) -> Test:
    """A test for the scan that never rules a device out but notes, as a CEL error is noted,
    a device the search would stop at because the request cannot be consumed from it (a
    negative amount, or one past int64): such a node is never ruled out by counting."""

    def test(device: Device, driver: str, pool: str) -> bool | str:
        try:
            consumed_capacity(requests, device)
        except CapacityProblem as problem:
            return str(problem)
        return True

    return test

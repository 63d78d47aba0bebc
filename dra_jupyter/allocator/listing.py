"""The devices each request could use on a node: :class:`Listing`, what the search is given.

A node's devices are listed once per request shape and node (the catalog keeps the lists:
class and request selectors, node selection, static capacity, taints), then, per call,
less those the allocated claims hold whole, in the order the search tries them: upstream's,
or ``topology``'s (:func:`~dra_jupyter.allocator.topology.order_candidates`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_jupyter.allocator.cache import Catalog, Holdings, Listed, Shape, request_shape
from dra_jupyter.allocator.capacity import CapacityProblem, consumed_capacity
from dra_jupyter.allocator.matching import SelectorResults
from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.scan import Test, slice_tests
from dra_jupyter.allocator.search import (
    Candidate,
    RequestData,
    capacity_error,
    selectable,
    taint_prevents,
)
from dra_jupyter.allocator.topology import order_candidates
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.nodes import selection_matches
from dra_jupyter.model.objects import DeviceID, ExactRequest, Node, ResourceClaim


class Listing:
    """The candidates of an allocator's requests (see the module's docstring), one per
    allocator: ``ordered`` is whether its strategy orders them (``topology``)."""

    def __init__(
        self, catalog: Catalog, holdings: Holdings, selectors: SelectorResults, *, ordered: bool
    ) -> None:
        self.catalog = catalog
        self.holdings = holdings
        self.state = holdings.state
        self.classes = catalog.classes
        self.selectors = selectors
        self.ordered = ordered
        self._list_tests: dict[Shape, tuple[Test, ...]] = {}  # per shape: _list's selectors

    def request_data(
        self,
        claims: Sequence[ResourceClaim],
        pools: list[Pool],
        node: Node | None,
        *,
        ordered: bool = True,
    ) -> dict[tuple[int, int, int], RequestData]:
        """Per request and alternative, the devices that could serve it, in the order the
        search tries them (upstream's order unless ``ordered`` and the strategy says else)."""
        data: dict[tuple[int, int, int], RequestData] = {}
        for ci, claim in enumerate(claims):
            for ri, request in enumerate(claim.requests):
                parent = request if request.exactly is None else None
                for si, alt in enumerate(request.alternatives):
                    rd = RequestData(alt, parent, self.classes[alt.device_class_name], alt.count)
                    if alt.allocation_mode == "All":
                        rd.all_devices = self._all_devices(rd, claim, pools, node)
                        rd.num_devices = len(rd.all_devices)
                    elif ordered and self.ordered:
                        rd.candidates = self._ordered_candidates(rd, claim, node)
                    else:
                        rd.candidates = self._candidates(rd, claim, node)
                    data[(ci, ri, si)] = rd
        return data

    def _ordered_candidates(
        self, rd: RequestData, claim: ResourceClaim, node: Node | None
    ) -> list[Candidate]:
        """``topology``'s order of the request's candidates, kept per request shape, count and
        node while the allocations are the same (not when a candidate carries a CEL error,
        which names this claim)."""
        name = node.name if node is not None else None
        key = (request_shape(rd.request), rd.num_devices, name)
        found = self.holdings.ordered.get(key)
        if found is None:
            rd.candidates = self._candidates(rd, claim, node)
            found = order_candidates(rd, self.state)
            if not self.listed(rd.request, claim, name).errors:
                self.holdings.ordered[key] = found
        return found

    def listed(self, request: ExactRequest, claim: ResourceClaim, name: str | None) -> Listed:
        """The node's devices that could ever serve requests of this shape (cached)."""
        shape = request_shape(request)
        listed = self.catalog.listed.get((shape, name))
        if listed is None:
            listed = self._list(shape, request, claim, name)
            self.catalog.remember(shape, name, listed)
        return listed

    def _list(
        self, shape: Shape, request: ExactRequest, claim: ResourceClaim, name: str | None
    ) -> Listed:
        node = self.catalog.node(name)
        out = Listed([], [])
        tests = self._list_tests.get(shape)
        if tests is None:
            cls = self.classes[request.device_class_name]
            tests = self._list_tests[shape] = tuple(
                self.selectors.scan_test(expr, owner, None if owner is cls else request, i)
                for owner, selectors in ((cls, cls.selectors), (claim, request.selectors))
                for i, expr in enumerate(selectors)
            )
        # a device that the scan of its pool left out has a selector that is false: skipped
        # without asking the selectors again
        scanned = self.catalog.pool_scans.get(shape)
        for pool in self.catalog.own_pools(name):
            if not pool.usable:
                continue
            kept = scanned.known(pool.id) if scanned is not None else None
            for slice_ in pool.slices:
                driver, pool_name = slice_.driver, slice_.pool
                # devices that agree on what a selector reads share its result (the scan's
                # tests), and a slice whose devices all agree asks it once
                asked, whole = slice_tests(slice_, tests)
                if whole is False:
                    continue
                for device in slice_.devices:
                    dev_id = None
                    if kept is not None:
                        dev_id = DeviceID(driver, pool_name, device.name)
                        if dev_id not in kept.ids:
                            continue
                    result: bool | str = True
                    for test in asked:
                        result = test(device, driver, pool_name)
                        if result is not True:
                            break
                    if result is False:
                        continue
                    if dev_id is None:
                        dev_id = DeviceID(driver, pool_name, device.name)
                    if result is True:
                        if slice_.per_device_node_selection and not (
                            device.node_selection is not None
                            and selection_matches(device.node_selection, node)
                        ):
                            continue
                        try:
                            consumed = consumed_capacity(request.capacity_requests, device)
                        except CapacityProblem:
                            # an error the search raises if it reaches the device, naming
                            # the claim (:meth:`_candidates`); before the taint, as upstream
                            out.candidates.append(Candidate(dev_id, device, slice_, pool))
                            out.failed.append(True)
                            continue
                        if consumed is None or taint_prevents(device, request):
                            continue
                        shared = consumed if device.allow_multiple_allocations else None
                        out.candidates.append(Candidate(dev_id, device, slice_, pool, shared))
                    else:
                        out.candidates.append(Candidate(dev_id, device, slice_, pool))
                    out.failed.append(result is not True)
        return out

    def _candidates(
        self, rd: RequestData, claim: ResourceClaim, node: Node | None
    ) -> list[Candidate]:
        """The devices that could serve the request now, in upstream's order: the listed
        ones less those held whole; a device whose selector fails with a CEL error carries
        the error (naming this claim), raised only if the search reaches it."""
        request = rd.request
        listed = self.listed(request, claim, node.name if node is not None else None)
        dedicated = self.state.dedicated
        admin = request.admin_access
        matches = self.selectors.matches
        out: list[Candidate] = []
        for cand, failed in zip(listed.candidates, listed.failed, strict=True):
            if not admin and cand.id in dedicated:
                continue
            if not failed:
                out.append(cand)
                continue
            fresh = Candidate(cand.id, cand.device, cand.slice, cand.pool)
            try:
                selectable(rd, claim, cand.slice, cand.device, cand.id, node, matches)
                consumed_capacity(request.capacity_requests, cand.device)
            except InvalidInputError as err:
                fresh.error = err
            except CapacityProblem as problem:
                fresh.error = capacity_error(claim, rd, cand.id, problem)
            out.append(fresh)
        return out

    def _all_devices(
        self, rd: RequestData, claim: ResourceClaim, pools: list[Pool], node: Node | None
    ) -> list[Candidate]:
        matches = self.selectors.matches
        out: list[Candidate] = []
        for pool in pools:
            state = (
                "is currently being updated"
                if pool.incomplete
                else "is invalid"
                if pool.invalid
                else ""
            )
            if state:
                raise InvalidInputError(
                    f"claim {claim.key}, request {rd.name}: asks for all devices, but resource "
                    f"pool {pool.id} {state}; try again when its driver has published it whole"
                )
            for slice_ in pool.slices:
                for device in slice_.devices:
                    dev_id = DeviceID(slice_.driver, slice_.pool, device.name)
                    if not selectable(rd, claim, slice_, device, dev_id, node, matches):
                        continue
                    # only the device's own capacity decides (1.37): one whose capacity
                    # is used up by other claims stays in the set, and the request fails;
                    # a request that is negative or out of a range's reach stops it all
                    try:
                        consumed = consumed_capacity(rd.request.capacity_requests, device)
                    except CapacityProblem as problem:
                        raise capacity_error(claim, rd, dev_id, problem) from None
                    if consumed is None:
                        continue
                    out.append(
                        Candidate(
                            dev_id,
                            device,
                            slice_,
                            pool,
                            consumed if device.allow_multiple_allocations else None,
                        )
                    )
        return out

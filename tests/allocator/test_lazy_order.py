"""``topology`` counts nodes only as far as it reads its order
(:class:`~dra_jupyter.allocator.topology.LazyOrder`): the nodes it plans must come in exactly
the order of the full sort (:func:`~dra_jupyter.allocator.topology.node_order` over every
node), less the nodes where the search must fail at once, whatever the inventory, the
allocations and the claims, and however much of a cached order earlier calls read."""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import random
import weakref
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.allocator.topology import node_bound, node_runs
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model.objects import ResourceClaim
from dra_jupyter.model.parse import parse_resource_claim
from tests.allocator import builders
from tests.allocator.builders import (
    ALL_NODES,
    allocated_claim,
    counter_set,
    device,
    device_allocation_result,
    device_class,
    device_counter_consumption,
    resource_pool,
    slice_with_counter_sets,
    slice_with_devices,
)

from .test_properties import PROFILE, World, as_dicts, class_objects, share_id, worlds

Wire = dict[str, Any]
MANY_NODES = settings(PROFILE, max_examples=40)  # each example makes dozens of allocators
Strategy = Literal["first-fit", "topology"]
GPU = nvidia.DRIVER
DRIVER_X = "d.example.com"


def full_sort(allocator: Allocator, claims: list[Wire]) -> list[str | None]:
    """The reference: every node counted and sorted, then the hopeless ones left out."""
    parsed: list[ResourceClaim] = [parse_resource_claim(c) for c in claims]
    quick = all(
        alt.allocation_mode == "ExactCount"
        for claim in parsed
        for request in claim.requests
        for alt in request.alternatives
    )
    order = allocator.node_order(parsed, None)
    if not quick:
        return order
    return [name for name in order if not allocator.node_filter._too_few(parsed, name)]


@PROFILE
@given(worlds())
def test_the_lazy_order_is_the_full_sort_on_random_worlds(world: World) -> None:
    claims = world.claim_objects()

    def fresh() -> Allocator:
        return Allocator(list(world.slices), class_objects(), world.held_claims(), "topology")

    expected = full_sort(fresh(), claims)
    assert fresh().search_order(claims) == expected


# --- clusters in the NVIDIA driver's shapes, with many nodes -----------------------------------


def cluster(kinds: list[str]) -> list[Wire]:
    out: list[Wire] = []
    for i, kind in enumerate(kinds):
        name = f"node-{i:02d}"
        if kind == "mig":
            out.extend(mig.h200_mig_node(name, gpus=2))
        elif kind == "hgx":
            out.append(nvidia.hgx_node(name, nvidia.H200))
        else:
            out.append(nvidia.hgx_node(name, nvidia.H100_SXM, shares=2))
    return out


def held(kinds: list[str], rng: random.Random, share: float) -> list[Wire]:
    """One claim per node holding a random share of its GPUs (MIG: a 3g or a 1g slice)."""
    claims = []
    for i, kind in enumerate(kinds):
        name = f"node-{i:02d}"
        gpus = 2 if kind == "mig" else 8
        devices = []
        for minor in range(gpus):
            if rng.random() >= share:
                continue
            if kind == "mig":
                devices.append(
                    rng.choice([f"gpu-{minor}-mig-3g71gb-9-0", f"gpu-{minor}-mig-1g18gb-19-4"])
                )
            else:
                devices.append(f"gpu-{minor}")
        if devices:
            results = [{"request": "r", "driver": GPU, "pool": name, "device": d} for d in devices]
            claims.append({
                "metadata": {"name": f"held-{name}", "namespace": "default"},
                "spec": {"devices": {"requests": []}},
                "status": {"allocation": {"devices": {"results": results}}},
            })  # fmt: skip
    return claims


def wanted(count: int, cls: str = "gpu.nvidia.com", *selectors: str, root: bool = False) -> Wire:
    exactly: Wire = {"deviceClassName": cls, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    constraints = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}] if root else []
    return {
        "metadata": {"name": "new", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}],
                             "constraints": constraints}},
    }  # fmt: skip


STRATEGIES: tuple[Strategy, ...] = ("first-fit", "topology")
CLAIMS = [
    wanted(1),
    wanted(2),
    wanted(4, root=True),
    wanted(8),
    wanted(1, "mig.nvidia.com", f"device.attributes['{GPU}'].profile == '3g.71gb'"),
    wanted(1, "mig.nvidia.com", f"device.attributes['{GPU}'].profile == '1g.18gb'"),
    wanted(
        1, "gpu.nvidia.com", f"device.capacity['{GPU}'].memory.compareTo(quantity('200Gi')) >= 0"
    ),
]


@MANY_NODES
@given(
    st.lists(st.sampled_from(["hgx", "shared", "mig"]), min_size=2, max_size=24),
    st.sampled_from([0.0, 0.3, 0.6, 0.9, 1.0]),
    st.integers(0, 2**16),
    st.integers(0, 30),
)
def test_the_lazy_order_is_the_full_sort_on_many_nodes(
    kinds: list[str], share: float, seed: int, read_first: int
) -> None:
    slices = cluster(kinds)
    allocated = held(kinds, random.Random(seed), share)
    classes = nvidia.device_classes()
    cache = AllocatorCache()
    for claim in CLAIMS:
        expected = full_sort(Allocator(slices, classes, allocated, "topology"), [claim])
        assert Allocator(slices, classes, allocated, "topology").search_order([claim]) == expected
        # an order that an earlier call read only in part goes on in the same order
        partly = Allocator(slices, classes, allocated, "topology", cache=cache)
        names = partly._search_order([parse_resource_claim(claim)], None, True)
        first = [name for _, name in zip(range(read_first), names, strict=False)]
        assert first == expected[:read_first]
        again = Allocator(slices, classes, allocated, "topology", cache=cache)
        assert again.search_order([claim]) == expected


# --- the scan of the whole inventory -----------------------------------------------------------


def answer(allocator: Allocator, claims: list[Wire]) -> object:
    """The answer, or the error's type and message."""
    try:
        found = allocator.allocate(claims)
    except InvalidInputError as err:
        return (type(err).__name__, str(err))
    return as_dicts(found)


@PROFILE
@given(worlds(), st.sampled_from(["first-fit", "topology"]))
def test_scanning_the_inventory_at_once_changes_no_answer(world: World, strategy: Strategy) -> None:
    """Random worlds (CEL errors, admin access, counters, shares, constraints): an allocator
    that counts over the whole inventory before listing any node answers as one that never
    does, and plans the same nodes."""
    claims = world.claim_objects()

    def fresh(scan_after: int) -> Allocator:
        counter = itertools.count()
        return Allocator(
            list(world.slices),
            class_objects(),
            world.held_claims(),
            strategy,
            share_id_factory=lambda: share_id(next(counter)),
            scan_after=scan_after,
        )

    never = 10**9
    assert answer(fresh(0), claims) == answer(fresh(never), claims)
    with contextlib.suppress(InvalidInputError):
        assert fresh(0).search_order(claims) == fresh(never).search_order(claims)


@PROFILE
@given(worlds())
def test_a_node_listed_after_the_scan_lists_what_it_lists_without_it(world: World) -> None:
    """Listing a node skips the devices the scan of the whole inventory left out: every
    node lists the same devices, in the same order, with the same CEL errors, as when no
    scan was made."""

    def fresh() -> Allocator:
        return Allocator(list(world.slices), class_objects(), world.held_claims(), "first-fit")

    plain, scanned = fresh(), fresh()
    try:
        claims = plain._prepare(world.claim_objects())
    except InvalidInputError:
        return
    names: list[str | None] = [*plain.node_names(), None]
    for claim in claims:
        for request in claim.requests:
            for alt in request.alternatives:
                inventory = scanned.node_filter._scan(alt, claim)
                for pool in inventory.pools():
                    inventory.pool(pool)
                for name in names:
                    mine, theirs = (
                        plain.listed(alt, claim, name),
                        scanned.listed(alt, claim, name),
                    )
                    assert [c.id for c in theirs.candidates] == [c.id for c in mine.candidates]
                    assert theirs.failed == mine.failed


@MANY_NODES
@given(
    st.lists(st.sampled_from(["hgx", "shared", "mig"]), min_size=2, max_size=24),
    st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    st.integers(0, 2**16),
)
def test_scanning_the_inventory_at_once_changes_no_answer_on_many_nodes(
    kinds: list[str], share: float, seed: int
) -> None:
    slices = cluster(kinds)
    allocated = held(kinds, random.Random(seed), share)
    classes = nvidia.device_classes()
    for claim in CLAIMS:
        for strategy in STRATEGIES:
            found = [
                answer(
                    Allocator(
                        slices,
                        classes,
                        allocated,
                        strategy,
                        share_id_factory=lambda: share_id(0),
                        scan_after=n,
                    ),
                    [claim],
                )
                for n in (0, 10**9)
            ]
            assert found[0] == found[1], (claim, strategy)


# --- the pools a node sees only through their counter slices ------------------------------------


def spoil(slices: list[Wire], node: str, how: str) -> list[Wire]:
    """The slices with one MIG node's pool made invalid (its counter sets renamed, so its
    devices draw on sets that do not exist) or incomplete (a device slice missing)."""
    out = copy.deepcopy(slices)
    mine = [s for s in out if s["spec"]["nodeName"] == node]
    if how == "invalid":
        for s in mine:
            for counter_set in s["spec"].get("sharedCounters", ()):
                counter_set["name"] += "-renamed"
        return out
    if how == "incomplete":
        gone = next(s for s in mine if s["spec"].get("devices"))
        return [s for s in out if s is not gone]
    return out


@MANY_NODES
@given(
    st.lists(st.sampled_from(["hgx", "shared", "mig"]), min_size=1, max_size=12),
    st.sampled_from(["valid", "invalid", "incomplete"]),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.integers(0, 2**16),
)
def test_a_node_lists_from_its_own_pools_what_upstream_pools_give(
    kinds: list[str], how: str, share: float, seed: int
) -> None:
    kinds = [*kinds, "mig"]
    spoiled = f"node-{len(kinds) - 1:02d}"
    slices = spoil(cluster(kinds), spoiled, how)
    allocated = held(kinds, random.Random(seed), share)
    allocator = Allocator(slices, nvidia.device_classes(), allocated, "topology")
    for name in allocator.node_names():
        full = allocator.catalog.pools(name)
        own = allocator.catalog.own_pools(name)
        # the usable pools, in the same order; what is left out is never usable there
        assert [p.id for p in own if p.usable] == [p.id for p in full if p.usable]
        own_ids = {p.id for p in own}
        left_out = [p for p in full if p.id not in own_ids]
        assert all(not p.usable for p in left_out)
        assert [p.id for p in own] == [p.id for p in full if p.id in own_ids]
        if name != spoiled:
            # 1.37: the counter slices of another node's pool are not this node's
            assert left_out == []
    if how == "valid":
        return
    # a request for all devices meets the spoiled pool on its node (and only there)
    every = wanted(1)
    every["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "All",
    }
    for strategy in STRATEGIES:
        fresh = Allocator(slices, nvidia.device_classes(), allocated, strategy)
        with pytest.raises(InvalidInputError, match=f"resource pool .*{spoiled}"):
            fresh.allocate([every], node=spoiled)


# --- counting pool by pool ----------------------------------------------------------------------


@MANY_NODES
@given(
    st.lists(st.sampled_from(["hgx", "shared", "mig"]), min_size=1, max_size=12),
    st.sampled_from(["valid", "invalid", "incomplete"]),
    st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    st.integers(0, 2**16),
)
def test_the_scan_never_counts_fewer_free_devices_than_a_node_lists(
    kinds: list[str], how: str, share: float, seed: int
) -> None:
    """What the scan counts free in a node's pools, without counters and with them, is an
    upper bound of what listing the node counts free (so a node it rules out could never
    take the request), and counters only lower the count: on valid, invalid and incomplete
    pools, with whole GPUs and MIG slices held."""
    kinds = [*kinds, "mig"]
    slices = spoil(cluster(kinds), f"node-{len(kinds) - 1:02d}", how)
    allocated = held(kinds, random.Random(seed), share)
    allocator = Allocator(slices, nvidia.device_classes(), allocated, "topology")
    for wire in CLAIMS:
        claim = allocator._prepare([wire])[0]
        alt = claim.requests[0].alternatives[0]
        found = allocator.node_filter._scan(alt, claim)
        for name in allocator.node_names():
            pools = allocator.catalog.pool_ids(name)
            rough = sum(
                allocator.node_filter._pool_free(alt, found, pool, exact=False) for pool in pools
            )
            exact = sum(
                allocator.node_filter._pool_free(alt, found, pool, exact=True) for pool in pools
            )
            listed = allocator.node_filter._free(alt, allocator.listed(alt, claim, name), name)
            assert rough >= exact >= listed, (name, wire)


@MANY_NODES
@given(
    st.lists(st.sampled_from(["hgx", "shared", "mig"]), min_size=2, max_size=24),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.integers(0, 2**16),
)
def test_topology_rules_out_nodes_without_mig_or_shares_at_once_only_when_right(
    kinds: list[str], share: float, seed: int
) -> None:
    """On a cluster of more nodes than it lists one by one, ``topology`` first asks whether
    any node without partitionable or shared devices has a device for the claim; when none
    has, it leaves them all out without counting them. It does so exactly when each of
    them would fail at once, and plans the nodes in the order of the full sort."""
    slices = cluster(kinds)
    allocated = held(kinds, random.Random(seed), share)
    classes = nvidia.device_classes()
    for claim in CLAIMS:
        parsed = [parse_resource_claim(claim)]

        def fresh(scan_after: int) -> Allocator:
            return Allocator(
                slices,
                classes,
                allocated,
                "topology",
                share_id_factory=lambda: share_id(0),
                scan_after=scan_after,
            )

        allocator = fresh(0)
        hopeless = allocator.node_filter.plain_nodes_hopeless(parsed)
        plain = [
            name for name in allocator.node_names() if not allocator.node_filter.flexible(name)
        ]
        reference = fresh(10**9)
        if hopeless:
            assert all(reference.node_filter._too_few(parsed, name) for name in plain)
        elif plain and "mig.nvidia.com" not in str(claim):
            assert not hopeless  # whole-GPU claims: plain nodes have their devices
        expected = full_sort(reference, [claim])
        assert allocator.search_order([claim]) == expected
        assert answer(allocator, [claim]) == answer(reference, [claim])


def test_a_mig_claim_on_a_large_cluster_counts_one_mig_node() -> None:
    """The case the shortcut is for: 40 plain nodes and 10 MIG nodes, nothing held; a MIG
    claim leaves the plain nodes out at once and counts (builds the pools of) only the MIG
    node it takes."""
    kinds = ["hgx"] * 40 + ["mig"] * 10
    allocator = Allocator(cluster(kinds), nvidia.device_classes(), [], "topology")
    found = allocator.allocate([CLAIMS[4]])
    assert found is not None and found[0].results[0].device.pool == "node-40"
    assert list(allocator.holdings.capacities) == ["node-40"]


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_a_mig_claim_on_a_cluster_of_mig_nodes_scans_only_once_a_node_failed(
    share: float,
) -> None:
    """No node without MIG or shares to leave out: ``topology`` lists its first MIG node, as
    first-fit would, and counts by the scan only once a node could not take the claim (a
    claim the first node takes scans nothing); the answers are those of an allocator that
    never scans."""
    kinds = ["mig"] * 20
    slices, classes = cluster(kinds), nvidia.device_classes()
    for seed in range(3):
        allocated = held(kinds, random.Random(seed), share)
        for claim in CLAIMS[4:6]:
            allocator = Allocator(slices, classes, allocated, "topology")
            never = Allocator(slices, classes, allocated, "topology", scan_after=10**9)
            assert answer(allocator, [claim]) == answer(never, [claim]), (seed, claim)
            if share == 0.0:
                assert not allocator.catalog.pool_scans
                assert list(allocator.holdings.capacities) == ["node-00"]


def test_a_cold_allocator_is_freed_without_the_garbage_collector() -> None:
    """An allocator and its caches (the catalog, the scan) hold no reference cycle: they go
    as soon as the last reference does, not at the collector's next full pass, which on a
    large inventory is a long pause."""
    kinds = ["hgx"] * 20 + ["mig"] * 4
    slices, classes = cluster(kinds), nvidia.device_classes()
    gc.disable()
    try:
        for claim in CLAIMS:
            allocator = Allocator(slices, classes, [], "topology", scan_after=0)
            allocator.allocate([claim])
            catalog = weakref.ref(allocator.catalog)
            holdings = weakref.ref(allocator.holdings)
            gone = weakref.ref(allocator)
            del allocator
            assert gone() is None and catalog() is None and holdings() is None, claim
    finally:
        gc.enable()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_scan_reads_no_counters_of_a_pool_that_publishes_more_slices_than_it_says(
    strategy: Strategy,
) -> None:
    """Pool p says 2 slices and publishes 3 (counters; node a's; node b's, whose device
    takes all of the counter and is held). Node a gathers its slice as the whole pool and
    sees all the counter left, so a0 is free there; the scan must not count less (it
    would read b0's use from the third slice) and skip node a."""
    pool = resource_pool("p", slice_count=2)

    def uses(amount: str) -> list[Wire]:
        return [device_counter_consumption("cs", {"mem": amount})]

    counters = counter_set("cs", {"mem": "2"})
    slices = [
        slice_with_counter_sets("p-counters", ALL_NODES, pool, DRIVER_X, counters),
        slice_with_devices("p-a", "a", pool, DRIVER_X, device("a0", consumes_counters=uses("1"))),
        slice_with_devices("p-b", "b", pool, DRIVER_X, device("b0", consumes_counters=uses("2"))),
    ]
    held = [allocated_claim("h", device_allocation_result("r", DRIVER_X, "p", "b0"))]
    want = [builders.claim("want", builders.request("r", "c"))]
    answers = {
        n: Allocator(slices, [device_class("c", DRIVER_X)], held, strategy, scan_after=n).allocate(
            want
        )
        for n in (0, 10**9)
    }
    assert [r.node for r in answers[10**9] or []] == ["a"]
    assert answers[0] == answers[10**9]


@given(
    st.one_of(
        st.just([None]), st.lists(st.sampled_from(["a", "b", "node-1", ""]), max_size=6).map(sorted)
    ),
    st.sets(st.sampled_from(["a", "b", "node-1", ""])),
    st.one_of(st.none(), st.sets(st.sampled_from(["a", "b", "node-1", ""]))),
)
def test_node_runs_give_every_node_in_the_order_of_its_bound(
    names: list[str | None], flexible: set[str], touched: set[str] | None
) -> None:
    """A cold call's runs of nodes (names in name order, as the allocator lists them), one
    after the other, are the nodes sorted by :func:`node_bound`, each run's prefix that of
    its nodes' bounds."""
    is_touched = None if touched is None else (lambda name: name in touched)
    runs = node_runs(names, lambda name: name in flexible, is_touched)
    bounds = {n: node_bound(n, touched is None or n not in touched, n in flexible) for n in names}
    assert [n for _, run in runs for n in run] == sorted(names, key=lambda n: bounds[n])
    assert all(bounds[n][:4] == prefix for prefix, run in runs for n in run)

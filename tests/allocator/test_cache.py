"""The allocator's cache: an allocator that reuses an :class:`AllocatorCache` answers exactly
as a fresh one does, whatever changed in between (slices, allocated claims, claims).

The property test replays a sequence of calls on one cache — the same world, claims that
come and go, other slices, copies of the same objects — and compares each answer (or
error) with a fresh allocator's. The unit tests pin the cases the cache shortcuts: a node
skipped for too few devices, an impossible request answered from the bound over all
nodes, a CEL error that must still be raised, selector results shared between devices
that publish the same values.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.allocator.core import SCAN_AFTER
from dra_jupyter.errors import InvalidInputError

from .builders import (
    Wire,
    allocated_claim,
    claim,
    device,
    device_allocation_result,
    device_class,
    match_attribute,
    request,
    slice_with_devices,
)
from .test_properties import PROFILE, World, as_dicts, class_objects, share_id, worlds

Strategy = Literal["first-fit", "topology"]
DRIVER = "d.example.com"


def outcome(call: Callable[[], object]) -> object:
    """The answer, or the error's type and message: what must not differ."""
    try:
        result = call()
    except InvalidInputError as err:
        return (type(err).__name__, str(err))
    assert isinstance(result, list | type(None))
    return as_dicts(result)


def allocate(
    slices: Sequence[Wire],
    held: Sequence[Wire],
    claims: list[Wire],
    strategy: Strategy,
    cache: AllocatorCache | None = None,
    scan_after: int = SCAN_AFTER,
) -> object:
    counter = itertools.count()

    def call() -> object:
        return Allocator(
            slices,
            class_objects(),
            held,
            strategy,
            share_id_factory=lambda: share_id(next(counter)),
            cache=cache,
            scan_after=scan_after,
        ).allocate(claims)

    return outcome(call)


def held_from(results: object, name: str) -> list[Wire]:
    """The first result of an answer as an allocated claim, if there is one."""
    if not isinstance(results, list) or not results:
        return []
    claim_wire: Wire = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": results[0]},
    }
    return [claim_wire]


@PROFILE
@given(
    worlds(), worlds(), st.sampled_from(["first-fit", "topology"]), st.sampled_from([0, SCAN_AFTER])
)
def test_a_reused_cache_answers_like_a_fresh_allocator(
    world: World, other: World, strategy: Strategy, scan_after: int
) -> None:
    """``scan_after=0``: the cached allocator rules nodes out by the scan from the first node
    on (the random worlds have fewer nodes than are listed one by one by default), while
    the fresh one it is compared with lists them."""
    cache = AllocatorCache()
    claims = world.claim_objects()
    held = world.held_claims()
    steps: list[tuple[Sequence[Wire], list[Wire], list[Wire]]] = [
        (world.slices, held, claims),
        (world.slices, held, claims),  # the same objects again: everything reused
        (world.slices, held[1:], claims),  # a claim went away
        (world.slices, held[1:], other.claim_objects()),  # other claims, same allocations
        (other.slices, other.held_claims(), claims),  # another inventory
        (copy.deepcopy(world.slices), copy.deepcopy(held), claims),  # equal, new objects
    ]
    first: object = None
    for i, (slices, allocated, wanted) in enumerate(steps):
        expected = allocate(slices, allocated, wanted, strategy)
        found = allocate(slices, allocated, wanted, strategy, cache, scan_after)
        assert found == expected, f"step {i}"
        if i == 0:
            first = expected
    # a claim came: the first answer, now held, on the same slices
    grown = held + held_from(first, "came")
    expected = allocate(world.slices, grown, claims, strategy)
    assert allocate(world.slices, grown, claims, strategy, cache, scan_after) == expected


def gpu(name: str, **attributes: Any) -> Wire:
    return device(name, attributes=attributes, capacity={"memory": "80Gi"})


def node_slice(node: str, *devices: Wire) -> Wire:
    return slice_with_devices(f"{node}-slice", node, node, DRIVER, *devices)


def held_gpu(name: str, node: str, dev: str) -> Wire:
    return allocated_claim(name, device_allocation_result("r", DRIVER, node, dev))


CLASSES = [device_class("c", DRIVER)]


def run(
    slices: list[Wire],
    claims: list[Wire],
    held: Sequence[Wire] = (),
    strategy: Strategy = "first-fit",
    cache: AllocatorCache | None = None,
) -> list[tuple[str, str]] | None:
    found = Allocator(slices, CLASSES, held, strategy, cache=cache).allocate(claims)
    if found is None:
        return None
    return [(r.device.pool, r.device.device) for result in found for r in result.results]


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
def test_a_claim_that_comes_and_goes_is_seen(strategy: Strategy) -> None:
    slices = [node_slice("n1", gpu("g0"), gpu("g1")), node_slice("n2", gpu("g0"))]
    want = [claim("c1", request("r", "c", 2))]
    cache = AllocatorCache()
    held = [held_gpu("h", "n1", "g1")]
    assert run(slices, want, held, strategy, cache) is None  # n1 has one left, n2 one
    assert run(slices, want, [], strategy, cache) == [("n1", "g0"), ("n1", "g1")]  # h went
    assert run(slices, want, held, strategy, cache) is None  # h came back


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
@pytest.mark.parametrize("count", [1, 2])
def test_a_node_ruled_out_by_the_scan_is_counted_again_when_its_devices_are_freed(
    strategy: Strategy, count: int
) -> None:
    """20 nodes (more than are listed one by one before the scan), every GPU held: no
    node can take the claim, most of them ruled out by the scan without gathering their
    pools. When n18's claims go, n18 is counted again (its answer was not kept)."""
    gpus = [f"g{i}" for i in range(count)]
    slices = [node_slice(f"n{i:02d}", *(gpu(g) for g in gpus)) for i in range(20)]
    held = [held_gpu(f"h{i:02d}{g}", f"n{i:02d}", g) for i in range(20) for g in gpus]
    want = [claim("c1", request("r", "c", count))]
    cache = AllocatorCache()
    assert run(slices, want, held, strategy, cache) is None
    freed = [h for h in held if not h["metadata"]["name"].startswith("h18")]
    assert run(slices, want, freed, strategy, cache) == [("n18", g) for g in gpus]
    assert run(slices, want, freed, strategy) == [("n18", g) for g in gpus]  # as a fresh one


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
def test_new_slices_replace_what_was_learned_from_the_old(strategy: Strategy) -> None:
    want = [claim("c1", request("r", "c", 1, selectors=[f"device.attributes['{DRIVER}'].m > 1"]))]
    cache = AllocatorCache()
    small = [node_slice("n1", gpu("g0", m=1))]
    assert run(small, want, (), strategy, cache) is None
    assert run(small, want, (), strategy, cache) is None  # from the bound over all nodes
    big = [node_slice("n1", gpu("g0", m=1)), node_slice("n2", gpu("g0", m=2))]
    assert run(big, want, (), strategy, cache) == [("n2", "g0")]
    assert run(small, want, (), strategy, cache) is None


def test_an_equal_copy_of_the_inputs_reuses_the_catalog_and_a_changed_one_does_not() -> None:
    """The cache compares its inputs as tuples: the same objects (by identity, in C), or
    objects equal to them (the same slices read again), are the same catalog; a slice that
    changed is a new one."""
    slices = [node_slice("n1", gpu("g0", m=1)), node_slice("n2", gpu("g0", m=2))]
    cache = AllocatorCache()
    first = cache.catalog(slices, CLASSES)
    assert cache.catalog(list(slices), CLASSES) is first
    assert cache.catalog(copy.deepcopy(slices), copy.deepcopy(CLASSES)) is first
    changed = copy.deepcopy(slices)
    changed[1]["spec"]["devices"][0]["attributes"]["m"] = {"int": 3}
    rebuilt = cache.catalog(changed, CLASSES)
    assert rebuilt is not first
    want = [claim("c1", request("r", "c", 1, selectors=[f"device.attributes['{DRIVER}'].m > 2"]))]
    assert run(changed, want, cache=cache) == [("n2", "g0")]
    assert run(slices, want, cache=cache) is None


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
def test_a_cel_error_is_raised_even_when_a_later_request_cannot_fit(strategy: Strategy) -> None:
    # r0's selector fails on g0 (no attribute "x"); r1 wants more devices than exist. The
    # search reaches g0 for r0 before it learns that r1 cannot fit, so it raises, and
    # skipping the node for r1's sake would hide the error.
    slices = [node_slice("n1", gpu("g0"), gpu("g1", x=1))]
    want = [
        claim(
            "c1",
            request("r0", "c", 1, selectors=[f"device.attributes['{DRIVER}'].x == 1"]),
            request("r1", "c", 5),
        )
    ]
    cache = AllocatorCache()
    for _ in range(2):
        with pytest.raises(InvalidInputError, match="no such key: x"):
            run(slices, want, (), strategy, cache)


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
def test_a_node_where_a_constraint_cannot_hold_is_skipped_like_the_search_does(
    strategy: Strategy,
) -> None:
    root = f"{DRIVER}/root"
    slices = [
        node_slice("n1", gpu("g0", root="a"), gpu("g1", root="b")),
        node_slice("n2", gpu("g0", root="a"), gpu("g1", root="a")),
    ]
    want = [claim("c1", request("r", "c", 2), constraints=[match_attribute(root)])]
    cache = AllocatorCache()
    for _ in range(2):
        assert run(slices, want, (), strategy, cache) == [("n2", "g0"), ("n2", "g1")]
    held = [held_gpu("h", "n2", "g1")]
    assert run(slices, want, held, strategy, cache) is None


def test_devices_with_equal_read_values_share_a_result_but_true_is_not_1() -> None:
    # x is the bool true on g0 and the int 1 on g1: Python finds them equal, CEL does not.
    slices = [node_slice("n1", gpu("g0", x=True), gpu("g1", x=1), gpu("g2", x=True))]
    selector = f"device.attributes['{DRIVER}'].x == 1"
    want = [claim("c1", request("r", "c", 1, selectors=[selector]))]
    assert run(slices, want) == [("n1", "g1")]
    two = [claim("c1", request("r", "c", 2, selectors=[selector.replace("== 1", "== true")]))]
    assert run(slices, two) == [("n1", "g0"), ("n1", "g2")]

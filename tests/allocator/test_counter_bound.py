"""The counters' bound of the search (:mod:`~dra_jupyter.allocator.bounds`): it cuts the
branches where the counters left cannot hold the devices still needed, and nothing else, so
the answer is the one the search without it finds, in far fewer steps where it applies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given

from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator import search as search_module
from dra_jupyter.inventory import simulated

from .test_properties import PROFILE, World, as_dicts, make_allocator, worlds

Wire = dict[str, Any]


def mig_claim(requests: int, constraints: list[Wire]) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": "wide"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": f"r{i}", "exactly": {"deviceClassName": "mig.nvidia.com"}}
                    for i in range(requests)
                ],
                "constraints": constraints,
            }
        },
    }


class Steps:
    """The steps of every search made while it is counting."""

    def __init__(self) -> None:
        self.searches: list[search_module.Search] = []

    @property
    def total(self) -> int:
        return sum(s.steps for s in self.searches)


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[Steps]:
    counted = Steps()
    made = search_module.Search.__init__

    def init(self: search_module.Search, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        counted.searches.append(self)

    monkeypatch.setattr(search_module.Search, "__init__", init)
    yield counted


def h200_mig() -> Allocator:
    inventory = simulated.load("h200-mig")
    return Allocator(list(inventory.slices), list(inventory.device_classes))


@pytest.mark.parametrize(
    ("requests", "constraints"),
    [
        (20, [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]),  # 8 memory slices
        (20, []),
        (8, []),  # 7 decoders: each slice takes one, so the eighth fails
    ],
)
def test_more_mig_slices_than_the_counters_hold_fail_at_once(
    steps: Steps, requests: int, constraints: list[Wire]
) -> None:
    """An H200 in MIG mode lists 25 slices, of which 7 fit at once. Without the bound the
    search tried the combinations: 20 requests took seconds of CPU (thousands of steps)."""
    assert h200_mig().allocate([mig_claim(requests, constraints)]) is None
    assert steps.total <= 2 * requests  # cut at the first request of each search


def test_as_many_slices_as_fit_are_still_found() -> None:
    results = h200_mig().allocate([mig_claim(7, [])])
    assert results is not None
    assert len(results[0].results) == 7


@PROFILE
@given(worlds())
def test_the_bound_never_changes_the_answer(world: World) -> None:
    """With and without the bound (MIG-like counters, shared devices, constraints, holders),
    the same allocation, share IDs and all, or none."""
    claims = world.claim_objects()
    bounded = as_dicts(make_allocator(world, "first-fit").allocate(claims))
    original = search_module.Search._bound_counters
    search_module.Search._bound_counters = lambda self, ci, ri: True  # type: ignore[method-assign]
    try:
        unbounded = as_dicts(make_allocator(world, "first-fit").allocate(claims))
    finally:
        search_module.Search._bound_counters = original  # type: ignore[method-assign]
    assert bounded == unbounded

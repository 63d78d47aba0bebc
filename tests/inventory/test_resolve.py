"""A device named by a person: in full, by its pool and name, or by its name where that is
unique; an ambiguous name says what it could mean (issue 42, item 15: the README's
`dra-jupyter taint gpu-3` could not run as written on two nodes)."""

from __future__ import annotations

import pytest

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_device
from dra_jupyter.kube.simulate import simulate

pytestmark = pytest.mark.pure


def nodes(count: int) -> Inventory:
    one = simulated.load("h200-8x")
    cluster = simulate(one, count)
    return Inventory(
        name="cluster",
        description=f"{count} nodes",
        slices=cluster.slices,
        device_classes=cluster.device_classes,
        simulated=True,
        source="test",
    )


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("gpu.nvidia.com/gpu-node-2/gpu-3", "gpu.nvidia.com/gpu-node-2/gpu-3"),
        ("gpu-node-2/gpu-3", "gpu.nvidia.com/gpu-node-2/gpu-3"),
    ],
)
def test_a_device_is_named_in_full_or_by_its_pool(name: str, key: str) -> None:
    assert resolve_device(nodes(2), name, what="taint") == key


def test_a_unique_short_name_is_enough() -> None:
    assert resolve_device(nodes(1), "gpu-3") == "gpu.nvidia.com/gpu-node-1/gpu-3"


def test_an_ambiguous_name_says_what_it_could_mean() -> None:
    with pytest.raises(InvalidInputError) as two:
        resolve_device(nodes(2), "gpu-3", what="taint")
    assert str(two.value) == (
        "taint: 'gpu-3' is ambiguous: it is gpu.nvidia.com/gpu-node-1/gpu-3, "
        "gpu.nvidia.com/gpu-node-2/gpu-3; name one with its pool, e.g. 'gpu-node-1/gpu-3'"
    )
    with pytest.raises(InvalidInputError, match=r"gpu-node-3/gpu-3 and 2 more; name one"):
        resolve_device(nodes(5), "gpu-3", what="taint")

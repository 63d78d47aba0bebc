"""What the daemon reads of its inventory's slices, as Kubernetes 1.37 reads them."""

from __future__ import annotations

from fractions import Fraction

from dra_jupyter.inventory.base import Inventory
from dra_jupyter.service.args import device_capacities


def test_a_capacity_without_a_value_is_zero() -> None:
    """kube-apiserver takes a capacity with no ``value`` (or ``null``), and the allocator
    reads it as zero; so does the daemon's count of shares (it crashed: KeyError)."""
    device = {
        "name": "gpu-0",
        "capacity": {"memory": {"value": "80Gi"}, "shares": {}, "slots": {"value": None}},
    }
    inventory = Inventory(
        "one",
        "one GPU",
        ({"spec": {"driver": "gpu.example.com", "pool": {"name": "p"}, "devices": [device]}},),
        (),
        True,
        "file:one",
    )
    assert device_capacities(inventory) == {
        "gpu.example.com/p/gpu-0": {
            "memory": Fraction(80 * 2**30),
            "shares": Fraction(0),
            "slots": Fraction(0),
        }
    }

"""The placement policies; all but the bound place claims with the real :class:`Allocator`.

* ``first-fit``: upstream's choice — nodes in name order, the first devices that fit;
* ``spread``: a device-blind scheduler in front of first-fit, as a stock kube-scheduler
  places pods today: among the nodes where the claim fits, the one with the least CPU
  requested (``NodeResourcesFit`` with ``LeastAllocated``, its default; devices are not
  scored), then first-fit on that node;
* ``topology``: our ``topology`` strategy over all nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from benchmarks.placement.cluster import Cluster
from benchmarks.placement.trace import Arrival
from dra_jupyter.allocator import Allocator
from dra_jupyter.model.objects import AllocationResult, ResourceClaim


@dataclass(frozen=True)
class Held:
    """A served claim that has not left yet: its arrival and the claim with its allocation."""

    arrival: Arrival
    claim: ResourceClaim

    @property
    def allocation(self) -> AllocationResult:
        assert self.claim.allocation is not None
        return self.claim.allocation


CPUS_PER_GPU = 16  # what a pod asks for per GPU-equivalent; nodes have 8 GPUs' worth


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def place(self, arrival: Arrival, held: Sequence[Held]) -> AllocationResult | None:
        """Where the claim goes given the claims held now, or None if it is not served."""


@dataclass
class AllocatorPolicy:
    """Every node, in the allocator's own order (name order for first-fit)."""

    name: str
    cluster: Cluster
    strategy: str
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def allocator(self, held: Sequence[Held]) -> Allocator:
        return Allocator(
            self.cluster.slices,
            self.cluster.classes,
            [h.claim for h in held],
            strategy="topology" if self.strategy == "topology" else "first-fit",
            share_id_factory=lambda: f"share-{next(self._ids)}",
        )

    def place(self, arrival: Arrival, held: Sequence[Held]) -> AllocationResult | None:
        found = self.allocator(held).allocate([arrival.claim])
        return None if found is None else found[0]


@dataclass
class SpreadPolicy(AllocatorPolicy):
    """Least-requested node first (ties by name), then first-fit on it."""

    requested: dict[str, float] = field(default_factory=dict)

    def place(self, arrival: Arrival, held: Sequence[Held]) -> AllocationResult | None:
        allocator = self.allocator(held)
        cpus = dict.fromkeys(self.cluster.names, 0.0)
        for h in held:
            node = h.allocation.node
            assert node is not None
            cpus[node] += float(h.arrival.kind.gpus) * CPUS_PER_GPU
        for node in sorted(self.cluster.names, key=lambda n: (cpus[n], n)):
            found = allocator.allocate([arrival.claim], node=node)
            if found is not None:
                return found[0]
        return None


def make(name: str, cluster: Cluster) -> Policy:
    if name == "spread":
        return SpreadPolicy(name, cluster, "first-fit")
    return AllocatorPolicy(name, cluster, name)

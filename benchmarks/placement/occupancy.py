"""What is in use on the cluster at one moment, per physical GPU, from the held allocations."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from benchmarks.placement.cluster import GPUS_PER_NODE, Cluster
from dra_jupyter.model.objects import AllocationResult

ALL_SLICES = frozenset(range(8))
WINDOWS_3G = (frozenset(range(4)), frozenset(range(4, 8)))  # the H200's 3g placements


@dataclass(frozen=True)
class Occupancy:
    """Memory slices in use per ``(node, gpu)``; a whole GPU or a share of it uses all 8."""

    used: dict[tuple[str, int], frozenset[int]]

    @classmethod
    def of(cls, cluster: Cluster, allocations: Iterable[AllocationResult]) -> Occupancy:
        used: dict[tuple[str, int], set[int]] = {}
        for allocation in allocations:
            for result in allocation.results:
                info = cluster.devices[result.device]
                used.setdefault((info.node, info.gpu), set()).update(info.memory_slices)
        return cls({k: frozenset(v) for k, v in used.items()})

    def busy_gpus(self) -> int:
        return len(self.used)

    def free_gpus(self, node: str) -> int:
        return sum(1 for g in range(GPUS_PER_NODE) if (node, g) not in self.used)

    def free_nodes(self, cluster: Cluster) -> int:
        """Nodes with nothing on them (what an 8-GPU claim needs)."""
        return sum(1 for n in cluster.names if self.free_gpus(n) == GPUS_PER_NODE)

    def stranded_gpus(self, cluster: Cluster) -> int:
        """Free whole GPUs on nodes that are not wholly free: of no use to an 8-GPU claim."""
        return sum(f for n in cluster.names if (f := self.free_gpus(n)) < GPUS_PER_NODE)

    def stranded_mig_slices(self, cluster: Cluster) -> int:
        """Free memory slices on MIG GPUs that lie in no free 3g placement."""
        total = 0
        for node in cluster.names:
            if cluster.kind(node) != "mig":
                continue
            for g in range(GPUS_PER_NODE):
                used = self.used.get((node, g), frozenset())
                free = ALL_SLICES - used
                usable = set().union(*(w for w in WINDOWS_3G if w <= free))
                total += len(free - usable)
        return total

"""The simulated cluster: HGX H200 nodes of 8 GPUs, some in MIG mode, some with shared GPUs.

Three kinds of node, each with 8 H200s on 4 PCIe roots (2 GPUs each) and 2 NUMA nodes:

* ``gpu``: whole GPUs only (``nvidia.hgx_node``);
* ``mig``: GPUs in DynamicMIG form (``mig.h200_mig_node``): every GPU is offered whole *or*
  as any set of MIG placements its counters allow (the H200's real placements);
* ``shared``: GPUs with the NVIDIA driver's consumable shares (``nvidia.hgx_node(...,
  shares=4)``): up to 4 claims hold a GPU at once, each with the memory it asks for; a
  claim that asks for no memory takes all of it.

Nodes are named ``node-00`` ... in name order; the MIG and shared nodes are the last ones
(a name-order first-fit fills whole-GPU nodes first).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model.objects import DeviceClass, DeviceID, ResourceSlice
from dra_jupyter.model.parse import parse_device_class, parse_many, parse_resource_slice

Wire = dict[str, Any]
GPUS_PER_NODE = 8
SHARES_PER_GPU = 4
SHARED_MEMORY_MI = 143771  # the H200's memory, what a share's memory comes out of
ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"


@dataclass(frozen=True)
class DeviceInfo:
    """Where a device sits, and which memory slices of its GPU it covers (MIG)."""

    node: str
    gpu: int  # index of the physical GPU on the node
    pcie_root: str
    numa_node: int
    memory_slices: tuple[int, ...]  # (0..7) for a whole GPU, its placement for a MIG device


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of 8 GPUs: the last ``mig_nodes + shared_nodes`` are MIG, then shared."""

    nodes: int = 16
    mig_nodes: int = 2
    shared_nodes: int = 2

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.mig_nodes + self.shared_nodes > self.nodes:
            raise ValueError("need at least one node and no more MIG/shared nodes than nodes")

    @property
    def names(self) -> list[str]:
        return [f"node-{i:02d}" for i in range(self.nodes)]

    def kind(self, node: str) -> str:
        i = self.names.index(node)
        plain = self.nodes - self.mig_nodes - self.shared_nodes
        return "gpu" if i < plain else "mig" if i < plain + self.mig_nodes else "shared"

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    @cached_property
    def wire_slices(self) -> list[Wire]:
        out: list[Wire] = []
        for name in self.names:
            kind = self.kind(name)
            if kind == "mig":
                out.extend(mig.h200_mig_node(name, gpus=GPUS_PER_NODE))
            elif kind == "shared":
                out.append(nvidia.hgx_node(name, shares=SHARES_PER_GPU))
            else:
                out.append(nvidia.hgx_node(name))
        return out

    @cached_property
    def slices(self) -> list[ResourceSlice]:
        return parse_many(self.wire_slices, parse_resource_slice, ResourceSlice)

    @cached_property
    def classes(self) -> list[DeviceClass]:
        return parse_many(nvidia.device_classes(), parse_device_class, DeviceClass)

    @cached_property
    def devices(self) -> dict[DeviceID, DeviceInfo]:
        """Every device of the cluster, with its GPU, PCIe root, NUMA node and memory slices."""
        out: dict[DeviceID, DeviceInfo] = {}
        for s in self.slices:
            node = s.node_selection.node_name if s.node_selection else None
            assert node is not None
            for d in s.devices:
                gpu = int(d.name.split("-")[1])
                root = d.attributes[ROOT]
                numa = d.attributes[NUMA]
                if "-mig-" in d.name:
                    profile = d.attributes["profile"]
                    start = int(d.name.rsplit("-", 1)[1])
                    size = next(
                        size
                        for p in mig.H200_PROFILES
                        if p.name == profile
                        for s0, size in p.placements
                        if s0 == start
                    )
                    covered = tuple(range(start, start + size))
                else:
                    covered = tuple(range(GPUS_PER_NODE))
                out[DeviceID(s.driver, s.pool, d.name)] = DeviceInfo(
                    node, gpu, str(root), int(str(numa)), covered
                )
        return out

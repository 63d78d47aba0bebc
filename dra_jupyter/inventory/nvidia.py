"""ResourceSlices and DeviceClasses in the shape of the NVIDIA DRA driver (``gpu.nvidia.com``).

Attribute names, types and device names follow ``dra-driver-nvidia-gpu`` (full GPUs
``gpu-<minor>`` with ``type``, ``uuid``, ``productName``, ``brand``, ``architecture``,
versions as semver, the standard ``resource.kubernetes.io`` PCI and NUMA attributes,
capacity ``memory``), so selectors written for real clusters work unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_jupyter.inventory.base import node_slice

DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class GpuModel:
    product_name: str
    architecture: str
    compute_capability: str  # semver
    memory: str  # a quantity
    brand: str = "Nvidia"


H200 = GpuModel("NVIDIA H200", "Hopper", "9.0.0", "143771Mi")  # 150754820096 bytes, as NVML reports
H100_SXM = GpuModel("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "81559Mi")


@dataclass(frozen=True)
class GpuPlacement:
    """Where one GPU sits: its PCI address, PCIe root complex and NUMA node."""

    pci_bus_id: str
    pcie_root: str
    numa_node: int | None


def gpu_uuid(node: str, minor: int) -> str:
    """A stable, made-up GPU UUID for a simulated GPU."""
    h = hashlib.sha256(f"{node}/{minor}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_device(
    node: str,
    minor: int,
    model: GpuModel,
    placement: GpuPlacement,
    *,
    driver_version: str = "580.159.4",
    cuda_driver_version: str = "13.0.0",
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu_uuid(node, minor)},
        "productName": {"string": model.product_name},
        "brand": {"string": model.brand},
        "architecture": {"string": model.architecture},
        "cudaComputeCapability": {"version": model.compute_capability},
        "driverVersion": {"version": driver_version},
        "cudaDriverVersion": {"version": cuda_driver_version},
        "resource.kubernetes.io/pciBusID": {"string": placement.pci_bus_id},
        "resource.kubernetes.io/pcieRoot": {"string": placement.pcie_root},
    }
    if placement.numa_node is not None:
        attributes["resource.kubernetes.io/numaNode"] = {"int": placement.numa_node}
    return {
        "name": f"gpu-{minor}",
        "attributes": attributes,
        "capacity": {"memory": {"value": model.memory}},
    }


def consumable_shares(device: dict[str, Any], shares: int) -> dict[str, Any]:
    """The GPU as the NVIDIA driver publishes it with ``--consumable-shares=N`` (gate
    ``ConsumableShares``): several claims may hold it at once (``allowMultipleAllocations``),
    each taking the memory it asks for (any multiple of 1Mi; all of it when it names none)
    and one of ``shares`` slots, so at most ``shares`` claims share the GPU."""
    memory = device["capacity"]["memory"]["value"]
    return {
        **device,
        "allowMultipleAllocations": True,
        "capacity": {
            "memory": {
                "value": memory,
                # the API server requires a default beside validRange: all of it
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
            "shares": {"value": str(shares), "requestPolicy": {"default": "1"}},
        },
    }


def gpu_slice(node: str, devices: Sequence[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    return node_slice(DRIVER, node, list(devices), generation)


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses the NVIDIA driver's Helm chart installs for GPUs and MIG devices."""

    def cls(name: str, kind: str, extended: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' && "
                        f"device.attributes['{DRIVER}'].type == '{kind}'"
                    }
                }
            ]
        }
        if extended:
            spec["extendedResourceName"] = extended
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": spec,
        }

    return [cls("gpu.nvidia.com", "gpu", "nvidia.com/gpu"), cls("mig.nvidia.com", "mig")]


def hgx_node(node: str, model: GpuModel = H200, *, shares: int = 0) -> dict[str, Any]:
    """An 8-GPU HGX node: 2 NUMA nodes, 4 PCIe root complexes with 2 GPUs each; with
    ``shares``, every GPU is shared by up to that many claims (:func:`consumable_shares`)."""
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    roots = ["15", "15", "37", "37", "97", "97", "b7", "b7"]
    devices = [
        gpu_device(
            node,
            i,
            model,
            GpuPlacement(f"0000:{bus}:00.0", f"pci0000:{root}", 0 if i < 4 else 1),
        )
        for i, (bus, root) in enumerate(zip(buses, roots, strict=True))
    ]
    if shares:
        devices = [consumable_shares(d, shares) for d in devices]
    return gpu_slice(node, devices)

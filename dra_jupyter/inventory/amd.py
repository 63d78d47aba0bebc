"""ResourceSlices and DeviceClasses in the shape of the AMD GPU DRA driver (``gpu.amd.com``).

Attribute names, types and device names follow ``ROCm/k8s-gpu-dra-driver``
(``cmd/gpu-kubeletplugin/deviceinfo.go``, ``AmdGpuInfo.GetDevice``; values as in its
``docs/demo.md`` ResourceSlice of an MI300X): full GPUs named ``gpu-<cardIndex>-<renderIndex>``
with ``type: amdgpu``, ``pciAddr``, ``cardIndex`` and ``renderIndex`` (int), ``deviceID``
(the KFD ``unique_id``, a decimal string, the same for every partition of one GPU),
``family`` (``AI`` for the GFX9 family of MI300X), ``productName`` (sysfs ``product_name``
with spaces turned into ``_``), ``driverVersion`` (version), ``driverSrcVersion``,
``partitionProfile`` (``<compute>_<memory>`` partition mode, ``spx_nps1`` when whole), the
standard ``resource.kubernetes.io/pcieRoot``; capacity ``memory`` (bytes of VRAM as KFD
reports them), ``computeUnits`` and ``simdUnits``.

NUMA: the driver's later versions publish ``numaNode`` (int, in the ``gpu.amd.com``
domain); this module publishes it and also the standard ``resource.kubernetes.io/numaNode``
(KEP-6072, as the NVIDIA driver does), so ``matchAttribute`` on NUMA works the same across
vendors and the allocator's topology strategy sees the AMD NUMA nodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_jupyter.inventory.base import node_slice

DRIVER = "gpu.amd.com"


@dataclass(frozen=True)
class AmdGpuModel:
    product_name: str
    family: str
    memory: str  # a quantity
    compute_units: int
    simd_units: int
    partition_profile: str = "spx_nps1"


# What the driver publishes for an MI300X OAM module in SPX/NPS1 mode (its docs/demo.md):
# 196592Mi is the VRAM KFD reports, 16Mi short of the 192Gi on the box.
MI300X = AmdGpuModel("AMD_Instinct_MI300X_OAM", "AI", "196592Mi", 304, 1216)


@dataclass(frozen=True)
class AmdPlacement:
    """Where one GPU sits: its DRM card and render minors, PCI address, root and NUMA node."""

    card_index: int
    render_index: int
    pci_addr: str
    pcie_root: str
    numa_node: int


def kfd_unique_id(node: str, card_index: int) -> str:
    """A stable, made-up KFD ``unique_id`` (a 64-bit number) for a simulated GPU."""
    return str(int(hashlib.sha256(f"{node}/card{card_index}".encode()).hexdigest()[:16], 16))


def amd_gpu_device(
    node: str,
    placement: AmdPlacement,
    model: AmdGpuModel = MI300X,
    *,
    driver_version: str = "6.12.12",
    driver_src_version: str = "7AA72EC2C8F513519BE86FD",
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "amdgpu"},
        "pciAddr": {"string": placement.pci_addr},
        "cardIndex": {"int": placement.card_index},
        "renderIndex": {"int": placement.render_index},
        "deviceID": {"string": kfd_unique_id(node, placement.card_index)},
        "family": {"string": model.family},
        "productName": {"string": model.product_name},
        "driverVersion": {"version": driver_version},
        "driverSrcVersion": {"string": driver_src_version},
        "partitionProfile": {"string": model.partition_profile},
        "numaNode": {"int": placement.numa_node},
        "resource.kubernetes.io/pcieRoot": {"string": placement.pcie_root},
        "resource.kubernetes.io/numaNode": {"int": placement.numa_node},
    }
    return {
        "name": f"gpu-{placement.card_index}-{placement.render_index}",
        "attributes": attributes,
        "capacity": {
            "memory": {"value": model.memory},
            "computeUnits": {"value": str(model.compute_units)},
            "simdUnits": {"value": str(model.simd_units)},
        },
    }


def amd_slice(node: str, devices: Sequence[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    return node_slice(DRIVER, node, list(devices), generation)


def mi300x_node(node: str, model: AmdGpuModel = MI300X) -> dict[str, Any]:
    """An 8-GPU MI300X platform: 2 sockets (NPS1: one NUMA node each), every GPU behind its
    own PCIe root complex, 4 per socket."""
    roots = ["00", "20", "40", "60", "80", "a0", "c0", "e0"]
    buses = ["05", "26", "46", "65", "85", "a6", "c6", "e5"]
    devices = [
        amd_gpu_device(
            node,
            AmdPlacement(i, 128 + i, f"0000:{bus}:00.0", f"pci0000:{root}", 0 if i < 4 else 1),
            model,
        )
        for i, (bus, root) in enumerate(zip(buses, roots, strict=True))
    ]
    return amd_slice(node, devices)


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClass the AMD driver's chart installs (there as v1beta1; here as v1)."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        }
    ]

"""ResourceSlices and DeviceClasses in the shape of the Google TPU DRA driver (``tpu.google.com``).

Attribute names, types and device names follow ``kubernetes-sigs/dra-driver-google-tpu``
(``cmd/tpu-dra-kubeletplugin/manager.go``, ``AllocatableDevice.GetDevice``): one device per
chip, named after its device file (``accel0`` ... ``accel7``; numeric names under
``/dev/vfio`` on hosts whose chips are bound to VFIO), with ``index`` (int), ``uuid``
(``tpu-<uuid>``), ``tpuGen``, ``brand``, ``accelerator`` (the node's accelerator label),
``chipCount`` (int, chips of the host) and ``topology`` (string, when the node knows it).
The driver publishes **no capacity** and no ``resource.kubernetes.io`` PCIe/NUMA
attributes, so neither does this module: a claim asks for the chips by count or with
``allocationMode: All`` (the driver's demo claims do the latter; libtpu wants all chips
of a host in one container).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from dra_jupyter.inventory.base import node_slice

DRIVER = "tpu.google.com"


@dataclass(frozen=True)
class TpuHost:
    """One TPU host type: what the node labels say about it."""

    tpu_gen: str  # what the driver derives from the accelerator label
    accelerator: str  # cloud.google.com/gke-tpu-accelerator
    chip_count: int  # cloud.google.com/gke-accelerator-count
    topology: str  # cloud.google.com/gke-tpu-topology


# ct5lp-hightpu-8t: a single-host TPU v5e slice of 8 chips in a 2x4 torus.
V5E_8 = TpuHost("v5litepod", "tpu-v5-lite-podslice", 8, "2x4")


def tpu_uuid(node: str, device: str) -> str:
    """A stable ``tpu-<uuid>`` for a chip, from the same seed as the driver's.

    The driver seeds Go's ``math/rand`` with a hash of ``<node>/<device file>``; the
    bytes differ here (SHA-256), but the UUID is just as stable and unique per chip.
    """
    h = hashlib.sha256(f"{node}/{device}".encode()).hexdigest()
    return f"tpu-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def tpu_device(node: str, index: int, host: TpuHost = V5E_8) -> dict[str, Any]:
    name = f"accel{index}"
    attributes: dict[str, Any] = {
        "index": {"int": index},
        "uuid": {"string": tpu_uuid(node, name)},
        "tpuGen": {"string": host.tpu_gen},
        "brand": {"string": "Google"},
        "accelerator": {"string": host.accelerator},
        "chipCount": {"int": host.chip_count},
    }
    if host.topology:
        attributes["topology"] = {"string": host.topology}
    return {"name": name, "attributes": attributes}


def tpu_node(node: str, host: TpuHost = V5E_8, generation: int = 1) -> dict[str, Any]:
    """The one ResourceSlice of a TPU host: a device per chip, pool named after the node."""
    devices = [tpu_device(node, i, host) for i in range(host.chip_count)]
    return node_slice(DRIVER, node, devices, generation)


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClass the TPU driver's chart installs: every device of the driver."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]

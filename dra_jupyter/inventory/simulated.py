"""Bundled simulated inventories, selectable by name, and inventories read from files.

>>> from dra_jupyter.inventory import simulated
>>> simulated.names()                                   # doctest: +SKIP
['h200-8x', 'h100-8x', 'h200-mig', 'workstation-4gpu', 'tpu-v5e-8', 'mi300x-8']
>>> inv = simulated.load("h100-8x")                     # doctest: +SKIP
>>> inv = simulated.from_file("cluster.yaml")           # doctest: +SKIP

Every inventory is ``simulated=True``: nothing here reads hardware. Each one is built
afresh on every call, so callers may change what they get. The bundled ones (node name,
devices):

* ``h200-8x``: ``gpu-node-1``, 8 H200 (``make demo``'s node, :data:`DEFAULT`);
* ``h100-8x``: ``h100-node-1``, 8 H100 SXM with Fabric Manager NVLink partitions;
* ``h200-mig``: ``h200-mig-1``, 1 H200 in MIG mode (:mod:`dra_jupyter.inventory.mig`);
* ``h200-shared``: ``gpu-shared-1``, 8 H200 that up to 4 claims share each, by memory
  (the NVIDIA driver's consumable shares);
* ``workstation-4gpu``: ``workstation-1``, 4 RTX 6000 Ada, one per PCIe root, 2 per NUMA node;
* ``tpu-v5e-8``: ``tpu-v5e-node-1``, 8 TPU v5e chips in a 2x4 topology;
* ``mi300x-8``: ``mi300x-node-1``, 8 AMD Instinct MI300X, one per PCIe root, 4 per NUMA node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import amd, nvidia, tpu
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.objects import DeviceClass, Wire
from dra_jupyter.model.taintrules import parse_taint_rules
from dra_jupyter.objectfile import load_objects
from dra_jupyter.selectors import compile_selector

DEFAULT = "h200-8x"

# A 48 GB workstation card: NVML says 49140 MiB; professional RTX cards have brand NvidiaRTX.
RTX_6000_ADA = nvidia.GpuModel(
    "NVIDIA RTX 6000 Ada Generation", "Ada Lovelace", "8.9.0", "49140Mi", brand="NvidiaRTX"
)

Build = Callable[[], tuple[list[Wire], list[Wire]]]


@dataclass(frozen=True)
class _Bundled:
    name: str
    description: str
    build: Build  # (slices, device classes)


# --- the bundled inventories ------------------------------------------------------------------


def _h200_8x() -> tuple[list[Wire], list[Wire]]:
    return [nvidia.hgx_node("gpu-node-1", nvidia.H200)], nvidia.device_classes()


def _h100_8x() -> tuple[list[Wire], list[Wire]]:
    """An HGX H100: 8 SXM GPUs on NVSwitch, 2 NUMA nodes, 4 PCIe roots of 2 GPUs each.

    NVLink: the NVIDIA driver describes the NVSwitch fabric only through Fabric Manager
    partitions (gate ``FabricManagerPartitioning``): ``gpuModuleID`` and, per partition
    size N that Fabric Manager reports, ``partitionN`` = the ID of the N-GPU partition
    holding the GPU. This node publishes the partitions of an 8-GPU baseboard (IDs as in
    the driver's documentation: module 1 has partition8 1, partition4 2, partition2 4,
    partition1 8), with module i+1 = ``gpu-i``, so the 2-GPU partitions coincide with the
    PCIe roots and the 4-GPU ones with the NUMA nodes. ``partition8`` is then one value
    shared by all 8 GPUs: ``matchAttribute: gpu.nvidia.com/partition8`` means "one NVLink
    domain". (Multi-node NVLink cliques belong to ``compute-domain.nvidia.com``, not here.)
    """
    node = nvidia.hgx_node("h100-node-1", nvidia.H100_SXM)
    for minor, device in enumerate(node["spec"]["devices"]):
        module = minor + 1
        attributes = device["attributes"]
        attributes["gpuModuleID"] = {"int": module}
        for size, first_id in ((8, 1), (4, 2), (2, 4), (1, 8)):
            attributes[f"partition{size}"] = {"int": first_id + (module - 1) // size}
    return [node], nvidia.device_classes()


def _h200_shared() -> tuple[list[Wire], list[Wire]]:
    return [nvidia.hgx_node("gpu-shared-1", nvidia.H200, shares=4)], nvidia.device_classes()


def _h200_mig() -> tuple[list[Wire], list[Wire]]:
    # Imported here: only this inventory needs the MIG tables.
    from dra_jupyter.inventory import mig  # noqa: PLC0415

    return mig.h200_mig_node("h200-mig-1", gpus=1), nvidia.device_classes()


def _workstation_4gpu() -> tuple[list[Wire], list[Wire]]:
    node = "workstation-1"
    places = [  # (bus, root, NUMA node): every GPU on its own root port, 2 per socket
        ("17", "16", 0),
        ("31", "30", 0),
        ("98", "97", 1),
        ("b1", "b0", 1),
    ]
    devices = [
        nvidia.gpu_device(
            node,
            minor,
            RTX_6000_ADA,
            nvidia.GpuPlacement(f"0000:{bus}:00.0", f"pci0000:{root}", numa),
        )
        for minor, (bus, root, numa) in enumerate(places)
    ]
    return [nvidia.gpu_slice(node, devices)], nvidia.device_classes()


def _tpu_v5e_8() -> tuple[list[Wire], list[Wire]]:
    return [tpu.tpu_node("tpu-v5e-node-1", tpu.V5E_8)], tpu.device_classes()


def _mi300x_8() -> tuple[list[Wire], list[Wire]]:
    return [amd.mi300x_node("mi300x-node-1", amd.MI300X)], amd.device_classes()


_BUNDLED: tuple[_Bundled, ...] = (
    _Bundled("h200-8x", "8x NVIDIA H200 (HGX): 2 NUMA nodes, 4 PCIe roots", _h200_8x),
    _Bundled(
        "h100-8x",
        "8x NVIDIA H100 SXM (HGX, NVSwitch): 2 NUMA nodes, 4 PCIe roots, NVLink partitions",
        _h100_8x,
    ),
    _Bundled("h200-mig", "1x NVIDIA H200 in MIG mode, with its MIG profiles", _h200_mig),
    _Bundled(
        "h200-shared",
        "8x NVIDIA H200 (HGX), each shared by up to 4 claims by memory (consumable shares)",
        _h200_shared,
    ),
    _Bundled(
        "workstation-4gpu",
        "4x NVIDIA RTX 6000 Ada (PCIe): 2 NUMA nodes, one PCIe root per GPU",
        _workstation_4gpu,
    ),
    _Bundled("tpu-v5e-8", "Google TPU v5e host: 8 chips, topology 2x4", _tpu_v5e_8),
    _Bundled(
        "mi300x-8",
        "8x AMD Instinct MI300X (SPX/NPS1): 2 NUMA nodes, one PCIe root per GPU",
        _mi300x_8,
    ),
)


def names() -> list[str]:
    """The bundled inventories, the default (``make demo``'s) first."""
    return [b.name for b in _BUNDLED]


def load(name: str) -> Inventory:
    """The bundled inventory ``name``, built afresh."""
    for bundled in _BUNDLED:
        if bundled.name == name:
            slices, classes = bundled.build()
            return Inventory(
                name=name,
                description=bundled.description,
                slices=tuple(slices),
                device_classes=tuple(classes),
                simulated=True,
                source=f"simulated:{name}",
            )
    raise InvalidInputError(
        f"no simulated inventory is named {name!r}; use one of: {', '.join(names())}"
    )


# --- device classes per driver -------------------------------------------------------------


def device_classes_for(drivers: Iterable[str]) -> list[Wire]:
    """The bundled DeviceClasses of each driver, in the order given.

    Drivers of this package get the classes their charts install; any other driver gets
    one class named after it that selects all its devices (the example driver's way).
    """
    known: dict[str, Callable[[], list[Wire]]] = {
        nvidia.DRIVER: nvidia.device_classes,
        tpu.DRIVER: tpu.device_classes,
        amd.DRIVER: amd.device_classes,
    }
    out: list[Wire] = []
    for driver in dict.fromkeys(drivers):
        make = known.get(driver)
        out += make() if make is not None else [_generic_class(driver)]
    return out


def _generic_class(driver: str) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def _covers(cls: DeviceClass, driver: str) -> bool:
    """Whether a class can select devices of ``driver``: it has no selector, or one names it.

    A textual test: a class that selects by driver names the driver in a string literal.
    """
    if not cls.selectors:
        return True
    return any(f"'{driver}'" in s or f'"{driver}"' in s for s in cls.selectors)


# --- files -----------------------------------------------------------------------------------


def from_file(path: str | Path) -> Inventory:
    """An inventory from a file of ResourceSlices and DeviceClasses (and DeviceTaintRules,
    kept as :attr:`~dra_jupyter.inventory.base.Inventory.taint_rules`).

    The file is multi-document YAML, JSON, or a ``List`` (as ``kubectl get -o yaml``
    writes it). Without DeviceClasses, the bundled classes of the slices' drivers are
    used; when the file has classes, drivers none of them selects get theirs added, with
    a warning. Every object is parsed as the allocator parses it and every class selector
    compiled, so a bad file fails here with the same clear error.
    """
    where = str(path)
    objects = load_objects(where)
    others = [k for k, objs in (("ResourceClaim", objects.claims), ("Node", objects.nodes)) if objs]
    if others:
        raise InvalidInputError(
            f"{where}: an inventory file holds only ResourceSlices, DeviceClasses and "
            "DeviceTaintRules; "
            f"remove the {' and '.join(others)} objects"
        )
    if not objects.slices:
        raise InvalidInputError(
            f"{where}: has no ResourceSlice; an inventory needs the devices' ResourceSlices"
        )
    classes = list(objects.classes)
    allocator = Allocator(objects.slices, classes)
    drivers = list(dict.fromkeys(s.driver for s in allocator.slices))
    uncovered = [d for d in drivers if not any(_covers(c, d) for c in allocator.classes.values())]
    warnings: list[str] = []
    if uncovered:
        added = [
            c
            for c in device_classes_for(uncovered)
            if c["metadata"]["name"] not in allocator.classes
        ]
        classes += added
        allocator = Allocator(objects.slices, classes)
        made_up = [d for d in uncovered if d not in (nvidia.DRIVER, tpu.DRIVER, amd.DRIVER)]
        if objects.classes or made_up:
            warnings.append(
                f"no DeviceClass of the file selects {', '.join(uncovered)}; added "
                f"{', '.join(c['metadata']['name'] for c in added) or 'none'}"
            )
    parse_taint_rules(objects.taint_rules)  # checked here, applied by whatever reads slices
    for cls in allocator.classes.values():
        for k, expression in enumerate(cls.selectors):
            compile_selector(expression, where=f"DeviceClass {cls.name}, spec.selectors[{k}]")
    count = sum(len(s.devices) for s in allocator.slices)
    nodes = allocator.node_names()
    on = f" on {nodes[0]}" if len(nodes) == 1 else f" on {len(nodes)} nodes" if nodes else ""
    return Inventory(
        name=Path(where).name,
        description=f"{count} devices of {', '.join(drivers)}{on}, from {where}",
        slices=tuple(objects.slices),
        device_classes=tuple(classes),
        simulated=True,
        source=f"file:{where}",
        warnings=tuple(warnings),
        taint_rules=tuple(objects.taint_rules),
    )

"""Whether a request can be met now, later or never here, and why: what ``%dra explain
gpu=9`` and ``dra-jupyter explain gpu=9`` answer (the allocator's explanation in the
user's terms). The wait hint is each surface's own: ``timeout=10m`` in a notebook,
``--timeout 10m`` in a shell.

For what can never be met, one line names what the user asked for and what the machine
has (:func:`impossible_hint`): the allocator's explanation is exact but generic, and this
says ``no device with memory >= 200Gi; the largest is 140.4Gi (gpu-3)``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import shown
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.attributes import Version
from dra_jupyter.model.objects import Device, ResourceSlice
from dra_jupyter.model.parse import parse_many, parse_resource_slice
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.sharing.gpushare import SHAREABLE, GpuSharing, pinned_memory_problem
from dra_jupyter.tables import human_bytes

if TYPE_CHECKING:
    pass

PROBE = "new-request"  # the name a claim is explained under before it has one
NOTEBOOK_WAIT = "add timeout=10m to wait in line"


def _value(device: Device, name: str) -> Any:
    """A scalar attribute's value (a version's text); None for a list or none."""
    value = device.attributes.get(name)
    if isinstance(value, tuple):
        return None
    return value.text if isinstance(value, Version) else value


def _slices(inventory: Inventory) -> list[ResourceSlice]:
    """The inventory's slices as the model reads them (a quantity left out is zero)."""
    return parse_many(inventory.patched_slices, parse_resource_slice, ResourceSlice)


def _devices_of_kind(inventory: Inventory, kind: str) -> list[tuple[str, Device]]:
    """(name, device) pairs of the kind the request asks for: gpu, mig or tpu."""
    out = []
    for s in _slices(inventory):
        node = s.node_selection.node_name if s.node_selection is not None else None
        for d in s.devices:
            driver, dtype = s.driver, _value(d, "type")
            if (
                (kind == "tpu" and driver == "tpu.google.com")
                or (kind == "mig" and dtype == "mig")
                or (kind == "gpu" and dtype in ("gpu", "amdgpu"))
            ):
                out.append((f"{node or s.pool}/{d.name}", d))
    return out


def _listing(counts: Counter[str]) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items())) or "none"


# ``device.attributes["gpu.nvidia.com"].architecture == "hopper"``: an attribute compared to
# a string literal (the attribute's name, the value)
_COMPARISON = re.compile(r"""\.\s*([A-Za-z_]\w*)\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')""")


def _all_devices_of_kind(inventory: Inventory) -> Iterator[Device]:
    for s in _slices(inventory):
        yield from s.devices


def selector_hint(selector: str, inventory: Inventory) -> str | None:
    """For a selector that no device can meet: a string comparison that no device's
    attribute meets, with the values the devices have (CEL compares strings exactly, so
    ``"hopper"`` is not ``"Hopper"``); None where every comparison meets some device."""
    for match in _COMPARISON.finditer(selector):
        name, wanted = (
            match.group(1),
            match.group(2) if match.group(2) is not None else match.group(3),
        )
        values = Counter(
            str(v) for d in _all_devices_of_kind(inventory) if isinstance(v := _value(d, name), str)
        )
        if not values or wanted in values:
            continue
        alike = [v for v in values if v.lower() == wanted.lower()]
        if alike:
            return (
                f'no device has {name} == "{wanted}": CEL compares strings exactly, and the '
                f'value here is "{alike[0]}"; write {name} == "{alike[0]}"'
            )
        found = sorted(values.items())
        listed = ", ".join(f'"{v}" ({n})' for v, n in found[:10])
        listed += f" and {len(found) - 10} more" if len(found) > 10 else ""
        return f'no device has {name} == "{wanted}"; the values here are {listed}'
    return None


def impossible_hint(spec: Mapping[str, Any], inventory: Inventory) -> str | None:
    """Why ``dra.request(**spec)`` can never be met here, in the user's terms; None if the
    reason is not one of the simple ones (the allocator's explanation then says more)."""
    if spec.get("alternatives") or spec.get("device_class"):
        return None
    if spec.get("selector"):
        return selector_hint(str(spec["selector"]), inventory)
    kind = "mig" if spec.get("mig") else "tpu" if spec.get("tpu") else "gpu"
    devices = _devices_of_kind(inventory, kind)
    where = inventory.description + (" (simulated)" if inventory.simulated else "")
    if not devices:
        return f"no {kind.upper()} devices on {where}"
    if kind == "mig":
        profiles = Counter(str(_value(d, "profile")) for _n, d in devices)
        if spec["mig"] not in profiles:
            return (
                f"no MIG profile {spec['mig']!r} on {where}; the profiles are {_listing(profiles)}"
            )
    if spec.get("model"):
        attr = "tpuGen" if kind == "tpu" else "productName"
        models = Counter(str(_value(d, attr)) for _n, d in devices)
        wanted = str(spec["model"]).lower()
        if not any(wanted in m.lower() for m in models):
            return (
                f"no device of model {spec['model']!r} on {where}; "
                f"the models are {_listing(models)}"
            )
    if spec.get("memory"):
        try:
            wanted_q = Quantity.parse(spec["memory"])
        except ValueError:
            return None
        sizes = [
            (m.value, name) for name, d in devices if (m := d.capacity.get("memory")) is not None
        ]
        if sizes and max(q for q, _ in sizes) < wanted_q:
            largest, name = max(sizes, key=lambda x: x[0])
            return (
                f"no device with memory >= {spec['memory']}; the largest is "
                f"{human_bytes(largest)} ({name})"
            )
    count = spec.get(kind) if kind != "mig" else spec.get("count", 1)
    if isinstance(count, int) and count > len(devices):
        return f"asks for {count} {kind.upper()} devices; {where} has {len(devices)}"
    return None


def sharing_hint(spec: Mapping[str, Any], inventory: Inventory) -> str | None:
    """Why a shared GPU's limit can never be met here: ``pinned_memory=`` above the memory
    of every device the request (or an alternative) may get (of its kind, and its MIG
    profile); None where it fits, or where the inventory knows no such device (the
    allocator then says why)."""
    for alt in spec.get("alternatives") or (spec,):
        if not isinstance(alt, Mapping) or alt.get("pinned_memory") is None:
            continue
        kind = "mig" if alt.get("mig") else "gpu"
        devices = [
            d
            for _name, d in _devices_of_kind(inventory, kind)
            if kind != "mig" or _value(d, "profile") == alt["mig"]
        ]
        sizes = [int(m.value) for d in devices if (m := d.capacity.get("memory")) is not None]
        if not sizes:
            continue
        limit = str(Quantity.parse(alt["pinned_memory"]))  # checked by the claim's build
        what = f"MIG {alt['mig']} partition" if kind == "mig" else "GPU"
        where = inventory.description + (" (simulated)" if inventory.simulated else "")
        problem = pinned_memory_problem(
            GpuSharing("mps", pinned_memory=limit), max(sizes), f"{what} on {where}"
        )
        if problem is not None:
            return problem
    return None


def no_sharing_driver(
    spec: Mapping[str, Any], claim: Mapping[str, Any], where: str | None
) -> str | None:
    """Why a GPU shared by its driver (``share="mps"``: the claim's opaque config) cannot be
    had ``where`` (a backend with no cluster, so no driver); None on a cluster (``where``
    None) or without such a config."""
    if where is None or not claim.get("spec", {}).get("devices", {}).get("config"):
        return None
    return (
        f"share={shown(_shared(spec))} asks a cluster's GPU driver (NVIDIA's DRA driver) to "
        f"share the device, and {where} has none; leave share= out, or use a quantity such "
        "as share='20Gi' where a device allows several claims"
    )


# how a driver shares a device of its class where none is shared by capacity
DRIVER_SHARES = {
    "gpu.nvidia.com": "share='time-slicing' or share='mps'",
    "mig.nvidia.com": "share='mps'",
}


def _capacity_requests(claim: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The bodies (``exactly`` or each ``firstAvailable`` one) of a claim that ask for part
    of a device's capacity (``share="20Gi"``)."""
    for request in claim.get("spec", {}).get("devices", {}).get("requests") or ():
        for body in [request["exactly"]] if "exactly" in request else request["firstAvailable"]:
            if body.get("capacity"):
                yield body


def no_shared_device(
    spec: Mapping[str, Any],
    claim: Mapping[str, Any],
    inventory: Inventory,
    *,
    drivers: bool = True,
) -> str | None:
    """Why ``share="20Gi"`` (part of a device's memory) cannot be had: no device of the
    request's class allows several claims at once (``allowMultipleAllocations``), where the
    scheduler (or our allocator, on one machine) would give a whole device instead (a
    capacity request is only a filter on a device that one claim holds). With alternatives,
    only where none of those that ask for a share could have one. None where some device
    allows it, or no slices are seen. ``drivers``: the backend has drivers that share a GPU
    themselves (a cluster), so the line offers their strategies; one machine has none."""
    classes = {c["metadata"]["name"] for c in inventory.device_classes}
    bodies = list(_capacity_requests(claim))
    if (
        not inventory.slices
        or not bodies
        or any(b["deviceClassName"] not in classes for b in bodies)
    ):
        return None  # a class the cluster lacks: the allocator's check says so
    allocator = Allocator(list(inventory.slices), list(inventory.device_classes), [], "first-fit")
    for body in bodies:
        probe = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": PROBE, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "probe",
                            "exactly": {
                                "deviceClassName": body["deviceClassName"],
                                "selectors": [{"cel": {"expression": SHAREABLE}}],
                            },
                        }
                    ]
                }
            },
        }
        if allocator.allocate([probe]) is not None:
            return None
    cls = str(bodies[0]["deviceClassName"])
    where = inventory.description + (" (simulated)" if inventory.simulated else "")
    instead = (
        f", or ask the driver to share one ({DRIVER_SHARES[cls]})"
        if drivers and cls in DRIVER_SHARES
        else ""
    )
    return (
        f"share={shown(_shared(spec))} asks for part of a device that several claims hold at "
        f"once (allowMultipleAllocations), and no {cls} device on {where} allows it; leave "
        f"share= out for a whole device{instead}"
    )


def _shared(spec: Mapping[str, Any]) -> object:
    """The ``share=`` of a request, or of its first alternative that has one."""
    for alt in (spec, *(spec.get("alternatives") or ())):
        if isinstance(alt, Mapping) and alt.get("share") is not None:
            return alt["share"]
    return None


def describe(spec: Mapping[str, Any]) -> str:
    """``gpu=2 same=pcieRoot``: a request as it was typed."""
    return " ".join(f"{k}={v}" for k, v in spec.items()) or "gpu=1"

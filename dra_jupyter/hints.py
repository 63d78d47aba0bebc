"""One-line answers for requests that can never be met on an inventory.

The allocator's explanation is exact but generic; these name what the user asked for and
what the machine has: ``no device with memory >= 200Gi; the largest is 140.4Gi (gpu-3)``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.tables import human_bytes

Wire = dict[str, Any]


def _value(device: Mapping[str, Any], name: str) -> Any:
    attr = (device.get("attributes") or {}).get(name) or {}
    return next(iter(attr.values()), None)


def _devices(inventory: Inventory, kind: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, device) pairs of the kind the request asks for: gpu, mig or tpu."""
    out = []
    for s in inventory.slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            driver, dtype = spec["driver"], _value(d, "type")
            if (
                (kind == "tpu" and driver == "tpu.google.com")
                or (kind == "mig" and dtype == "mig")
                or (kind == "gpu" and dtype in ("gpu", "amdgpu"))
            ):
                out.append((f"{spec.get('nodeName') or spec['pool']['name']}/{d['name']}", d))
    return out


def _listing(counts: Counter[str]) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items())) or "none"


# ``device.attributes["gpu.nvidia.com"].architecture == "hopper"``: an attribute compared to
# a string literal (the attribute's name, the value)
_COMPARISON = re.compile(r"""\.\s*([A-Za-z_]\w*)\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')""")


def _all_devices(inventory: Inventory) -> Iterator[Mapping[str, Any]]:
    for s in inventory.slices:
        yield from s.get("spec", {}).get("devices") or ()


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
            str(v) for d in _all_devices(inventory) if isinstance(v := _value(d, name), str)
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
    devices = _devices(inventory, kind)
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
            (Quantity.parse(m["value"]), name)
            for name, d in devices
            if (m := (d.get("capacity") or {}).get("memory")) is not None
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

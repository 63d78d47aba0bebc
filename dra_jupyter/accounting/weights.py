"""How many GPUs a claim's devices are worth, from the inventory's devices.

* a whole device (a GPU, a TPU chip, an AMD GPU) is **1**;
* a **MIG instance** is its memory over its parent GPU's memory (the GPU whose ``uuid`` is
  its ``parentUUID``; else the largest GPU of its pool): an H200's ``1g.18gb`` (16 GiB of
  140 GiB) is 0.114, its ``7g.141gb`` is 1;
* a **share** of a shared GPU (a result with a ``shareID``) is the memory it consumes over
  the GPU's memory (where it consumes no memory, the largest part of any capacity it
  consumes).

Memory, not compute: a MIG profile's memory and compute slices differ (an H200's 3g.71gb
has 3 of 7 compute slices and half the memory), and memory is what another user cannot
have while it is held.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dra_jupyter.accounting.book import DevicePart
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.quantity import Quantity


@dataclass(frozen=True)
class _Device:
    kind: str  # the ``type`` attribute: gpu, mig, tpu, ...
    model: str
    capacity: Mapping[str, Fraction]
    parent_memory: Fraction | None  # a MIG instance's parent GPU's memory


def _string(device: Mapping[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(value.get("string", "")) if isinstance(value, dict) else ""


def _capacity(device: Mapping[str, Any]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, cap in (device.get("capacity") or {}).items():
        with contextlib.suppress(DraJupyterError, TypeError, ValueError, KeyError):
            out[str(name)] = Quantity.parse(cap["value"]).value
    return out


class Weights:
    """The GPU-equivalents of the devices of one inventory (worked out once)."""

    def __init__(self, inventory: Inventory) -> None:
        found: dict[str, tuple[Mapping[str, Any], str]] = {}  # key: (device, pool key)
        by_uuid: dict[str, Fraction] = {}
        largest: dict[str, Fraction] = {}  # by driver/pool: the largest GPU memory
        for s in inventory.slices:
            spec = s.get("spec", {})
            pool = f"{spec.get('driver')}/{(spec.get('pool') or {}).get('name')}"
            for d in spec.get("devices") or ():
                found[f"{pool}/{d.get('name')}"] = (d, pool)
                memory = _capacity(d).get("memory")
                if memory and _string(d, "type") != "mig":
                    if _string(d, "uuid"):
                        by_uuid[_string(d, "uuid")] = memory
                    largest[pool] = max(largest.get(pool, Fraction(0)), memory)
        self._devices: dict[str, _Device] = {}
        for key, (d, pool) in found.items():
            kind = _string(d, "type")
            parent = None
            if kind == "mig":
                parent = by_uuid.get(_string(d, "parentUUID")) or largest.get(pool)
            self._devices[key] = _Device(kind, _string(d, "productName"), _capacity(d), parent)

    def part(self, result: Mapping[str, Any]) -> DevicePart:
        """What one allocation result (``driver``, ``pool``, ``device``) is worth."""
        key = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
        device = self._devices.get(key)
        if device is None:  # not this inventory's: a whole device of no known model
            return DevicePart(key, 1.0, "")
        gpus = 1.0
        if result.get("shareID"):
            gpus = _share(result.get("consumedCapacity") or {}, device.capacity)
        elif device.kind == "mig":
            memory = device.capacity.get("memory")
            if memory and device.parent_memory:
                gpus = min(1.0, float(memory / device.parent_memory))
        return DevicePart(key, round(gpus, 6), device.model)

    def parts(self, allocation: Mapping[str, Any]) -> tuple[DevicePart, ...]:
        """The devices of a claim's ``status.allocation``, each with its GPU-equivalents."""
        results = (allocation.get("devices") or {}).get("results") or []
        return tuple(self.part(r) for r in results if isinstance(r, dict))

    def models(self) -> dict[str, str]:
        """Each device's model (``productName``; empty where it has none), by key."""
        return {key: d.model for key, d in self._devices.items()}

    def of_key(self, key: str) -> DevicePart:
        """A device by key, held whole (for a book row that did not record its worth)."""
        driver, _, rest = key.partition("/")
        pool, _, name = rest.rpartition("/")
        return self.part({"driver": driver, "pool": pool, "device": name})


def share_parts(consumed: Mapping[str, Any], capacity: Mapping[str, Fraction]) -> dict[str, float]:
    """What a share's ``consumedCapacity`` takes of its device, per capacity, as a fraction
    of the device's (those that cannot be read, or of a capacity the device lacks, left
    out): the service's share limit and the book's GPU-equivalents both count from it."""
    parts: dict[str, float] = {}
    for name, amount in consumed.items():
        total = capacity.get(name)
        with contextlib.suppress(DraJupyterError, TypeError, ValueError):
            if total:
                parts[name] = float(Quantity.parse(amount).value / total)
    return parts


def _share(consumed: Mapping[str, Any], capacity: Mapping[str, Fraction]) -> float:
    parts = share_parts(consumed, capacity)
    if "memory" in parts:
        return min(1.0, parts["memory"])
    return min(1.0, max(parts.values(), default=1.0))

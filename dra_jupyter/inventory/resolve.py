"""Which inventory to use: real GPUs through NVML, a bundled simulation, or a file."""

from __future__ import annotations

from pathlib import Path

from dra_jupyter.errors import DraJupyterError, InvalidInputError, shown
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.objects import ResourceSlice
from dra_jupyter.model.parse import parse_many, parse_resource_slice

DEFAULT_SIMULATED = "h200-8x"


def resolve_inventory(choice: str) -> Inventory:
    """``auto``: NVML when it finds GPUs, else the simulated ``h200-8x`` (which says so);
    ``nvml``: NVML or a clear error; a bundled name; or a path to a YAML file of slices."""
    from dra_jupyter.inventory import simulated  # noqa: PLC0415  # not at import time

    if choice in ("auto", "nvml"):
        from dra_jupyter.inventory import nvml  # noqa: PLC0415  # NVML is probed on use only

        try:
            found = nvml.discover()
        except DraJupyterError as err:
            if choice == "nvml":
                raise
            inventory = simulated.load(DEFAULT_SIMULATED)
            return Inventory(
                name=inventory.name,
                description=inventory.description,
                slices=inventory.slices,
                device_classes=inventory.device_classes,
                simulated=True,
                source=inventory.source,
                warnings=(*inventory.warnings, f"no GPUs found through NVML ({err})"),
            )
        if not found.slices and choice == "auto":
            return simulated.load(DEFAULT_SIMULATED)
        return found
    if choice in simulated.names():
        return simulated.load(choice)
    if Path(choice).suffix in (".yaml", ".yml", ".json") or _exists(choice):
        return simulated.from_file(choice)
    raise InvalidInputError(
        f"inventory {shown(choice)} is not known; use auto, nvml, a file of ResourceSlices, or one "
        f"of {', '.join(simulated.names())}"
    )


def _exists(path: str) -> bool:
    try:
        return Path(path).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def resolve_device(inventory: Inventory, device: str, *, what: str = "dra.history") -> str:
    """``driver/pool/device`` of a device named in full, by its pool and name
    (``gpu-node-1/gpu-3``) or by its name alone where that is unique (``gpu-3``); ``what``
    begins the error's line, which names the devices a name could mean."""
    parsed = parse_many(inventory.patched_slices, parse_resource_slice, ResourceSlice)
    keys = [f"{s.driver}/{s.pool}/{d.name}" for s in parsed for d in s.devices]
    if device in keys:
        return device
    found = [k for k in keys if k.endswith(f"/{device}")]
    if len(found) == 1:
        return found[0]
    if found:
        named = ", ".join(found[:AMBIGUOUS_NAMED])
        more = len(found) - AMBIGUOUS_NAMED
        raise InvalidInputError(
            f"{what}: {device!r} is ambiguous: it is {named}"
            + (f" and {more} more" if more > 0 else "")
            + f"; name one with its pool, e.g. {found[0].split('/', 1)[1]!r}"
        )
    raise InvalidInputError(
        f"{what}: {device!r} is not a device of this inventory; use a name from "
        f"dra.devices(), e.g. {keys[0] if keys else 'gpu-0'!r}"
    )


AMBIGUOUS_NAMED = 3  # devices an ambiguous name's error names; more are counted

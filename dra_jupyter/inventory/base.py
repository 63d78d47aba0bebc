"""What an inventory is: the ResourceSlices and DeviceClasses of one machine (or cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_jupyter.model.objects import Wire


def node_slice(
    driver: str,
    node: str,
    devices: list[Wire] | None = None,
    generation: int = 1,
    *,
    suffix: str = "",
    slice_count: int = 1,
    shared_counters: list[Wire] | None = None,
) -> Wire:
    """A ResourceSlice of a node-local driver's pool, named after the node, as the NVIDIA,
    AMD and TPU drivers publish it: ``devices``, or (``shared_counters``) a counters-only
    slice of a pool split over ``slice_count`` slices."""
    body: Wire = {"sharedCounters": shared_counters} if shared_counters else {"devices": devices}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}" + (f"-{suffix}" if suffix else "")},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slice_count},
            **body,
        },
    }


@dataclass(frozen=True)
class Inventory:
    """Devices as DRA drivers would publish them, plus where they came from.

    ``slices`` and ``device_classes`` are ``resource.k8s.io/v1`` wire dicts, exactly what
    the allocator and a real cluster take. ``simulated`` is True for anything not read
    from real hardware: every view of a simulated inventory must say so.
    """

    name: str
    description: str
    slices: tuple[Wire, ...]
    device_classes: tuple[Wire, ...]
    simulated: bool
    source: str  # "nvml", "simulated:<name>" or "file:<path>"
    warnings: tuple[str, ...] = field(default=())  # e.g. NVML calls that were not supported

    @property
    def nodes(self) -> list[str]:
        return sorted(
            {s["spec"]["nodeName"] for s in self.slices if s.get("spec", {}).get("nodeName")}
        )

"""What an inventory is: the ResourceSlices and DeviceClasses of one machine (or cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from dra_jupyter.model.objects import ResourceSlice, Wire


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

    ``taint_rules``: a cluster's DeviceTaintRules (wire dicts), which taint devices of the
    slices without being in them; :attr:`patched_slices` are the slices with them applied,
    what kube-scheduler allocates from. Whatever allocates, explains or counts reads those.
    """

    name: str
    description: str
    slices: tuple[Wire, ...]
    device_classes: tuple[Wire, ...]
    simulated: bool
    source: str  # "nvml", "simulated:<name>" or "file:<path>"
    warnings: tuple[str, ...] = field(default=())  # e.g. NVML calls that were not supported
    taint_rules: tuple[Wire, ...] = field(default=())

    @cached_property
    def patched_slices(self) -> tuple[Wire, ...] | tuple[ResourceSlice, ...]:
        """The slices as kube-scheduler's allocator sees them: each device with the taints
        of the DeviceTaintRules that select it (:mod:`dra_jupyter.model.taintrules`); the
        wire slices themselves when there are no rules. Made once per inventory, so that
        allocators given them again find their work cached (same objects)."""
        if not self.taint_rules:
            return self.slices
        from dra_jupyter.model.taintrules import apply_taint_rules  # noqa: PLC0415  # with rules only

        return tuple(apply_taint_rules(self.slices, self.taint_rules))

    @property
    def nodes(self) -> list[str]:
        return sorted(
            {s["spec"]["nodeName"] for s in self.slices if s.get("spec", {}).get("nodeName")}
        )

"""MIG profiles and placements as DRA devices, exactly as the NVIDIA driver publishes them.

Two shapes (``dra-driver-nvidia-gpu``, ``cmd/gpu-kubelet-plugin``):

* **DynamicMIG** (KEP-4815 partitionable devices, ``partitions.go``): one counter set per GPU,
  ``gpu-<minor>-counter-set``, with one counter per capacity dimension (the maximum over all
  profiles) plus ``memory-slice-<i>: 1`` per memory slice. The full GPU consumes all of it;
  each possible MIG placement ``gpu-<minor>-mig-<profile>-<giProfileId>-<start>`` consumes its
  own capacities and the memory slices of its placement, so any MIG device excludes the full
  GPU, overlapping placements exclude each other, and engines run out as on the hardware.
  Slices use the Kubernetes >= 1.35 "split" layout: slices holding only ``sharedCounters``,
  then devices-only slices per GPU (``driver.go``, ``generateSplitResourceSlices``).
* **Static MIG** (existing instances, ``deviceinfo.go``): ``uuid`` ``MIG-...`` and
  ``memorySlice<i>`` capacities, no counters.

Everything here is pure: wire dicts in, wire dicts out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from dra_jupyter.inventory import nvidia
from dra_jupyter.inventory.base import node_slice
from dra_jupyter.model.limits import MAX_COUNTER_SETS_PER_SLICE, MAX_DEVICES_PER_SLICE_WITH_EXTRAS
from dra_jupyter.model.objects import Wire
from dra_jupyter.model.quantity import Quantity

# NVML_GPU_INSTANCE_PROFILE_* enum -> (GPU slices, name suffix), as go-nvlib NewMigProfile.
GI_PROFILE_SHAPES: Mapping[int, tuple[int, str]] = MappingProxyType({
    0x0: (1, ""), 0x1: (2, ""), 0x2: (3, ""), 0x3: (4, ""), 0x4: (7, ""), 0x5: (8, ""),
    0x6: (6, ""), 0x7: (1, "+me"), 0x8: (2, "+me"), 0x9: (1, ""), 0xA: (1, "+gfx"),
    0xB: (2, "+gfx"), 0xC: (4, "+gfx"), 0xD: (1, "-me"), 0xE: (2, "-me"), 0xF: (1, "+me.all"),
    0x10: (2, "+me.all"),
})  # fmt: skip

# Capacity name -> counter name (the driver's camelToDNSName).
CAPACITY_COUNTERS: Mapping[str, str] = MappingProxyType({
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
    "memory": "memory",
})  # fmt: skip


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile (``nvmlDeviceGetGpuInstanceProfileInfo``) and its placements."""

    gi_profile_id: int  # GpuInstanceProfileInfo.id, what `nvidia-smi mig -lgip` shows as ID
    name: str  # "1g.18gb", "1g.18gb+me"
    slice_count: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int  # memorySizeMB, which is MiB
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices

    def capacities(self) -> dict[str, int]:
        """The seven capacities of a MIG device of this profile (``CommonCapacitiesMig``)."""
        return {
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
            "memory": self.memory_mib * 2**20,
        }


# NVIDIA H200 (141 GB HBM3e, 150754820096 bytes), driver 580.159.04: `nvidia-smi mig -lgip`
# and `-lgipp` and nvmlDeviceGetGpuInstanceProfileInfo (tests/fixtures/nvidia-h200).
H200_PROFILES: tuple[MigProfile, ...] = (
    MigProfile(19, "1g.18gb", 1, 16, 1, 1, 0, 1, 0, 16384, tuple((s, 1) for s in range(7))),
    MigProfile(20, "1g.18gb+me", 1, 16, 1, 1, 0, 1, 1, 16384, tuple((s, 1) for s in range(7))),
    MigProfile(15, "1g.35gb", 1, 26, 1, 1, 0, 1, 0, 33280, ((0, 2), (2, 2), (4, 2), (6, 2))),
    MigProfile(14, "2g.35gb", 2, 32, 2, 2, 0, 2, 0, 33280, ((0, 2), (2, 2), (4, 2))),
    MigProfile(9, "3g.71gb", 3, 60, 3, 3, 0, 3, 0, 71424, ((0, 4), (4, 4))),
    MigProfile(5, "4g.71gb", 4, 64, 4, 4, 0, 4, 0, 71424, ((0, 4),)),
    MigProfile(0, "7g.141gb", 7, 132, 8, 7, 0, 7, 1, 143360, ((0, 8),)),
)
H200_MEMORY_BYTES = 150754820096


def profile_name(gi_slices: int, memory_mib: int, total_memory_bytes: int, suffix: str = "") -> str:
    """``<g>g.<gb>gb<suffix>`` as go-nvlib computes it (C == G profiles).

    ``gb`` is the profile's fraction of memory rounded up to eighths, times the total in
    whole GiB rounded up, rounded half away from zero (Go's ``math.Round``).
    """
    fraction = math.ceil(memory_mib * 2**20 / total_memory_bytes * 8) / 8
    total_gib = -(-total_memory_bytes // 2**30)
    gb = math.floor(fraction * total_gib + 0.5)
    return f"{gi_slices}g.{gb}gb{suffix}"


def rfc1123(name: str) -> str:
    """The driver's ``toRFC1123Compliant``."""
    name = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-")
    return name.removesuffix(".")[:253]


def mig_device_name(minor: int, profile: str, gi_profile_id: int, start: int) -> str:
    """``gpu-<minor>-mig-<profile without dots>-<giProfileId>-<start>`` (``ToCanonicalName``)."""
    return f"gpu-{minor}-mig-{rfc1123(profile.replace('.', ''))}-{gi_profile_id}-{start}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def _quantity(n: int) -> str:
    return str(Quantity.from_value(n, "BinarySI"))


def _capacity(values: dict[str, int]) -> Wire:
    return {name: {"value": _quantity(v)} for name, v in values.items()}


def _counters(values: dict[str, int], slices: Iterable[int]) -> Wire:
    out = {CAPACITY_COUNTERS[name]: {"value": _quantity(v)} for name, v in values.items()}
    out.update({f"memory-slice-{i}": {"value": "1"} for i in slices})
    return out


def max_capacities(profiles: Sequence[MigProfile]) -> dict[str, int]:
    """Per dimension, the maximum over all profiles (the full GPU's DynamicMIG capacity)."""
    out: dict[str, int] = {}
    for p in profiles:
        for name, v in p.capacities().items():
            out[name] = max(out.get(name, 0), v)
    return out


def memory_slice_count(profiles: Sequence[MigProfile]) -> int:
    """The largest placement size: the driver assumes the largest profile takes every slice."""
    return max((size for p in profiles for _, size in p.placements), default=0)


def mig_attributes(parent: Wire, profile: str) -> Wire:
    """``CommonAttributesMig``: the parent's attributes without ``uuid``, ``type: mig``."""
    attrs = {k: dict(v) for k, v in parent["attributes"].items() if k != "uuid"}
    attrs["type"] = {"string": "mig"}
    attrs["parentUUID"] = {"string": parent["attributes"]["uuid"]["string"]}
    attrs["profile"] = {"string": profile}
    return attrs


@dataclass(frozen=True)
class ExistingMig:
    """A MIG device that exists on the GPU: its profile, placement start and ``MIG-`` UUID."""

    profile: MigProfile
    start: int
    size: int
    uuid: str


def static_mig_device(parent: Wire, minor: int, mig: ExistingMig) -> Wire:
    """An existing MIG device as static MIG publishes it (``MigDeviceInfo.GetDevice``)."""
    attrs = mig_attributes(parent, mig.profile.name)
    attrs["uuid"] = {"string": mig.uuid}
    capacity = _capacity(mig.profile.capacities())
    for i in range(mig.start, mig.start + mig.size):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    name = mig_device_name(minor, mig.profile.name, mig.profile.gi_profile_id, mig.start)
    return {"name": name, "attributes": attrs, "capacity": capacity}


@dataclass(frozen=True)
class PartitionedGpu:
    """One GPU's share of a DynamicMIG pool: its counter set (if any) and its devices."""

    counter_set: Wire | None
    devices: tuple[Wire, ...]


def partitioned_gpu(
    parent: Wire,
    minor: int,
    profiles: Sequence[MigProfile],
    *,
    include_full: bool = True,
    existing: Sequence[ExistingMig] = (),
) -> PartitionedGpu:
    """A GPU in DynamicMIG form: counter set, full GPU and every possible MIG placement.

    ``parent`` is the full-GPU device (``nvidia.gpu_device`` shape). ``include_full=False``
    leaves the full GPU out (Ampere with MIG on cannot toggle MIG without a reset).
    ``existing`` MIG devices are published statically (uuid, memory slices, no counters);
    the placements overlapping them are left out, the counters they hold are taken off the
    set, and the full GPU is not offered (it would need them destroyed).
    """
    caps = max_capacities(profiles)
    if not caps:
        return PartitionedGpu(None, (parent,) if include_full else ())
    used = {i for m in existing for i in range(m.start, m.start + m.size)}
    left = dict(caps)
    for m in existing:
        for k, v in m.profile.capacities().items():
            left[k] = max(0, left[k] - v)
    free = [i for i in range(memory_slice_count(profiles)) if i not in used]
    cs_name = counter_set_name(minor)
    devices: list[Wire] = [static_mig_device(parent, minor, m) for m in existing]
    if include_full and not existing:
        full = {k: v for k, v in parent.items() if k not in ("capacity", "consumesCounters")}
        full["capacity"] = _capacity(caps)
        full["consumesCounters"] = [{"counterSet": cs_name, "counters": _counters(caps, free)}]
        devices.append(full)
    for p in profiles:
        for start, size in p.placements:
            if used.intersection(range(start, start + size)):
                continue
            devices.append(
                {
                    "name": mig_device_name(minor, p.name, p.gi_profile_id, start),
                    "attributes": mig_attributes(parent, p.name),
                    "capacity": _capacity(p.capacities()),
                    "consumesCounters": [
                        {
                            "counterSet": cs_name,
                            "counters": _counters(p.capacities(), range(start, start + size)),
                        }
                    ],
                }
            )
    devices.sort(key=lambda d: str(d["name"]))
    counter_set = {"name": cs_name, "counters": _counters(left, free)}
    return PartitionedGpu(counter_set, tuple(devices))


def _chunks(items: Sequence[Wire], size: int) -> list[list[Wire]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def split_slices(
    node: str, gpus: Sequence[tuple[int, PartitionedGpu]], generation: int = 1
) -> list[Wire]:
    """The Kubernetes >= 1.35 "split" layout of one node's pool.

    Slices with only ``sharedCounters`` (at most 8 counter sets each) come first, then per
    GPU (given as ``(minor, gpu)``) devices-only slices of at most 64 devices.
    """
    sets = [g.counter_set for _, g in gpus if g.counter_set is not None]
    specs: list[tuple[str, Wire]] = [
        (f"counters-{i}", {"sharedCounters": chunk})
        for i, chunk in enumerate(_chunks(sets, MAX_COUNTER_SETS_PER_SLICE))
    ]
    for minor, g in gpus:
        chunks = _chunks(g.devices, MAX_DEVICES_PER_SLICE_WITH_EXTRAS)
        for i, chunk in enumerate(chunks):
            suffix = f"gpu-{minor}" if len(chunks) == 1 else f"gpu-{minor}-{i}"
            specs.append((suffix, {"devices": chunk}))
    return [
        node_slice(
            nvidia.DRIVER,
            node,
            body.get("devices"),
            generation,
            suffix=suffix,
            slice_count=len(specs),
            shared_counters=body.get("sharedCounters"),
        )
        for suffix, body in specs
    ]


def h200_mig_node(node: str, gpus: int = 1) -> list[Wire]:
    """Slices of a node whose ``gpus`` H200s are in MIG mode, as DynamicMIG partitions."""
    out: list[tuple[int, PartitionedGpu]] = []
    for minor in range(gpus):
        bus, root = 0x18 + 0x10 * minor, 0x15 + 0x20 * (minor // 2)  # two GPUs per root
        placement = nvidia.GpuPlacement(
            f"0000:{bus % 256:02x}:00.0", f"pci0000:{root % 256:02x}", minor * 2 // max(gpus, 2)
        )
        parent = nvidia.gpu_device(node, minor, nvidia.H200, placement)
        out.append((minor, partitioned_gpu(parent, minor, H200_PROFILES)))
    return split_slices(node, out)

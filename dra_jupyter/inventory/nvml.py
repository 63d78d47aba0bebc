"""The real inventory of this machine's NVIDIA GPUs, read through NVML (``pynvml``).

Devices, attribute values and MIG layout are those of the NVIDIA DRA driver
(``dra-driver-nvidia-gpu``, ``cmd/gpu-kubelet-plugin/nvlib.go``): see
:mod:`dra_jupyter.inventory.nvidia` and :mod:`dra_jupyter.inventory.mig`.

Nothing here runs at import time: :func:`discover` imports ``pynvml`` (or takes a module
with the same API, e.g. a fake for tests), initialises NVML and always shuts it down.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, TypeVar

from dra_jupyter.errors import DiscoveryError
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.objects import Wire
from dra_jupyter.model.quantity import Quantity

T = TypeVar("T")

# NVML return codes and enum values (nvml.h, a stable ABI).
INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND = 2, 3, 4, 6
DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH = 9, 12, 15, 18
MIG_ENABLE, VIRTUALIZATION_VGPU, ARCH_HOPPER, ARCH_UNKNOWN = 1, 2, 9, 0xFFFFFFFF

# go-nvlib GetBrandAsString / GetArchitectureAsString.
BRANDS = MappingProxyType({
    0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
    7: "NvidiaVApps", 8: "NvidiaVPC", 9: "NvidiaVCS", 10: "NvidiaVWS", 11: "NvidiaCloudGaming",
    12: "QuadroRTX", 13: "NvidiaRTX", 14: "Nvidia", 15: "GeForceRTX", 16: "TitanRTX",
})  # fmt: skip
ARCHITECTURES = MappingProxyType({
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
    8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 13: "Rubin", ARCH_UNKNOWN: "Unknown",
})  # fmt: skip
ADDRESSING_MODES = MappingProxyType({0: "None", 1: "HMM", 2: "ATS"})
_INIT_PROBLEMS = MappingProxyType({
    LIBRARY_NOT_FOUND: "the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver "
    "is installed here, or it is not visible in this container",
    DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    NO_PERMISSION: "no permission to use the NVIDIA devices (/dev/nvidia*)",
    LIB_RM_VERSION_MISMATCH: "the NVML library and the NVIDIA kernel driver have different "
    "versions; reload the driver or reboot",
})  # fmt: skip
_PROFILE_FIELDS = (
    "sliceCount", "multiprocessorCount", "copyEngineCount", "decoderCount", "encoderCount",
    "jpegCount", "ofaCount", "memorySizeMB",
)  # fmt: skip
_PCI_BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
_PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def semver3(text: str) -> str:
    """A version as Masterminds semver prints it: ``580.159.04`` -> ``580.159.4``."""
    core = text.strip().lstrip("v").split("-")[0].split("+")[0]
    parts = [*core.split("."), "0", "0"][:3]
    return ".".join(str(int(p)) for p in parts)


def cuda_version(value: int) -> str:
    """``nvmlSystemGetCudaDriverVersion`` as the driver publishes it: 13000 -> ``13.0.0``."""
    return semver3(f"{value // 1000}.{(value % 1000) // 10}")


def pci_bus_id(raw: bytes | str) -> str:
    """NVML ``busId`` -> ``resource.kubernetes.io/pciBusID``: ``00000000:00:06.0`` ->
    ``0000:00:06.0`` (lower case; the leading ``0000`` of an 8-digit domain dropped)."""
    text = _text(raw).lower()
    return text[4:] if re.match(r"^0{4}[0-9a-f]{4}:", text) else text


def pcie_root(sysfs: Path, bdf: str) -> str | None:
    """``pci<domain>:<bus>`` of the root complex above ``bdf``, from the sysfs device link."""
    link = sysfs / "bus" / "pci" / "devices" / bdf
    try:
        parts = link.resolve(strict=True).relative_to(sysfs.resolve()).parts
    except (OSError, ValueError):
        return None
    root = parts[1] if len(parts) > 2 and parts[0] == "devices" else ""
    return root if _PCIE_ROOT.match(root) else None


def numa_node(sysfs: Path, bdf: str) -> int | None:
    """The device's NUMA node from sysfs; None when missing or negative (no NUMA)."""
    try:
        value = int((sysfs / "bus" / "pci" / "devices" / bdf / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Session:
    lib: ModuleType
    node: str
    sysfs: Path
    warnings: list[str] = field(default_factory=list)

    def optional(self, call: Callable[[], T], label: str, what: str) -> T | None:
        """``call()``, or None with a warning when NVML says it is not supported."""
        try:
            return call()
        except self.lib.NVMLError as err:
            if err.value != NOT_SUPPORTED:
                raise
            self.warnings.append(f"{label}: {what} is not supported by NVML; left out")
            return None

    def named(self, label: str, what: str, names: Mapping[int, str], raw: int | None) -> str | None:
        """The driver's name of an NVML enum value; None (and a warning) if it has none."""
        if raw is not None and raw not in names:
            self.warnings.append(f"{label}: unknown NVML {what} value {raw}; left out")
        return names.get(raw) if raw is not None else None


def _quiet(lib: ModuleType, call: Callable[[], T]) -> T | None:
    """``call()``, or None where NVML answers NotSupported, InvalidArgument or NotFound."""
    try:
        return call()
    except lib.NVMLError as err:
        if err.value in (NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND):
            return None
        raise


def discover(
    nvml: ModuleType | None = None, *, node: str | None = None, sysfs: Path = Path("/sys")
) -> Inventory:
    """This machine's NVIDIA GPUs as ``gpu.nvidia.com`` ResourceSlices, read through NVML.

    GPUs in MIG mode are published as DynamicMIG partitionable devices (existing MIG
    devices statically); a GPU that fails (e.g. fell off the bus) is skipped with a
    warning. Raises :class:`DiscoveryError` when NVML cannot be used at all.
    """
    lib = nvml if nvml is not None else _import_pynvml()
    try:
        lib.nvmlInit()
    except lib.NVMLError as err:
        problem = _INIT_PROBLEMS.get(err.value, f"NVML failed to start ({err})")
        raise DiscoveryError(f"cannot read the GPUs through NVML: {problem}") from err
    try:
        return _discover(_Session(lib, node or socket.gethostname(), sysfs))
    except lib.NVMLError as err:
        raise DiscoveryError(f"cannot read the GPUs through NVML: {err}") from err
    finally:
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()


def _import_pynvml() -> ModuleType:
    try:  # here, never at import time: importing it is the first step of probing hardware
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise DiscoveryError(
            "cannot read the GPUs through NVML: the nvidia-ml-py package (module pynvml) is "
            "not installed; pip install nvidia-ml-py"
        ) from err


def _discover(s: _Session) -> Inventory:
    driver = semver3(_text(s.lib.nvmlSystemGetDriverVersion()))
    cuda_raw = s.optional(s.lib.nvmlSystemGetCudaDriverVersion, "system", "cudaDriverVersion")
    cuda = cuda_version(cuda_raw) if cuda_raw is not None else None
    gpus: list[tuple[str, int, mig.PartitionedGpu, bool]] = []  # bus id, minor, devices, dynamic
    for index in range(s.lib.nvmlDeviceGetCount()):
        try:
            gpus.append(_gpu(s, index, driver, cuda))
        except s.lib.NVMLError as err:
            why = "fell off the bus" if err.value == GPU_IS_LOST else "failed"
            s.warnings.append(f"GPU {index}: {why} (NVML: {err}); skipped")
    gpus.sort(key=lambda g: g[0])
    if any(dynamic for *_, dynamic in gpus):
        slices = mig.split_slices(s.node, [(minor, g) for _, minor, g, _ in gpus])
    else:
        devices = [d for _, _, g, _ in gpus for d in g.devices]
        slices = [nvidia.gpu_slice(s.node, devices)] if devices else []
    if not gpus:
        s.warnings.append("NVML found no usable GPU on this machine")
    return Inventory(
        name=s.node,
        description=f"{len(gpus)} NVIDIA GPU(s) of {s.node}, read through NVML (driver {driver})",
        slices=tuple(slices),
        device_classes=tuple(nvidia.device_classes()),
        simulated=False,
        source="nvml",
        warnings=tuple(s.warnings),
    )


def _gpu(
    s: _Session, index: int, driver: str, cuda: str | None
) -> tuple[str, int, mig.PartitionedGpu, bool]:
    lib = s.lib
    h = lib.nvmlDeviceGetHandleByIndex(index)
    minor = int(lib.nvmlDeviceGetMinorNumber(h))
    label = f"gpu-{minor}"
    bus = pci_bus_id(lib.nvmlDeviceGetPciInfo(h).busId)
    memory = s.optional(lambda: int(lib.nvmlDeviceGetMemoryInfo(h).total), label, "memory")
    arch = s.optional(lambda: int(lib.nvmlDeviceGetArchitecture(h)), label, "architecture")
    parent = _full_gpu(s, h, label, minor, bus, (driver, cuda), memory, arch)
    modes = _quiet(lib, lambda: list(lib.nvmlDeviceGetMigMode(h)))  # None: not MIG-capable
    if not modes or modes[0] != MIG_ENABLE:
        return bus, minor, mig.PartitionedGpu(None, (parent,)), False
    if len(modes) > 1 and modes[1] != modes[0]:
        s.warnings.append(f"{label}: a MIG mode change is pending; publishing the current mode")
    if memory is None:
        s.warnings.append(f"{label}: MIG mode is on but the memory size is unknown; no MIG")
        return bus, minor, mig.PartitionedGpu(None, ()), False
    profiles = mig_profiles(lib, h, memory)
    existing = _existing(s, h, label, {p.gi_profile_id: p for p in profiles})
    virt = _quiet(lib, lambda: int(lib.nvmlDeviceGetVirtualizationMode(h)))
    if virt == VIRTUALIZATION_VGPU or not profiles:
        why = "a vGPU guest" if profiles else "no MIG profile"
        s.warnings.append(f"{label}: MIG is on but {why}; only existing MIG devices published")
        static = tuple(mig.static_mig_device(parent, minor, m) for m in existing)
        return bus, minor, mig.PartitionedGpu(None, static), False
    if existing:
        s.warnings.append(
            f"{label}: {len(existing)} MIG device(s) exist; published as they are, with the "
            "placements left around them (the full GPU needs them destroyed)"
        )
    # Hopper and newer toggle MIG without a reset, so the full GPU stays on offer.
    full = arch is not None and ARCH_HOPPER <= arch < ARCH_UNKNOWN
    gpu = mig.partitioned_gpu(parent, minor, profiles, include_full=full, existing=existing)
    return bus, minor, gpu, True


def _full_gpu(
    s: _Session,
    h: Any,
    label: str,
    minor: int,
    bus: str,
    versions: tuple[str, str | None],
    memory: int | None,
    arch: int | None,
) -> Wire:
    """The full GPU: :func:`nvidia.gpu_device` with the real values, unknown ones left out."""
    lib, (driver, cuda) = s.lib, versions
    brand = s.optional(lambda: int(lib.nvmlDeviceGetBrand(h)), label, "brand")
    cc = s.optional(lambda: tuple(lib.nvmlDeviceGetCudaComputeCapability(h)), label, "CUDA cc")
    root = pcie_root(s.sysfs, bus)
    if root is None:
        s.warnings.append(f"{label}: no PCIe root found for {bus} under {s.sysfs}; left out")
    values = {
        "uuid": _text(lib.nvmlDeviceGetUUID(h)),
        "brand": s.named(label, "brand", BRANDS, brand),
        "architecture": s.named(label, "architecture", ARCHITECTURES, arch),
        "cudaComputeCapability": semver3(f"{cc[0]}.{cc[1]}") if cc is not None else None,
        "cudaDriverVersion": cuda,
        "resource.kubernetes.io/pciBusID": bus if _PCI_BUS_ID.match(bus) else None,
        "resource.kubernetes.io/pcieRoot": root,
    }
    size = str(Quantity.from_value(memory or 0, "BinarySI"))
    model = nvidia.GpuModel(_text(lib.nvmlDeviceGetName(h)), "", "", size, "")
    place = nvidia.GpuPlacement(bus, "", numa_node(s.sysfs, bus))
    device = nvidia.gpu_device(s.node, minor, model, place, driver_version=driver)
    attrs = device["attributes"]
    for key, value in values.items():  # keep the value type gpu_device gives each attribute
        attrs[key] = {next(iter(attrs[key])): value}
        if value is None:
            del attrs[key]
    if memory is None:
        del device["capacity"]
    if hasattr(lib, "nvmlDeviceGetAddressingMode"):  # like the driver: silent where unsupported
        mode = _quiet(lib, lambda: int(lib.nvmlDeviceGetAddressingMode(h)))
        if mode is not None and mode in ADDRESSING_MODES:
            attrs["addressingMode"] = {"string": ADDRESSING_MODES[mode]}
    return device


def mig_profiles(lib: ModuleType, handle: Any, memory: int) -> list[mig.MigProfile]:
    """The GPU's MIG profiles (C == G) and placements, as ``inspectMigProfilesAndPlacements``
    reads them; ``memory`` is the GPU's total in bytes (profile names depend on it)."""
    out = []
    for enum in range(int(getattr(lib, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12))):
        get = functools.partial(lib.nvmlDeviceGetGpuInstanceProfileInfo, handle, enum)
        info = _quiet(lib, get)
        if info is None or enum not in mig.GI_PROFILE_SHAPES:
            continue
        placements = _quiet(lib, functools.partial(_placements, lib, handle, int(info.id)))
        if placements is None:
            continue
        slices, suffix = mig.GI_PROFILE_SHAPES[enum]
        name = mig.profile_name(slices, int(info.memorySizeMB), memory, suffix)
        c = [int(getattr(info, f)) for f in _PROFILE_FIELDS]
        profile = mig.MigProfile(
            int(info.id), name, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], placements
        )
        out.append(profile)
    return out


def _placements(lib: ModuleType, h: Any, profile_id: int) -> tuple[tuple[int, int], ...]:
    """``nvmlDeviceGetGpuInstancePossiblePlacements``: a count call, then a fill call."""
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    array = (lib.c_nvmlGpuInstancePlacement_t * count.value)()
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(count))
    return tuple((int(array[i].start), int(array[i].size)) for i in range(count.value))


def _existing(
    s: _Session, h: Any, label: str, profiles: dict[int, mig.MigProfile]
) -> list[mig.ExistingMig]:
    """MIG devices that exist now (``getMigDevices``), one per GPU instance."""
    lib, out, seen = s.lib, [], set()
    for i in range(int(lib.nvmlDeviceGetMaxMigDeviceCount(h))):
        handle = _quiet(lib, functools.partial(lib.nvmlDeviceGetMigDeviceHandleByIndex, h, i))
        if handle is None:  # an empty slot
            continue
        gi = lib.nvmlDeviceGetGpuInstanceById(h, lib.nvmlDeviceGetGpuInstanceId(handle))
        info = lib.nvmlGpuInstanceGetInfo(gi)
        uuid = _text(lib.nvmlDeviceGetUUID(handle))
        profile = profiles.get(int(info.profileId))
        start, size = int(info.placement.start), int(info.placement.size)
        if profile is None or (profile.gi_profile_id, start) in seen:
            why = "an unknown profile" if profile is None else "a GPU instance already listed"
            s.warnings.append(f"{label}: MIG device {uuid} is on {why}; left out")
            continue
        seen.add((profile.gi_profile_id, start))
        out.append(mig.ExistingMig(profile, start, size, uuid))
    return out


def lists_process(pid: int) -> bool | None:
    """Whether NVML lists ``pid`` among the processes holding a GPU context: the
    framework-neutral sign that CUDA is initialised in it. None when NVML cannot tell
    (no driver here, or pids of another namespace in a container)."""
    try:
        lib = _import_pynvml()
    except DiscoveryError:
        return None
    try:
        lib.nvmlInit()
    except lib.NVMLError:
        return None
    try:
        for index in range(lib.nvmlDeviceGetCount()):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            if any(p.pid == pid for p in lib.nvmlDeviceGetComputeRunningProcesses(handle)):
                return True
        return False
    except lib.NVMLError:
        return None
    finally:
        lib.nvmlShutdown()

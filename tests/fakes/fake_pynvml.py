# ruff: noqa: N802, N803  (the names and parameter names are those of pynvml)
"""A fake ``pynvml`` module that answers as the real NVIDIA H200 of tests/fixtures/nvidia-h200.

Every value comes from that capture (driver 580.159.04, NVML 13.580.159.04, one H200 in a VM
with PCIe pass-through): ``nvml.json`` (what nvidia-ml-py returned, including which calls
raised NotSupported or InvalidArgument), ``topo-mig.txt`` (``nvidia-smi mig -lgipp``: the
possible placements, which the capture script failed to read through NVML) and
``nvidia-smi-q.xml`` (the addressing mode). Functions have the names, signatures and return
types of nvidia-ml-py 13.x: ``str`` from string calls, ctypes structs (``bytes`` char fields)
from struct calls, errors as the real ``pynvml.NVMLError`` subclasses with ``.value``.

Configurable: the number of GPUs (clones of the captured one with derived UUIDs, bus ids and
minors), MIG mode per GPU, existing MIG devices, lost GPUs, a missing library or unloaded
driver, the processes on each GPU or MIG device (:class:`FakeProcess`: a real test process's
pid, its memory, its kind and its SM utilisation, listed as NVML lists running processes
and samples their utilisation), each GPU's total energy counter (``energy``), and
``overrides`` (function name -> value to return, or NVMLError to raise).

Health, in NVML's own shapes: events (``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``,
``nvmlEventSetWait`` answering ``c_nvmlEventData_t``'s fields: ``device`` the handle,
``eventType`` e.g. ``nvmlEventTypeXidCriticalError``, ``eventData`` the XID; or
``NVML_ERROR_TIMEOUT``), the uncorrectable ECC counter, remapped rows and throttle reasons,
each GPU's as the test sets them (:meth:`FakePynvml.inject_xid`, :meth:`FakePynvml.fall_off_bus`,
``ecc``, ``remapped``, ``throttle``) or as a ``health`` file says (another process's fake:
:func:`write_health`, read again at each call).
"""

from __future__ import annotations

import importlib
import json
import queue
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType, SimpleNamespace
from typing import Any, Literal

# Untyped (no stubs): through importlib it is a ModuleType, its attributes Any.
pynvml = importlib.import_module("pynvml")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-h200"
_ERRORS = MappingProxyType({"NVMLError_NotSupported": 3, "NVMLError_InvalidArgument": 2})
_ADDRESSING = MappingProxyType({"None": 0, "HMM": 1, "ATS": 2})


@dataclass(frozen=True)
class Capture:
    """What the real machine said: ``nvml.json``, placements and addressing mode."""

    nvml: dict[str, Any]
    placements: dict[int, tuple[tuple[int, int], ...]]  # GI profile id -> (start, size)
    addressing_mode: int | None  # None: NotSupported (nvidia-smi prints N/A)

    @property
    def device(self) -> dict[str, Any]:
        gpu: dict[str, Any] = self.nvml["devices"][0]
        return gpu


def parse_placements(text: str) -> dict[int, tuple[tuple[int, int], ...]]:
    """``nvidia-smi mig -lgipp``: ``GPU  0 Profile ID 19 Placements: {0,1,...}:1``."""
    out: dict[int, tuple[tuple[int, int], ...]] = {}
    pattern = r"Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)"
    for profile_id, starts, size in re.findall(pattern, text):
        out[int(profile_id)] = tuple((int(s), int(size)) for s in starts.split(","))
    return out


def load_capture(directory: Path = FIXTURES) -> Capture:
    nvml = json.loads((directory / "nvml.json").read_text())
    placements = parse_placements((directory / "topo-mig.txt").read_text())
    mode = ET.parse(directory / "nvidia-smi-q.xml").findtext("gpu/addressing_mode", "N/A")
    return Capture(nvml, placements, _ADDRESSING.get(mode.strip()))


@dataclass(frozen=True)
class FakeProcess:
    """A process NVML lists on a device: compute and/or graphics, holding ``memory`` bytes
    (None: NVML_VALUE_NOT_AVAILABLE, which nvidia-ml-py gives as None), with SM utilisation
    ``sm`` percent in its latest sample (None: NVML has no sample of it)."""

    pid: int
    memory: int | None = None
    kinds: tuple[str, ...] = ("compute",)
    sm: int | None = None
    memory_util: int = 0


def read_world(path: Path) -> dict[int | tuple[int, int], list[FakeProcess]]:
    """The processes of a world file (see ``FakePynvml.world``); none while it is missing."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out: dict[int | tuple[int, int], list[FakeProcess]] = {}
    for where, rows in data.items():
        gpu, _, slot = where.partition("/")
        key: int | tuple[int, int] = (int(gpu), int(slot)) if slot else int(gpu)
        out[key] = [
            FakeProcess(
                int(r["pid"]), r.get("memory"), tuple(r.get("kinds", ["compute"])), r.get("sm")
            )
            for r in rows
        ]
    return out


def write_world(path: Path, processes: Mapping[str, Sequence[FakeProcess]]) -> None:
    """Write a world file atomically (the reader never sees half of it)."""
    data = {
        where: [
            {"pid": p.pid, "memory": p.memory, "kinds": list(p.kinds), "sm": p.sm} for p in rows
        ]
        for where, rows in processes.items()
    }
    part = path.with_suffix(".part")
    part.write_text(json.dumps(data))
    part.replace(path)


def write_health(path: Path, health: Mapping[str, Any]) -> None:
    """Write a health file atomically: ``{"events": [[gpu, eventType, eventData], ...],
    "ecc": {"0": uncorrected}, "remapped": {"0": [corr, unc, pending, failure]}, "lost":
    [gpu, ...], "throttle": {"0": reasons}}``. Events are delivered once each, in order: a
    test appends to the list."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(health))
    part.replace(path)


@dataclass(frozen=True)
class Handle:
    index: int


@dataclass(frozen=True)
class MigHandle:
    parent: int
    slot: int


@dataclass(frozen=True)
class GpuInstance:
    parent: int
    gi_id: int


class FakePynvml(ModuleType):
    """The ``pynvml`` API over the capture; ``calls`` records every call by name."""

    def __init__(
        self,
        capture: Capture | None = None,
        *,
        gpus: int = 1,
        mig: bool | Sequence[bool] = False,
        mig_devices: Mapping[int, Sequence[tuple[int, int]]] | None = None,
        lost: Sequence[int] = (),
        lost_at: Literal["handle", "query"] = "query",
        library_missing: bool = False,
        driver_not_loaded: bool = False,
        overrides: Mapping[str, Any] | None = None,
        processes: Mapping[int | tuple[int, int], Sequence[FakeProcess]] | None = None,
        energy: Mapping[int, int] | None = None,
        world: Path | None = None,
        health: Path | None = None,
    ) -> None:
        super().__init__("pynvml", "fake pynvml answering from a captured NVIDIA H200")
        for name in dir(pynvml):  # constants, error classes and structs are the real ones
            if name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo", "nvmlMemory")):
                setattr(self, name, getattr(pynvml, name))
        self.NVMLError = pynvml.NVMLError
        self.capture = capture or load_capture()
        self.gpus = gpus
        self.mig = [mig] * gpus if isinstance(mig, bool) else list(mig)
        self.mig_devices = {k: list(v) for k, v in (mig_devices or {}).items()}
        for index, devices in self.mig_devices.items():
            for profile_id, start in devices:
                if not self.mig[index] or start not in dict(self.capture.placements[profile_id]):
                    raise ValueError(f"GPU {index}: no MIG placement {profile_id}@{start}")
        self.lost, self.lost_at = set(lost), lost_at
        self.library_missing, self.driver_not_loaded = library_missing, driver_not_loaded
        self.overrides = dict(overrides or {})
        # GPU index, or (GPU index, MIG slot) -> its processes
        self.processes = {k: list(v) for k, v in (processes or {}).items()}
        # GPU index -> its total energy counter, millijoules (not captured: NotSupported)
        self.energy = dict(energy or {})
        # a JSON file of processes, read again at each listing (another process's fake:
        # the daemon's, that the test changes): {"0": [{"pid": 1, "memory": 2, "sm": 3}],
        # "0/1": [...] for MIG slot 1 of GPU 0}
        self.world = world
        self.initialized = False
        self.calls: list[str] = []
        # health: events waiting to be delivered (GPU index, eventType, eventData), and each
        # GPU's counters (uncorrectable volatile ECC errors, remapped rows, throttle reasons)
        self.events: queue.Queue[tuple[int, int, int]] = queue.Queue()
        self.ecc: dict[int, int] = {}
        self.remapped: dict[int, tuple[int, int, int, int]] = {}
        self.throttle: dict[int, int] = {}
        self.registered: dict[int, int] = {}  # GPU index -> event types registered
        self.health_file = health
        self._delivered = 0  # events of the health file delivered so far

    # --- plumbing -----------------------------------------------------------------------

    def _enter(self, name: str, handle: Handle | MigHandle | None = None) -> Any:
        """Record the call; raise as NVML would; return an override if there is one."""
        self.calls.append(name)
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        index = handle.index if isinstance(handle, Handle) else getattr(handle, "parent", None)
        if index in self.lost and (self.lost_at == "query" or name.endswith("ByIndex")):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        value = self.overrides.get(name)
        if isinstance(value, pynvml.NVMLError):
            raise value
        return value

    def _uuid(self, index: int, prefix: str = "GPU-") -> str:
        """The captured UUID for GPU 0; clones count up in the last group."""
        uuid: str = self.capture.device["uuid"].removeprefix("GPU-")
        head, last = uuid.rsplit("-", 1)
        return f"{prefix}{head}-{(int(last, 16) + index) % 16**12:012x}"

    def _pci(self, index: int) -> tuple[int, int, int]:
        pci = self.capture.device["pci"]
        return int(pci["domain"]), int(pci["bus"]), int(pci["device"]) + index

    # --- system ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.library_missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if self.driver_not_loaded:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        value = self._enter("nvmlSystemGetDriverVersion")
        return str(value if value is not None else self.capture.nvml["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        value = self._enter("nvmlSystemGetCudaDriverVersion")
        return int(value if value is not None else self.capture.nvml["cuda_driver"])

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return str(self.capture.nvml["nvml"])

    def nvmlDeviceGetCount(self) -> int:
        value = self._enter("nvmlDeviceGetCount")
        return int(value if value is not None else self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._enter("nvmlDeviceGetHandleByIndex", Handle(index))
        if not 0 <= index < self.gpus:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(index)

    # --- identity -------------------------------------------------------------------------

    def _get(self, name: str, handle: Handle, default: Any) -> Any:
        value = self._enter(name, handle)
        return value if value is not None else default

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return str(self._get("nvmlDeviceGetName", handle, self.capture.device["name"]))

    def nvmlDeviceGetUUID(self, handle: Handle | MigHandle) -> str:
        if isinstance(handle, MigHandle):
            self._enter("nvmlDeviceGetUUID", handle)
            return self._uuid(100 * (handle.parent + 1) + handle.slot, "MIG-")
        return str(self._get("nvmlDeviceGetUUID", handle, self._uuid(handle.index)))

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        minor = int(self.capture.device["minor"]) + handle.index
        return int(self._get("nvmlDeviceGetMinorNumber", handle, minor))

    def _on(self, handle: Handle | MigHandle) -> list[FakeProcess]:
        key = handle.index if isinstance(handle, Handle) else (handle.parent, handle.slot)
        if self.world is not None:
            self.processes = read_world(self.world)
        return self.processes.get(key, [])

    def _running(self, name: str, kind: str, handle: Handle | MigHandle) -> list[Any]:
        pids = self._enter(name, handle)
        if pids is not None:  # overrides: pids only
            return [SimpleNamespace(pid=pid, usedGpuMemory=None) for pid in pids]
        listed = [
            SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=p.memory,
                gpuInstanceId=handle.slot + 1 if isinstance(handle, MigHandle) else 0xFFFFFFFF,
                computeInstanceId=0 if isinstance(handle, MigHandle) else 0xFFFFFFFF,
            )
            for p in self._on(handle)
            if kind in p.kinds
        ]
        if kind == "compute" and isinstance(handle, Handle):
            captured = self.capture.device["procs"]  # empty on the captured GPU
            listed += [SimpleNamespace(pid=p["pid"], usedGpuMemory=None) for p in captured]
        return listed

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle | MigHandle) -> list[Any]:
        """The processes given for this device (compute), then the capture's (none on the
        captured GPU); ``overrides`` may give pids instead, as
        ``{"nvmlDeviceGetComputeRunningProcesses": [pid, ...]}``."""
        return self._running("nvmlDeviceGetComputeRunningProcesses", "compute", handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Handle | MigHandle) -> list[Any]:
        """The processes given for this device with a graphics context."""
        return self._running("nvmlDeviceGetGraphicsRunningProcesses", "graphics", handle)

    def nvmlDeviceGetProcessUtilization(
        self, handle: Handle | MigHandle, lastSeenTimeStamp: int
    ) -> list[Any]:
        """One sample per given process with an ``sm`` value, stamped now; NotFound when
        there is none (as NVML answers), NotSupported on a MIG device."""
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        if isinstance(handle, MigHandle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        stamp = int(time.time() * 1_000_000)
        samples = []
        for process in self._on(handle):
            if process.sm is not None and stamp > lastSeenTimeStamp:
                sample = pynvml.c_nvmlProcessUtilizationSample_t()
                sample.pid, sample.timeStamp = process.pid, stamp
                sample.smUtil, sample.memUtil = process.sm, process.memory_util
                samples.append(sample)
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle | MigHandle) -> int:
        """The GPU's counter as given in ``energy`` (millijoules); NotSupported for a GPU
        not given (the capture has none) and for a MIG device."""
        value = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        if value is not None:
            return int(value)
        if isinstance(handle, MigHandle) or handle.index not in self.energy:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self.energy[handle.index])

    def nvmlDeviceGetBrand(self, handle: Handle) -> int:
        return int(self._get("nvmlDeviceGetBrand", handle, self.capture.device["brand"]))

    def nvmlDeviceGetArchitecture(self, handle: Handle) -> int:
        return int(self._get("nvmlDeviceGetArchitecture", handle, self.capture.device["arch"]))

    def nvmlDeviceGetCudaComputeCapability(self, handle: Handle) -> tuple[int, int]:
        major, minor = self._get(
            "nvmlDeviceGetCudaComputeCapability", handle, self.capture.device["cc"]
        )
        return int(major), int(minor)

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        self._enter("nvmlDeviceGetPciInfo", handle)
        pci, (domain, bus, device) = self.capture.device["pci"], self._pci(handle.index)
        info = pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.0".encode()
        info.busId = f"{domain:08X}:{bus:02X}:{device:02X}.0".encode()
        info.domain, info.bus, info.device = domain, bus, device
        info.pciDeviceId, info.pciSubSystemId = pci["pciDeviceId"], pci["pciSubSystemId"]
        return info

    def nvmlDeviceGetMemoryInfo(
        self, handle: Handle | MigHandle, version: int | None = None
    ) -> Any:
        """As captured for a GPU. No MIG device was captured: a MIG device's memory is
        NotSupported here unless ``overrides`` gives a value."""
        value = self._enter("nvmlDeviceGetMemoryInfo", handle)
        if value is not None:
            return value
        if isinstance(handle, MigHandle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        memory = self.capture.device["memory"]
        info = pynvml.c_nvmlMemory_t() if not version else pynvml.c_nvmlMemory_v2_t()
        info.total, info.free, info.used = memory["total"], memory["free"], memory["used"]
        return info

    def nvmlDeviceGetUtilizationRates(self, handle: Handle | MigHandle) -> Any:
        """As captured (``util``); NotSupported for a MIG device, as NVML answers."""
        value = self._enter("nvmlDeviceGetUtilizationRates", handle)
        if isinstance(handle, MigHandle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if value is not None:
            return value
        info = pynvml.c_nvmlUtilization_t()
        util = self.capture.device["util"]
        info.gpu, info.memory = util["gpu"], util["memory"]
        return info

    def nvmlDeviceGetTemperature(self, handle: Handle | MigHandle, sensor: int) -> int:
        """As captured (``temp``, the GPU sensor); NotSupported for a MIG device."""
        value = self._enter("nvmlDeviceGetTemperature", handle)
        if isinstance(handle, MigHandle) or sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(value if value is not None else self.capture.device["temp"])

    def nvmlDeviceGetNumaNodeId(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetNumaNodeId", handle)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as captured

    def nvmlDeviceGetAddressingMode(self, handle: Handle) -> int:
        mode = self._get("nvmlDeviceGetAddressingMode", handle, self.capture.addressing_mode)
        if mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(mode)

    def nvmlDeviceGetVirtualizationMode(self, handle: Handle) -> int:
        mode = self.capture.device["vgpu_mode"]
        return int(self._get("nvmlDeviceGetVirtualizationMode", handle, mode))

    # --- MIG --------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        captured = [int(m) for m in self.capture.device["mig_mode"]]
        modes = [1, 1] if self.mig[handle.index] else captured
        return list(self._get("nvmlDeviceGetMigMode", handle, modes))

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Handle, profile: int, version: int = 2
    ) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo", device)
        entry = self.capture.device["gi_profiles"].get(str(profile))
        if entry is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if "error" in entry:
            raise pynvml.NVMLError(_ERRORS[entry["error"].split(":")[0]])
        info: Any = (
            pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            if version == 2
            else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        )
        for name, _ in info._fields_:
            value = entry[name]
            setattr(info, name, value.encode() if isinstance(value, str) else value)
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Handle, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        self._enter("nvmlDeviceGetGpuInstancePossiblePlacements", device)
        placements = self.capture.placements.get(profileId)
        if placements is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        count = countRef._obj  # the c_uint behind ctypes.byref()
        if placementsRef is None:
            count.value = len(placements)
            return int(pynvml.NVML_SUCCESS)
        if count.value < len(placements):
            count.value = len(placements)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, (start, size) in enumerate(placements):
            placementsRef[i].start, placementsRef[i].size = start, size
        count.value = len(placements)
        return int(pynvml.NVML_SUCCESS)

    def _max_mig(self, index: int) -> int:
        """As captured with MIG off (0); with MIG on, the most instances of any profile."""
        if not self.mig[index]:
            return int(self.capture.device["max_mig"])
        profiles = self.capture.device["gi_profiles"].values()
        return max(int(p["instanceCount"]) for p in profiles if "error" not in p)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", device)
        return self._max_mig(device.index)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Handle, index: int) -> MigHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if index >= self._max_mig(device.index):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(self.mig_devices.get(device.index, ())):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return MigHandle(device.index, index)

    def nvmlDeviceGetGpuInstanceId(self, device: MigHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", device)
        return device.slot + 1  # NVML numbers GPU instances from 1 up, in creation order

    def nvmlDeviceGetComputeInstanceId(self, device: MigHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", device)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, device: Handle, gpuInstanceId: int) -> GpuInstance:
        self._enter("nvmlDeviceGetGpuInstanceById", device)
        if not 1 <= gpuInstanceId <= len(self.mig_devices.get(device.index, ())):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return GpuInstance(device.index, gpuInstanceId)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: GpuInstance) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        profile_id, start = self.mig_devices[gpuInstance.parent][gpuInstance.gi_id - 1]
        sizes = dict(self.capture.placements[profile_id])
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = gpuInstance.gi_id, profile_id
        info.placement.start, info.placement.size = start, sizes[start]
        return info

    # --- health ---------------------------------------------------------------------------

    def inject_event(self, index: int, event_type: int, data: int = 0) -> None:
        """NVML reports ``event_type`` on GPU ``index`` (delivered if registered)."""
        self.events.put((index, event_type, data))

    def inject_xid(self, index: int, xid: int) -> None:
        self.inject_event(index, pynvml.nvmlEventTypeXidCriticalError, xid)

    def fall_off_bus(self, index: int) -> None:
        """XID 79, and every later query of the GPU answers GPU_IS_LOST."""
        self.lost.add(index)
        self.inject_xid(index, 79)

    def _read_health(self) -> None:
        """The health file's state (another process's test writes it)."""
        if self.health_file is None:
            return
        try:
            data = json.loads(self.health_file.read_text())
        except (OSError, ValueError):
            return
        events = data.get("events", [])
        for gpu, kind, value in events[self._delivered :]:
            self.events.put((int(gpu), int(kind), int(value)))
        self._delivered = len(events)
        self.ecc = {int(k): int(v) for k, v in data.get("ecc", {}).items()}
        self.remapped = {int(k): tuple(v) for k, v in data.get("remapped", {}).items()}
        self.throttle = {int(k): int(v) for k, v in data.get("throttle", {}).items()}
        self.lost |= {int(g) for g in data.get("lost", [])}

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        return SimpleNamespace(kind="c_nvmlEventSet_t")

    def nvmlDeviceGetSupportedEventTypes(self, handle: Handle) -> int:
        """Every event type (the H200's answer was not captured)."""
        return int(self._get("nvmlDeviceGetSupportedEventTypes", handle, pynvml.nvmlEventTypeAll))

    def nvmlDeviceRegisterEvents(self, handle: Handle, eventTypes: int, eventSet: Any) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        self.registered[handle.index] = self.registered.get(handle.index, 0) | int(eventTypes)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        """The next registered event, as ``c_nvmlEventData_t``'s fields; NVML_ERROR_TIMEOUT
        when none came within ``timeoutms``."""
        self._enter("nvmlEventSetWait")
        deadline = time.monotonic() + timeoutms / 1000
        while True:
            self._read_health()
            left = deadline - time.monotonic()
            try:
                index, kind, data = self.events.get(timeout=max(0.0, min(left, 0.02)))
            except queue.Empty:
                if left <= 0:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
                continue
            if self.registered.get(index, 0) & kind:
                return SimpleNamespace(
                    device=Handle(index),
                    eventType=kind,
                    eventData=data,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, errorType: int, counterType: int) -> int:
        """The uncorrectable volatile counter as set (0 as captured); others 0."""
        value = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        self._read_health()
        if value is not None:
            return int(value)
        wanted = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return self.ecc.get(handle.index, 0) if (errorType, counterType) == wanted else 0

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        """(corrected, uncorrected, pending, failure) as set; none as captured."""
        self._enter("nvmlDeviceGetRemappedRows", handle)
        self._read_health()
        return self.remapped.get(handle.index, (0, 0, 0, 0))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        self._read_health()
        return int(self.throttle.get(handle.index, pynvml.nvmlClocksEventReasonGpuIdle))

"""Metrics read through NVML: memory, utilisation and temperature of each GPU, and memory
of each existing MIG device (NVML reports neither utilisation nor temperature for MIG);
and the processes on each of them (:meth:`NvmlSource.processes`): compute and graphics
contexts, the memory each holds, and its recent utilisation where NVML samples it; and
each GPU's total energy counter (:meth:`NvmlSource.energy`).

NVML is initialised on the first sample and shut down by :meth:`NvmlSource.close`. Any
NVML error leaves that value (or that device) out: a sample is never an exception.
Devices are matched to the inventory by UUID, so a sample's ``device`` is the key that
``dra.devices()`` shows.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Collection
from functools import partial
from types import ModuleType
from typing import Any, TypeVar

from dra_jupyter.inventory.base import Inventory
from dra_jupyter.metrics.base import DeviceProcess, Sample, device_key

T = TypeVar("T")

MIG_ENABLE = 1
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU


def uuid_keys(inventory: Inventory) -> dict[str, str]:
    """UUID -> ``driver/pool/device`` for every device of the inventory that has one."""
    keys = {}
    for s in inventory.slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            uuid = ((d.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid:
                keys[uuid] = device_key(spec["driver"], spec["pool"]["name"], d["name"])
    return keys


class NvmlSource:
    """Samples the GPUs (and MIG devices) of an inventory read through NVML."""

    name = "nvml"
    simulated = False

    def __init__(self, inventory: Inventory, nvml: ModuleType | None = None) -> None:
        self.keys = uuid_keys(inventory)
        self._nvml = nvml
        self._lib: ModuleType | None = None
        self.problem = ""

    def _start(self) -> ModuleType | None:
        if self._lib is not None:
            return self._lib
        try:
            lib = self._nvml if self._nvml is not None else importlib.import_module("pynvml")
        except ImportError:
            self.problem = "the nvidia-ml-py package (module pynvml) is not installed"
            return None
        try:
            lib.nvmlInit()
        except lib.NVMLError as err:
            self.problem = f"NVML failed to start ({err})"
            return None
        self.problem = ""
        self._lib = lib
        return lib

    def close(self) -> None:
        lib, self._lib = self._lib, None
        if lib is not None:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlShutdown()

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        lib = self._start()
        if lib is None:
            return []
        count = _try(lib, lib.nvmlDeviceGetCount)
        out = []
        for index in range(count or 0):
            handle = _try(lib, partial(lib.nvmlDeviceGetHandleByIndex, index))
            if handle is None:
                continue
            key = self._key(lib, handle)
            if key is not None:
                out.append(self._measure(lib, handle, key, now, mig=False))
            modes = _try(lib, partial(lib.nvmlDeviceGetMigMode, handle))
            if modes and modes[0] == MIG_ENABLE:
                out.extend(self._mig_samples(lib, handle, now))
        return out

    def processes(self, now: float, since: float = 0.0) -> list[DeviceProcess] | None:
        """The processes holding a context on each device of the inventory: on a GPU, or,
        with MIG on, on each of its MIG devices (where NVML lists them), with the memory
        each holds and its SM utilisation in NVML's samples newer than ``since`` (seconds
        since the epoch; a process without a sample has None). None when NVML cannot be
        used; a device that cannot be read is left out."""
        lib = self._start()
        if lib is None:
            return None
        out: list[DeviceProcess] = []
        for index in range(_try(lib, lib.nvmlDeviceGetCount) or 0):
            handle = _try(lib, partial(lib.nvmlDeviceGetHandleByIndex, index))
            if handle is None:
                continue
            modes = _try(lib, partial(lib.nvmlDeviceGetMigMode, handle))
            if modes and modes[0] == MIG_ENABLE:
                slots = _try(lib, partial(lib.nvmlDeviceGetMaxMigDeviceCount, handle))
                for slot in range(int(slots or 0)):
                    mig = _try(lib, partial(lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot))
                    if mig is not None:
                        out.extend(self._processes_on(lib, mig, now, since))
            else:
                out.extend(self._processes_on(lib, handle, now, since))
        return out

    def energy(self) -> dict[str, float] | None:
        """Each whole GPU's total energy counter (joules since the driver loaded; NVML's
        millijoules), where NVML gives it (Volta and later); None when NVML cannot be used.
        A MIG device has none of its own."""
        lib = self._start()
        if lib is None:
            return None
        out: dict[str, float] = {}
        for index in range(_try(lib, lib.nvmlDeviceGetCount) or 0):
            handle = _try(lib, partial(lib.nvmlDeviceGetHandleByIndex, index))
            key = self._key(lib, handle) if handle is not None else None
            if key is None:
                continue
            total = _try(lib, partial(lib.nvmlDeviceGetTotalEnergyConsumption, handle))
            if total is not None:
                out[key] = int(total) / 1000
        return out

    def _processes_on(
        self, lib: ModuleType, handle: Any, now: float, since: float
    ) -> list[DeviceProcess]:
        key = self._key(lib, handle)
        if key is None:
            return []
        kinds: dict[int, list[str]] = {}
        memory: dict[int, int | None] = {}
        for kind, listing in (
            ("compute", lib.nvmlDeviceGetComputeRunningProcesses),
            ("graphics", lib.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            for process in _try(lib, partial(listing, handle)) or ():
                pid = int(process.pid)
                kinds.setdefault(pid, []).append(kind)
                used = getattr(process, "usedGpuMemory", None)  # None: NVML cannot say
                if used is not None or pid not in memory:
                    memory[pid] = int(used) if used is not None else None
        utilization = _process_utilization(lib, handle, since) if kinds else {}
        return [
            DeviceProcess(key, pid, now, tuple(k), memory[pid], utilization.get(pid))
            for pid, k in sorted(kinds.items())
        ]

    def _mig_samples(self, lib: ModuleType, parent: Any, now: float) -> list[Sample]:
        out = []
        for slot in range(_try(lib, lambda: int(lib.nvmlDeviceGetMaxMigDeviceCount(parent))) or 0):
            handle = _try(lib, partial(lib.nvmlDeviceGetMigDeviceHandleByIndex, parent, slot))
            key = self._key(lib, handle) if handle is not None else None
            if key is not None:
                out.append(self._measure(lib, handle, key, now, mig=True))
        return out

    def _key(self, lib: ModuleType, handle: Any) -> str | None:
        uuid = _try(lib, lambda: lib.nvmlDeviceGetUUID(handle))
        if uuid is None:
            return None
        return self.keys.get(uuid.decode() if isinstance(uuid, bytes) else str(uuid))

    def _measure(self, lib: ModuleType, handle: Any, key: str, now: float, *, mig: bool) -> Sample:
        memory = _try(lib, lambda: lib.nvmlDeviceGetMemoryInfo(handle))
        utilization = None if mig else _try(lib, lambda: lib.nvmlDeviceGetUtilizationRates(handle))
        temperature = (
            None
            if mig
            else _try(lib, lambda: lib.nvmlDeviceGetTemperature(handle, TEMPERATURE_GPU))
        )
        return Sample(
            device=key,
            time=now,
            memory_used=int(memory.used) if memory is not None else None,
            memory_total=int(memory.total) if memory is not None else None,
            utilization=float(utilization.gpu) if utilization is not None else None,
            temperature=float(temperature) if temperature is not None else None,
        )


def _process_utilization(lib: ModuleType, handle: Any, since: float) -> dict[int, float]:
    """pid -> the highest SM utilisation (percent) of its NVML samples newer than ``since``
    (NVML keeps a few seconds of them; none, or not supported, as on a MIG device: {})."""
    stamp = max(0, int(since * 1_000_000))  # NVML's timestamps are in microseconds
    samples = _try(lib, lambda: lib.nvmlDeviceGetProcessUtilization(handle, stamp)) or ()
    out: dict[int, float] = {}
    for sample in samples:
        pid, value = int(sample.pid), float(sample.smUtil)
        out[pid] = max(out.get(pid, value), value)
    return out


def _try(lib: ModuleType, call: Callable[[], T]) -> T | None:
    """``call()``, or None for any NVML error (not supported, GPU lost, ...)."""
    try:
        return call()
    except lib.NVMLError:
        return None

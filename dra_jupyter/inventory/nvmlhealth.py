"""The GPUs' health as NVML tells it: events waited for, counters read, each a taint or a
warning of :mod:`dra_jupyter.model.health`, by GPU (its minor number: ``gpu-<minor>``).

:class:`NvmlHealth` opens NVML once and keeps it open (an event set lives in an NVML
session): ``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents`` for each GPU with the
events of :data:`~dra_jupyter.model.health.WATCHED_EVENTS` it supports, then
:meth:`~NvmlHealth.wait` (``nvmlEventSetWait``, which answers ``NVML_ERROR_TIMEOUT`` when
nothing happened) and :meth:`~NvmlHealth.poll` (uncorrectable ECC errors, remapped rows,
``NVML_ERROR_GPU_IS_LOST``, throttle reasons). A GPU that supports no events (a vGPU guest,
some consumer boards) is polled only. Use it from one thread.

Nothing here runs at import time; ``nvml`` may be any module with pynvml's API (a fake for
tests, at this seam only).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from dra_jupyter.errors import DiscoveryError
from dra_jupyter.inventory.nvml import GPU_IS_LOST, NOT_SUPPORTED, _import_pynvml
from dra_jupyter.model import health
from dra_jupyter.model.health import HealthTaint

T = TypeVar("T")
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
# nvml.h: nvmlMemoryErrorType_t, nvmlEccCounterType_t
UNCORRECTED, VOLATILE = 1, 0


@dataclass(frozen=True)
class Signal:
    """What NVML said of GPU ``minor``: a taint, or a warning (throttling)."""

    minor: int
    taint: HealthTaint | None = None
    warning: str | None = None


@dataclass
class _Gpu:
    index: int
    minor: int
    handle: Any
    lost: bool = False


def handle_key(handle: Any) -> Any:
    """What identifies a device handle: the address a ctypes pointer holds (each
    ``nvmlEventSetWait`` answer is a new pointer object), else the handle itself."""
    with contextlib.suppress(TypeError, ValueError):
        if isinstance(handle, ctypes._Pointer):
            return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


class NvmlHealth:
    """An open NVML session watching every GPU's health (see the module docstring)."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self.lib = nvml if nvml is not None else _import_pynvml()
        lib = self.lib
        try:
            lib.nvmlInit()
        except lib.NVMLError as err:
            raise DiscoveryError(f"health: cannot start NVML ({err})") from err
        self.gpus: list[_Gpu] = []
        self.early: list[Signal] = []  # what opening found (a GPU lost already)
        self.event_set: Any = None
        try:
            self._open()
        except lib.NVMLError as err:
            self.close()
            raise DiscoveryError(f"health: cannot read the GPUs through NVML ({err})") from err

    def _open(self) -> None:
        lib = self.lib
        self.event_set = lib.nvmlEventSetCreate()
        for index in range(int(lib.nvmlDeviceGetCount())):
            try:
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                minor = int(lib.nvmlDeviceGetMinorNumber(handle))
            except lib.NVMLError as err:
                if err.value != GPU_IS_LOST:
                    raise
                # its minor is unknown: the inventory (which skips lost GPUs) has no device
                continue
            gpu = _Gpu(index, minor, handle)
            self.gpus.append(gpu)
            try:
                supported = int(lib.nvmlDeviceGetSupportedEventTypes(handle))
                wanted = supported & health.WATCHED_EVENTS
                if wanted:
                    lib.nvmlDeviceRegisterEvents(handle, wanted, self.event_set)
            except lib.NVMLError as err:
                if err.value == GPU_IS_LOST:
                    gpu.lost = True
                    self.early.append(Signal(minor, health.gpu_lost()))
                elif err.value != NOT_SUPPORTED:
                    raise
        self._by_handle = {handle_key(g.handle): g for g in self.gpus}

    def wait(self, timeout_ms: int) -> list[Signal]:
        """The next event, waited for up to ``timeout_ms`` (none: an empty list)."""
        early, self.early = self.early, []
        if early:
            return early
        lib = self.lib
        try:
            data = lib.nvmlEventSetWait(self.event_set, timeout_ms)
        except lib.NVMLError as err:
            # TIMEOUT: nothing happened; GPU_IS_LOST: a GPU of the set is gone, which the
            # poll finds out (by GPU) at its next reading
            if err.value in (TIMEOUT, GPU_IS_LOST):
                return []
            raise
        gpu = self._by_handle.get(handle_key(data.device))
        taint = health.of_event(int(data.eventType), int(data.eventData))
        if gpu is None or taint is None:
            return []
        return [Signal(gpu.minor, taint)]

    def poll(self) -> list[Signal]:
        """Each GPU's counters now: uncorrectable ECC errors, remapped rows, lost, throttle."""
        out: list[Signal] = []
        for gpu in self.gpus:
            try:
                out += self._read(gpu)
            except self.lib.NVMLError as err:
                if err.value != GPU_IS_LOST:
                    raise
                out.append(Signal(gpu.minor, health.gpu_lost()))
        return out

    def _read(self, gpu: _Gpu) -> list[Signal]:
        lib, h = self.lib, gpu.handle
        ecc = self._optional(lambda: lib.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE))
        taints = [health.of_ecc(int(ecc)) if ecc is not None else None]
        rows = self._optional(lambda: lib.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            taints.append(health.of_remapped_rows(bool(rows[2]), bool(rows[3])))
        out = [Signal(gpu.minor, t) for t in taints if t is not None]
        reasons = self._optional(lambda: lib.nvmlDeviceGetCurrentClocksEventReasons(h))
        if reasons is not None:
            out += [Signal(gpu.minor, warning=w) for w in health.throttle_warnings(int(reasons))]
        return out

    def _optional(self, call: Callable[[], T]) -> T | None:
        """``call()``, or None where NVML says the GPU does not support it."""
        try:
            return call()
        except self.lib.NVMLError as err:
            if err.value == NOT_SUPPORTED:
                return None
            raise

    def close(self) -> None:
        """Free the event set and end the NVML session (both errors of a lost GPU aside)."""
        lib = self.lib
        if self.event_set is not None:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlEventSetFree(self.event_set)
            self.event_set = None
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()

"""What NVML's health signals mean for a device: a taint in our model, a warning, or nothing.

A GPU that fails is taken out of service the way Kubernetes 1.37 takes a device out: a
device taint (key, value, effect), which allocation, explanations and counts already
honour (:mod:`dra_jupyter.model.taintrules`). This module decides which taint a signal
calls for, with a one-line meaning a user can read:

- **XIDs** (``nvmlEventTypeXidCriticalError``, the XID in ``eventData``): the critical ones
  of NVIDIA's catalogue (https://docs.nvidia.com/deploy/xid-errors/) each get a taint
  ``gpu.nvidia.com/xid=<n>``. ``NoExecute`` where the GPU cannot be trusted with the work
  it has (79 off the bus, 48/95 uncorrectable ECC, 64 row remapping failed, 74 NVLink, 119/120
  GSP); ``NoSchedule`` where the work running survived but the GPU needs a reset or an
  admin's look before new work (63 row remapping pending, 92 high single-bit ECC rate, 94
  contained ECC). XIDs that an application causes (13, 31, 43, 45, 68, 109) say nothing
  about the device: nothing. An XID not in the catalogue here is ``NoSchedule``: nothing
  running is ended for what we cannot read, and an admin untaints it once they have.
- NVML's other **event types** (double-bit ECC, single-bit ECC storm, DRAM retirement
  failure, GPU unavailable): as the XID NVIDIA documents for the same failure.
- **Counters** read every few seconds: uncorrectable ECC errors since the driver loaded
  (``NoSchedule``: the XID event said the rest), remapped rows pending (``NoSchedule``) or
  failed (``NoExecute``), and ``NVML_ERROR_GPU_IS_LOST`` (``NoExecute``, no grace: the work
  on it is gone already).
- **Throttle reasons** (``nvmlDeviceGetCurrentClocksEventReasons``): warnings only; a hot
  or power-braked GPU still computes right.

Pure: no I/O, no ``pynvml`` (the NVML values are those of ``nvml.h``, a stable ABI).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

Effect = Literal["NoSchedule", "NoExecute"]
NVIDIA_DRIVER = "gpu.nvidia.com"
WATCHER = "health watcher"  # who the taints of the watcher are by, in the ledger
Source = Literal["xid", "ecc", "remapped-rows", "lost"]

XID_KEY = "gpu.nvidia.com/xid"
ECC_KEY = "gpu.nvidia.com/ecc"
ROWS_KEY = "gpu.nvidia.com/remapped-rows"
LOST_KEY = "gpu.nvidia.com/lost"

# nvml.h: nvmlEventType*
EVENT_SINGLE_BIT_ECC = 0x0001
EVENT_DOUBLE_BIT_ECC = 0x0002
EVENT_XID_CRITICAL = 0x0008
EVENT_SBE_STORM = 0x0200
EVENT_DRAM_RETIREMENT_FAILURE = 0x0800
EVENT_GPU_UNAVAILABLE = 0x4000
# What the watcher registers for, where the GPU supports it.
WATCHED_EVENTS = (
    EVENT_XID_CRITICAL
    | EVENT_DOUBLE_BIT_ECC
    | EVENT_SBE_STORM
    | EVENT_DRAM_RETIREMENT_FAILURE
    | EVENT_GPU_UNAVAILABLE
)

# The critical XIDs: XID -> (effect, meaning); None: an application's error, not the GPU's.
XIDS: MappingProxyType[int, tuple[Effect, str] | None] = MappingProxyType({
    13: None,  # graphics engine exception: an application's bad access or instruction
    31: None,  # GPU memory page fault: an application's illegal address
    43: None,  # GPU stopped processing: an application's fault, the channel was reset
    45: None,  # preemptive cleanup after an earlier error: a process was stopped
    68: None,  # video decoder exception: an application's stream
    109: None,  # context switch timeout: usually an application's long kernel
    48: ("NoExecute", "double-bit ECC error: GPU memory returned wrong data"),
    62: ("NoExecute", "the GPU's internal micro-controller halted"),
    63: ("NoSchedule", "a memory row remapping is pending: the GPU needs a reset"),
    64: ("NoExecute", "a memory row remapping failed: the GPU needs an admin"),
    74: ("NoExecute", "NVLink error: the links to other GPUs failed"),
    79: ("NoExecute", "the GPU fell off the bus"),
    92: ("NoSchedule", "high single-bit ECC error rate: the GPU memory is wearing"),
    94: ("NoSchedule", "contained ECC error: the process that hit it was stopped; the GPU "
         "needs a reset"),
    95: ("NoExecute", "uncontained ECC error: every process on the GPU may have wrong data"),
    119: ("NoExecute", "GSP timeout: the GPU's system processor stopped answering"),
    120: ("NoExecute", "GSP error: the GPU's system processor failed"),
})  # fmt: skip

# nvml.h: nvmlClocksEventReason* that mean the GPU is slowed by its hardware or heat.
THROTTLE_REASONS = MappingProxyType({
    0x0008: "slowed by the hardware (HW slowdown)",
    0x0020: "slowed to cool down (software thermal slowdown)",
    0x0040: "slowed to cool down (hardware thermal slowdown)",
    0x0080: "slowed by the power brake (an external power limit)",
})  # fmt: skip


@dataclass(frozen=True)
class HealthTaint:
    """The taint a health signal puts on a GPU (and every MIG partition of it): ``key``,
    ``value`` and ``effect`` as a DeviceTaintRule's taint, ``meaning`` in words, ``source``
    (what NVML said: an XID, an ECC count, remapped rows, the GPU lost) and ``what`` (the
    XID, the count, ``pending``/``failed``, ``lost``)."""

    key: str
    value: str
    effect: Effect
    meaning: str
    source: Source
    what: str

    @property
    def lost(self) -> bool:
        """The GPU is gone: the work on it is lost already, no grace helps."""
        return self.source == "lost"

    def text(self) -> str:
        """``gpu.nvidia.com/xid=79: the GPU fell off the bus``."""
        return f"{self.key}={self.value}: {self.meaning}"


def of_xid(xid: int) -> HealthTaint | None:
    """The taint of a critical XID; None for an application's error."""
    if xid in XIDS:
        known = XIDS[xid]
        if known is None:
            return None
        effect, meaning = known
    else:
        effect = "NoSchedule"
        meaning = f"XID {xid}, not in dra-jupyter's catalogue: an admin should look"
    return HealthTaint(XID_KEY, str(xid), effect, meaning, "xid", str(xid))


def of_event(event_type: int, data: int) -> HealthTaint | None:
    """The taint of one NVML event (``c_nvmlEventData_t``'s ``eventType``, ``eventData``)."""
    if event_type & EVENT_XID_CRITICAL:
        return of_xid(int(data))
    if event_type & EVENT_GPU_UNAVAILABLE:
        return gpu_lost()
    for flag, xid in (
        (EVENT_DOUBLE_BIT_ECC, 48),
        (EVENT_DRAM_RETIREMENT_FAILURE, 64),
        (EVENT_SBE_STORM, 92),
    ):
        if event_type & flag:
            return of_xid(xid)
    return None  # single-bit ECC (corrected), clocks, power: not a failure


def of_ecc(uncorrected: int) -> HealthTaint | None:
    """Uncorrectable ECC errors since the driver loaded (the volatile counter)."""
    if uncorrected <= 0:
        return None
    meaning = (
        f"{uncorrected} uncorrectable ECC error{'s' if uncorrected != 1 else ''} since "
        "the driver loaded: the GPU needs a reset"
    )
    return HealthTaint(ECC_KEY, "uncorrectable", "NoSchedule", meaning, "ecc", str(uncorrected))


def of_remapped_rows(pending: bool, failed: bool) -> HealthTaint | None:
    """``nvmlDeviceGetRemappedRows``' pending and failure flags."""
    if failed:
        meaning = "memory row remapping failed: the GPU has no spare rows left"
        return HealthTaint(ROWS_KEY, "failed", "NoExecute", meaning, "remapped-rows", "failed")
    if pending:
        meaning = "a memory row remapping is pending: the GPU needs a reset"
        return HealthTaint(ROWS_KEY, "pending", "NoSchedule", meaning, "remapped-rows", "pending")
    return None


def gpu_lost() -> HealthTaint:
    """``NVML_ERROR_GPU_IS_LOST`` (or ``nvmlEventTypeGpuUnavailableError``)."""
    meaning = "the GPU is lost: it fell off the bus or stopped answering"
    return HealthTaint(LOST_KEY, "true", "NoExecute", meaning, "lost", "lost")


def throttle_warnings(reasons: int) -> list[str]:
    """The throttle reasons in ``reasons`` (a bit mask) that deserve a word; never a taint."""
    return [text for bit, text in THROTTLE_REASONS.items() if reasons & bit]


def taken_out(device: str, taint: HealthTaint) -> str:
    """What a holder reads when its claim is released: ``gpu-3 was taken out
    (gpu.nvidia.com/xid=79: the GPU fell off the bus)``."""
    return f"{device} was taken out ({taint.text()})"


def stronger(effect: str, than: str) -> bool:
    """Whether ``effect`` takes more out than ``than`` (NoExecute over NoSchedule)."""
    return effect == "NoExecute" and than != "NoExecute"


_GPU_NAME = re.compile(r"^(gpu-\d+)(?:-|$)")


def gpu_name(device: str) -> str:
    """The GPU a device (``driver/pool/name`` or a name) is or is a partition of:
    ``gpu-3-mig-1g18gb-19-0`` -> ``gpu-3``; a name of another shape is itself."""
    name = device.rsplit("/", 1)[-1]
    found = _GPU_NAME.match(name)
    return found.group(1) if found else name


def gpu_devices(slices: Iterable[Any], minor: int) -> list[str]:
    """Every ``gpu.nvidia.com`` device (``driver/pool/name``) of GPU ``minor``: the full GPU
    ``gpu-<minor>`` and its MIG partitions ``gpu-<minor>-mig-...``, as the NVIDIA DRA
    driver names them (:mod:`dra_jupyter.inventory.mig`), the full GPU first."""
    want = f"gpu-{minor}"
    out: list[str] = []
    for s in slices:
        spec = s["spec"]
        if spec.get("driver") != NVIDIA_DRIVER:
            continue
        for device in spec.get("devices") or ():
            if gpu_name(device["name"]) == want:
                out.append(f"{NVIDIA_DRIVER}/{spec['pool']['name']}/{device['name']}")
    return sorted(out, key=lambda k: (k.rsplit("/", 1)[-1] != want, k))

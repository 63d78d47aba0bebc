"""The environment a process needs to use allocated devices, per vendor.

* NVIDIA: ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` list GPU UUIDs
  (``GPU-...``) and MIG device UUIDs (``MIG-...``), which CUDA accepts in place of indices;
* AMD: ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` list card indices;
* Google TPU: ``TPU_VISIBLE_CHIPS`` lists chip indices.

A device without the identity its runtime needs (a simulated MIG partition that was never
created, for instance) is reported in ``missing`` instead of being guessed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Wire = dict[str, Any]


@dataclass
class DeviceEnvironment:
    env: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # devices with no usable identity


def _attr(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("string", "int", "version", "bool"):
        if kind in value:
            return value[kind]
    return None


def environment_for(
    results: Iterable[Mapping[str, Any]], slices: Sequence[Wire]
) -> DeviceEnvironment:
    """Environment variables for the devices of ``status.allocation.devices.results``."""
    index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            index[(spec["driver"], spec["pool"]["name"], d["name"])] = d
    nvidia: list[str] = []
    amd: list[str] = []
    tpu: list[str] = []
    out = DeviceEnvironment()
    for result in results:
        key = (result["driver"], result["pool"], result["device"])
        device = index.get(key, {})
        ident = "/".join(key)
        if result["driver"] == "gpu.nvidia.com":
            uuid = _attr(device, "uuid")
            (nvidia.append(str(uuid)) if uuid else out.missing.append(ident))
        elif result["driver"] == "gpu.amd.com":
            card = _attr(device, "cardIndex")
            (amd.append(str(card)) if card is not None else out.missing.append(ident))
        elif result["driver"] == "tpu.google.com":
            chip = _attr(device, "index")
            (tpu.append(str(chip)) if chip is not None else out.missing.append(ident))
    if nvidia:
        out.env["CUDA_VISIBLE_DEVICES"] = out.env["NVIDIA_VISIBLE_DEVICES"] = ",".join(nvidia)
    if amd:
        out.env["ROCR_VISIBLE_DEVICES"] = out.env["HIP_VISIBLE_DEVICES"] = ",".join(amd)
    if tpu:
        out.env["TPU_VISIBLE_CHIPS"] = ",".join(tpu)
    return out


def nvml_lists_process(pid: int) -> bool | None:
    """NVML's answer (see :func:`dra_jupyter.inventory.nvml.lists_process`), loaded lazily."""
    from dra_jupyter.inventory.nvml import lists_process  # noqa: PLC0415

    return lists_process(pid)


def accelerator_runtime_loaded(maps: Path = Path("/proc/self/maps")) -> str | None:
    """The accelerator runtime already initialised in this process, if any.

    Once CUDA is initialised, changing ``CUDA_VISIBLE_DEVICES`` has no effect. A mapped
    ``libcuda`` alone does not prove it (a bare ``import torch`` maps it), so: torch's own
    ``torch.cuda.is_initialized()`` when torch is loaded; else, with ``libcuda`` mapped,
    NVML's list of processes holding a context (framework-neutral); when NVML cannot
    tell, a mapped runtime library counts, to be safe.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialized = getattr(cuda, "is_initialized", None)
    if callable(initialized) and initialized():
        return "libcuda.so"
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for lib in ("libcuda.so", "libamdhip64.so", "libtpu.so"):
        if lib in text:
            if lib == "libcuda.so" and nvml_lists_process(os.getpid()) is False:
                return None  # loaded but no context yet: the new environment still works
            return lib
    return None

#!/usr/bin/env python3
"""Check NVML discovery on a real NVIDIA machine against the captured H200.

Run on the GPU machine (no root needed)::

    python scripts/nvml-check.py [--fixtures tests/fixtures/nvidia-h200] [--slices]

It runs :func:`dra_jupyter.inventory.nvml.discover`, reads the same facts again straight
from ``pynvml`` (independently of the discovery code), and prints one JSON object:

* ``discovered``: devices, warnings and slice names of the inventory (``--slices``: the slices);
* ``raw``: what NVML says about GPU 0, including every GPU instance profile and its
  placements, whether optional calls (addressing mode, NUMA id) are supported, and the
  per-process calls (compute and graphics processes, per-process utilisation samples) and
  the total energy counter (``energy_mj``; :meth:`NvmlSource.energy` is checked against it);
* ``processes``: what :meth:`dra_jupyter.metrics.nvml.NvmlSource.processes` reads of the
  same machine (checked against ``raw`` with ``must: false``: processes come and go);
* ``checks``: comparisons, each ``{"what", "expected", "got", "ok", "must"}``. ``must`` checks
  compare discovery with raw NVML, and the model facts (name, memory, brand, architecture,
  MIG profiles and placements) with ``nvml.json``/``topo-mig.txt`` of the capture; checks with
  ``must: false`` (UUID, PCI address, driver) only differ on another machine or driver.

Exit status: 0 when every ``must`` check holds, 1 otherwise, 2 when NVML cannot be used.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from dra_jupyter.errors import DiscoveryError  # noqa: E402
from dra_jupyter.inventory import mig  # noqa: E402
from dra_jupyter.inventory.nvml import ARCHITECTURES, BRANDS, discover, pci_bus_id, semver3  # noqa: E402
from dra_jupyter.metrics.nvml import NvmlSource  # noqa: E402
from dra_jupyter.model.quantity import Quantity  # noqa: E402


def attempt(call: Any, *args: Any) -> Any:
    """The call's result, or ``{"error": "<NVMLError class>: <text>"}``."""
    try:
        return call(*args)
    except Exception as err:  # every outcome, an NVMLError or a missing function, is data
        return {"error": f"{type(err).__name__}: {err}"}


def text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def placements(nvml: Any, handle: Any, profile_id: int) -> list[list[int]]:
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [[array[i].start, array[i].size] for i in range(count.value)]


def processes(nvml: Any, h: Any) -> dict[str, Any]:
    """The per-process calls on one device, as plain data (or their errors)."""

    def listing(call: Any) -> Any:
        found = attempt(call, h)
        if isinstance(found, dict):
            return found
        return [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory} for p in found]

    samples = attempt(nvml.nvmlDeviceGetProcessUtilization, h, 0)
    if not isinstance(samples, dict):
        samples = [{name: getattr(x, name) for name, _ in x._fields_} for x in samples]
    return {
        "compute": listing(nvml.nvmlDeviceGetComputeRunningProcesses),
        "graphics": listing(nvml.nvmlDeviceGetGraphicsRunningProcesses),
        "utilization": samples,
    }


def raw_gpu0(nvml: Any) -> dict[str, Any]:
    """GPU 0 as pynvml reports it, read without the discovery code."""
    nvml.nvmlInit()
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        pci = nvml.nvmlDeviceGetPciInfo(h)
        out: dict[str, Any] = {
            "driver": text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": nvml.nvmlSystemGetCudaDriverVersion(),
            "count": nvml.nvmlDeviceGetCount(),
            "name": text(nvml.nvmlDeviceGetName(h)),
            "uuid": text(nvml.nvmlDeviceGetUUID(h)),
            "minor": nvml.nvmlDeviceGetMinorNumber(h),
            "brand": nvml.nvmlDeviceGetBrand(h),
            "arch": nvml.nvmlDeviceGetArchitecture(h),
            "cc": list(nvml.nvmlDeviceGetCudaComputeCapability(h)),
            "busId": text(pci.busId),
            "memory": nvml.nvmlDeviceGetMemoryInfo(h).total,
            "mig_mode": attempt(nvml.nvmlDeviceGetMigMode, h),
            "addressing_mode": attempt(getattr(nvml, "nvmlDeviceGetAddressingMode", None), h),
            "numa_nvml": attempt(nvml.nvmlDeviceGetNumaNodeId, h),
            "vgpu_mode": attempt(nvml.nvmlDeviceGetVirtualizationMode, h),
            "processes": processes(nvml, h),
            "energy_mj": attempt(nvml.nvmlDeviceGetTotalEnergyConsumption, h),
            "gi_profiles": {},
        }
        for enum in range(max(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT, 20)):  # as the capture
            info = attempt(nvml.nvmlDeviceGetGpuInstanceProfileInfo, h, enum)
            if isinstance(info, dict):
                out["gi_profiles"][str(enum)] = info
                continue
            entry = {name: text(getattr(info, name)) for name, _ in info._fields_}
            entry["placements"] = attempt(placements, nvml, h, info.id)
            out["gi_profiles"][str(enum)] = entry
        return out
    finally:
        nvml.nvmlShutdown()


def checks(gpu: dict[str, Any], raw: dict[str, Any], fixtures: Path) -> list[dict[str, Any]]:
    capture = json.loads((fixtures / "nvml.json").read_text())
    cap = capture["devices"][0]
    lgipp = (fixtures / "topo-mig.txt").read_text()
    cap_places = {
        int(pid): [[int(s), int(size)] for s in starts.split(",")]
        for pid, starts, size in re.findall(
            r"Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", lgipp
        )
    }
    attrs = {k: next(iter(v.values())) for k, v in gpu["attributes"].items()}
    out: list[dict[str, Any]] = []

    def check(what: str, expected: Any, got: Any, must: bool = True) -> None:
        out.append(
            {"what": what, "expected": expected, "got": got, "ok": expected == got, "must": must}
        )

    # discovery against raw NVML
    check("discovered uuid", raw["uuid"], attrs.get("uuid"))
    check("discovered productName", raw["name"], attrs.get("productName"))
    check(
        "discovered pciBusID",
        pci_bus_id(raw["busId"]),
        attrs.get("resource.kubernetes.io/pciBusID"),
    )
    check("discovered driverVersion", semver3(raw["driver"]), attrs.get("driverVersion"))
    check("discovered brand", BRANDS.get(raw["brand"]), attrs.get("brand"))
    check("discovered architecture", ARCHITECTURES.get(raw["arch"]), attrs.get("architecture"))
    check(
        "discovered cudaComputeCapability",
        "{}.{}.0".format(*raw["cc"]),
        attrs.get("cudaComputeCapability"),
    )
    capacity = gpu.get("capacity", {})
    if "multiprocessors" not in capacity:  # a full GPU outside DynamicMIG: memory is the total
        memory = str(Quantity.from_value(raw["memory"], "BinarySI"))
        check("discovered memory", memory, capacity.get("memory", {}).get("value"))
    # the machine against the capture
    check("capture uuid", cap["uuid"], raw["uuid"], False)
    check("capture busId", cap["pci"]["busId"], raw["busId"], False)
    check("capture driver", capture["driver"], raw["driver"], False)
    check("capture cuda_driver", capture["cuda_driver"], raw["cuda_driver"], False)
    for key in ("name", "memory", "brand", "arch", "cc"):
        expected = cap["memory"]["total"] if key == "memory" else cap[key]
        check(f"capture {key}", expected, raw[key])
    for enum, entry in cap["gi_profiles"].items():
        got = raw["gi_profiles"].get(enum, {})
        if "error" in entry:
            check(
                f"capture gi_profile {enum}",
                entry["error"].split(":")[0],
                str(got.get("error", "")).split(":")[0],
            )
            continue
        fields = [f for f in entry if f not in ("placements", "version")]
        check(
            f"capture gi_profile {enum}",
            {f: entry[f] for f in fields},
            {f: got.get(f) for f in fields},
        )
        check(
            f"capture placements of profile id {entry['id']}",
            cap_places.get(entry["id"]),
            got.get("placements"),
        )
    if raw["name"] == "NVIDIA H200":
        table = {p.gi_profile_id: [list(x) for x in p.placements] for p in mig.H200_PROFILES}
        found = {e["id"]: e["placements"] for e in raw["gi_profiles"].values() if "id" in e}
        check("mig.H200_PROFILES placements", table, found)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=ROOT / "tests/fixtures/nvidia-h200")
    parser.add_argument("--node", default=None, help="node name (default: the host name)")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"))
    parser.add_argument("--slices", action="store_true", help="print the full slices too")
    args = parser.parse_args()
    try:
        inventory = discover(node=args.node, sysfs=args.sysfs)
    except DiscoveryError as err:
        print(json.dumps({"error": str(err)}, indent=1))
        return 2
    nvml = importlib.import_module("pynvml")
    devices = [d for s in inventory.slices for d in s["spec"].get("devices", [])]
    raw = raw_gpu0(nvml)
    gpu0 = next(
        (d for d in devices if d["attributes"].get("uuid", {}).get("string") == raw["uuid"]), None
    )
    report: dict[str, Any] = {
        "discovered": {
            "source": inventory.source,
            "warnings": list(inventory.warnings),
            "slices": [s["metadata"]["name"] for s in inventory.slices],
            "devices": len(devices),
            "device_names": [d["name"] for d in devices],
            "gpu0": gpu0,
        },
        "raw": raw,
    }
    if args.slices:
        report["discovered"]["slices"] = list(inventory.slices)
    if gpu0 is None:  # no full GPU published (MIG devices exist): compare a MIG device's
        child = next(
            d for d in devices if d["attributes"].get("parentUUID", {}).get("string") == raw["uuid"]
        )
        gpu0 = {"attributes": {**child["attributes"], "uuid": {"string": raw["uuid"]}}}
    report["checks"] = checks(gpu0, raw, args.fixtures)
    source = NvmlSource(inventory, nvml)
    seen = source.processes(time.time()) or []
    energy = source.energy() or {}
    source.close()
    report["processes"] = [p.to_dict() for p in seen]
    lists = [raw["processes"][k] for k in ("compute", "graphics")]
    raw_pids = sorted({p["pid"] for found in lists if isinstance(found, list) for p in found})
    gpu0_key = next((p.device for p in seen if p.device.endswith("/gpu-0")), None)
    report["checks"].append(
        {
            "what": "NvmlSource.processes on GPU 0 (MIG off) lists the pids NVML lists",
            "expected": raw_pids,
            "got": sorted(p.pid for p in seen if p.device == gpu0_key),
            "ok": raw_pids == sorted(p.pid for p in seen if p.device == gpu0_key),
            "must": False,
        }
    )
    counter = raw["energy_mj"] if isinstance(raw["energy_mj"], int) else None
    joules = next((j for k, j in energy.items() if k.endswith("/gpu-0")), None)
    report["checks"].append(
        {
            "what": "NvmlSource.energy of GPU 0 is NVML's total energy counter, in joules",
            "expected": None if counter is None else counter / 1000,
            "got": joules,
            # read after the raw counter, which only grows
            "ok": joules is None
            if counter is None
            else joules is not None and joules >= counter / 1000,
            "must": False,
        }
    )
    failed = [c["what"] for c in report["checks"] if c["must"] and not c["ok"]]
    report["failed"] = failed
    print(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

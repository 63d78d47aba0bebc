"""NVML discovery against a fake pynvml that answers as the captured H200 (tests/fixtures)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import DiscoveryError, DraJupyterError
from dra_jupyter.inventory import mig, nvidia, nvml
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.nvml import (
    cuda_version,
    discover,
    numa_node,
    pci_bus_id,
    pcie_root,
    semver3,
)
from dra_jupyter.kernel import environment
from tests.fakes.fake_pynvml import FakeProcess, FakePynvml, load_capture, pynvml

from .test_mig import allocate_in_turn, check, claim, devices

NODE = "mig-node"  # the node name the allocation helpers of test_mig use
CAPTURED_BDF = "0000:00:06.0"


def make_sysfs(root: Path, numa: dict[str, str], pcie: str = "pci0000:00") -> Path:
    """``<root>/bus/pci/devices/<bdf>`` links into ``<root>/devices/<pcie>/<bdf>``."""
    for bdf, node in numa.items():
        real = root / "devices" / pcie / bdf
        real.mkdir(parents=True)
        (real / "numa_node").write_text(f"{node}\n")
        link = root / "bus" / "pci" / "devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..", "..", "..", "devices", pcie, bdf))
    return root


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The captured VM: the GPU on the root bus, ``numa_node`` -1 (as nvml.json says)."""
    numa = load_capture().device["sysfs_numa_node"]
    bdfs = {f"0000:00:{6 + i:02x}.0": numa for i in range(8)}
    return make_sysfs(tmp_path / "sys", bdfs)


def run(fake: FakePynvml, sysfs: Path) -> Inventory:
    inventory = discover(fake, node=NODE, sysfs=sysfs)
    assert fake.calls[0] == "nvmlInit"
    assert fake.calls[-1] == "nvmlShutdown"
    assert not fake.initialized
    check(inventory.slices)
    return inventory


def only_device(inventory: Inventory) -> dict[str, Any]:
    (dev,) = devices(inventory.slices)
    return dev


# --- values ------------------------------------------------------------------------------------


def test_conversions_are_the_drivers() -> None:
    assert semver3("580.159.04") == "580.159.4"
    assert semver3("535.104.05") == "535.104.5"
    assert semver3("9.0") == "9.0.0"
    assert cuda_version(13000) == "13.0.0"
    assert cuda_version(12040) == "12.4.0"
    assert pci_bus_id(b"00000000:00:06.0") == "0000:00:06.0"
    assert pci_bus_id(b"00000000:9A:00.0") == "0000:9a:00.0"
    assert pci_bus_id("0001:65:00.0") == "0001:65:00.0"


def test_sysfs_lookups(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path, {"0000:9a:00.0": "1", "0000:ab:00.0": "-1"}, pcie="pci0000:97")
    assert pcie_root(root, "0000:9a:00.0") == "pci0000:97"
    assert numa_node(root, "0000:9a:00.0") == 1
    assert numa_node(root, "0000:ab:00.0") is None
    assert pcie_root(root, "0000:00:01.0") is None
    assert numa_node(root, "0000:00:01.0") is None


def test_the_captured_h200(sysfs: Path) -> None:
    fake = FakePynvml()
    inventory = run(fake, sysfs)
    assert (inventory.simulated, inventory.source, inventory.warnings) == (False, "nvml", ())
    assert inventory.nodes == [NODE]
    assert [c["metadata"]["name"] for c in inventory.device_classes] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
    ]
    (slice_,) = inventory.slices
    assert slice_["spec"]["driver"] == "gpu.nvidia.com"
    assert slice_["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    dev = only_device(inventory)
    assert dev == {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-01cbfeff-048d-efef-7ea6-d9bcffa69200"},
            "productName": {"string": "NVIDIA H200"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.159.4"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:00:06.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
            # nvidia-smi -q of the capture says <addressing_mode>None</addressing_mode>
            "addressingMode": {"string": "None"},
        },
        "capacity": {"memory": {"value": "143771Mi"}},  # 150754820096 bytes
    }
    # The shape is the simulated H200's, value for value where they can agree.
    simulated = nvidia.gpu_device(
        NODE, 0, nvidia.H200, nvidia.GpuPlacement(CAPTURED_BDF, "pci0000:00", None)
    )
    assert dev["capacity"] == simulated["capacity"]
    for key, value in simulated["attributes"].items():
        assert key == "uuid" or dev["attributes"][key] == value


def test_numa_node_and_missing_sysfs(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path / "sys", {CAPTURED_BDF: "1"}, pcie="pci0000:00")
    attrs = only_device(run(FakePynvml(), root))["attributes"]
    assert attrs["resource.kubernetes.io/numaNode"] == {"int": 1}
    inventory = run(FakePynvml(), tmp_path / "nothing")
    attrs = only_device(inventory)["attributes"]
    assert "resource.kubernetes.io/pcieRoot" not in attrs
    assert "resource.kubernetes.io/numaNode" not in attrs
    assert inventory.warnings == (
        f"gpu-0: no PCIe root found for {CAPTURED_BDF} under {tmp_path / 'nothing'}; left out",
    )


def test_cloned_gpus(sysfs: Path) -> None:
    inventory = run(FakePynvml(gpus=8), sysfs)
    devs = devices(inventory.slices)
    assert [d["name"] for d in devs] == [f"gpu-{i}" for i in range(8)]
    buses = [d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for d in devs]
    assert buses == [f"0000:00:{6 + i:02x}.0" for i in range(8)]  # NVML's 0A comes out 0a
    uuids = {d["attributes"]["uuid"]["string"] for d in devs}
    assert len(uuids) == 8
    assert "GPU-01cbfeff-048d-efef-7ea6-d9bcffa69200" in uuids
    results = Allocator(inventory.slices, inventory.device_classes).allocate(
        [claim("four", ("gpu", 4))], node=NODE
    )
    assert results is not None
    assert [r.device.device for r in results[0].results] == [f"gpu-{i}" for i in range(4)]


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("lost_at", ["handle", "query"])
def test_a_lost_gpu_is_skipped(sysfs: Path, lost_at: Any) -> None:
    inventory = run(FakePynvml(gpus=3, lost=[1], lost_at=lost_at), sysfs)
    assert [d["name"] for d in devices(inventory.slices)] == ["gpu-0", "gpu-2"]
    assert inventory.warnings == ("GPU 1: fell off the bus (NVML: GPU is lost); skipped",)


def test_all_gpus_lost(sysfs: Path) -> None:
    inventory = run(FakePynvml(lost=[0]), sysfs)
    assert inventory.slices == ()
    assert inventory.warnings[-1] == "NVML found no usable GPU on this machine"


@pytest.mark.parametrize(
    ("fake", "words"),
    [
        (FakePynvml(library_missing=True), r"\(libnvidia-ml\.so\.1\) was not found"),
        (FakePynvml(driver_not_loaded=True), "kernel driver is not loaded"),
    ],
    ids=["library-missing", "driver-not-loaded"],
)
def test_no_nvml_raises_discovery_error(fake: FakePynvml, words: str) -> None:
    with pytest.raises(DiscoveryError, match=words) as info:
        discover(fake, node=NODE)
    assert isinstance(info.value, DraJupyterError)
    assert isinstance(info.value.__cause__, pynvml.NVMLError)
    assert fake.calls == ["nvmlInit"]  # nothing else, no shutdown of what never started


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(DiscoveryError, match="pip install nvidia-ml-py"):
        discover(node=NODE)


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvml_library_present(), reason="this machine has an NVIDIA driver")
def test_the_real_pynvml_without_a_driver() -> None:
    with pytest.raises(DiscoveryError, match="not found"):
        discover(node=NODE)


def test_shutdown_after_a_failure(sysfs: Path) -> None:
    fake = FakePynvml(overrides={"nvmlDeviceGetCount": pynvml.NVMLError(999)})
    with pytest.raises(DiscoveryError, match="Unknown Error"):
        discover(fake, node=NODE, sysfs=sysfs)
    assert fake.calls[-1] == "nvmlShutdown"
    assert not fake.initialized


def test_not_supported_calls_leave_attributes_out(sysfs: Path) -> None:
    names = [
        "nvmlDeviceGetBrand",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetAddressingMode",
        "nvmlDeviceGetMigMode",
        "nvmlSystemGetCudaDriverVersion",
    ]
    not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    inventory = run(FakePynvml(overrides=dict.fromkeys(names, not_supported)), sysfs)
    dev = only_device(inventory)
    assert "capacity" not in dev
    assert sorted(dev["attributes"]) == [
        "driverVersion",
        "productName",
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/pcieRoot",
        "type",
        "uuid",
    ]
    # MIG mode and addressing mode are not attributes that every GPU has: no warning for them
    assert len(inventory.warnings) == len(names) - 2
    assert all("not supported by NVML; left out" in w for w in inventory.warnings)


def test_unknown_enum_values_are_left_out(sysfs: Path) -> None:
    fake = FakePynvml(overrides={"nvmlDeviceGetBrand": 19, "nvmlDeviceGetArchitecture": 15})
    inventory = run(fake, sysfs)
    attrs = only_device(inventory)["attributes"]
    assert "brand" not in attrs
    assert "architecture" not in attrs
    assert inventory.warnings == (
        "gpu-0: unknown NVML brand value 19; left out",
        "gpu-0: unknown NVML architecture value 15; left out",
    )


# --- MIG mode --------------------------------------------------------------------------------


def test_mig_mode_publishes_the_partitionable_layout(sysfs: Path) -> None:
    fake = FakePynvml(mig=True)
    inventory = run(fake, sysfs)
    assert inventory.warnings == ()
    assert "nvmlDeviceGetGpuInstancePossiblePlacements" in fake.calls
    counters, gpu_slice = inventory.slices
    assert counters["spec"]["sharedCounters"][0]["name"] == "gpu-0-counter-set"
    assert len(gpu_slice["spec"]["devices"]) == 26
    # Profiles and placements read through NVML give exactly the H200 table of mig.py.
    parent = {k: v for k, v in gpu_slice["spec"]["devices"][0].items() if k == "attributes"}
    parent["name"] = "gpu-0"
    parent["capacity"] = {"memory": {"value": "143771Mi"}}
    expected = mig.partitioned_gpu(parent, 0, mig.H200_PROFILES)
    assert expected.counter_set == counters["spec"]["sharedCounters"][0]
    assert list(expected.devices) == gpu_slice["spec"]["devices"]


def test_allocation_on_discovered_mig_slices(sysfs: Path) -> None:
    inventory = run(FakePynvml(gpus=2, mig=[True, False]), sysfs)
    assert len(inventory.slices) == 3  # counters (one set), MIG GPU, plain GPU
    plain = inventory.slices[2]["spec"]["devices"]
    assert [d["name"] for d in plain] == ["gpu-1"]
    assert "consumesCounters" not in plain[0]
    got = allocate_in_turn(
        list(inventory.slices),
        claim("a", ("3g.71gb", 1)),
        claim("b", ("4g.71gb", 1)),
        claim("c", ("gpu", 1)),
        claim("d", ("gpu", 1)),
        claim("e", ("3g.71gb", 1)),
    )
    assert got == [
        ["gpu-0-mig-3g71gb-9-0"],
        None,  # a 4g.71gb only starts at 0, which is taken; gpu-1 has MIG off
        ["gpu-1"],  # gpu-0 is partitioned
        None,
        ["gpu-0-mig-3g71gb-9-4"],
    ]


def test_existing_mig_devices(sysfs: Path) -> None:
    fake = FakePynvml(mig=True, mig_devices={0: [(9, 0), (19, 4)]})  # a 3g at 0, a 1g at 4
    inventory = run(fake, sysfs)
    assert inventory.warnings == (
        "gpu-0: 2 MIG device(s) exist; published as they are, with the placements left "
        "around them (the full GPU needs them destroyed)",
    )
    devs = {d["name"]: d for d in devices(inventory.slices)}
    assert "gpu-0" not in devs
    static = devs["gpu-0-mig-3g71gb-9-0"]
    assert static["attributes"]["uuid"]["string"].startswith("MIG-")
    assert "consumesCounters" not in static
    assert static["capacity"]["memorySlice3"] == {"value": "1"}
    assert "consumesCounters" not in devs["gpu-0-mig-1g18gb-19-4"]
    free = sorted(n for n, d in devs.items() if "consumesCounters" in d)
    assert free == [
        "gpu-0-mig-1g18gb-19-5",
        "gpu-0-mig-1g18gb-19-6",
        "gpu-0-mig-1g18gb-me-20-5",
        "gpu-0-mig-1g18gb-me-20-6",
        "gpu-0-mig-1g35gb-15-6",
    ]
    uuid = static["attributes"]["uuid"]["string"]
    by_uuid = claim("mine", ("3g.71gb", 1))
    selectors = by_uuid["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    expression = f"device.attributes['gpu.nvidia.com'].uuid == '{uuid}'"
    selectors.append({"cel": {"expression": expression}})
    assert allocate_in_turn(list(inventory.slices), by_uuid) == [["gpu-0-mig-3g71gb-9-0"]]


def test_ampere_with_mig_on_has_no_full_gpu(sysfs: Path) -> None:
    fake = FakePynvml(mig=True, overrides={"nvmlDeviceGetArchitecture": 7})
    inventory = run(fake, sysfs)
    names = [d["name"] for d in devices(inventory.slices)]
    assert "gpu-0" not in names
    assert len(names) == 25


def test_vgpu_guest_with_mig_on_publishes_only_existing(sysfs: Path) -> None:
    fake = FakePynvml(
        mig=True, mig_devices={0: [(0, 0)]}, overrides={"nvmlDeviceGetVirtualizationMode": 2}
    )
    inventory = run(fake, sysfs)
    assert [d["name"] for d in devices(inventory.slices)] == ["gpu-0-mig-7g141gb-0-0"]
    assert len(inventory.slices) == 1
    assert "a vGPU guest" in inventory.warnings[0]


def test_every_slice_validates_with_kubernetes_validate(sysfs: Path) -> None:
    for fake in (FakePynvml(gpus=9, mig=True), FakePynvml(gpus=3), FakePynvml(mig=True)):
        for obj in discover(fake, node=NODE, sysfs=sysfs).slices:
            assert kubernetes_validate.validate(obj, "1.36.0", strict=True) == "1.36"


# --- scripts/nvml-check.py, run here against the fake ------------------------------------------


def _check_script() -> Any:
    path = Path(__file__).resolve().parents[2] / "scripts" / "nvml-check.py"
    spec = importlib.util.spec_from_file_location("nvml_check", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fake_mig", [False, True], ids=["mig-off", "mig-on"])
def test_the_check_script_passes_on_the_captured_machine(
    fake_mig: bool, sysfs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script prepends the checkout
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(mig=fake_mig))
    monkeypatch.setattr(sys, "argv", ["nvml-check.py", "--node", NODE, "--sysfs", str(sysfs)])
    status = _check_script().main()
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] == []
    assert status == 0
    assert all(c["ok"] for c in report["checks"])
    assert report["discovered"]["devices"] == (26 if fake_mig else 1)


def test_the_check_script_reads_the_processes_as_the_seam_does(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The per-process calls, raw and through NvmlSource.processes, on a GPU that runs this
    test's own process (as a CUDA process would be listed)."""
    me = FakeProcess(pid=os.getpid(), memory=1 << 30, sm=40)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(processes={0: [me]}))
    monkeypatch.setattr(sys, "argv", ["nvml-check.py", "--node", NODE, "--sysfs", str(sysfs)])
    assert _check_script().main() == 0
    report = json.loads(capsys.readouterr().out)
    assert report["raw"]["processes"]["compute"] == [{"pid": os.getpid(), "usedGpuMemory": 1 << 30}]
    assert [s["pid"] for s in report["raw"]["processes"]["utilization"]] == [os.getpid()]
    (seen,) = report["processes"]
    assert (seen["pid"], seen["memory_used"], seen["utilization"]) == (os.getpid(), 1 << 30, 40.0)
    assert all(c["ok"] for c in report["checks"])


def test_the_check_script_reports_a_different_gpu(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakePynvml(overrides={"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(sys, "argv", ["nvml-check.py", "--node", NODE, "--sysfs", str(sysfs)])
    assert _check_script().main() == 1
    assert json.loads(capsys.readouterr().out)["failed"] == ["capture name"]


# --- is CUDA initialised in a process? ------------------------------------------------------


def test_lists_process_from_the_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The captured GPU runs no process; a pid NVML lists holds a context; no NVML: unknown."""
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml())
    assert nvml.lists_process(4242) is False
    busy = FakePynvml(overrides={"nvmlDeviceGetComputeRunningProcesses": [4242]})
    monkeypatch.setitem(sys.modules, "pynvml", busy)
    assert nvml.lists_process(4242) is True
    assert busy.calls[-1] == "nvmlShutdown"
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(library_missing=True))
    assert nvml.lists_process(4242) is None


def test_cuda_loaded_but_not_initialised_still_takes_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libcuda mapped (as after a bare ``import torch``) but no context: no warning."""
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 00:00 0 /usr/lib/x86_64-linux-gnu/libcuda.so.580\n")
    monkeypatch.setattr(environment, "nvml_lists_process", lambda pid: False)
    assert environment.accelerator_runtime_loaded(maps) is None
    monkeypatch.setattr(environment, "nvml_lists_process", lambda pid: True)
    assert environment.accelerator_runtime_loaded(maps) == "libcuda.so"
    monkeypatch.setattr(environment, "nvml_lists_process", lambda pid: None)
    assert environment.accelerator_runtime_loaded(maps) == "libcuda.so"  # cannot tell: warn

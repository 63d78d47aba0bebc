"""Metrics sources: NVML against the fake built from the captured H200, the simulated one,
the ring buffer, and the recorder's history."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.nvml import discover
from dra_jupyter.metrics import MetricsHistory, Sample, source_for
from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.nvml import NvmlSource
from dra_jupyter.metrics.recorder import Recorder
from dra_jupyter.metrics.simulated import SimulatedSource
from tests.fakes.fake_pynvml import FakeProcess, FakePynvml, load_capture, pynvml

NODE = "metrics-node"
NOW = 1_800_000_000.0


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return tmp_path / "no-sysfs"  # PCIe root and NUMA node are left out; not needed here


def nvml_inventory(fake: FakePynvml, sysfs: Path) -> Inventory:
    inventory = discover(fake, node=NODE, sysfs=sysfs)
    fake.calls.clear()
    return inventory


def test_nvml_gpus_as_captured(sysfs: Path) -> None:
    fake = FakePynvml(gpus=2)
    inventory = nvml_inventory(fake, sysfs)
    source = source_for(inventory, fake)
    assert isinstance(source, NvmlSource)
    assert (source.name, source.simulated) == ("nvml", False)
    samples = source.sample(held=(), now=NOW)
    captured = load_capture().device
    assert [s.device for s in samples] == [
        f"gpu.nvidia.com/{NODE}/gpu-0",
        f"gpu.nvidia.com/{NODE}/gpu-1",
    ]
    for s in samples:
        assert s == Sample(
            device=s.device,
            time=NOW,
            memory_used=captured["memory"]["used"],
            memory_total=captured["memory"]["total"],
            utilization=float(captured["util"]["gpu"]),
            temperature=float(captured["temp"]),
            simulated=False,
        )
    source.sample(held=(), now=NOW + 1)
    assert fake.calls.count("nvmlInit") == 1  # initialised once, kept until close
    source.close()
    assert fake.calls[-1] == "nvmlShutdown"
    assert not fake.initialized


def test_nvml_errors_are_missing_values_never_exceptions(sysfs: Path) -> None:
    fake = FakePynvml(gpus=3)
    inventory = nvml_inventory(fake, sysfs)
    source = NvmlSource(inventory, fake)
    fake.overrides["nvmlDeviceGetTemperature"] = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    fake.overrides["nvmlDeviceGetUtilizationRates"] = pynvml.NVMLError(
        pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    fake.lost = {1}  # GPU 1 fell off the bus after discovery
    samples = source.sample(held=(), now=NOW)
    assert [s.device.rsplit("/", 1)[-1] for s in samples] == ["gpu-0", "gpu-2"]
    assert all(s.temperature is None and s.utilization is None for s in samples)
    assert all(s.memory_total == load_capture().device["memory"]["total"] for s in samples)


def test_nvml_that_cannot_start_gives_no_samples_and_says_why(sysfs: Path) -> None:
    inventory = nvml_inventory(FakePynvml(), sysfs)
    source = NvmlSource(inventory, FakePynvml(driver_not_loaded=True))
    assert source.sample(held=(), now=NOW) == []
    assert "NVML failed to start" in source.problem
    source.close()  # nothing to shut down, no error


def test_nvml_mig_devices(sysfs: Path) -> None:
    fake = FakePynvml(mig=True, mig_devices={0: [(9, 0), (19, 4)]})  # a 3g at 0, a 1g at 4
    inventory = nvml_inventory(fake, sysfs)
    source = NvmlSource(inventory, fake)
    # with MIG devices in place the full GPU is not on offer: only they have UUIDs
    mig_keys = set(source.keys.values())
    assert {k.rsplit("/", 1)[-1] for k in mig_keys} == {
        "gpu-0-mig-3g71gb-9-0",
        "gpu-0-mig-1g18gb-19-4",
    }
    by_device = {s.device: s for s in source.sample(held=(), now=NOW)}
    assert set(by_device) == mig_keys
    for key in mig_keys:  # NVML gives neither utilisation nor temperature of a MIG device
        assert by_device[key].utilization is None
        assert by_device[key].temperature is None
        assert by_device[key].memory_total is None  # no MIG memory was captured
    memory = pynvml.c_nvmlMemory_t()
    memory.total, memory.used, memory.free = 4 << 30, 1 << 30, 3 << 30
    fake.overrides["nvmlDeviceGetMemoryInfo"] = memory
    by_device = {s.device: s for s in source.sample(held=(), now=NOW)}
    assert {by_device[k].memory_used for k in mig_keys} == {1 << 30}


def test_nvml_lists_the_processes_on_each_gpu(sysfs: Path, child: int) -> None:
    """Compute and graphics contexts of real pids (a child, and this test), each once with
    both kinds, their memory (None where NVML cannot say) and their SM utilisation where
    NVML sampled it; in pid order."""
    me = FakeProcess(pid=child, memory=80 << 30, kinds=("compute", "graphics"), sm=93)
    quiet = FakeProcess(pid=os.getpid(), memory=None)  # no memory figure, no sample
    fake = FakePynvml(gpus=2, processes={1: [me, quiet]})
    source = NvmlSource(nvml_inventory(fake, sysfs), fake)
    gpu = f"gpu.nvidia.com/{NODE}/gpu-1"

    def expected(busy: float | None) -> list[DeviceProcess]:
        return sorted(
            [
                DeviceProcess(gpu, child, NOW, ("compute", "graphics"), 80 << 30, busy),
                DeviceProcess(gpu, os.getpid(), NOW, ("compute",), None, None),
            ],
            key=lambda p: p.pid,
        )

    assert source.processes(now=NOW) == expected(93.0)
    assert source.processes(now=NOW, since=2e9) == expected(None)  # no sample that new
    assert "nvmlDeviceGetProcessUtilization" in fake.calls
    idle = FakePynvml(gpus=2)  # the captured GPU runs nothing: nothing is sampled either
    source = NvmlSource(nvml_inventory(idle, sysfs), idle)
    assert source.processes(now=NOW) == []
    assert "nvmlDeviceGetProcessUtilization" not in idle.calls


def test_nvml_processes_on_mig_devices_and_on_errors(sysfs: Path, child: int) -> None:
    """With MIG on, processes are told by MIG device (NVML has no per-process samples
    there); a device that cannot be read is left out, and no NVML at all is None."""
    fake = FakePynvml(
        mig=True,
        mig_devices={0: [(9, 0), (19, 4)]},
        processes={(0, 1): [FakeProcess(pid=child, memory=9 << 30, sm=50)]},
    )
    source = NvmlSource(nvml_inventory(fake, sysfs), fake)
    (found,) = source.processes(now=NOW) or []
    assert found.device.endswith("/gpu-0-mig-1g18gb-19-4")
    assert (found.pid, found.memory_used, found.utilization) == (child, 9 << 30, None)
    fake.overrides["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLError(
        pynvml.NVML_ERROR_GPU_IS_LOST
    )
    assert source.processes(now=NOW) == []
    missing = FakePynvml(library_missing=True)
    assert (
        NvmlSource(Inventory("none", "no GPUs", (), (), False, "nvml"), missing).processes(now=NOW)
        is None
    )


def test_simulated_values_depend_on_time_and_holding_and_say_so() -> None:
    inventory = simulated.load("h200-8x")
    source = source_for(inventory)
    assert isinstance(source, SimulatedSource)
    keys = list(source.totals)
    held = {keys[0]}
    first = source.sample(held, NOW)
    assert first == source.sample(held, NOW)  # deterministic
    assert all(s.simulated for s in first)
    busy, idle = first[0], first[1]
    assert busy.utilization is not None and 30 <= busy.utilization <= 90
    assert idle.utilization == 0.0
    assert idle.temperature == float(load_capture().device["temp"])
    assert busy.memory_used is not None and idle.memory_used is not None
    assert busy.memory_used > idle.memory_used
    assert busy.memory_total == idle.memory_total == 143771 * 2**20
    later = source.sample(held, NOW + 10)[0]
    assert later.utilization != busy.utilization


def test_simulated_mig_inventory_has_a_sample_per_partition() -> None:
    inventory = simulated.load("h200-mig")
    samples = SimulatedSource(inventory).sample((), NOW)
    names = [r["name"] for s in inventory.slices for r in s["spec"].get("devices") or ()]
    assert len(samples) == len(names) > 1
    assert all(s.memory_total for s in samples)


def test_history_is_a_bounded_ring_per_device() -> None:
    history = MetricsHistory(3)
    for i in range(5):
        history.add([Sample("a", float(i)), Sample("b", float(i))])
    assert [s.time for s in history.series("a")] == [2.0, 3.0, 4.0]
    assert [s.time for s in history.series("b", 2)] == [3.0, 4.0]
    assert history.series("b", 0) == []
    assert history.series("nothing") == []
    assert [s.time for s in history.latest()] == [4.0, 4.0]
    with pytest.raises(ValueError, match="at least 1"):
        MetricsHistory(0)


def test_recorder_computes_a_simulated_past_and_keeps_a_real_one(sysfs: Path) -> None:
    recorder = Recorder(source_for(simulated.load("h200-8x")))
    key = "gpu.nvidia.com/gpu-node-1/gpu-0"
    held = {key: [(NOW - 30, NOW - 10)]}  # a claim held it from 30 s ago to 10 s ago
    past = recorder.series(key, since=NOW - 60, now=NOW, held=held, step=5)
    assert [s.time for s in past] == [NOW - 60 + 5 * i for i in range(13)]
    assert [s.utilization == 0.0 for s in past] == [True] * 6 + [False] * 4 + [True] * 3

    fake = FakePynvml()
    real = Recorder(NvmlSource(nvml_inventory(fake, sysfs), fake), length=2)
    gpu = f"gpu.nvidia.com/{NODE}/gpu-0"
    for t in (NOW - 20, NOW - 10, NOW):
        real.sample((), t)
    kept = real.series(gpu, since=NOW - 60, now=NOW, held={})
    assert [s.time for s in kept] == [NOW - 10, NOW]
    real.close()

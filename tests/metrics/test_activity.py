"""GPU activity per claim (pure): the states as tables of readings, the accounting hook's
intervals, and a claim's reading from NVML's processes and samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_jupyter.inventory.nvml import discover
from dra_jupyter.metrics.activity import (
    Activity,
    ActivitySettings,
    ActivityTracker,
    GpuState,
    Reading,
    claim_reading,
)
from dra_jupyter.metrics.base import DeviceProcess, Sample
from dra_jupyter.metrics.nvml import NvmlSource
from tests.fakes.fake_pynvml import FakePynvml

SETTINGS = ActivitySettings(threshold=5.0, window=60.0, idle_timeout=600.0)
A, Q, D, U = GpuState.ACTIVE, GpuState.INACTIVE, GpuState.IDLE, GpuState.UNKNOWN


def ticks(start: float, end: float, value: float | None) -> list[tuple[float, float | None]]:
    """A reading every 30 s from ``start`` up to ``end`` (included), all ``value``."""
    return [(float(t), value) for t in range(int(start), int(end) + 1, 30)]


@pytest.mark.parametrize(
    ("readings", "at", "state"),
    [
        # (time, utilisation) fed one a tick; the state at ``at``
        ([(0, 93.0)], 0, A),
        ([(0, 5.0)], 30, A),  # the threshold counts as active
        ([(0, 4.9)], 30, Q),
        ([(0, 93.0), (30, 0.0)], 60, A),  # active within the window
        ([(0, 93.0), (30, 0.0), (61, 0.0)], 61, Q),  # out of the window: inactive
        ([(0, 93.0), *ticks(30, 600, 0.0)], 600, D),  # idle_timeout since the last activity
        ([(0, 93.0), *ticks(30, 570, 0.0)], 599, Q),
        (ticks(0, 600, 0.0), 600, D),  # never active: since the signal began
        ([(0, None)], 0, U),  # no signal
        (ticks(0, 900, None), 900, U),  # never a signal: never idle
        ([(0, 0.0)], 61, U),  # no reading for a window: the signal is lost
        ([(0, 0.0), (100, None)], 100, U),
        ([(0, 0.0), (100, None), *ticks(200, 770, 0.0)], 770, Q),  # it restarts at 200
        ([(0, 0.0), (100, None), *ticks(200, 800, 0.0)], 800, D),
    ],
)
def test_states(readings: list[tuple[float, float | None]], at: float, state: GpuState) -> None:
    tracker = ActivityTracker(SETTINGS)
    for time, utilization in readings:
        tracker.feed(time, {"c": Reading(utilization)})
    assert tracker.activity("c", at).state is state


def test_what_views_show() -> None:
    tracker = ActivityTracker(SETTINGS)
    tracker.feed(0, {"busy": Reading(93.0), "quiet": Reading(1.0), "none": Reading(None)})
    assert tracker.activity("busy", 10).text(10) == "GPU busy: 93%"
    assert tracker.activity("quiet", 10).text(10) == "GPU quiet: 1%"
    assert tracker.activity("none", 10).text(10) == "no GPU signal"
    assert tracker.activity("never-fed", 10).text(10) == "no GPU signal"
    for time in range(30, 721, 30):
        tracker.feed(time, {"quiet": Reading(0.0)})
    idle = tracker.activity("quiet", 720)
    assert (idle.state, idle.since, idle.utilization) == (D, 0, 0.0)
    assert idle.text(720) == "GPU idle for 12 min"
    assert idle.to_dict(720) == {
        "state": "idle",
        "utilization": 0.0,
        "since": 0,
        "text": "GPU idle for 12 min",
    }
    assert Activity(GpuState.UNKNOWN).to_dict(0)["text"] == "no GPU signal"


def test_the_hook_counts_every_held_second_once() -> None:
    got: list[tuple[str, float, float, float, float]] = []
    tracker = ActivityTracker(SETTINGS, on_interval=lambda *a: got.append(a))
    tracker.feed(0, {"a": Reading(50.0, energy=1000.0), "b": Reading(None)})
    assert got == []  # the first reading opens the books
    tracker.feed(10, {"a": Reading(50.0, energy=1700.0), "b": Reading(None)})
    tracker.feed(80, {"a": Reading(0.0, energy=1800.0), "b": Reading(None)})  # a: inactive
    tracker.feed(90, {"a": Reading(0.0, energy=10.0)})  # a counter reset; b ended at 90
    tracker.end("a", 95)
    tracker.end("a", 99)  # nothing left to close
    assert got == [
        ("a", 10.0, 0.0, 0.0, 700.0),
        ("b", 0.0, 0.0, 10.0, 0.0),
        ("a", 0.0, 70.0, 0.0, 100.0),
        ("b", 0.0, 0.0, 70.0, 0.0),
        ("b", 0.0, 0.0, 10.0, 0.0),
        ("a", 0.0, 10.0, 0.0, 0.0),
        ("a", 0.0, 5.0, 0.0, 0.0),
    ]
    held = {"a": 95.0, "b": 90.0}
    for claim, seconds in held.items():
        assert sum(sum(g[1:4]) for g in got if g[0] == claim) == seconds
    assert tracker.claims() == []


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="threshold"):
        ActivitySettings(threshold=120)
    with pytest.raises(ValueError, match="window"):
        ActivitySettings(window=0)


GPU0, GPU1, MIG = "gpu.nvidia.com/n/gpu-0", "gpu.nvidia.com/n/gpu-1", "gpu.nvidia.com/n/mig-0"


def process(device: str, pid: int, utilization: float | None) -> DeviceProcess:
    return DeviceProcess(device, pid, 0.0, utilization=utilization)


def sample(device: str, utilization: float | None, *, simulated: bool = False) -> Sample:
    return Sample(device, 0.0, utilization=utilization, simulated=simulated)


@pytest.mark.parametrize(
    ("devices", "pids", "processes", "samples", "expected"),
    [
        # per-process samples: the claim's own processes only
        ([GPU0], {10}, [process(GPU0, 10, 93.0), process(GPU0, 99, 40.0)], [], 93.0),
        ([GPU0], {10}, [process(GPU0, 10, None), process(GPU0, 99, 40.0)], [sample(GPU0, 40)], 0.0),
        ([GPU0], None, [process(GPU0, 10, 3.0), process(GPU0, 99, 40.0)], [], 40.0),
        # no per-process samples on the device: the device's utilisation
        ([GPU0], {10}, [process(GPU0, 10, None)], [sample(GPU0, 71.0)], 71.0),
        ([GPU0], {10}, [], [sample(GPU0, 0.0)], 0.0),
        ([GPU0], {10}, None, [sample(GPU0, 12.0)], 12.0),
        # the highest of the claim's devices that say something
        ([GPU0, GPU1], {10}, [process(GPU1, 10, 20.0)], [sample(GPU0, 8.0)], 20.0),
        ([GPU0, MIG], {10}, [], [sample(GPU0, 8.0), sample(MIG, None)], 8.0),
        # no signal: a MIG device NVML does not sample, a simulated device, nothing read
        ([MIG], {10}, [process(MIG, 10, None)], [sample(MIG, None)], None),
        ([GPU0], {10}, None, [sample(GPU0, 60.0, simulated=True)], None),
        ([GPU0], {10}, None, [], None),
    ],
)
def test_claim_reading(
    devices: list[str],
    pids: set[int] | None,
    processes: list[DeviceProcess] | None,
    samples: list[Sample],
    expected: float | None,
) -> None:
    assert claim_reading(devices, pids, processes, samples).utilization == expected


def test_claim_energy_is_its_whole_gpus() -> None:
    energy = {GPU0: 100.0, GPU1: 50.0}
    assert claim_reading([GPU0, GPU1], None, None, [], energy).energy == 150.0
    assert claim_reading([MIG], None, None, [], energy).energy is None
    assert claim_reading([GPU0], None, None, []).energy is None


def test_nvml_energy_counter(tmp_path: Path) -> None:
    fake = FakePynvml(gpus=2, energy={0: 123_456})
    source = NvmlSource(discover(fake, node="n", sysfs=tmp_path), fake)
    assert source.energy() == {GPU0: 123.456}  # gpu-1: NotSupported, left out
    fake.energy[0] = 200_000
    assert source.energy() == {GPU0: 200.0}
    assert (
        NvmlSource(
            discover(fake, node="n", sysfs=tmp_path), FakePynvml(library_missing=True)
        ).energy()
        is None
    )

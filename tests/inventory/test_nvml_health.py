"""The NVML health seam (:mod:`dra_jupyter.inventory.nvmlhealth`) on the fake pynvml of the
captured H200s: events registered and waited for in NVML's shapes, counters polled, a lost
GPU, the session closed."""

from __future__ import annotations

import ctypes

import pytest

from dra_jupyter.errors import DiscoveryError
from dra_jupyter.inventory.nvmlhealth import NvmlHealth, Signal, handle_key
from dra_jupyter.model import health
from tests.fakes.fake_pynvml import FakePynvml, pynvml


def test_an_xid_event_becomes_the_taint_of_its_gpu_by_minor() -> None:
    fake = FakePynvml(gpus=2)
    watch = NvmlHealth(fake)
    try:
        assert fake.registered == {0: health.WATCHED_EVENTS, 1: health.WATCHED_EVENTS}
        assert watch.wait(10) == []  # nothing happened: NVML's timeout
        fake.inject_xid(1, 79)
        (signal,) = watch.wait(1000)
        minor = int(fake.capture.device["minor"]) + 1
        assert signal == Signal(minor, health.of_xid(79))
        fake.inject_xid(0, 13)  # an application's error: nothing
        assert watch.wait(50) == []
    finally:
        watch.close()
    assert "nvmlEventSetFree" in fake.calls and not fake.initialized


def test_unregistered_events_are_not_delivered() -> None:
    fake = FakePynvml(gpus=1)
    watch = NvmlHealth(fake)
    try:
        fake.inject_event(0, pynvml.nvmlEventTypePState, 0)  # not watched
        assert watch.wait(50) == []
        fake.inject_event(0, pynvml.nvmlEventTypeDoubleBitEccError, 0)
        (signal,) = watch.wait(1000)
        assert signal.taint == health.of_xid(48)
    finally:
        watch.close()


def test_the_poll_reads_ecc_remapped_rows_throttling_and_a_lost_gpu() -> None:
    fake = FakePynvml(gpus=3)
    watch = NvmlHealth(fake)
    base = int(fake.capture.device["minor"])
    try:
        assert watch.poll() == []  # as captured: no errors, idle
        fake.ecc[0] = 2
        fake.remapped[1] = (0, 1, 1, 0)
        fake.throttle[1] = pynvml.nvmlClocksEventReasonHwThermalSlowdown
        fake.lost.add(2)
        got = watch.poll()
        assert got == [
            Signal(base, health.of_ecc(2)),
            Signal(base + 1, health.of_remapped_rows(True, False)),
            Signal(base + 1, warning="slowed to cool down (hardware thermal slowdown)"),
            Signal(base + 2, health.gpu_lost()),
        ]
    finally:
        watch.close()


def test_a_gpu_that_falls_off_the_bus_says_xid_79_then_lost() -> None:
    fake = FakePynvml(gpus=1)
    watch = NvmlHealth(fake)
    try:
        fake.fall_off_bus(0)
        (event,) = watch.wait(1000)
        assert event.taint is not None and event.taint.value == "79"
        (polled,) = watch.poll()
        assert polled.taint == health.gpu_lost()
    finally:
        watch.close()


def test_a_gpu_without_events_is_polled_only() -> None:
    not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake = FakePynvml(gpus=1, overrides={"nvmlDeviceGetSupportedEventTypes": not_supported})
    watch = NvmlHealth(fake)
    try:
        assert fake.registered == {}
        fake.ecc[0] = 1
        assert [s.taint for s in watch.poll()] == [health.of_ecc(1)]
    finally:
        watch.close()


def test_no_driver_is_one_line() -> None:
    with pytest.raises(DiscoveryError, match="health: cannot start NVML"):
        NvmlHealth(FakePynvml(driver_not_loaded=True))


def test_a_wait_that_meets_a_lost_gpu_leaves_it_to_the_poll() -> None:
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    fake = FakePynvml(gpus=1, overrides={"nvmlEventSetWait": lost})
    watch = NvmlHealth(fake)
    try:
        assert watch.wait(10) == []
        fake.lost.add(0)
        assert [s.taint for s in watch.poll()] == [health.gpu_lost()]
    finally:
        watch.close()


def test_real_nvml_handles_are_told_apart_by_address() -> None:
    """Each nvmlEventSetWait answer holds a new pointer object: the watcher matches it to
    its GPU by the address it points to, as pynvml's handles are ctypes pointers."""
    structs = [pynvml.struct_c_nvmlDevice_t(), pynvml.struct_c_nvmlDevice_t()]
    first = ctypes.pointer(structs[0])
    again = ctypes.cast(ctypes.addressof(structs[0]), pynvml.c_nvmlDevice_t)
    other = ctypes.cast(ctypes.addressof(structs[1]), pynvml.c_nvmlDevice_t)
    assert first is not again
    assert handle_key(first) == handle_key(again) != handle_key(other)

"""MIG as DRA devices: the H200 profile table against the capture, and counters that make the
embedded allocator place MIG partitions exactly as the GPU can (DynamicMIG semantics)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import kubernetes_validate
import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model.limits import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_COUNTER_SETS_PER_SLICE,
    MAX_COUNTERS_PER_SET,
    MAX_DEVICES_PER_SLICE_WITH_EXTRAS,
    dns_label_problem,
)
from tests.fakes.fake_pynvml import load_capture

Wire = dict[str, Any]
NODE = "mig-node"
QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$")


def check(slices: Sequence[Wire]) -> None:
    """Each slice validates against the Kubernetes 1.36 schema and the API's limits."""
    for obj in slices:
        assert kubernetes_validate.validate(obj, "1.36.0", strict=True) == "1.36"
        spec = obj["spec"]
        assert not (spec.get("devices") and spec.get("sharedCounters")), "split layout"
        assert len(spec.get("devices", [])) <= MAX_DEVICES_PER_SLICE_WITH_EXTRAS
        assert len(spec.get("sharedCounters", [])) <= MAX_COUNTER_SETS_PER_SLICE
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        for cs in spec.get("sharedCounters", []):
            assert len(cs["counters"]) <= MAX_COUNTERS_PER_SET
            assert all(QUANTITY.match(c["value"]) for c in cs["counters"].values())
        for dev in spec.get("devices", []):
            assert dns_label_problem(dev["name"]) is None
            capacity = dev.get("capacity", {})
            assert len(dev["attributes"]) + len(capacity) <= MAX_ATTRIBUTES_AND_CAPACITIES
            assert all(QUANTITY.match(c["value"]) for c in capacity.values())


def devices(slices: Sequence[Wire]) -> list[Wire]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def claim(name: str, *requests: tuple[str, int], same_gpu: bool = False) -> Wire:
    """A claim for MIG profiles (``"3g.71gb"``) or ``"gpu"`` (a full GPU), each ``count`` times."""
    reqs = []
    for i, (what, count) in enumerate(requests):
        exactly: Wire = {"deviceClassName": "gpu.nvidia.com", "count": count}
        if what != "gpu":
            expr = f"device.attributes['gpu.nvidia.com'].profile == '{what}'"
            exactly = {**exactly, "deviceClassName": "mig.nvidia.com"}
            exactly["selectors"] = [{"cel": {"expression": expr}}]
        reqs.append({"name": f"r{i}", "exactly": exactly})
    spec: Wire = {"devices": {"requests": reqs}}
    if same_gpu:
        spec["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


def allocate_in_turn(slices: Sequence[Wire], *claims: Wire) -> list[list[str] | None]:
    """Allocate claims one after the other, each holding its devices; the names each got."""
    held: list[Wire] = []
    out: list[list[str] | None] = []
    for c in claims:
        results = Allocator(slices, nvidia.device_classes(), held).allocate([c], node=NODE)
        if results is None:
            out.append(None)
            continue
        (result,) = results
        held.append({**c, "status": {"allocation": result.to_dict()}})
        out.append([r.device.device for r in result.results])
    return out


# --- the H200 table is the capture's --------------------------------------------------------


def test_h200_profiles_are_the_captured_ones() -> None:
    capture = load_capture()
    gpu = capture.device
    infos = {p["id"]: p for p in gpu["gi_profiles"].values() if "error" not in p}
    assert [p.gi_profile_id for p in mig.H200_PROFILES] == [19, 20, 15, 14, 9, 5, 0]
    assert {p.gi_profile_id for p in mig.H200_PROFILES} == set(infos)
    assert gpu["memory"]["total"] == mig.H200_MEMORY_BYTES
    for p in mig.H200_PROFILES:
        info = infos[p.gi_profile_id]
        assert info["name"] == f"MIG {p.name}"
        assert (
            p.slice_count, p.multiprocessors, p.copy_engines, p.decoders, p.encoders,
            p.jpeg_engines, p.ofa_engines, p.memory_mib,
        ) == (
            info["sliceCount"], info["multiprocessorCount"], info["copyEngineCount"],
            info["decoderCount"], info["encoderCount"], info["jpegCount"], info["ofaCount"],
            info["memorySizeMB"],
        )  # fmt: skip
        assert p.placements == capture.placements[p.gi_profile_id]


def test_profile_names_follow_go_nvlib() -> None:
    """<g>g.<gb>gb from the memory share; 69.75 GiB of 141 -> 70.5 -> 71 (half away from 0)."""
    total = mig.H200_MEMORY_BYTES
    shapes = {19: (1, ""), 20: (1, "+me"), 15: (1, ""), 14: (2, ""), 9: (3, ""), 5: (4, "")}
    shapes[0] = (7, "")
    for p in mig.H200_PROFILES:
        slices, suffix = shapes[p.gi_profile_id]
        assert mig.profile_name(slices, p.memory_mib, total, suffix) == p.name
    assert mig.profile_name(1, 4864, 42949672960) == "1g.5gb"  # A100-40GB
    assert mig.profile_name(3, 20096, 42949672960) == "3g.20gb"


def test_device_names_are_the_drivers() -> None:
    assert mig.mig_device_name(0, "1g.18gb", 19, 0) == "gpu-0-mig-1g18gb-19-0"
    assert mig.mig_device_name(0, "1g.18gb+me", 20, 0) == "gpu-0-mig-1g18gb-me-20-0"
    assert mig.mig_device_name(3, "7g.141gb", 0, 0) == "gpu-3-mig-7g141gb-0-0"
    assert mig.counter_set_name(2) == "gpu-2-counter-set"


# --- the published shape ---------------------------------------------------------------------


def test_one_h200_yields_26_devices_in_split_slices() -> None:
    slices = mig.h200_mig_node(NODE)
    check(slices)
    assert [s["metadata"]["name"] for s in slices] == [
        f"{NODE}-gpu.nvidia.com-counters-0",
        f"{NODE}-gpu.nvidia.com-gpu-0",
    ]
    (counter_set,) = slices[0]["spec"]["sharedCounters"]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert counter_set["counters"] == {
        "multiprocessors": {"value": "132"}, "copy-engines": {"value": "8"},
        "decoders": {"value": "7"}, "encoders": {"value": "0"},
        "jpeg-engines": {"value": "7"}, "ofa-engines": {"value": "1"},
        "memory": {"value": "140Gi"}, **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }  # fmt: skip
    devs = devices(slices)
    per_profile = {p.name: len(p.placements) for p in mig.H200_PROFILES}
    assert per_profile == {
        "1g.18gb": 7, "1g.18gb+me": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
        "7g.141gb": 1,
    }  # fmt: skip
    assert len(devs) == 1 + sum(per_profile.values()) == 26
    assert [d["name"] for d in devs] == sorted(d["name"] for d in devs)


def test_full_gpu_consumes_everything_and_mig_its_share() -> None:
    devs = {d["name"]: d for d in devices(mig.h200_mig_node(NODE))}
    full = devs["gpu-0"]
    assert full["attributes"]["type"] == {"string": "gpu"}
    assert full["capacity"]["memory"] == {"value": "140Gi"}  # the largest profile, not total
    (use,) = full["consumesCounters"]
    assert len(use["counters"]) == 15
    small = devs["gpu-0-mig-1g18gb-me-20-3"]
    attrs = small["attributes"]
    assert attrs["type"] == {"string": "mig"}
    assert attrs["profile"] == {"string": "1g.18gb+me"}
    assert attrs["parentUUID"] == full["attributes"]["uuid"]
    assert "uuid" not in attrs
    for key in ("productName", "brand", "architecture", "driverVersion", "cudaComputeCapability"):
        assert attrs[key] == full["attributes"][key]
    assert small["capacity"] == {
        "multiprocessors": {"value": "16"}, "copyEngines": {"value": "1"},
        "decoders": {"value": "1"}, "encoders": {"value": "0"}, "jpegEngines": {"value": "1"},
        "ofaEngines": {"value": "1"}, "memory": {"value": "16Gi"},
    }  # fmt: skip
    (use,) = small["consumesCounters"]
    assert use["counterSet"] == "gpu-0-counter-set"
    assert use["counters"]["memory-slice-3"] == {"value": "1"}
    assert not any(f"memory-slice-{i}" in use["counters"] for i in (0, 1, 2, 4, 5, 6, 7))
    big = devs["gpu-0-mig-3g71gb-9-4"]["consumesCounters"][0]["counters"]
    slices = [k for k in big if k.startswith("memory-slice")]
    assert slices == [f"memory-slice-{i}" for i in (4, 5, 6, 7)]


@pytest.mark.parametrize("gpus", [1, 2, 8, 9])
def test_nodes_respect_the_slice_limits(gpus: int) -> None:
    slices = mig.h200_mig_node(NODE, gpus)
    check(slices)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert len(counter_slices) == -(-gpus // MAX_COUNTER_SETS_PER_SLICE)
    assert len(slices) == len(counter_slices) + gpus
    assert len(devices(slices)) == 26 * gpus


def test_many_devices_are_split_over_slices() -> None:
    parent = devices(mig.h200_mig_node(NODE))[0]
    placements = tuple((i, 1) for i in range(80))
    profile = mig.MigProfile(99, "1g.1gb", 1, 1, 1, 0, 0, 0, 0, 1024, placements)
    gpu = mig.partitioned_gpu(parent, 0, [profile])
    slices = mig.split_slices(NODE, [(0, gpu)])
    assert [len(s["spec"].get("devices", [])) for s in slices] == [0, 64, 17]
    assert slices[1]["metadata"]["name"].endswith("gpu-0-0")


def test_static_mig_devices_have_uuid_and_memory_slices() -> None:
    parent = devices(mig.h200_mig_node(NODE))[0]
    three_g = mig.H200_PROFILES[4]
    existing = mig.ExistingMig(three_g, 4, 4, "MIG-5bce4520-8cea-103d-b5ad-af3181b2c4cd")
    dev = mig.static_mig_device(parent, 0, existing)
    assert dev["name"] == "gpu-0-mig-3g71gb-9-4"
    assert dev["attributes"]["uuid"] == {"string": existing.uuid}
    assert dev["attributes"]["type"] == {"string": "mig"}
    assert {k for k in dev["capacity"] if k.startswith("memorySlice")} == {
        "memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7",
    }  # fmt: skip
    assert "consumesCounters" not in dev
    check([nvidia.gpu_slice(NODE, [dev])])


# --- the allocator places MIG partitions as the hardware can ------------------------------


@pytest.fixture(scope="module")
def h200() -> list[Wire]:
    return mig.h200_mig_node(NODE)


def test_full_gpu_and_mig_exclude_each_other(h200: list[Wire]) -> None:
    assert allocate_in_turn(h200, claim("a", ("gpu", 1)), claim("b", ("1g.18gb", 1))) == [
        ["gpu-0"], None,
    ]  # fmt: skip
    assert allocate_in_turn(h200, claim("a", ("1g.18gb", 1)), claim("b", ("gpu", 1))) == [
        ["gpu-0-mig-1g18gb-19-0"], None,
    ]  # fmt: skip


def test_two_3g_fit_at_starts_0_and_4(h200: list[Wire]) -> None:
    got = allocate_in_turn(h200, *(claim(n, ("3g.71gb", 1)) for n in "abc"))
    assert got == [["gpu-0-mig-3g71gb-9-0"], ["gpu-0-mig-3g71gb-9-4"], None]
    assert allocate_in_turn(h200, claim("two", ("3g.71gb", 2))) == [
        ["gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-4"],
    ]  # fmt: skip


def test_4g_and_3g_fit(h200: list[Wire]) -> None:
    got = allocate_in_turn(h200, claim("a", ("4g.71gb", 1)), claim("b", ("3g.71gb", 1)))
    assert got == [["gpu-0-mig-4g71gb-5-0"], ["gpu-0-mig-3g71gb-9-4"]]
    assert allocate_in_turn(h200, claim("c", ("4g.71gb", 1), ("3g.71gb", 1))) == [
        ["gpu-0-mig-4g71gb-5-0", "gpu-0-mig-3g71gb-9-4"],
    ]  # fmt: skip


def test_after_a_1g_at_start_0(h200: list[Wire]) -> None:
    first = claim("first", ("1g.18gb", 1))
    got = allocate_in_turn(
        h200, first, claim("four", ("4g.71gb", 1)), claim("seven", ("7g.141gb", 1)),
        claim("gpu", ("gpu", 1)), claim("three", ("3g.71gb", 1)), claim("again", ("3g.71gb", 1)),
    )  # fmt: skip
    assert got == [["gpu-0-mig-1g18gb-19-0"], None, None, None, ["gpu-0-mig-3g71gb-9-4"], None]
    # what is left of slices 1..3: a 2g at start 2 and a 1g at start 1 (1g.35gb needs 0..1)
    rest = allocate_in_turn(
        h200, first, claim("three", ("3g.71gb", 1)), claim("2g", ("2g.35gb", 1)),
        claim("1g35", ("1g.35gb", 1)), claim("1g", ("1g.18gb", 1)), claim("more", ("1g.18gb", 1)),
    )  # fmt: skip
    assert rest == [
        ["gpu-0-mig-1g18gb-19-0"], ["gpu-0-mig-3g71gb-9-4"], ["gpu-0-mig-2g35gb-14-2"], None,
        ["gpu-0-mig-1g18gb-19-1"], None,
    ]  # fmt: skip


def test_seven_1g_fit_not_eight(h200: list[Wire]) -> None:
    (seven,) = allocate_in_turn(h200, claim("seven", ("1g.18gb", 7)))
    assert seven == [f"gpu-0-mig-1g18gb-19-{i}" for i in range(7)]
    assert allocate_in_turn(h200, claim("eight", ("1g.18gb", 8))) == [None]
    assert allocate_in_turn(h200, claim("4x", ("1g.35gb", 4)), claim("5th", ("1g.35gb", 1))) == [
        [f"gpu-0-mig-1g35gb-15-{i}" for i in (0, 2, 4, 6)], None,
    ]  # fmt: skip


def test_only_one_media_extension_profile(h200: list[Wire]) -> None:
    """The one OFA engine: one 1g.18gb+me, and then no 7g.141gb either."""
    assert allocate_in_turn(h200, claim("two", ("1g.18gb+me", 2))) == [None]
    got = allocate_in_turn(h200, claim("me", ("1g.18gb+me", 1)), claim("six", ("1g.18gb", 6)))
    assert got == [["gpu-0-mig-1g18gb-me-20-0"], [f"gpu-0-mig-1g18gb-19-{i}" for i in range(1, 7)]]


def test_mixed_profiles_on_one_parent(h200: list[Wire]) -> None:
    """The NVIDIA quickstart's gpu-test4 on an H200: two 1g, a 2g and a 3g on one GPU."""
    c = claim("mix", ("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1), same_gpu=True)
    ((*ones, two, three),) = allocate_in_turn(h200, c)  # type: ignore[misc]
    assert three == "gpu-0-mig-3g71gb-9-4"
    assert two == "gpu-0-mig-2g35gb-14-2"
    assert ones == ["gpu-0-mig-1g18gb-19-0", "gpu-0-mig-1g18gb-19-1"]


def test_two_gpus_two_7g() -> None:
    slices = mig.h200_mig_node(NODE, 2)
    got = allocate_in_turn(slices, *(claim(n, ("7g.141gb", 1)) for n in "abc"))
    assert got == [["gpu-0-mig-7g141gb-0-0"], ["gpu-1-mig-7g141gb-0-0"], None]
    got = allocate_in_turn(slices, claim("full", ("gpu", 1)), claim("mig", ("3g.71gb", 2)))
    assert got == [["gpu-0"], ["gpu-1-mig-3g71gb-9-0", "gpu-1-mig-3g71gb-9-4"]]


def test_existing_instances_stay_and_fence_off_their_slices() -> None:
    parent = devices(mig.h200_mig_node(NODE))[0]
    four_g = mig.H200_PROFILES[5]
    existing = [mig.ExistingMig(four_g, 0, 4, "MIG-11111111-2222-3333-4444-555555555555")]
    gpu = mig.partitioned_gpu(parent, 0, mig.H200_PROFILES, existing=existing)
    slices = mig.split_slices(NODE, [(0, gpu)])
    check(slices)
    names = [d["name"] for d in devices(slices)]
    assert "gpu-0" not in names
    assert "gpu-0-mig-4g71gb-5-0" in names
    assert not any(n.endswith(("-0", "-1", "-2", "-3")) and "4g71gb" not in n for n in names)
    counters = slices[0]["spec"]["sharedCounters"][0]["counters"]
    assert counters["multiprocessors"] == {"value": "68"}  # 132 - 64
    assert sorted(k for k in counters if k.startswith("memory-slice")) == [
        f"memory-slice-{i}" for i in (4, 5, 6, 7)
    ]  # fmt: skip
    claims = [claim("held", ("4g.71gb", 1)), claim("b", ("3g.71gb", 1)), claim("c", ("1g.18gb", 1))]
    got = allocate_in_turn(slices, *claims)
    assert got == [["gpu-0-mig-4g71gb-5-0"], ["gpu-0-mig-3g71gb-9-4"], None]


def test_without_the_full_gpu() -> None:
    """Ampere with MIG on: only MIG devices, still with the counter set."""
    parent = devices(mig.h200_mig_node(NODE))[0]
    gpu = mig.partitioned_gpu(parent, 0, mig.H200_PROFILES, include_full=False)
    assert len(gpu.devices) == 25
    assert gpu.counter_set is not None
    assert all(d["attributes"]["type"] == {"string": "mig"} for d in gpu.devices)

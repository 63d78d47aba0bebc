"""The bundled simulated inventories and inventories read from files.

Every bundled inventory must be what a real cluster could hold: its ResourceSlices and
DeviceClasses validate strictly against the Kubernetes 1.36 OpenAPI schemas, its classes
cover its drivers, and the allocator serves realistic claims on it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import InvalidInputError, ObjectError, SelectorError
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.base import Inventory

Wire = dict[str, Any]

SCHEMA_VERSION = "1.36.0"
# resource.Quantity's pattern in the OpenAPI schema (kubernetes-validate does not enforce it).
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
NAMES = simulated.names()
NV, TPU, AMD = "gpu.nvidia.com", "tpu.google.com", "gpu.amd.com"
# The classes that select at least one device of each inventory.
SERVED = {
    "h200-8x": {NV},
    "h100-8x": {NV},
    "h200-mig": {NV, "mig.nvidia.com"},
    "h200-shared": {NV},
    "workstation-4gpu": {NV},
    "tpu-v5e-8": {TPU},
    "mi300x-8": {AMD},
}
DEVICES = {
    "h200-8x": 8,
    "h100-8x": 8,
    "h200-shared": 8,
    "workstation-4gpu": 4,
    "tpu-v5e-8": 8,
    "mi300x-8": 8,
}
ROOT, NUMA = "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"


def request(cls: str, count: int = 1, *selectors: str, name: str = "r", all_: bool = False) -> Wire:
    exactly: Wire = {"deviceClassName": cls}
    exactly.update({"allocationMode": "All"} if all_ else {"count": count})
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def claim(*requests: Wire, match: str | None = None) -> Wire:
    devices: Wire = {"requests": list(requests)}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": devices},
    }


def allocate(inv: Inventory, obj: Wire) -> list[str] | None:
    """Names of the devices the claim gets on the inventory's node, or None."""
    results = Allocator(inv.slices, inv.device_classes).allocate([obj], node=inv.nodes[0])
    return None if results is None else [r.device.device for r in results[0].results]


def devices(inv: Inventory) -> dict[str, Wire]:
    return {d["name"]: d for s in inv.slices for d in s["spec"].get("devices", [])}


def attr(inv: Inventory, device: str, key: str) -> Any:
    """The value of a device's attribute, by its fully-qualified name."""
    raw = devices(inv)[device]["attributes"]
    value = raw.get(key) or raw[key.split("/", 1)[1]]
    return next(iter(value.values()))


@pytest.fixture(params=NAMES)
def inv(request: pytest.FixtureRequest) -> Inventory:
    return simulated.load(request.param)


# --- shape --------------------------------------------------------------------------------------


def test_registry() -> None:
    assert NAMES[0] == simulated.DEFAULT == "h200-8x"
    assert set(NAMES) == set(SERVED)


def test_inventory_metadata(inv: Inventory) -> None:
    assert inv.simulated
    assert inv.source == f"simulated:{inv.name}"
    assert inv.description and "\n" not in inv.description
    assert len(inv.nodes) == 1
    assert inv.name not in DEVICES or len(devices(inv)) == DEVICES[inv.name]


def test_objects_validate_against_the_schema(inv: Inventory) -> None:
    for obj in inv.slices + inv.device_classes:
        assert kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True) == "1.36"
    for dev in devices(inv).values():
        for name, cap in (dev.get("capacity") or {}).items():
            assert QUANTITY.match(cap["value"]), f"{dev['name']} capacity {name}"


def test_loads_are_fresh(inv: Inventory) -> None:
    again = simulated.load(inv.name)
    assert again == inv
    assert again.slices[0] is not inv.slices[0]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInputError) as info:
        simulated.load("h300-8x")
    message = str(info.value)
    assert "'h300-8x'" in message and "\n" not in message
    assert all(name in message for name in NAMES)


# --- allocation ---------------------------------------------------------------------------------


def test_one_device_of_each_class(inv: Inventory) -> None:
    served = set()
    for cls in inv.device_classes:
        name = cls["metadata"]["name"]
        got = allocate(inv, claim(request(name)))
        assert got is None or len(got) == 1
        if got:
            served.add(name)
    assert served == SERVED[inv.name]


def test_classes_cover_every_driver(inv: Inventory) -> None:
    allocator = Allocator(inv.slices, inv.device_classes)
    served = set()
    for cls in SERVED[inv.name]:
        results = allocator.allocate([claim(request(cls))], node=inv.nodes[0])
        assert results is not None
        served.add(results[0].results[0].device.driver)
    assert served == {s["spec"]["driver"] for s in inv.slices}


@pytest.mark.parametrize("name", [n for n in NAMES if n != "h200-mig"])
def test_whole_inventory_with_allocation_mode_all(name: str) -> None:
    inv = simulated.load(name)
    requests = [request(c, name=f"r{i}", all_=True) for i, c in enumerate(sorted(SERVED[name]))]
    assert sorted(allocate(inv, claim(*requests)) or []) == sorted(devices(inv))


def test_mig_placements_exclude_each_other_and_the_full_gpu() -> None:
    inv = simulated.load("h200-mig")
    full = [d for d in devices(inv) if attr(inv, d, f"{NV}/type") == "gpu"]
    assert allocate(inv, claim(request(NV, all_=True))) == full
    assert allocate(inv, claim(request("mig.nvidia.com", all_=True))) is None  # overlapping
    small = f"device.attributes['{NV}'].profile == '1g.18gb'"
    assert len(allocate(inv, claim(request("mig.nvidia.com", 7, small))) or []) == 7
    assert allocate(inv, claim(request("mig.nvidia.com", 8, small))) is None
    both = claim(request(NV, name="gpu"), request("mig.nvidia.com", 1, small, name="mig"))
    assert allocate(inv, both) is None


def test_h100_pcie_roots_numa_nodes_and_nvlink_partitions() -> None:
    inv = simulated.load("h100-8x")
    assert allocate(inv, claim(request(NV, 4), match=ROOT)) is None  # each root has 2 GPUs
    pair = allocate(inv, claim(request(NV, 2), match=ROOT))
    assert pair is not None and len({attr(inv, d, ROOT) for d in pair}) == 1
    four = allocate(inv, claim(request(NV, 4), match=NUMA))
    assert four is not None and len({attr(inv, d, NUMA) for d in four}) == 1
    assert allocate(inv, claim(request(NV, 5), match=NUMA)) is None
    assert len(allocate(inv, claim(request(NV, 8), match=f"{NV}/partition8")) or []) == 8
    fm_pair = allocate(inv, claim(request(NV, 2), match=f"{NV}/partition2"))
    assert fm_pair is not None and len({attr(inv, d, ROOT) for d in fm_pair}) == 1
    fm_four = allocate(inv, claim(request(NV, 4), match=f"{NV}/partition4"))
    assert fm_four is not None and len({attr(inv, d, NUMA) for d in fm_four}) == 1
    # "80GB" is decimal: NVML's 81559Mi is 80G and more, but less than 80Gi.
    big = f"device.capacity['{NV}'].memory.compareTo(quantity('80G')) >= 0"
    hopper = f"device.attributes['{NV}'].architecture == 'Hopper'"
    assert len(allocate(inv, claim(request(NV, 1, big, hopper, all_=True))) or []) == 8


def test_workstation_has_one_gpu_per_root_and_two_per_numa_node() -> None:
    inv = simulated.load("workstation-4gpu")
    assert allocate(inv, claim(request(NV, 2), match=ROOT)) is None
    pair = allocate(inv, claim(request(NV, 2), match=NUMA))
    assert pair is not None and len({attr(inv, d, NUMA) for d in pair}) == 1
    assert allocate(inv, claim(request(NV, 3), match=NUMA)) is None
    ada = (
        f"device.attributes['{NV}'].architecture == 'Ada Lovelace' && "
        f"device.attributes['{NV}'].cudaComputeCapability.compareTo(semver('8.9.0')) >= 0"
    )
    assert len(allocate(inv, claim(request(NV, 1, ada, all_=True))) or []) == 4
    big = f"device.capacity['{NV}'].memory.compareTo(quantity('80Gi')) >= 0"
    assert allocate(inv, claim(request(NV, 1, big))) is None


def test_tpu_host_is_taken_whole() -> None:
    inv = simulated.load("tpu-v5e-8")
    v5e = (
        f"device.attributes['{TPU}'].tpuGen == 'v5litepod' && "
        f"device.attributes['{TPU}'].topology == '2x4' && "
        f"device.attributes['{TPU}'].chipCount == 8"
    )
    chips = [f"accel{i}" for i in range(8)]
    assert allocate(inv, claim(request(TPU, 1, v5e, all_=True))) == chips
    assert sorted(allocate(inv, claim(request(TPU, 8))) or []) == chips
    assert allocate(inv, claim(request(TPU, 9))) is None
    uuids = {attr(inv, c, f"{TPU}/uuid") for c in chips}
    assert len(uuids) == 8 and all(re.fullmatch(r"tpu-[0-9a-f-]{36}", u) for u in uuids)
    assert all("capacity" not in d for d in devices(inv).values())


def test_mi300x_capacities_and_numa_nodes() -> None:
    inv = simulated.load("mi300x-8")
    vram = f"device.capacity['{AMD}'].memory.compareTo(quantity('190Gi')) >= 0"
    cus = f"device.capacity['{AMD}'].computeUnits.compareTo(quantity('304')) >= 0"
    assert len(allocate(inv, claim(request(AMD, 8, vram, cus))) or []) == 8
    # As on real MI300X: KFD reports 196592Mi of VRAM, 16Mi short of the 192Gi on the box.
    nominal = f"device.capacity['{AMD}'].memory.compareTo(quantity('192Gi')) >= 0"
    assert allocate(inv, claim(request(AMD, 1, nominal))) is None
    for numa in (NUMA, f"{AMD}/numaNode"):
        four = allocate(inv, claim(request(AMD, 4), match=numa))
        assert four is not None and len({attr(inv, d, numa) for d in four}) == 1
        assert allocate(inv, claim(request(AMD, 5), match=numa)) is None
    assert allocate(inv, claim(request(AMD, 2), match=ROOT)) is None
    whole = f"device.attributes['{AMD}'].partitionProfile == 'spx_nps1'"
    assert len(allocate(inv, claim(request(AMD, 1, whole, all_=True))) or []) == 8


# --- files --------------------------------------------------------------------------------------


def write(path: Path, objects: list[Wire]) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    return path


def test_from_file_round_trip(inv: Inventory, tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [*inv.slices, *inv.device_classes])
    got = simulated.from_file(path)
    assert got.slices == inv.slices and got.device_classes == inv.device_classes
    assert (got.simulated, got.source, got.warnings) == (True, f"file:{path}", ())
    assert got.nodes == inv.nodes and got.name == "inv.yaml"
    assert "\n" not in got.description


def test_from_file_list_without_classes_gets_the_bundled_ones(tmp_path: Path) -> None:
    slices = [*simulated.load("tpu-v5e-8").slices, *simulated.load("mi300x-8").slices]
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}))
    got = simulated.from_file(str(path))
    assert [c["metadata"]["name"] for c in got.device_classes] == [TPU, AMD]
    assert got.warnings == () and got.nodes == ["mi300x-node-1", "tpu-v5e-node-1"]
    assert "16 devices" in got.description


def test_from_file_adds_classes_for_uncovered_drivers(tmp_path: Path) -> None:
    example = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n-1-example"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n-1",
            "pool": {"name": "n-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }
    got = simulated.from_file(write(tmp_path / "a.yaml", [example]))
    assert [c["metadata"]["name"] for c in got.device_classes] == ["gpu.example.com"]
    assert len(got.warnings) == 1 and "gpu.example.com" in got.warnings[0]
    assert allocate(got, claim(request("gpu.example.com"))) == ["gpu-0"]
    amd = simulated.load("mi300x-8")
    mixed = [*amd.slices, example, *amd.device_classes]
    got = simulated.from_file(write(tmp_path / "b.yaml", mixed))
    assert [c["metadata"]["name"] for c in got.device_classes] == [AMD, "gpu.example.com"]
    assert len(got.warnings) == 1


def test_from_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidInputError, match=r"nope\.yaml: cannot read the file") as info:
        simulated.from_file(missing)
    assert "\n" not in str(info.value)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: [ResourceSlice\n")
    with pytest.raises(InvalidInputError, match="not valid YAML") as info:
        simulated.from_file(bad_yaml)
    assert "\n" not in str(info.value)
    with pytest.raises(InvalidInputError, match="has no ResourceSlice"):
        simulated.from_file(write(tmp_path / "empty.yaml", []))
    inv = simulated.load("h200-8x")
    with pytest.raises(InvalidInputError, match="ResourceClaim"):
        simulated.from_file(write(tmp_path / "claim.yaml", [*inv.slices, claim(request(NV))]))


def test_from_file_rejects_bad_objects_like_the_allocator(tmp_path: Path) -> None:
    inv = simulated.load("h200-8x")
    broken = json.loads(json.dumps(inv.slices[0]))
    broken["spec"]["devices"][0]["attributes"]["driverVersion"] = {"version": "580.x"}
    with pytest.raises(ObjectError, match="driverVersion"):
        simulated.from_file(write(tmp_path / "s.yaml", [broken]))
    nameless = json.loads(json.dumps(inv.slices[0]))
    del nameless["spec"]["driver"]
    with pytest.raises(ObjectError, match=r"spec\.driver"):
        simulated.from_file(write(tmp_path / "d.yaml", [nameless]))
    bad_cel = json.loads(json.dumps(inv.device_classes[0]))
    bad_cel["spec"]["selectors"][0]["cel"]["expression"] = f"device.driver == '{NV}' &&"
    with pytest.raises(SelectorError, match=re.escape(f"DeviceClass {NV}")):
        simulated.from_file(write(tmp_path / "c.yaml", [*inv.slices, bad_cel]))

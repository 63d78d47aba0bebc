"""Every object dra_jupyter emits validates against the official Kubernetes schemas.

Checked with ``kubernetes_validate`` in strict mode (unknown fields are errors), against
the Kubernetes 1.36 OpenAPI schemas: kubernetes-validate 1.37 ships schemas for 1.34
to 1.37, and 1.36 is the release whose semantics the allocator reproduces.

Objects checked: ResourceClaims carrying ``status.allocation`` from
``AllocationResult.to_dict()`` for every case of the upstream semantics table that
allocates, for the demo claims and for random property-test worlds; the ResourceSlices
and DeviceClasses of :mod:`dra_jupyter.inventory.nvidia`; the demo claims themselves.
The schemas do not check the syntax of quantities or of share IDs, so those are
checked here too, with the apiserver's rules.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings

from dra_jupyter.allocator import Allocator
from dra_jupyter.cli.demo import demo_claims
from dra_jupyter.inventory import nvidia

from .builders import Wire
from .test_properties import World, class_objects, worlds
from .test_upstream_semantics import CASES, Case

SCHEMA_VERSION = "1.36.0"
NODE = "gpu-node-1"  # any node name: the demo claims do not name one
API_VERSION = "resource.k8s.io/v1"

# resource.Quantity's pattern in the OpenAPI schema (kubernetes-validate does not enforce it).
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# The apiserver wants a share ID to be a lower-case UUID (8-4-4-4-12 hex digits).
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def validate(obj: Wire) -> None:
    """Validate ``obj`` with the 1.36 schema; it must not fall back to another version."""
    assert kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True) == "1.36"


def resource_object(obj: Wire, kind: str) -> Wire:
    """A deep copy of ``obj`` with apiVersion and kind (upstream test objects lack them)."""
    out = copy.deepcopy(obj)
    out.setdefault("apiVersion", API_VERSION)
    out.setdefault("kind", kind)
    return out


def allocated(claim_obj: Wire, allocation: Wire) -> Wire:
    out = resource_object(claim_obj, "ResourceClaim")
    out["status"] = {"allocation": allocation}
    return out


def _capacity_quantities(capacity: Wire, path: str) -> Iterator[tuple[str, Any]]:
    for name, cap in capacity.items():
        yield f"{path}.{name}.value", cap.get("value")
        policy = cap.get("requestPolicy") or {}
        if "default" in policy:
            yield f"{path}.{name}.requestPolicy.default", policy["default"]
        for i, v in enumerate(policy.get("validValues") or []):
            yield f"{path}.{name}.requestPolicy.validValues[{i}]", v
        for key, v in (policy.get("validRange") or {}).items():
            yield f"{path}.{name}.requestPolicy.validRange.{key}", v


def _counter_quantities(counters: Wire, path: str) -> Iterator[tuple[str, Any]]:
    for name, counter in counters.items():
        yield f"{path}.{name}.value", counter.get("value")


def quantities(obj: Wire) -> Iterator[tuple[str, Any]]:
    """Every field of a ResourceSlice or ResourceClaim that the API types as a quantity."""
    spec = obj.get("spec", {})
    if obj["kind"] == "ResourceSlice":
        for i, dev in enumerate(spec.get("devices") or []):
            path = f"spec.devices[{i}]"
            yield from _capacity_quantities(dev.get("capacity") or {}, f"{path}.capacity")
            for j, use in enumerate(dev.get("consumesCounters") or []):
                counters = use.get("counters") or {}
                yield from _counter_quantities(counters, f"{path}.consumesCounters[{j}].counters")
        for i, cs in enumerate(spec.get("sharedCounters") or []):
            yield from _counter_quantities(cs.get("counters") or {}, f"spec.sharedCounters[{i}]")
    if obj["kind"] == "ResourceClaim":
        for i, req in enumerate(spec.get("devices", {}).get("requests") or []):
            path = f"spec.devices.requests[{i}]"
            subs = [(f"{path}.exactly", req["exactly"])] if "exactly" in req else []
            subs += [
                (f"{path}.firstAvailable[{j}]", s)
                for j, s in enumerate(req.get("firstAvailable") or [])
            ]
            for sub_path, sub in subs:
                for name, q in ((sub.get("capacity") or {}).get("requests") or {}).items():
                    yield f"{sub_path}.capacity.requests.{name}", q
        allocation = obj.get("status", {}).get("allocation") or {}
        for i, result in enumerate(allocation.get("devices", {}).get("results") or []):
            for name, q in (result.get("consumedCapacity") or {}).items():
                yield f"status.allocation.devices.results[{i}].consumedCapacity.{name}", q


def check_emitted(obj: Wire) -> None:
    """Schema validation plus the string formats the schema leaves out."""
    validate(obj)
    for path, value in quantities(obj):
        assert isinstance(value, str), f"{path}: {value!r} is not a string"
        assert QUANTITY.match(value), f"{path}: {value!r} is not a quantity"
    allocation = obj.get("status", {}).get("allocation", {})
    for result in allocation.get("devices", {}).get("results", []):
        if "shareID" in result:
            assert UUID.match(result["shareID"]), f"shareID {result['shareID']!r} is not a UUID"


# --- the validator is strict enough to matter ------------------------------------------------

GOOD_CLAIM: Wire = {
    "apiVersion": API_VERSION,
    "kind": "ResourceClaim",
    "metadata": {"name": "claim-0", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.example.com",
                        "pool": "node-1",
                        "device": "gpu-0",
                        "shareID": "6c1f2a2e-8d0c-4f5e-9a55-0f1b2c3d4e5f",
                        "consumedCapacity": {"memory": "16Gi"},
                    }
                ]
            }
        }
    },
}


def _result(obj: Wire) -> Wire:
    result: Wire = obj["status"]["allocation"]["devices"]["results"][0]
    return result


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda o: _result(o).update(bogus=True),  # unknown field
        lambda o: _result(o).pop("pool"),  # required field
        lambda o: _result(o).update(consumedCapacity={"memory": {"value": "16Gi"}}),  # type
        lambda o: o["status"]["allocation"].update(nodeSelector={"terms": []}),
        lambda o: _result(o).update(shareID="share-1"),  # not a UUID (checked here)
        lambda o: _result(o).update(consumedCapacity={"memory": "16 GiB"}),  # checked here
    ],
    ids=["unknown-field", "missing-pool", "capacity-type", "bad-node-selector", "share-id", "qty"],
)
def test_checks_reject_broken_objects(corrupt: Any) -> None:
    check_emitted(GOOD_CLAIM)
    broken = copy.deepcopy(GOOD_CLAIM)
    corrupt(broken)
    with pytest.raises((kubernetes_validate.ValidationError, AssertionError)):
        check_emitted(broken)


# --- allocations of the upstream semantics table ------------------------------------------------

ALLOCATING = {name: case for name, case in CASES.items() if case.expect and case.error is None}


@pytest.mark.parametrize("case", list(ALLOCATING.values()), ids=list(ALLOCATING))
def test_upstream_case_allocations_validate(case: Case) -> None:
    node_name = case.node["metadata"]["name"]
    allocator = Allocator(
        case.slices, case.classes, allocated_claims=case.allocated, nodes=[case.node]
    )
    results = allocator.allocate(case.claims, node=node_name)
    assert results is not None
    assert len(results) == len(case.claims)
    for claim_obj, result in zip(case.claims, results, strict=True):
        check_emitted(allocated(claim_obj, result.to_dict()))


def test_the_table_has_allocating_cases() -> None:
    assert len(ALLOCATING) > 100


# --- the simulated NVIDIA inventory -----------------------------------------------------------


@pytest.mark.parametrize("model", [nvidia.H200, nvidia.H100_SXM], ids=["H200", "H100"])
def test_nvidia_slices_validate(model: nvidia.GpuModel) -> None:
    check_emitted(nvidia.hgx_node("gpu-node-1", model))


def test_nvidia_slice_without_numa_validates() -> None:
    placement = nvidia.GpuPlacement("0000:18:00.0", "pci0000:15", None)
    gpu = nvidia.gpu_device("gpu-node-2", 0, nvidia.H100_SXM, placement)
    check_emitted(nvidia.gpu_slice("gpu-node-2", [gpu], generation=3))


def test_nvidia_device_classes_validate() -> None:
    classes = nvidia.device_classes()
    assert classes
    for cls in classes:
        check_emitted(cls)


# --- the demo ----------------------------------------------------------------------------------


def test_demo_claims_and_their_allocations_validate() -> None:
    slices = [nvidia.hgx_node(NODE)]
    classes = nvidia.device_classes()
    held: list[Wire] = []
    for _title, claim_obj in demo_claims():
        check_emitted(claim_obj)
        results = Allocator(slices, classes, held).allocate([claim_obj])
        if results is None:
            continue
        (result,) = results
        obj = allocated(claim_obj, result.to_dict())
        check_emitted(obj)
        held.append(obj)
    assert len(held) >= 3  # most demo claims allocate: the loop above checked something


# --- random worlds of the property tests --------------------------------------------------------


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(worlds())
def test_property_worlds_and_their_allocations_validate(world: World) -> None:
    """The generated inputs are valid API objects, and so is what is allocated from them."""
    for slice_obj in world.slices:
        check_emitted(resource_object(slice_obj, "ResourceSlice"))
    for held in world.held_claims():
        check_emitted(resource_object(held, "ResourceClaim"))
    for claim_obj in world.claim_objects():
        check_emitted(resource_object(claim_obj, "ResourceClaim"))
    # The default share_id_factory: real share IDs, which must be UUIDs.
    allocator = Allocator(list(world.slices), class_objects(), world.held_claims())
    claims = world.claim_objects()
    results = allocator.allocate(claims)
    if results is not None:
        for claim_obj, result in zip(claims, results, strict=True):
            check_emitted(allocated(claim_obj, result.to_dict()))


def test_property_device_classes_validate() -> None:
    for cls in class_objects():
        check_emitted(resource_object(cls, "DeviceClass"))

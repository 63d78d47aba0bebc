"""Regression tests for what Kubernetes 1.37.2 does differently from 1.36, each found by the
differential test against the real allocator (tests/upstream/) and checked there: the
expectations are what ``tools/upstream-allocator`` (kube-apiserver's defaulting and
validation, then ``k8s.io/dynamic-resource-allocation/structured`` v0.37.2 as kube-scheduler
uses it, 1.37 default gates) answers for the same objects.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.features import use_features

Wire = dict[str, Any]
DRIVER = "d.example.com"
NODE: Wire = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}


def device_class(name: str = "c", config: list[Wire] | None = None) -> Wire:
    spec: Wire = {"config": config} if config else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def slice_(*devices: Wire, **selection: Any) -> Wire:
    spec: Wire = {
        "driver": DRIVER,
        **(selection or {"nodeName": "node-1"}),
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": list(devices),
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": spec,
    }


def claim(*requests: Wire, config: list[Wire] | None = None) -> Wire:
    devices: Wire = {"requests": list(requests)}
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim", "namespace": "default"},
        "spec": {"devices": devices},
    }


def exact(name: str, **fields: Any) -> Wire:
    return {"name": name, "exactly": {"deviceClassName": "c", **fields}}


def opaque(tag: str) -> Wire:
    return {"opaque": {"driver": DRIVER, "parameters": {"tag": tag}}}


def allocate(
    slices: list[Wire], claims: list[Wire], classes: list[Wire] | None = None
) -> list[Wire] | None:
    allocator = Allocator(
        slices, classes or [device_class()], nodes=[NODE], share_id_factory=lambda: "share"
    )
    results = allocator.allocate(claims)
    return None if results is None else [r.to_dict() for r in results]


def configs(
    slices: list[Wire], claims: list[Wire], classes: list[Wire] | None = None
) -> list[Wire]:
    found = allocate(slices, claims, classes)
    assert found is not None
    return list(found[0]["devices"].get("config", []))


TWO = slice_({"name": "d0"}, {"name": "d1"})


# --- (a) a config that applies to every request has no requests list --------------------------


def test_class_config_of_the_only_request_has_no_requests() -> None:
    got = configs([TWO], [claim(exact("r"))], [device_class(config=[opaque("class")])])
    assert got == [{"source": "FromClass", **opaque("class")}]


def test_class_config_of_some_requests_keeps_them() -> None:
    classes = [device_class(config=[opaque("class")]), device_class("other")]
    got = configs(
        [TWO],
        [claim(exact("r0"), {"name": "r1", "exactly": {"deviceClassName": "other"}})],
        classes,
    )
    assert got == [{"source": "FromClass", "requests": ["r0"], **opaque("class")}]


def test_claim_config_naming_every_request_is_copied_once_without_requests() -> None:
    config = [{"requests": ["r0", "r1"], **opaque("claim")}]
    got = configs([TWO], [claim(exact("r0"), exact("r1"), config=config)])
    assert got == [{"source": "FromClaim", **opaque("claim")}]


def test_claim_config_naming_two_of_three_requests_is_copied_once() -> None:
    three = slice_({"name": "d0"}, {"name": "d1"}, {"name": "d2"})
    config = [{"requests": ["r0", "r1"], **opaque("claim")}]
    got = configs([three], [claim(exact("r0"), exact("r1"), exact("r2"), config=config)])
    assert got == [{"source": "FromClaim", "requests": ["r0", "r1"], **opaque("claim")}]


def test_claim_config_naming_the_chosen_subrequest_of_the_only_request() -> None:
    request = {
        "name": "r",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "c", "count": 3},
            {"name": "small", "deviceClassName": "c"},
        ],
    }
    got = configs([TWO], [claim(request, config=[{"requests": ["r/small"], **opaque("claim")}])])
    assert got == [{"source": "FromClaim", **opaque("claim")}]


# --- (b) request policies as with DRAFractionalCapacityRange off (the 1.37 default) ----------


def shared(policy: Wire, value: str = "4") -> Wire:
    return {
        "name": "d0",
        "allowMultipleAllocations": True,
        "capacity": {"bw": {"value": value, "requestPolicy": policy}},
    }


FRACTIONAL = {"default": "500m", "validRange": {"min": "100m", "step": "250m"}}


def consumed(policy: Wire, request: str | None, value: str = "4") -> str:
    fields = {"capacity": {"requests": {"bw": request}}} if request else {}
    found = allocate([slice_(shared(policy, value))], [claim(exact("r", **fields))])
    assert found is not None
    return str(found[0]["devices"]["results"][0]["consumedCapacity"]["bw"])


def test_fractional_default_off_the_step_is_accepted_with_the_gate_off() -> None:
    assert consumed(FRACTIONAL, None) == "500m"


@pytest.mark.parametrize(("request_", "expected"), [("700m", "1"), ("1200m", "2")])
def test_range_rounds_on_whole_numbers_with_the_gate_off(request_: str, expected: str) -> None:
    assert consumed(FRACTIONAL, request_) == expected


def test_fractional_default_off_the_step_is_refused_with_the_gate_on() -> None:
    with (
        use_features(dra_fractional_capacity_range=True),
        pytest.raises(InvalidInputError, match="step"),
    ):
        allocate([slice_(shared(FRACTIONAL))], [claim(exact("r"))])


def test_range_rounds_on_milli_units_with_the_gate_on() -> None:
    policy = {"default": "350m", "validRange": {"min": "100m", "step": "250m"}}
    with use_features(dra_fractional_capacity_range=True):
        assert consumed(policy, "700m") == "850m"


def test_rounded_amount_prints_in_the_step_format() -> None:
    policy = {"default": "1G", "validRange": {"min": "1G", "step": "1G"}}
    assert consumed(policy, "2500M", "8G") == "3G"


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"default": "1", "validRange": {"min": "1", "max": "8", "step": "1"}}, "max: 8 is larger"),
        ({"default": "1", "validRange": {"min": "8", "step": "1"}}, "min: 8 is larger"),
        ({"default": "1", "validRange": {"min": "1", "step": "4"}}, "one step 5 is larger"),
        ({"default": "1", "validValues": ["1", "8"]}, r"validValues\[1\]: option 8 is larger"),
        ({"default": "1", "validValues": ["500m", "1"]}, r"validValues\[1\]: 1 is a duplicate"),
        (
            {"default": "2", "validRange": {"min": "1", "max": "4", "step": "2"}},
            "2 is not a multiple",
        ),
    ],
)
def test_request_policy_refused_as_kube_apiserver_does(policy: Wire, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        allocate([slice_(shared(policy))], [claim(exact("r"))])


def test_request_policy_on_a_device_without_multiple_allocations_is_refused() -> None:
    device = {"name": "d0", "capacity": {"bw": {"value": "4", "requestPolicy": {"default": "1"}}}}
    with pytest.raises(InvalidInputError, match="allowMultipleAllocations must be true"):
        allocate([slice_(device)], [claim(exact("r"))])


# --- (e) count: 0 is defaulted to 1 --------------------------------------------------------


def test_count_zero_is_defaulted_to_one() -> None:
    found = allocate([TWO], [claim(exact("r", count=0))])
    assert found is not None
    assert [r["device"] for r in found[0]["devices"]["results"]] == ["d0"]


def test_count_zero_in_a_subrequest_is_defaulted_to_one() -> None:
    request = {"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "c", "count": 0}]}
    found = allocate([TWO], [claim(request)])
    assert found is not None
    assert [r["device"] for r in found[0]["devices"]["results"]] == ["d0"]


def test_count_with_all_is_refused() -> None:
    with pytest.raises(
        InvalidInputError, match="must not be specified when allocationMode is 'All'"
    ):
        allocate([TWO], [claim(exact("r", allocationMode="All", count=2))])


# --- (f) a slice's matchFields has one value per requirement --------------------------------


def test_slice_node_selector_match_fields_with_two_values_is_refused() -> None:
    selector = {
        "nodeSelectorTerms": [
            {
                "matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["node-1", "node-2"]}
                ]
            }
        ]
    }
    with pytest.raises(InvalidInputError, match=r"matchFields\[0\]\.values"):
        allocate([slice_({"name": "d0"}, nodeSelector=selector)], [claim(exact("r"))])

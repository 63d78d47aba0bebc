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
            "default: 2 is not validRange.min 1 plus a whole number of steps of 2",
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


# --- (c) All over shared devices: a device whose capacity is used up stays in the set ---------


def held(device: str, amount: str) -> Wire:
    """A claim in use holding a share of ``amount`` bandwidth of ``device``."""
    result = {
        "request": "r",
        "driver": DRIVER,
        "pool": "p",
        "device": device,
        "shareID": "00000000-0000-4000-8000-000000000001",
        "consumedCapacity": {"bw": amount},
    }
    out = claim(exact("r"))
    out["metadata"]["name"] = "held"
    out["status"] = {"allocation": {"devices": {"results": [result]}}}
    return out


def bandwidth(name: str, value: str) -> Wire:
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"bw": {"value": value}}}


def test_all_over_shared_devices_fails_when_one_is_used_up() -> None:
    slices = [slice_(bandwidth("d0", "4"), bandwidth("d1", "4"))]
    allocator = Allocator(slices, [device_class()], [held("d1", "4")], nodes=[NODE])
    request = exact("r", allocationMode="All", capacity={"requests": {"bw": "1"}})
    assert allocator.allocate([claim(request)]) is None


def test_all_over_used_up_shared_devices_moves_to_the_next_subrequest() -> None:
    slices = [slice_(bandwidth("d0", "4"), bandwidth("d1", "4"))]
    allocator = Allocator(slices, [device_class()], [held("d1", "4")], nodes=[NODE])
    request = {
        "name": "r",
        "firstAvailable": [
            {
                "name": "all",
                "deviceClassName": "c",
                "allocationMode": "All",
                "capacity": {"requests": {"bw": "1"}},
            },
            {"name": "one", "deviceClassName": "c", "capacity": {"requests": {"bw": "1"}}},
        ],
    }
    found = allocator.allocate([claim(request)])
    assert found is not None
    results = found[0].to_dict()["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("r/one", "d0")]


# --- (d) a CEL error the search meets stops it, as upstream's ---------------------------------

MISSING = f'device.attributes["{DRIVER}"].numa == 1'  # an error where numa is missing


def test_cel_error_on_a_device_stops_the_search_when_too_few_devices_remain() -> None:
    with pytest.raises(InvalidInputError, match="CEL runtime error"):
        allocate(
            [slice_({"name": "d0"})],
            [claim(exact("r", count=3, selectors=[{"cel": {"expression": MISSING}}]))],
        )


def test_cel_error_on_a_device_stops_the_search_when_a_constraint_cannot_hold() -> None:
    request = exact("r0", selectors=[{"cel": {"expression": MISSING}}])
    constrained = claim(request, exact("r1"))
    constrained["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/absent"}]
    with pytest.raises(InvalidInputError, match="CEL runtime error"):
        allocate([TWO], [constrained])


def test_cel_error_of_a_later_request_is_met_when_the_constraint_fails_later() -> None:
    numa = {"numa": {"int": 0}}
    slices = [slice_({"name": "d0", "attributes": numa}, {"name": "d1"}, {"name": "d2"})]
    requests = (exact("r0"), exact("r1", count=2, selectors=[{"cel": {"expression": MISSING}}]))
    constrained = claim(*requests)
    constrained["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{DRIVER}/numa"}]
    with pytest.raises(InvalidInputError, match="CEL runtime error"):
        allocate(slices, [constrained])


# --- validation of counter slices, as kube-apiserver's ------------------------------------


def counters_slice(**selection: Any) -> Wire:
    spec: Wire = {
        "driver": DRIVER,
        **selection,
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
        "sharedCounters": [{"name": "set", "counters": {"memory": {"value": "1"}}}],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "k"},
        "spec": spec,
    }


def test_counters_slice_without_node_selection_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="exactly one of nodeName"):
        allocate([counters_slice()], [claim(exact("r"))])


def test_counter_set_without_counters_is_refused() -> None:
    slice_obj = counters_slice(nodeName="node-1")
    slice_obj["spec"]["sharedCounters"][0]["counters"] = {}
    with pytest.raises(InvalidInputError, match=r"sharedCounters\[0\]\.counters: is required"):
        allocate([slice_obj], [claim(exact("r"))])


# --- a quantity left out is zero, as Go decodes it ---------------------------------------------
# Seeds 91008186 and 91001112 of make fuzz-upstream (10,000 worlds from 91000000), shrunk: a
# capacity or a counter without ``value`` (or with ``value: null``) is a zero
# resource.Quantity once decoded, which kube-apiserver's validation accepts.


@pytest.mark.parametrize("entry", [{}, {"value": None}])
def test_a_capacity_without_a_value_is_zero(entry: Wire) -> None:
    device = {"name": "d0", "capacity": {"memory": entry}}
    zero = f"device.capacity['{DRIVER}'].memory == quantity('0')"
    found = allocate(
        [slice_(device)], [claim(exact("r", selectors=[{"cel": {"expression": zero}}]))]
    )
    assert found is not None and found[0]["devices"]["results"][0]["device"] == "d0"


@pytest.mark.parametrize("entry", [{}, {"value": None}])
def test_a_counter_without_a_value_is_zero(entry: Wire) -> None:
    counters = counters_slice(nodeName="node-1")
    counters["spec"]["sharedCounters"][0]["counters"] = {"memory": entry}

    def device(name: str, needs: Wire) -> Wire:
        uses = [{"counterSet": "set", "counters": {"memory": needs}}]
        return {"name": name, "consumesCounters": uses}

    devices = slice_(device("none", entry), device("some", {"value": "1"}))
    devices["spec"]["pool"]["resourceSliceCount"] = 2
    found = allocate([counters, devices], [claim(exact("r", allocationMode="All"))])
    assert found is None  # "some" needs 1 of the 0 there is: All cannot take every device
    found = allocate([counters, devices], [claim(exact("r"))])
    assert found is not None and found[0]["devices"]["results"][0]["device"] == "none"


def test_a_counter_slice_for_another_node_is_not_this_nodes() -> None:
    """Seed 91001999 of make fuzz-upstream, shrunk: 1.37's GatherPools gives a node the
    counter slices that name or select it, not every counter slice of the cluster (1.36's
    stable code did), so a pool of another node that is still being published (one counter
    slice of three) does not stop a request for all devices here; on that node it does."""
    elsewhere = counters_slice(nodeName="node-2")
    elsewhere["spec"]["pool"] = {"name": "q", "generation": 1, "resourceSliceCount": 3}
    mine = slice_({"name": "d0"})
    node_2 = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}}
    allocator = Allocator([mine, elsewhere], [device_class()], nodes=[NODE, node_2])
    all_of_them = claim(exact("r", allocationMode="All"))
    [found] = allocator.allocate([all_of_them], node="node-1") or []
    assert [r.device.device for r in found.results] == ["d0"]
    with pytest.raises(
        InvalidInputError, match=r"pool d\.example\.com/q is currently being updated"
    ):
        allocator.allocate([all_of_them], node="node-2")


def test_cel_error_of_a_request_before_the_one_a_constraint_rules_out_is_met() -> None:
    """Seed 5000553 of make fuzz-upstream, shrunk: r1's selector fails on the device left for
    it; upstream meets that before it finds that r2's constraint cannot hold."""
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "o"}}
    other["spec"] = {}
    requests = (
        exact("r0"),
        exact("r1", selectors=[{"cel": {"expression": MISSING}}]),
        {"name": "r2", "exactly": {"deviceClassName": "o"}},
    )
    constrained = claim(*requests)
    constrained["spec"]["devices"]["constraints"] = [
        {"matchAttribute": f"{DRIVER}/speed", "requests": ["r2"]}
    ]
    with pytest.raises(InvalidInputError, match="CEL runtime error"):
        allocate([TWO], [constrained], [device_class(), other])

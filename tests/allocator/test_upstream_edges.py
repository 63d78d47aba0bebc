"""The edges of Kubernetes 1.37.2 that random worlds seldom reach (issue #31): consumable
capacity near its limits, fields of features that are off with the 1.37 default gates, and
what kube-apiserver refuses. Each expectation is what ``tools/upstream-allocator``
(kube-apiserver's defaulting and validation, then ``k8s.io/dynamic-resource-allocation``
v0.37.2's incubating allocator as kube-scheduler runs it, 1.37 default gates) answers for the
same objects, and what its source says (``structured/internal/incubating``:
``consumable_capacity.go``, ``compatibility_groups.go``, ``constraint.go``;
``pkg/apis/resource/validation``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator.core import STRATEGIES
from dra_jupyter.cli import main as cli_main
from dra_jupyter.errors import InvalidInputError

Wire = dict[str, Any]
DRIVER = "d.example.com"
NODE: Wire = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}
INT64_MAX = "9223372036854775807"
PAST_INT64 = "9223372036854775808"


def device_class(name: str = "c") -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {},
    }


def slice_(*devices: Wire, name: str = "s", pool: str = "p", count: int = 1) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-1",
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }


def claim(*requests: Wire, constraints: list[Wire] | None = None, name: str = "c") -> Wire:
    devices: Wire = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def exact(name: str = "r", **fields: Any) -> Wire:
    return {"name": name, "exactly": {"deviceClassName": "c", **fields}}


def bandwidth(amount: str) -> Wire:
    return {"capacity": {"requests": {"bw": amount}}}


def shared(name: str, value: str = "8", policy: Wire | None = None) -> Wire:
    cap: Wire = {"value": value}
    if policy is not None:
        cap["requestPolicy"] = policy
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"bw": cap}}


def allocate(
    slices: list[Wire], claims: list[Wire], held: list[Wire] | None = None
) -> list[Wire] | None:
    allocator = Allocator(
        slices, [device_class()], held or [], nodes=[NODE], share_id_factory=lambda: "share"
    )
    results = allocator.allocate(claims)
    return None if results is None else [r.to_dict() for r in results]


def devices_of(found: list[Wire] | None) -> list[str]:
    assert found is not None
    return [r["device"] for r in found[0]["devices"]["results"]]


def cli(objects: list[Wire], tmp_path: Path, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "world.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(
        [*args, "-f", str(path)] if args[0] == "allocate" else [*args, str(path)], out, err
    )
    return code, out.getvalue(), err.getvalue()


# --- 1. a negative consumable-capacity request stops the allocation ---------------------------


def test_negative_capacity_request_stops_the_allocation() -> None:
    """Upstream: "capacity value is negative" (errNegativeCapacity), not a share of -5 that
    would add capacity for everyone else."""
    with pytest.raises(InvalidInputError, match="capacity value is negative"):
        allocate([slice_(shared("d0"))], [claim(exact(**bandwidth("-5")))])


def test_negative_capacity_request_stops_it_on_a_device_that_is_not_shared() -> None:
    device = {"name": "d0", "capacity": {"bw": {"value": "8"}}}
    with pytest.raises(InvalidInputError, match="capacity value is negative"):
        allocate([slice_(device)], [claim(exact(**bandwidth("-5")))])


def test_negative_capacity_request_is_an_invalid_input_for_the_cli(tmp_path: Path) -> None:
    world = [device_class(), slice_(shared("d0")), NODE, claim(exact(**bandwidth("-5")))]
    code, _, err = cli(world, tmp_path, "allocate")
    assert code == 2
    assert "capacity value is negative" in err and len(err.strip().splitlines()) == 1


def test_negative_request_under_a_range_rounds_up_to_its_min() -> None:
    policy = {"default": "1", "validRange": {"min": "1", "step": "1"}}
    found = allocate([slice_(shared("d0", policy=policy))], [claim(exact(**bandwidth("-5")))])
    assert found is not None
    assert found[0]["devices"]["results"][0]["consumedCapacity"] == {"bw": "1"}


def held_claim(device: str) -> Wire:
    """A claim in use holding ``device`` whole."""
    out = claim(exact(), name="held")
    result = {"request": "r", "driver": DRIVER, "pool": "p", "device": device}
    out["status"] = {"allocation": {"devices": {"results": [result]}}}
    return out


def test_negative_request_stops_only_where_the_search_reaches_a_device_with_it() -> None:
    """A device without the capacity is passed over (a request it lacks), and one in use is
    never looked at: then the request only finds no device (exit 1)."""
    plain = {"name": "d0"}
    dedicated = {"name": "d1", "capacity": {"bw": {"value": "8"}}}
    with pytest.raises(InvalidInputError, match="capacity value is negative"):
        allocate([slice_(plain, dedicated)], [claim(exact(**bandwidth("-5")))])
    found = allocate(
        [slice_(plain, dedicated)], [claim(exact(**bandwidth("-5")))], [held_claim("d1")]
    )
    assert found is None


def test_negative_request_is_met_on_a_node_past_those_listed_one_by_one() -> None:
    """On a cluster of more nodes than are listed before the devices are counted pool by
    pool (``scan_after``), a node whose one device has the capacity is not ruled out for
    having fewer devices than the request's count: the search meets that device first."""
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:02d}"}} for i in range(20)
    ]
    slices = []
    for i in range(20):
        device = {"name": "d0", "capacity": {"bw": {"value": "8"}}} if i == 19 else {"name": "d0"}
        one = slice_(device, name=f"s{i:02d}", pool=f"p{i:02d}")
        one["spec"]["nodeName"] = f"n{i:02d}"
        slices.append(one)
    request = claim(exact(count=2, **bandwidth("-5")))
    for strategy in STRATEGIES:
        allocator = Allocator(slices, [device_class()], nodes=nodes, strategy=strategy)
        with pytest.raises(InvalidInputError, match="capacity value is negative"):
            allocator.allocate([request])


# --- 2. a validRange request past int64, or rounded past it, stops the allocation -------------

BIG = {"default": "1", "validRange": {"min": "1", "step": "1"}}


def test_range_request_past_int64_stops_the_allocation() -> None:
    slices = [slice_(shared("d0", INT64_MAX, BIG), shared("d1", INT64_MAX))]
    with pytest.raises(InvalidInputError, match="exceeds MaxInt64"):
        allocate(slices, [claim(exact(**bandwidth(PAST_INT64)))])


def test_range_request_rounded_past_int64_stops_the_allocation() -> None:
    policy = {"default": "0", "validRange": {"min": "0", "step": "2"}}
    slices = [slice_(shared("d0", INT64_MAX, policy), shared("d1", INT64_MAX))]
    with pytest.raises(InvalidInputError, match="passes MaxInt64"):
        allocate(slices, [claim(exact(**bandwidth(INT64_MAX)))])


def test_range_request_that_rounds_to_int64_max_is_allocated() -> None:
    policy = {"default": "1", "validRange": {"min": "1", "step": "2"}}
    found = allocate(
        [slice_(shared("d0", INT64_MAX, policy))], [claim(exact(**bandwidth(INT64_MAX)))]
    )
    assert found is not None
    assert found[0]["devices"]["results"][0]["consumedCapacity"] == {"bw": INT64_MAX}


def test_range_request_past_int64_stops_all_mode() -> None:
    slices = [slice_(shared("d0", INT64_MAX), shared("d1", INT64_MAX, BIG))]
    request = exact(allocationMode="All", **bandwidth(PAST_INT64))
    with pytest.raises(InvalidInputError, match="exceeds MaxInt64"):
        allocate(slices, [claim(request)])


def test_all_mode_meets_the_problem_on_a_device_held_by_another_claim() -> None:
    """All mode lists every device that matches, held or not, before the search."""
    device = {"name": "d1", "capacity": {"bw": {"value": "8"}}}
    slices = [slice_(shared("d0"), device)]
    request = exact(allocationMode="All", **bandwidth("-1"))
    with pytest.raises(InvalidInputError, match="capacity value is negative"):
        allocate(slices, [claim(request)], [held_claim("d1")])


# --- 3. fields of features that are off with the 1.37 default gates ----------------------------


def counters_slice(name: str, pool: str, count: int) -> Wire:
    out = slice_(name=name, pool=pool, count=count)
    del out["spec"]["devices"]
    out["spec"]["sharedCounters"] = [{"name": "cs", "counters": {"memory": {"value": "8"}}}]
    return out


def consumer(name: str, *groups: str) -> Wire:
    use: Wire = {"counterSet": "cs", "counters": {"memory": {"value": "1"}}}
    if groups:
        use["compatibilityGroups"] = list(groups)
    return {"name": name, "consumesCounters": [use]}


def grouped_pool(pool: str = "p") -> list[Wire]:
    """A pool of three slices: counters, a device without groups, one with groups."""
    return [
        counters_slice(f"{pool}-counters", pool, 3),
        slice_(consumer("d0"), name=f"{pool}-a", pool=pool, count=3),
        slice_(consumer("d1", "g"), name=f"{pool}-b", pool=pool, count=3),
    ]


def test_pool_with_compatibility_groups_is_skipped_as_a_whole() -> None:
    """DRADeviceCompatibilityGroups is off: the slice with groups is ignored, so its pool is
    incomplete and its other device is not taken either; the request falls through."""
    other = slice_({"name": "d2"}, name="q", pool="q")
    assert devices_of(allocate([*grouped_pool(), other], [claim(exact())])) == ["d2"]
    assert allocate(grouped_pool(), [claim(exact())]) is None


def test_pool_of_one_slice_with_groups_is_not_seen_at_all() -> None:
    """No slice of the pool is left: there is no pool, not an incomplete one, so a request
    for all devices takes those of the other pools (a counter slice would keep the pool,
    incomplete: see the next test)."""
    grouped = slice_(consumer("d1", "g"), name="p-b", pool="p")
    other = slice_({"name": "d2"}, name="q", pool="q")
    found = allocate([grouped, other], [claim(exact(allocationMode="All"))])
    assert devices_of(found) == ["d2"]


def test_all_mode_stops_at_a_pool_made_incomplete_by_groups() -> None:
    other = slice_({"name": "d2"}, name="q", pool="q")
    with pytest.raises(InvalidInputError, match="currently being updated"):
        allocate([*grouped_pool(), other], [claim(exact(allocationMode="All"))])


def listed(name: str, value: Wire) -> Wire:
    return {"name": name, "attributes": {"a": value}}


def test_list_attributes_are_read_not_refused(tmp_path: Path) -> None:
    """DRAListTypeAttributes is off: kube-apiserver still validates and keeps the values; a
    constraint over two devices with lists finds no allocation (exit 1), not invalid input."""
    devices = slice_(listed("d0", {"strings": ["x", "y"]}), listed("d1", {"strings": ["x", "y"]}))
    constrained = claim(exact(count=2), constraints=[{"matchAttribute": f"{DRIVER}/a"}])
    assert allocate([devices], [constrained]) is None
    code, _, err = cli([device_class(), devices, NODE, constrained], tmp_path, "allocate")
    assert code == 1, err


@pytest.mark.parametrize("kind", ["matchAttribute", "distinctAttribute"])
def test_list_attribute_of_the_first_device_of_a_constraint_is_taken(kind: str) -> None:
    devices = slice_(listed("d0", {"ints": [1, 2]}), listed("d1", {"int": 3}))
    constrained = claim(exact(), constraints=[{kind: f"{DRIVER}/a"}])
    assert devices_of(allocate([devices], [constrained])) == ["d0"]


def test_match_attribute_takes_nothing_after_a_list() -> None:
    devices = slice_(listed("d0", {"strings": ["x"]}), listed("d1", {"string": "x"}))
    constrained = claim(exact(count=2), constraints=[{"matchAttribute": f"{DRIVER}/a"}])
    assert allocate([devices], [constrained]) is None


def test_distinct_attribute_takes_a_scalar_after_a_list_but_no_list_after_anything() -> None:
    after_list = slice_(listed("d0", {"strings": ["x"]}), listed("d1", {"string": "x"}))
    constrained = claim(exact(count=2), constraints=[{"distinctAttribute": f"{DRIVER}/a"}])
    assert devices_of(allocate([after_list], [constrained])) == ["d0", "d1"]
    after_scalar = slice_(listed("d0", {"string": "x"}), listed("d1", {"strings": ["y"]}))
    assert allocate([after_scalar], [constrained]) is None


@pytest.mark.parametrize(
    ("expression", "found"),
    [
        ('"x" in device.attributes["d.example.com"].a', True),
        ('size(device.attributes["d.example.com"].a) == 2', True),
        ('device.attributes["d.example.com"].a == "x"', False),
        ('device.attributes["d.example.com"].a != "x"', True),
    ],
)
def test_selectors_see_a_list_attribute_as_a_list(expression: str, found: bool) -> None:
    devices = slice_(listed("d0", {"strings": ["x", "y"]}))
    request = exact(selectors=[{"cel": {"expression": expression}}])
    assert (allocate([devices], [claim(request)]) is not None) is found


def test_a_list_attribute_is_no_range_of_a_macro_with_the_gate_off() -> None:
    """Its type is any, not dyn: "cannot be range of a comprehension" when the claim is
    validated, whatever the devices."""
    expression = 'device.attributes["d.example.com"].a.exists(v, v == "y")'
    request = exact(selectors=[{"cel": {"expression": expression}}])
    with pytest.raises(InvalidInputError, match="cannot be the range of a comprehension"):
        allocate([slice_(listed("d0", {"strings": ["x", "y"]}))], [claim(request)])


def test_empty_list_attribute_is_refused_as_kube_apiserver_does() -> None:
    with pytest.raises(InvalidInputError, match=r"strings: must not be empty if specified"):
        allocate([slice_(listed("d0", {"strings": []}))], [claim(exact())])


# --- 4, 5. what kube-apiserver refuses --------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"bindingConditions": ["Ready"]},
            r"devices\[0\]\.bindingFailureConditions: bindingFailureConditions are required "
            "to use bindingConditions",
        ),
        (
            {"bindingFailureConditions": ["Failed"]},
            r"devices\[0\]\.bindingConditions: bindingConditions are required to use "
            "bindingFailureConditions",
        ),
        (
            {"bindingConditions": ["Ready"], "bindingFailureConditions": ["Ready"]},
            "must not overlap",
        ),
        (
            {"bindingConditions": ["Ready", "Ready"], "bindingFailureConditions": ["Failed"]},
            r"bindingConditions\[1\]: 'Ready' is a duplicate",
        ),
        (
            {"bindingConditions": ["not ready"], "bindingFailureConditions": ["Failed"]},
            r"bindingConditions\[0\]: 'not ready' is not a qualified name",
        ),
    ],
)
def test_binding_conditions_refused_as_kube_apiserver_does(fields: Wire, problem: str) -> None:
    device = {"name": "d0", "bindsToNode": True, **fields}
    with pytest.raises(InvalidInputError, match=problem):
        allocate([slice_(device)], [claim(exact())])


def test_binding_conditions_with_failure_conditions_are_allocated_and_copied() -> None:
    device = {
        "name": "d0",
        "bindingConditions": ["example.com/Ready"],
        "bindingFailureConditions": ["example.com/Failed"],
    }
    found = allocate([slice_(device)], [claim(exact())])
    assert found is not None
    result = found[0]["devices"]["results"][0]
    assert result["bindingConditions"] == ["example.com/Ready"]
    assert result["bindingFailureConditions"] == ["example.com/Failed"]


def test_two_slices_of_one_name_are_refused(tmp_path: Path) -> None:
    first = slice_({"name": "d0"})
    second = slice_({"name": "d1"}, pool="q")
    with pytest.raises(
        InvalidInputError, match=r"ResourceSlice s, metadata\.name: is defined twice"
    ):
        allocate([first, second], [claim(exact())])
    code, _, err = cli([device_class(), first, second, NODE, claim(exact())], tmp_path, "allocate")
    assert code == 2 and "ResourceSlice s" in err and len(err.strip().splitlines()) == 1


# --- 6. every reader of slices takes the model's values ----------------------------------------


def test_devices_table_reads_a_counter_without_a_value_as_zero(tmp_path: Path) -> None:
    """``dra-jupyter devices --inventory FILE`` ended in an internal error (KeyError 'value'
    in the table of counters left): a counter or capacity without ``value`` is zero, as the
    allocator and kube-apiserver read it."""
    counters = counters_slice("p-counters", "p", 2)
    counters["spec"]["sharedCounters"][0]["counters"] = {"memory": {}}
    device = {
        "name": "gpu-0",
        "attributes": {"type": {"string": "gpu"}, "uuids": {"strings": ["a", "b"]}},
        "capacity": {"memory": {}},
        "consumesCounters": [{"counterSet": "cs", "counters": {"memory": {}}}],
    }
    inventory = tmp_path / "slices.json"
    items = [counters, slice_(device, name="p-a", pool="p", count=2)]
    inventory.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    out, err = io.StringIO(), io.StringIO()
    argv = ["devices", "--ledger", str(tmp_path / "ledger.db"), "--inventory", str(inventory)]
    code = cli_main(argv, out, err)
    assert code == 0, err.getvalue()
    assert "d.example.com/p/gpu-0" in out.getvalue() and "free" in out.getvalue()


# --- topology's index of plain nodes by the shapes of their devices ------------------------------


def test_topology_finds_the_one_plain_node_whose_devices_have_another_shape() -> None:
    """Plain nodes are ruled out for a claim by one slice per shape of device; a node whose
    devices differ (here: the one plain node with devices of the type asked for) is a shape
    of its own, and topology, which tries plain nodes first, takes it."""

    def node_slice(i: int, kind: str, counters: bool = False) -> list[Wire]:
        devices = []
        for j in range(2):
            device: Wire = {"name": f"d{j}", "attributes": {"type": {"string": kind}}}
            if counters:
                use = {"counterSet": "cs", "counters": {"memory": {"value": "1"}}}
                device["consumesCounters"] = [use]
            devices.append(device)
        one = slice_(*devices, name=f"s{i:02d}", pool=f"p{i:02d}", count=2 if counters else 1)
        one["spec"]["nodeName"] = f"n{i:02d}"
        if not counters:
            return [one]
        shared = counters_slice(f"c{i:02d}", f"p{i:02d}", 2)
        shared["spec"]["nodeName"] = f"n{i:02d}"
        return [one, shared]

    slices = [s for i in range(30) for s in node_slice(i, "gpu")]
    slices += node_slice(30, "mig", counters=True)  # a MIG node
    slices += node_slice(31, "mig")  # a plain node with devices of that type
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:02d}"}} for i in range(32)
    ]
    mig = device_class("mig")
    mig["spec"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].type == "mig"'}}
    ]
    request = claim({"name": "r", "exactly": {"deviceClassName": "mig"}})
    found = Allocator(slices, [mig], nodes=nodes, strategy="topology").allocate([request])
    assert found is not None
    assert found[0].to_dict()["devices"]["results"][0]["pool"] == "p31"

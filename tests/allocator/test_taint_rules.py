"""DeviceTaintRules: checked as kube-apiserver 1.37 checks them, applied to slices as
kube-scheduler's ResourceSlice tracker applies them, and what the allocator and its
explanations then make of the slices.

The cases of :func:`test_tracker_cases` are upstream's ``TestListPatchedResourceSlices``
(``k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker_test.go``, v0.37.2)
that concern what a list of slices and rules gives (the others are about informer events).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import ObjectError
from dra_jupyter.inventory import simulated
from dra_jupyter.model.objects import ResourceSlice, Taint
from dra_jupyter.model.parse import parse_resource_slice
from dra_jupyter.model.taintrules import (
    DeviceTaintRule,
    apply_taint_rules,
    parse_device_taint_rule,
    parse_taint_rules,
)
from tests.allocator.builders import (
    claim,
    device,
    device_class,
    request,
    slice_with_devices,
    taint,
    toleration,
)

Wire = dict[str, Any]

DRIVER1, DRIVER2 = "driver1.example.com", "driver2.example.com"
POOL1, POOL2 = "pool-1", "pool-2"
NODE = "node-1"
TAINT1 = {"key": "example.com/taint", "value": "tainted", "effect": "NoExecute"}
TAINT2 = {"key": "example.com/other-taint", "value": "tainted", "effect": "NoExecute"}


def rule(name: str = "rule", selector: Wire | None = None, **taint_fields: str) -> Wire:
    """A DeviceTaintRule; ``selector=None`` leaves out spec.deviceSelector (selects none)."""
    spec: Wire = {"taint": {**TAINT1, **taint_fields}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def slice1(*taints: Wire, devices: tuple[str, ...] = ("device-1",)) -> Wire:
    return slice_with_devices(
        "slice-1", NODE, POOL1, DRIVER1, *(device(d, taints=taints) for d in devices)
    )


def slice2() -> Wire:
    return slice_with_devices("slice-2", NODE, POOL2, DRIVER2, device("device-2"))


def keys(slices: list[ResourceSlice]) -> dict[str, list[list[tuple[str, str, str]]]]:
    """Per slice, per device: its taints as (key, value, effect)."""
    return {
        s.name: [[(t.key, t.value, t.effect) for t in d.taints] for d in s.devices] for s in slices
    }


T1 = (TAINT1["key"], TAINT1["value"], TAINT1["effect"])
T2 = (TAINT2["key"], TAINT2["value"], TAINT2["effect"])

TRACKER_CASES: dict[str, tuple[list[Wire], list[Wire], dict[str, Any]]] = {
    "add-slices-no-patches": ([slice1(), slice2()], [], {"slice-1": [[]], "slice-2": [[]]}),
    "patch-all-slices": (
        [slice1(), slice2()],
        [rule(selector={})],
        {"slice-1": [[T1]], "slice-2": [[T1]]},
    ),
    "merge-taints": ([slice1(TAINT2)], [rule(selector={})], {"slice-1": [[T2, T1]]}),
    "add-taint-for-driver": (
        [slice1(), slice2()],
        [rule(selector={"driver": DRIVER1})],
        {"slice-1": [[T1]], "slice-2": [[]]},
    ),
    "add-taint-for-pool": (
        [slice1(), slice2()],
        [rule(selector={"pool": POOL1})],
        {"slice-1": [[T1]], "slice-2": [[]]},
    ),
    "add-taint-for-device": (
        [slice1(), slice2()],
        [rule(selector={"device": "device-1"})],
        {"slice-1": [[T1]], "slice-2": [[]]},
    ),
    "filter-all-criteria": (
        [slice1(), slice2()],
        [rule(selector={"driver": DRIVER1, "pool": POOL1, "device": "device-1"})],
        {"slice-1": [[T1]], "slice-2": [[]]},
    ),
    "update-patched-slice": (  # the final state: three devices, the named one tainted
        [slice1(devices=("device-0", "device-1", "device-2"))],
        [rule(selector={"device": "device-1"})],
        {"slice-1": [[], [T1], []]},
    ),
    "nil-selector-matches-none": (
        [slice1(), slice2()],
        [rule(selector=None)],
        {"slice-1": [[]], "slice-2": [[]]},
    ),
}


@pytest.mark.parametrize("name", sorted(TRACKER_CASES))
def test_tracker_cases(name: str) -> None:
    slices, rules, expected = TRACKER_CASES[name]
    assert keys(apply_taint_rules(slices, rules)) == expected


def test_every_set_field_must_match() -> None:
    """driver, pool and device together: a rule of another pool leaves the slice alone."""
    rules = [rule(selector={"driver": DRIVER1, "pool": POOL2, "device": "device-1"})]
    assert keys(apply_taint_rules([slice1()], rules)) == {"slice-1": [[]]}


def test_one_taint_per_rule_in_name_order() -> None:
    rules = [rule("b-rule", {}, key="example.com/b"), rule("a-rule", {}, key="example.com/a")]
    [patched] = apply_taint_rules([slice1(TAINT2)], rules)
    assert [t.key for t in patched.devices[0].taints] == [
        TAINT2["key"],
        "example.com/a",
        "example.com/b",
    ]
    assert [t.rule for t in patched.devices[0].taints] == ["", "a-rule", "b-rule"]


def test_untouched_slices_are_the_same_objects() -> None:
    """A slice no rule selects is passed on as it is (the allocator's caches key on it)."""
    parsed = [parse_resource_slice(slice1()), parse_resource_slice(slice2())]
    patched = apply_taint_rules(parsed, [rule(selector={"driver": DRIVER2})])
    assert patched[0] is parsed[0]
    assert patched[1] is not parsed[1]
    assert apply_taint_rules(parsed, []) == parsed


def test_the_limits_of_the_slice_are_not_checked_again() -> None:
    """Validation is of the objects as stored: 128 plain devices (more than the 64 a slice
    with taints may have) and a device with the most taints still take a rule's taint."""
    many = slice_with_devices("many", NODE, POOL1, DRIVER1, *(device(f"d-{i}") for i in range(128)))
    full = [{**TAINT2, "key": f"example.com/t{i}"} for i in range(16)]
    most = slice_with_devices("most", NODE, POOL2, DRIVER1, device("d", taints=full))
    patched = apply_taint_rules([many, most], [rule(selector={})])
    assert all(len(d.taints) == 1 for d in patched[0].devices)
    assert len(patched[1].devices[0].taints) == 17


# --- what kube-apiserver accepts -----------------------------------------------------------


def test_parse_keeps_the_selector_and_the_taint() -> None:
    parsed = parse_device_taint_rule(
        rule(
            "xid-79",
            {"driver": DRIVER1, "pool": POOL1, "device": "gpu-3"},
            effect="NoSchedule",
            timeAdded="2026-09-01T12:00:00Z",
        )
    )
    assert parsed == DeviceTaintRule(
        name="xid-79",
        taint=Taint(key=TAINT1["key"], value="tainted", effect="NoSchedule"),
        driver=DRIVER1,
        pool=POOL1,
        device="gpu-3",
    )
    assert parsed.taint.time_added == "2026-09-01T12:00:00Z"
    assert parsed.taint.rule == "xid-79"
    assert not parse_device_taint_rule(rule(selector=None)).selects


def test_dropped_selector_fields_are_ignored() -> None:
    """deviceClassName and selectors left the API in 1.35: kube-apiserver drops them as
    unknown fields, so the rule selects every device."""
    dropped = rule(selector={"deviceClassName": "gpu", "selectors": [{"cel": {"expression": "x"}}]})
    assert keys(apply_taint_rules([slice1()], [dropped])) == {"slice-1": [[T1]]}


INVALID: dict[str, tuple[Wire, str]] = {
    "no-taint": (
        {**rule(), "spec": {"deviceSelector": {}}},
        "DeviceTaintRule rule, spec.taint: is required",
    ),
    "no-key": (rule(key=""), "DeviceTaintRule rule, spec.taint.key: is required"),
    "bad-key": (rule(key="-bad"), "spec.taint.key: '-bad' is not a qualified name"),
    "bad-value": (rule(value="a b"), "spec.taint.value: 'a b' is not a label value"),
    "no-effect": (rule(effect=""), "spec.taint.effect: is required"),
    "prefer-no-schedule": (
        rule(effect="PreferNoSchedule"),
        "spec.taint.effect: 'PreferNoSchedule' is not NoSchedule, NoExecute or None",
    ),
    "bad-time": (rule(timeAdded="yesterday"), "spec.taint.timeAdded: 'yesterday' is not"),
    "empty-driver": (rule(selector={"driver": ""}), "spec.deviceSelector.driver: must not be"),
    "bad-driver": (rule(selector={"driver": "Driver"}), "spec.deviceSelector.driver: 'Driver'"),
    "bad-pool": (rule(selector={"pool": "a//b"}), "spec.deviceSelector.pool: 'a//b'"),
    "bad-device": (rule(selector={"device": "gpu_0"}), "spec.deviceSelector.device: 'gpu_0'"),
    "bad-name": (rule("Rule"), "DeviceTaintRule Rule, metadata.name:"),
    "bad-version": (
        {**rule(), "apiVersion": "resource.k8s.io/v1beta2"},
        "apiVersion: 'resource.k8s.io/v1beta2' is not supported",
    ),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_rules_are_refused_naming_the_field(name: str) -> None:
    obj, message = INVALID[name]
    with pytest.raises(ObjectError) as caught:
        parse_device_taint_rule(obj)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(ObjectError) as caught:
        parse_taint_rules([rule(), rule(selector={})])
    assert "DeviceTaintRule rule, metadata.name: is defined twice" in str(caught.value)


# --- the allocator on patched slices --------------------------------------------------------


def gpus() -> list[Wire]:
    devices = [device(f"gpu-{i}") for i in range(2)]
    return [slice_with_devices("node-1-gpus", NODE, NODE, DRIVER1, *devices)]


CLASSES = [device_class("gpu", DRIVER1)]


def test_a_no_schedule_rule_keeps_the_device_from_new_claims() -> None:
    slices = apply_taint_rules(gpus(), [rule("xid", {"device": "gpu-0"}, effect="NoSchedule")])
    [result] = Allocator(slices, CLASSES).allocate([claim("nb", request("gpu", "gpu"))]) or []
    assert [r.device.device for r in result.results] == ["gpu-1"]
    two = claim("nb", request("gpu", "gpu", 2))
    allocator = Allocator(slices, CLASSES)
    assert allocator.allocate([two]) is None
    summary = allocator.explain([two]).summary()
    assert "1 of the 2 free" in summary
    assert "example.com/taint=tainted:NoSchedule (DeviceTaintRule xid)" in summary


def test_a_tolerated_rule_or_effect_none_does_not() -> None:
    tolerating = request(
        "gpu", "gpu", 2, tolerations=[toleration(TAINT1["key"], effect="NoSchedule")]
    )
    slices = apply_taint_rules(gpus(), [rule("xid", {}, effect="NoSchedule")])
    assert Allocator(slices, CLASSES).allocate([claim("nb", tolerating)]) is not None
    marked = apply_taint_rules(gpus(), [rule("note", {}, effect="None")])
    assert Allocator(marked, CLASSES).allocate([claim("nb", request("gpu", "gpu", 2))])


def test_rules_and_slice_taints_together() -> None:
    own = [device("gpu-0", taints=[taint("a.example.com/x", "1", "NoSchedule")]), device("gpu-1")]
    slices = [slice_with_devices("s", NODE, NODE, DRIVER1, *own)]
    patched = apply_taint_rules(slices, [rule("r", {"device": "gpu-1"})])
    assert Allocator(patched, CLASSES).allocate([claim("nb", request("gpu", "gpu"))]) is None
    tolerate_both = [toleration("a.example.com/x"), toleration(TAINT1["key"])]
    both = claim("nb", request("gpu", "gpu", 2, tolerations=tolerate_both))
    assert Allocator(patched, CLASSES).allocate([both]) is not None


# --- an inventory's rules ---------------------------------------------------------------------


def test_an_inventory_file_keeps_its_rules_and_its_slices_carry_them(tmp_path: Path) -> None:
    slices = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s} for s in gpus()]
    objects = [*slices, rule("xid", {"device": "gpu-1"}, effect="NoSchedule")]
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    inventory = simulated.from_file(path)
    assert [r["metadata"]["name"] for r in inventory.taint_rules] == ["xid"]
    patched = inventory.patched_slices
    assert patched is inventory.patched_slices  # made once: allocators find their cache
    assert [[t.rule for t in d.taints] for d in patched[0].devices] == [[], ["xid"]]  # type: ignore[union-attr]
    plain = replace(inventory, taint_rules=())
    assert plain.patched_slices is plain.slices

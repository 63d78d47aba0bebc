"""What a user reads when a pod of theirs was stopped for a ``NoExecute`` device taint
(:mod:`dra_jupyter.model.takenout`): which held device, on which node, whose taint."""

from __future__ import annotations

from typing import Any

from dra_jupyter.model.admintaints import REASON_ANNOTATION
from dra_jupyter.model.takenout import (
    HeldDevice,
    evicted_for_device_taint,
    held_devices,
    taken_out,
)
from tests.allocator.builders import device, slice_with_devices, taint

Wire = dict[str, Any]
DRIVER, POOL, NODE = "gpu.nvidia.com", "node-1", "node-1"
HELD = (HeldDevice(DRIVER, POOL, "gpu-0"), HeldDevice(DRIVER, POOL, "gpu-1"))


def gpus(*taints: Wire) -> Wire:
    """Two GPUs on one node; gpu-1 carries ``taints`` as published by its driver."""
    return slice_with_devices(
        "s", NODE, POOL, DRIVER, device("gpu-0"), device("gpu-1", taints=taints)
    )


def rule(name: str, device_name: str, effect: str, value: str = "", reason: str = "") -> Wire:
    notes = {REASON_ANNOTATION: reason} if reason else {}
    body: Wire = {"key": "health.example.com/xid", "effect": effect}
    if value:
        body["value"] = value
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "annotations": notes},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": POOL, "device": device_name},
            "taint": body,
        },
    }


def test_an_admins_rule_is_said_with_its_reason() -> None:
    rules = [rule("r", "gpu-0", "NoExecute", reason="XID 79: fell off the bus")]
    assert taken_out(HELD, [gpus()], rules) == (
        "gpu-0 on node-1 was taken out (health.example.com/xid: XID 79: fell off the bus)"
    )


def test_a_rule_without_a_reason_is_named_and_a_drivers_taint_said_as_its() -> None:
    rules = [rule("r", "gpu-0", "NoExecute", value="79")]
    published = gpus(taint("example.com/broken", "fan", "NoExecute"))
    assert taken_out(HELD, [published], rules) == (
        "gpu-0 on node-1 was taken out (health.example.com/xid=79, DeviceTaintRule r), "
        "gpu-1 on node-1 was taken out (example.com/broken=fan, published by its driver)"
    )


def test_no_execute_only_and_only_held_devices() -> None:
    rules = [rule("soft", "gpu-0", "NoSchedule", reason="fan"), rule("x", "gpu-1", "NoExecute")]
    assert taken_out(HELD[:1], [gpus()], rules) is None  # gpu-0: NoSchedule; gpu-1 not held
    assert taken_out((), [gpus()], rules) is None


def test_the_pod_condition_and_the_claims_devices() -> None:
    condition = {"type": "DisruptionTarget", "reason": "DeletionByDeviceTaintManager"}
    assert evicted_for_device_taint({"status": {"conditions": [condition]}})
    other = {"type": "DisruptionTarget", "reason": "PreemptionByScheduler"}
    assert not evicted_for_device_taint({"status": {"conditions": [other]}})
    assert not evicted_for_device_taint({})
    results = [{"request": "r", "driver": DRIVER, "pool": POOL, "device": "gpu-1"}]
    claim = {"status": {"allocation": {"devices": {"results": results}}}}
    assert held_devices(claim) == (HELD[1],)
    assert held_devices({"status": {}}) == ()

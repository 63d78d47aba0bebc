"""Why a pod's devices were taken from it: the ``NoExecute`` taints on the devices its claims
were allocated, said in one line for the user whose kernel or run stopped.

kube-controller-manager's device taint eviction controller (on by default in Kubernetes
1.37) deletes a pod whose allocated device carries a ``NoExecute`` taint it does not
tolerate, with the pod condition ``DisruptionTarget`` (reason
``DeletionByDeviceTaintManager``, message "Device Taint manager: deleting due to NoExecute
taint"). The condition names no device and no taint; this module finds them from what the
pod held and what the cluster says now: the slices' own taints (a driver's) and the
DeviceTaintRules (an admin's or a health checker's), applied as the scheduler applies them
(:mod:`dra_jupyter.model.taintrules`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_jupyter.model.admintaints import REASON_ANNOTATION
from dra_jupyter.model.taintrules import apply_taint_rules

DISRUPTION_TARGET = "DisruptionTarget"
BY_DEVICE_TAINT = "DeletionByDeviceTaintManager"


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """A device a claim was allocated: its driver, pool and name (``status.allocation``)."""

    driver: str
    pool: str
    device: str


def evicted_for_device_taint(pod: Mapping[str, Any]) -> bool:
    """Whether the eviction controller deleted ``pod`` (wire form) for a device taint."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(
        c.get("type") == DISRUPTION_TARGET and c.get("reason") == BY_DEVICE_TAINT
        for c in conditions
    )


def held_devices(claim: Mapping[str, Any]) -> tuple[HeldDevice, ...]:
    """The devices a claim (wire form) was allocated, in its results' order."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return tuple(
        HeldDevice(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in results
    )


def taken_out(
    held: Sequence[HeldDevice],
    slices: Iterable[Mapping[str, Any]],
    rules: Iterable[Mapping[str, Any]],
) -> str | None:
    """One line saying which of the ``held`` devices carry a ``NoExecute`` taint now and
    whose it is, e.g. ``gpu-3 on gpu-node-1 was taken out (health.example.com/xid=79: the
    GPU fell off the bus)``; None when none does (the pod ended for another reason, or the
    taint is gone already)."""
    rules = list(rules)
    reasons = {str((r.get("metadata") or {}).get("name", "")): _rule_reason(r) for r in rules}
    wanted = set(held)
    said: list[str] = []
    for slice_ in apply_taint_rules(slices, rules):
        for device in slice_.devices:
            where = HeldDevice(slice_.driver, slice_.pool, device.name)
            if where not in wanted:
                continue
            taints = [t for t in device.taints if t.effect == "NoExecute"]
            if not taints:
                continue
            node = f" on {slice_.local_node}" if slice_.local_node else ""
            why = "; ".join(_said(t.key, t.value, t.rule, reasons.get(t.rule, "")) for t in taints)
            said.append(f"{device.name}{node} was taken out ({why})")
    return ", ".join(said) if said else None


def _rule_reason(rule: Mapping[str, Any]) -> str:
    notes = (rule.get("metadata") or {}).get("annotations") or {}
    return str(notes.get(REASON_ANNOTATION) or "")


def _said(key: str, value: str, rule: str, reason: str) -> str:
    taint = f"{key}={value}" if value else key
    if reason and reason != value:
        return f"{taint}: {reason}"
    if rule:
        return f"{taint}, DeviceTaintRule {rule}"
    return f"{taint}, published by its driver"

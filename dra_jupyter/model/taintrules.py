"""DeviceTaintRules (``resource.k8s.io/v1``, GA in Kubernetes 1.37): parsed as kube-apiserver
validates them, and applied to ResourceSlices as kube-scheduler's slice tracker applies them.

A rule puts one taint on every device its selector picks; the devices then carry it as if
the driver had published it in the slice. kube-scheduler never hands the allocator the
slices as stored: its ResourceSlice tracker
(``k8s.io/dynamic-resource-allocation/resourceslice/tracker``, ``applyPatches``) appends
each matching rule's taint to the device's own taints, and the allocator reads those
(``ListWithDeviceTaintRules``). :func:`apply_taint_rules` does the same, so an allocation,
an explanation or a count made here sees what kube-scheduler sees:

* a rule without ``spec.deviceSelector`` selects no device; an empty selector selects every
  device of the cluster;
* ``driver``, ``pool`` and ``device`` must each equal the slice's driver, the slice's pool
  and the device's name, when set (all that are set);
* the taint is appended after the device's own taints, one copy per rule, as given
  (``timeAdded`` is stamped by kube-apiserver on create when missing; allocation does not
  read it; neither does anything here but explanations).

``deviceClassName`` and CEL ``selectors`` were dropped from the selector in 1.35: the API
server drops them as unknown fields (with a warning), so a rule that names only those
selects every device. The same happens here: unknown fields are ignored.

A rule dra-jupyter's ledger makes for a MIG partition of a GPU tainted whole carries the
GPU's rule in the annotation ``dra-jupyter/part-of``: its taint names that rule (what
explanations show, and what ``untaint`` takes away); selection is the rule's own.

Pure: no I/O. The rules' ``status`` (the eviction controller's conditions) is not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dra_jupyter.errors import ObjectError, shown
from dra_jupyter.model import limits
from dra_jupyter.model.admintaints import PART_OF_ANNOTATION
from dra_jupyter.model.fields import Ctx, check_kind, read_metadata
from dra_jupyter.model.objects import ResourceSlice, Taint
from dra_jupyter.model.parse import parse_many, parse_resource_slice

KIND = "DeviceTaintRule"
EFFECTS = ("NoSchedule", "NoExecute", "None")
# metav1.Time as JSON: RFC 3339 with seconds (Go's time.RFC3339 layout)
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """One rule: which devices (``selects`` False: none at all; else every device whose
    slice's driver and pool, and whose name, equal the fields that are set) and its taint."""

    name: str
    taint: Taint
    selects: bool = True
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def selects_slice(self, slice_: ResourceSlice) -> bool:
        """Whether some device of ``slice_`` may be selected (the tracker's slice checks)."""
        return (
            self.selects
            and (self.driver is None or self.driver == slice_.driver)
            and (self.pool is None or self.pool == slice_.pool)
        )


def _optional_name(
    ctx: Ctx, selector: Mapping[str, Any], key: str, check: Callable[[str], str | None]
) -> str | None:
    """A selector field: None when absent; when given, it must pass ``check`` (an empty
    string is given and fails, as kube-apiserver refuses it)."""
    if key not in selector or selector[key] is None:
        return None
    path = f"spec.deviceSelector.{key}"
    value = selector[key]
    if not isinstance(value, str):
        raise ctx.fail(path, f"must be a string, not {shown(value)}")
    problem = check(value)
    if problem:
        raise ctx.fail(path, problem)
    return value


def parse_device_taint_rule(obj: Any) -> DeviceTaintRule:
    """The rule, checked as kube-apiserver 1.37 validates it on create; a problem raises
    :class:`~dra_jupyter.errors.ObjectError` naming the rule and the field."""
    obj = check_kind(obj, KIND)
    ctx, name, _ = read_metadata(obj, KIND, namespaced=False)
    spec = ctx.mapping(obj.get("spec"), "spec", required=True)
    raw_selector = spec.get("deviceSelector")
    selects = raw_selector is not None
    selector = ctx.mapping(raw_selector, "spec.deviceSelector")
    driver = _optional_name(ctx, selector, "driver", limits.driver_name_problem)
    pool = _optional_name(ctx, selector, "pool", limits.pool_name_problem)
    device = _optional_name(ctx, selector, "device", limits.dns_label_problem)
    raw_taint = ctx.mapping(spec.get("taint"), "spec.taint", required=True)
    key = ctx.string(raw_taint.get("key"), "spec.taint.key", required=True)
    problem = limits.label_name_problem(key)
    if problem:
        raise ctx.fail("spec.taint.key", problem)
    value = ctx.string(raw_taint.get("value"), "spec.taint.value")
    problem = limits.label_value_problem(value) if value else None
    if problem:
        raise ctx.fail("spec.taint.value", problem)
    effect = ctx.string(raw_taint.get("effect"), "spec.taint.effect", required=True)
    if effect not in EFFECTS:
        raise ctx.fail(
            "spec.taint.effect",
            f"{shown(effect)} is not NoSchedule, NoExecute or None",
            "use NoSchedule to keep new claims off the devices, NoExecute to evict their "
            "pods too, None to only mark them",
        )
    time_added = ctx.string(raw_taint.get("timeAdded"), "spec.taint.timeAdded")
    if time_added and not _RFC3339.match(time_added):
        raise ctx.fail(
            "spec.taint.timeAdded",
            f"{shown(time_added)} is not an RFC 3339 time",
            "write it as 2026-09-01T12:00:00Z, or leave it out (kube-apiserver stamps it)",
        )
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    shown_rule = annotations.get(PART_OF_ANNOTATION) if isinstance(annotations, Mapping) else None
    taint = Taint(
        key=key,
        effect=effect,
        value=value,
        time_added=time_added,
        rule=shown_rule if isinstance(shown_rule, str) and shown_rule else name,
    )
    return DeviceTaintRule(
        name=name, taint=taint, selects=selects, driver=driver, pool=pool, device=device
    )


def parse_taint_rules(rules: Iterable[Any]) -> list[DeviceTaintRule]:
    """Wire rules (or rules parsed already) in name order; a name given twice is refused,
    as kube-apiserver keeps one object per name."""
    parsed = parse_many(rules, parse_device_taint_rule, DeviceTaintRule)
    seen: set[str] = set()
    for rule in parsed:
        if rule.name in seen:
            raise ObjectError(
                f"{KIND} {rule.name}",
                "metadata.name",
                "is defined twice (kube-apiserver keeps one object per name)",
                "remove the copy, or give one of them another name",
            )
        seen.add(rule.name)
    return sorted(parsed, key=lambda r: r.name)


def _patched(slice_: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    """The tracker's ``applyPatches``: the slice itself when no rule selects a device of it,
    else a copy whose selected devices carry the rules' taints after their own."""
    devices = list(slice_.devices)
    changed = False
    for rule in rules:
        if not rule.selects_slice(slice_):
            continue
        for i, device in enumerate(devices):
            if rule.device is not None and rule.device != device.name:
                continue
            devices[i] = replace(device, taints=(*device.taints, rule.taint))
            changed = True
    return replace(slice_, devices=tuple(devices)) if changed else slice_


def apply_taint_rules(
    slices: Iterable[Mapping[str, Any] | ResourceSlice],
    rules: Iterable[Mapping[str, Any] | DeviceTaintRule],
) -> list[ResourceSlice]:
    """The slices as kube-scheduler's allocator gets them: each device with the taints of
    the rules that select it appended to its own. A slice no rule touches is returned as
    the same object (so caches keyed by slice identity keep working); wire-form slices and
    rules are parsed (and checked) first."""
    parsed = parse_many(slices, parse_resource_slice, ResourceSlice)
    active = [r for r in parse_taint_rules(rules) if r.selects]
    if not active:
        return parsed
    return [_patched(s, active) for s in parsed]

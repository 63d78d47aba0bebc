"""Parse and validate wire-form ``resource.k8s.io/v1`` objects into :mod:`.objects`.

Every problem raises :class:`~dra_jupyter.errors.ObjectError` naming the object
(``ResourceClaim default/nb-7``), the field path
(``spec.devices.requests[0].exactly.count``) and what to do.  The checks are the
ones the apiserver makes for these fields, so input accepted here would be
accepted by a cluster (CEL is compiled separately, by the allocator).

Plain slices and devices are read first on a fast path (:mod:`.parse_fast`), which gives
the same answer as the parse here or none; the checks of one field each are in
:mod:`.fields`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from dra_jupyter.errors import ObjectError, shown
from dra_jupyter.model import features, limits, recall
from dra_jupyter.model.attributes import AttributeValue, Version
from dra_jupyter.model.fields import Ctx, check_kind, cut, read_metadata
from dra_jupyter.model.objects import (
    AllocationResult,
    ClaimConfig,
    Constraint,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceID,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    Node,
    NodeSelection,
    RequestPolicy,
    ResourceClaim,
    ResourceSlice,
    Taint,
    Toleration,
    ValidRange,
    Wire,
)
from dra_jupyter.model.parse_fast import fast_device, fast_slice, label_ok
from dra_jupyter.model.quantity import Quantity

T = TypeVar("T")


# --- DeviceClass -------------------------------------------------------------------------------


def _selectors(ctx: Ctx, raw: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, sel in enumerate(ctx.seq(raw, path, limits.MAX_SELECTORS)):
        sel_map = ctx.mapping(sel, f"{path}[{i}]", required=True)
        cel = ctx.mapping(sel_map.get("cel"), f"{path}[{i}].cel", required=True)
        out.append(ctx.string(cel.get("expression"), f"{path}[{i}].cel.expression", required=True))
    return tuple(out)


def _opaque(ctx: Ctx, raw: Mapping[str, Any], path: str) -> Wire:
    opaque = ctx.mapping(raw.get("opaque"), f"{path}.opaque", required=True)
    ctx.name(opaque.get("driver"), f"{path}.opaque.driver", limits.driver_name_problem)
    if "parameters" not in opaque:
        raise ctx.fail(f"{path}.opaque.parameters", "is required")
    return {"opaque": dict(opaque)}


def parse_device_class(obj: Any) -> DeviceClass:
    obj = check_kind(obj, "DeviceClass")
    ctx, name, _ = read_metadata(obj, "DeviceClass", namespaced=False)
    spec = ctx.mapping(obj.get("spec"), "spec")
    config = tuple(
        _opaque(ctx, ctx.mapping(c, f"spec.config[{i}]", required=True), f"spec.config[{i}]")
        for i, c in enumerate(ctx.seq(spec.get("config"), "spec.config", limits.MAX_CONFIGS))
    )
    return DeviceClass(
        name=name,
        selectors=_selectors(ctx, spec.get("selectors"), "spec.selectors"),
        config=config,
        extended_resource_name=spec.get("extendedResourceName") or None,
    )


# --- ResourceSlice -----------------------------------------------------------------------------


def _attribute(ctx: Ctx, raw: Any, path: str) -> AttributeValue:
    m = ctx.mapping(raw, path, required=True)
    kinds = [
        k
        for k in ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")
        if m.get(k) is not None
    ]
    if len(kinds) != 1:
        raise ctx.fail(
            path,
            "must have exactly one of bool, int, string, version, bools, ints, strings, versions",
        )
    kind = kinds[0]
    value = m[kind]
    try:
        if kind.endswith("s"):
            # a list (DRAListTypeAttributes): kube-apiserver 1.37 validates it whatever the
            # gate; with the gate off (the default) constraints do not match lists
            items = ctx.seq(value, f"{path}.{kind}")
            if not items:
                raise ctx.fail(f"{path}.{kind}", "must not be empty if specified")
            return tuple(  # type: ignore[return-value]
                _scalar(ctx, kind[:-1], v, f"{path}.{kind}[{i}]") for i, v in enumerate(items)
            )
        return _scalar(ctx, kind, value, f"{path}.{kind}")
    except ValueError as err:
        raise ctx.fail(f"{path}.{kind}", str(err)) from err


def _value_count(raw: Any) -> int:
    """kube-apiserver's ``numEntriesDeviceAttribute`` for one attribute: the items of its list
    values, or 1."""
    if not isinstance(raw, Mapping):
        return 1
    items = sum(
        len(v)
        for k in ("bools", "ints", "strings", "versions")
        if isinstance(v := raw.get(k), list)
    )
    return items or 1


def _scalar(ctx: Ctx, kind: str, value: Any, path: str) -> bool | int | str | Version:
    if kind == "bool":
        return ctx.boolean(value, path)
    if kind == "int":
        return ctx.integer(value, path, 0)
    text = ctx.string(value, path)
    if len(text) > limits.MAX_ATTRIBUTE_STRING_LENGTH:
        raise ctx.fail(path, f"is longer than {limits.MAX_ATTRIBUTE_STRING_LENGTH} characters")
    return recall.version(text) if kind == "version" else text


def _zero_if_unset(value: Any) -> Any:
    """A capacity's or counter's ``value``: left out or null, it is Go's zero
    ``resource.Quantity`` once decoded, which kube-apiserver accepts (as 1.37.2 does)."""
    return 0 if value is None else value


def _qualified_keys(ctx: Ctx, raw: Mapping[str, Any], path: str) -> None:
    for key in raw:
        problem = limits.qualified_name_problem(str(key))
        if problem:
            raise ctx.fail(f"{path}[{cut(str(key))}]", problem)


def _capacity(ctx: Ctx, raw: Any, path: str) -> DeviceCapacity:
    m = ctx.mapping(raw, path, required=True)
    given = _zero_if_unset(m.get("value"))
    value = ctx.quantity(given, f"{path}.value")
    if m.get("requestPolicy") is None:
        return recall.plain_capacity(given)
    policy = None
    if m.get("requestPolicy") is not None:
        p = ctx.mapping(m.get("requestPolicy"), f"{path}.requestPolicy")
        ppath = f"{path}.requestPolicy"
        default = (
            ctx.quantity(p["default"], f"{ppath}.default") if p.get("default") is not None else None
        )
        values = tuple(
            ctx.quantity(v, f"{ppath}.validValues[{i}]")
            for i, v in enumerate(ctx.seq(p.get("validValues"), f"{ppath}.validValues", 10))
        )
        valid_range = None
        if p.get("validRange") is not None:
            r = ctx.mapping(p["validRange"], f"{ppath}.validRange")
            if r.get("min") is None:
                raise ctx.fail(f"{ppath}.validRange.min", "is required")
            valid_range = ValidRange(
                min=ctx.quantity(r["min"], f"{ppath}.validRange.min"),
                max=ctx.quantity(r["max"], f"{ppath}.validRange.max") if r.get("max") else None,
                step=ctx.quantity(r["step"], f"{ppath}.validRange.step") if r.get("step") else None,
            )
        if values and valid_range:
            raise ctx.fail(ppath, "must not set both validValues and validRange")
        policy = RequestPolicy(default=default, valid_values=values, valid_range=valid_range)
        _check_policy(ctx, policy, value, ppath)
    return DeviceCapacity(value=value, request_policy=policy)


def _check_policy(ctx: Ctx, policy: RequestPolicy, value: Quantity, path: str) -> None:
    """What kube-apiserver 1.37 checks of a request policy (``validateRequestPolicy``):
    a default beside validValues or validRange and inside them, options and bounds within
    the capacity's ``value``, and steps from ``min`` to the default and to ``max``. Steps
    are counted on whole numbers (``Quantity.Value()``, rounded up) unless the gate
    ``DRAFractionalCapacityRange`` is on and the range or default has a fraction: then on
    milli-units (:mod:`dra_jupyter.model.features`)."""
    default, values, valid = policy.default, policy.valid_values, policy.valid_range
    kind = "validValues" if values else "validRange" if valid is not None else ""
    if kind and default is None:
        raise ctx.fail(
            f"{path}.default",
            f"is required when {kind} is set",
            "give the amount a request that does not ask for this capacity consumes",
        )
    fractional = features.current().dra_fractional_capacity_range
    if values:
        for i in range(len(values) - 1):
            if values[i] > values[i + 1]:
                raise ctx.fail(
                    f"{path}.validValues[{i + 1}]", "values must be sorted in ascending order"
                )
        seen: set[object] = set()
        for i, option in enumerate(values):
            key: object = option.value if fractional else int(option)
            if key in seen:
                raise ctx.fail(f"{path}.validValues[{i}]", f"{option} is a duplicate")
            seen.add(key)
            if option > value:
                raise ctx.fail(
                    f"{path}.validValues[{i}]",
                    f"option {option} is larger than capacity value {value}",
                )
        if default not in values:
            raise ctx.fail(f"{path}.default", f"{default} is not one of validValues")
        return
    if valid is None or default is None:
        return
    rpath = f"{path}.validRange"
    if valid.min > value:
        raise ctx.fail(f"{rpath}.min", f"{valid.min} is larger than capacity value {value}")
    if default < valid.min:
        raise ctx.fail(f"{path}.default", f"{default} is less than validRange.min {valid.min}")
    if valid.max is not None:
        if valid.min > valid.max:
            raise ctx.fail(f"{rpath}.max", f"min {valid.min} is larger than max {valid.max}")
        if valid.max > value:
            raise ctx.fail(f"{rpath}.max", f"{valid.max} is larger than capacity value {value}")
        if default > valid.max:
            raise ctx.fail(f"{path}.default", f"{default} is more than validRange.max {valid.max}")
    bounds = {"default": default, "min": valid.min, "max": valid.max, "step": valid.step}
    milli = fractional and any(q is not None and q.value.denominator != 1 for q in bounds.values())
    if milli:
        for name, q in bounds.items():
            if q is not None and (q.value * 1000).denominator != 1:
                raise ctx.fail(f"{rpath}.{name}", f"{q} cannot be represented as a milli value")
    step = valid.step
    if step is None:
        return
    if step.value <= 0:
        raise ctx.fail(f"{rpath}.step", f"{step} must be greater than zero")
    if valid.min + step > value:
        raise ctx.fail(
            f"{rpath}.step", f"one step {valid.min + step} is larger than capacity value {value}"
        )
    if not milli:
        for name, q in bounds.items():
            if q is not None and not 0 <= q.value <= 2**63 - 1:
                raise ctx.fail(f"{rpath}.{name}", f"{q} must be between 0 and 9223372036854775807")

    def units(q: Quantity) -> int:
        return int(q.value * 1000) if milli else int(q)

    for field, q in (("default", default), ("validRange.max", valid.max)):
        if q is not None and (units(q) - units(valid.min)) % units(step) != 0:
            raise ctx.fail(
                f"{path}.{field}",
                f"{q} is not validRange.min {valid.min} plus a whole number of steps of {step}",
            )


def _counters(ctx: Ctx, raw: Any, path: str) -> dict[str, Quantity]:
    m = ctx.mapping(raw, path)
    if len(m) > limits.MAX_COUNTERS_PER_SET:
        raise ctx.fail(path, f"has more than {limits.MAX_COUNTERS_PER_SET} counters")
    out = {}
    for key, c in m.items():
        problem = None if type(key) is str and label_ok(key) else limits.dns_label_problem(str(key))
        if problem:
            raise ctx.fail(f"{path}[{cut(str(key))}]", f"a counter name {problem}")
        cm = ctx.mapping(c, f"{path}[{key}]", required=True)
        out[str(key)] = ctx.quantity(_zero_if_unset(cm.get("value")), f"{path}[{key}].value")
    return out


_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _node_requirement(ctx: Ctx, raw: Any, path: str, *, field: bool) -> None:
    """A core/v1 NodeSelectorRequirement, checked as the API server checks it."""
    m = ctx.mapping(raw, path, required=True)
    key = ctx.string(m.get("key"), f"{path}.key", required=True)
    if field and key != "metadata.name":
        raise ctx.fail(f"{path}.key", f"{shown(key)} is not supported; use metadata.name")
    operator = ctx.string(m.get("operator"), f"{path}.operator", required=True)
    allowed = ("In", "NotIn") if field else _NODE_OPERATORS
    if operator not in allowed:
        raise ctx.fail(f"{path}.operator", f"{shown(operator)} is not one of {', '.join(allowed)}")
    values = [
        ctx.string(v, f"{path}.values[{i}]")
        for i, v in enumerate(ctx.seq(m.get("values"), f"{path}.values"))
    ]
    if field and len(values) != 1:
        raise ctx.fail(f"{path}.values", "must have exactly one value for a field selector")
    if operator in ("In", "NotIn") and not values:
        raise ctx.fail(f"{path}.values", f"must not be empty when the operator is {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ctx.fail(f"{path}.values", f"must be empty when the operator is {operator}")
    if operator in ("Gt", "Lt") and (
        len(values) != 1 or not re.fullmatch(r"-?\d{1,18}", values[0])
    ):
        raise ctx.fail(f"{path}.values", f"must be one integer when the operator is {operator}")


def _node_selector(ctx: Ctx, raw: Any, path: str) -> Wire:
    """A core/v1 NodeSelector: terms of match expressions (labels) and fields."""
    m = ctx.mapping(raw, path, required=True)
    terms = ctx.seq(m.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    for i, term in enumerate(terms):
        tpath = f"{path}.nodeSelectorTerms[{i}]"
        t = ctx.mapping(term, tpath, required=True)
        for name, field in (("matchExpressions", False), ("matchFields", True)):
            for j, r in enumerate(ctx.seq(t.get(name), f"{tpath}.{name}")):
                _node_requirement(ctx, r, f"{tpath}.{name}[{j}]", field=field)
    return dict(m)


def _node_selection(ctx: Ctx, m: Mapping[str, Any], path: str) -> NodeSelection | None:
    node_name = ctx.string(m.get("nodeName"), f"{path}nodeName") or None
    if node_name is not None:
        problem = limits.dns_subdomain_problem(node_name)
        if problem:
            raise ctx.fail(f"{path}nodeName", problem)
    selector = m.get("nodeSelector")
    if selector is not None:
        selector = _node_selector(ctx, selector, f"{path}nodeSelector")
        if len(selector.get("nodeSelectorTerms") or ()) != 1:
            raise ctx.fail(f"{path}nodeSelector.nodeSelectorTerms", "must have exactly one term")
    all_nodes = ctx.boolean(m.get("allNodes"), f"{path}allNodes")
    chosen = sum((node_name is not None, selector is not None, all_nodes))
    if chosen > 1:
        raise ctx.fail(
            path.rstrip(".") or "spec", "sets more than one of nodeName, nodeSelector, allNodes"
        )
    if chosen == 0:
        return None
    return NodeSelection(node_name=node_name, node_selector=selector, all_nodes=all_nodes)


def _taint(ctx: Ctx, raw: Any, path: str) -> Taint:
    m = ctx.mapping(raw, path, required=True)
    effect = ctx.string(m.get("effect"), f"{path}.effect", required=True)
    if effect not in ("NoSchedule", "NoExecute", "None"):
        raise ctx.fail(f"{path}.effect", f"{shown(effect)} is not NoSchedule, NoExecute or None")
    return Taint(
        key=ctx.string(m.get("key"), f"{path}.key", required=True),
        value=ctx.string(m.get("value"), f"{path}.value"),
        effect=effect,
    )


def _device(ctx: Ctx, raw: Any, path: str, per_device: bool) -> Device:
    m = ctx.mapping(raw, path, required=True)
    name = ctx.name(m.get("name"), f"{path}.name", limits.dns_label_problem)
    attrs_raw = ctx.mapping(m.get("attributes"), f"{path}.attributes")
    caps_raw = ctx.mapping(m.get("capacity"), f"{path}.capacity")
    _qualified_keys(ctx, attrs_raw, f"{path}.attributes")
    _qualified_keys(ctx, caps_raw, f"{path}.capacity")
    if len(attrs_raw) + len(caps_raw) > limits.MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ctx.fail(
            path, f"has more than {limits.MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities"
        )
    values = sum(_value_count(v) for v in attrs_raw.values())
    if values > limits.MAX_ATTRIBUTE_VALUES_PER_DEVICE:
        raise ctx.fail(
            path,
            f"has {values} attribute values; the total must not exceed "
            f"{limits.MAX_ATTRIBUTE_VALUES_PER_DEVICE} (each item of a list counts)",
        )
    consumes = []
    for i, c in enumerate(
        ctx.seq(m.get("consumesCounters"), f"{path}.consumesCounters", limits.MAX_CONSUMES_COUNTERS)
    ):
        cpath = f"{path}.consumesCounters[{i}]"
        cm = ctx.mapping(c, cpath, required=True)
        groups = tuple(
            ctx.string(g, f"{cpath}.compatibilityGroups[{j}]", required=True)
            for j, g in enumerate(
                ctx.seq(cm.get("compatibilityGroups"), f"{cpath}.compatibilityGroups")
            )
        )
        consumes.append(
            CounterConsumption(
                counter_set=ctx.string(cm.get("counterSet"), f"{cpath}.counterSet", required=True),
                counters=_counters(ctx, cm.get("counters"), f"{cpath}.counters"),
                compatibility_groups=groups,
            )
        )
    selection = _node_selection(ctx, m, f"{path}.")
    if per_device and selection is None:
        raise ctx.fail(
            path,
            "needs one of nodeName, nodeSelector, allNodes (the slice sets perDeviceNodeSelection)",
        )
    if not per_device and selection is not None:
        raise ctx.fail(
            path, "sets node selection, but the slice does not set perDeviceNodeSelection"
        )
    conditions, failure_conditions = _binding_conditions(ctx, m, path)
    capacity = {str(k): _capacity(ctx, v, f"{path}.capacity[{k}]") for k, v in caps_raw.items()}
    multiple = ctx.boolean(m.get("allowMultipleAllocations"), f"{path}.allowMultipleAllocations")
    for key, cap in capacity.items():
        if cap.request_policy is not None and not multiple:
            raise ctx.fail(
                f"{path}.capacity[{key}].requestPolicy",
                "is forbidden: allowMultipleAllocations must be true",
            )
    return Device(
        name=name,
        attributes={
            str(k): _attribute(ctx, v, f"{path}.attributes[{k}]") for k, v in attrs_raw.items()
        },
        capacity=capacity,
        consumes_counters=tuple(consumes),
        taints=tuple(
            _taint(ctx, t, f"{path}.taints[{i}]")
            for i, t in enumerate(ctx.seq(m.get("taints"), f"{path}.taints", limits.MAX_TAINTS))
        ),
        allow_multiple_allocations=multiple,
        binds_to_node=ctx.boolean(m.get("bindsToNode"), f"{path}.bindsToNode"),
        binding_conditions=conditions,
        binding_failure_conditions=failure_conditions,
        node_selection=selection,
    )


def _binding_conditions(
    ctx: Ctx, m: Mapping[str, Any], path: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``bindingConditions`` and ``bindingFailureConditions``, checked as kube-apiserver's
    ``validateDeviceBindingParameters``: at most 4 each, qualified names, no duplicates, no
    name in both, and neither without the other."""
    lists: list[tuple[str, ...]] = []
    for key in ("bindingConditions", "bindingFailureConditions"):
        names: list[str] = []
        for i, raw in enumerate(
            ctx.seq(m.get(key), f"{path}.{key}", limits.MAX_BINDING_CONDITIONS)
        ):
            name = ctx.name(raw, f"{path}.{key}[{i}]", limits.label_name_problem)
            if name in names:
                raise ctx.fail(f"{path}.{key}[{i}]", f"{shown(name)} is a duplicate")
            if lists and name in lists[0]:
                raise ctx.fail(
                    f"{path}.{key}[{i}]",
                    f"{shown(name)}: bindingFailureConditions must not overlap with "
                    "bindingConditions",
                )
            names.append(name)
        lists.append(tuple(names))
    conditions, failures = lists
    if failures and not conditions:
        raise ctx.fail(
            f"{path}.bindingConditions",
            "bindingConditions are required to use bindingFailureConditions",
            "list the conditions that must hold before binding, or drop the failure conditions",
        )
    if conditions and not failures:
        raise ctx.fail(
            f"{path}.bindingFailureConditions",
            "bindingFailureConditions are required to use bindingConditions",
            "list the conditions that mean binding failed (kube-apiserver requires both)",
        )
    return conditions, failures


def parse_resource_slice(obj: Any) -> ResourceSlice:
    """The slice: on the fast path when it is plain (:mod:`.parse_fast`), else in full."""
    fast = fast_slice(obj)
    return fast if fast is not None else _full_resource_slice(obj)


def _full_resource_slice(obj: Any) -> ResourceSlice:
    """The slice, every field checked; a problem raises naming the first one."""
    obj = check_kind(obj, "ResourceSlice")
    ctx, name, _ = read_metadata(obj, "ResourceSlice", namespaced=False)
    spec = ctx.mapping(obj.get("spec"), "spec", required=True)
    driver = ctx.name(spec.get("driver"), "spec.driver", limits.driver_name_problem)
    pool = ctx.mapping(spec.get("pool"), "spec.pool", required=True)
    pool_name = ctx.name(pool.get("name"), "spec.pool.name", limits.pool_name_problem)
    generation = ctx.integer(pool.get("generation"), "spec.pool.generation", 0)
    count = ctx.integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", 0)
    if count <= 0:
        raise ctx.fail("spec.pool.resourceSliceCount", "must be greater than zero")
    per_device = ctx.boolean(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection")
    selection = _node_selection(ctx, spec, "spec.")
    shared_raw = ctx.seq(
        spec.get("sharedCounters"), "spec.sharedCounters", limits.MAX_COUNTER_SETS_PER_SLICE
    )
    chosen = (selection is not None) + per_device
    if chosen != 1:  # a counters-only slice too (kube-apiserver 1.37)
        raise ctx.fail(
            "spec",
            "must set exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection",
        )
    devices_raw = ctx.seq(spec.get("devices"), "spec.devices", limits.MAX_DEVICES_PER_SLICE)
    if shared_raw and devices_raw:
        raise ctx.fail(
            "spec",
            "holds both devices and sharedCounters; since Kubernetes 1.35 a "
            "slice holds one or the other",
            "move the counter sets into a slice of their own",
        )
    parsed = []
    for i, d in enumerate(devices_raw):
        device = None if per_device else fast_device(d)
        parsed.append(
            device if device is not None else _device(ctx, d, f"spec.devices[{i}]", per_device)
        )
    devices = tuple(parsed)
    ctx.unique([d.name for d in devices], "spec.devices", "device name")
    if len(devices) > limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS and any(
        d.taints or d.consumes_counters or any(type(v) is tuple for v in d.attributes.values())
        for d in devices
    ):
        raise ctx.fail(
            "spec.devices",
            f"has more than {limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS} "
            "devices while some use taints or counters",
        )
    shared = []
    for i, s in enumerate(shared_raw):
        sm = ctx.mapping(s, f"spec.sharedCounters[{i}]", required=True)
        if not sm.get("counters"):
            raise ctx.fail(f"spec.sharedCounters[{i}].counters", "is required")
        shared.append(
            CounterSet(
                name=ctx.name(
                    sm.get("name"), f"spec.sharedCounters[{i}].name", limits.dns_label_problem
                ),
                counters=_counters(ctx, sm.get("counters"), f"spec.sharedCounters[{i}].counters"),
            )
        )
    ctx.unique([s.name for s in shared], "spec.sharedCounters", "counter set")
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=generation,
        resource_slice_count=count,
        node_selection=selection,
        per_device_node_selection=per_device,
        devices=devices,
        shared_counters=tuple(shared),
    )


# --- ResourceClaim -----------------------------------------------------------------------------


def _toleration(ctx: Ctx, raw: Any, path: str) -> Toleration:
    m = ctx.mapping(raw, path, required=True)
    operator = ctx.string(m.get("operator"), f"{path}.operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise ctx.fail(f"{path}.operator", f"{shown(operator)} is not Equal or Exists")
    effect = ctx.string(m.get("effect"), f"{path}.effect")
    if effect not in ("", "NoSchedule", "NoExecute", "None"):
        raise ctx.fail(f"{path}.effect", f"{shown(effect)} is not NoSchedule, NoExecute or None")
    value = ctx.string(m.get("value"), f"{path}.value")
    if operator == "Exists" and value:
        raise ctx.fail(f"{path}.value", "must be empty when operator is Exists")
    return Toleration(
        key=ctx.string(m.get("key"), f"{path}.key"),
        operator=operator,
        value=value,
        effect=effect,
        raw=dict(m),
    )


def _exact(ctx: Ctx, raw: Any, path: str, name: str, *, sub: bool) -> ExactRequest:
    m = ctx.mapping(raw, path, required=True)
    mode = ctx.string(m.get("allocationMode"), f"{path}.allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ctx.fail(f"{path}.allocationMode", f"{shown(mode)} is not ExactCount or All")
    # kube-apiserver: count is omitempty, so 0 is not given; ExactCount defaults it to 1
    # (SetDefaults_ExactDeviceRequest); All refuses a count
    count = ctx.integer(m.get("count"), f"{path}.count", 0)
    if mode == "ExactCount" and count == 0:
        count = 1
    if mode == "ExactCount" and count < 0:
        raise ctx.fail(
            f"{path}.count",
            f"must be at least 1, not {count}",
            "ask for one or more devices, or use allocationMode: All",
        )
    if mode == "All" and count != 0:
        raise ctx.fail(
            f"{path}.count",
            "must not be specified when allocationMode is 'All'",
            "leave count out: All takes every matching device",
        )
    if sub and m.get("adminAccess") is not None:
        raise ctx.fail(f"{path}.adminAccess", "is not allowed in a firstAvailable subrequest")
    caps = ctx.mapping(
        ctx.mapping(m.get("capacity"), f"{path}.capacity").get("requests"),
        f"{path}.capacity.requests",
    )
    _qualified_keys(ctx, caps, f"{path}.capacity.requests")
    return ExactRequest(
        name=name,
        device_class_name=ctx.name(
            m.get("deviceClassName"), f"{path}.deviceClassName", limits.dns_subdomain_problem
        ),
        selectors=_selectors(ctx, m.get("selectors"), f"{path}.selectors"),
        allocation_mode=mode,  # type: ignore[arg-type]
        count=count if mode == "ExactCount" else 0,
        admin_access=ctx.boolean(m.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=tuple(
            _toleration(ctx, t, f"{path}.tolerations[{i}]")
            for i, t in enumerate(
                ctx.seq(m.get("tolerations"), f"{path}.tolerations", limits.MAX_TOLERATIONS)
            )
        ),
        capacity_requests={
            str(k): ctx.quantity(v, f"{path}.capacity.requests[{k}]") for k, v in caps.items()
        },
    )


def _request(ctx: Ctx, raw: Any, path: str) -> DeviceRequest:
    m = ctx.mapping(raw, path, required=True)
    name = ctx.name(m.get("name"), f"{path}.name", limits.dns_label_problem)
    has_exact = m.get("exactly") is not None
    subs_raw = ctx.seq(m.get("firstAvailable"), f"{path}.firstAvailable", limits.MAX_SUBREQUESTS)
    if has_exact == bool(subs_raw):
        raise ctx.fail(path, "must set exactly one of exactly and firstAvailable")
    if has_exact:
        return DeviceRequest(
            name=name, exactly=_exact(ctx, m["exactly"], f"{path}.exactly", name, sub=False)
        )
    subs = []
    for i, s in enumerate(subs_raw):
        spath = f"{path}.firstAvailable[{i}]"
        sm = ctx.mapping(s, spath, required=True)
        sub_name = ctx.name(sm.get("name"), f"{spath}.name", limits.dns_label_problem)
        subs.append(_exact(ctx, sm, spath, sub_name, sub=True))
    ctx.unique([s.name for s in subs], f"{path}.firstAvailable", "subrequest")
    return DeviceRequest(name=name, first_available=tuple(subs))


def _known_request(ctx: Ctx, ref: str, path: str, requests: tuple[DeviceRequest, ...]) -> None:
    base, _, sub = ref.partition("/")
    for r in requests:
        if r.name == base and (not sub or any(s.name == sub for s in r.first_available)):
            return
    raise ctx.fail(path, f"names request {shown(ref)}, which the claim does not have")


def parse_resource_claim(obj: Any) -> ResourceClaim:
    obj = check_kind(obj, "ResourceClaim")
    ctx, name, namespace = read_metadata(obj, "ResourceClaim", namespaced=True)
    spec = ctx.mapping(obj.get("spec"), "spec")
    devices = ctx.mapping(spec.get("devices"), "spec.devices")
    requests = tuple(
        _request(ctx, r, f"spec.devices.requests[{i}]")
        for i, r in enumerate(
            ctx.seq(
                devices.get("requests"),
                "spec.devices.requests",
                limits.MAX_REQUESTS_PER_CLAIM,
                "split the requests over several claims",
            )
        )
    )
    ctx.unique([r.name for r in requests], "spec.devices.requests", "request")
    constraints = []
    for i, c in enumerate(
        ctx.seq(devices.get("constraints"), "spec.devices.constraints", limits.MAX_CONSTRAINTS)
    ):
        cpath = f"spec.devices.constraints[{i}]"
        cm = ctx.mapping(c, cpath, required=True)
        refs = tuple(
            ctx.string(x, f"{cpath}.requests[{j}]", required=True)
            for j, x in enumerate(ctx.seq(cm.get("requests"), f"{cpath}.requests"))
        )
        for j, ref in enumerate(refs):
            _known_request(ctx, ref, f"{cpath}.requests[{j}]", requests)
        match = cm.get("matchAttribute")
        distinct = cm.get("distinctAttribute")
        if (match is None) == (distinct is None):
            raise ctx.fail(cpath, "must set exactly one of matchAttribute and distinctAttribute")
        attr_path = f"{cpath}.{'matchAttribute' if match is not None else 'distinctAttribute'}"
        attr = ctx.string(match if match is not None else distinct, attr_path, required=True)
        problem = limits.qualified_name_problem(attr, fully=True)
        if problem:
            raise ctx.fail(attr_path, problem)
        constraints.append(
            Constraint(
                requests=refs,
                match_attribute=attr if match is not None else None,
                distinct_attribute=attr if distinct is not None else None,
            )
        )
    config = []
    for i, c in enumerate(
        ctx.seq(devices.get("config"), "spec.devices.config", limits.MAX_CONFIGS)
    ):
        cpath = f"spec.devices.config[{i}]"
        cm = ctx.mapping(c, cpath, required=True)
        refs = tuple(
            ctx.string(x, f"{cpath}.requests[{j}]", required=True)
            for j, x in enumerate(ctx.seq(cm.get("requests"), f"{cpath}.requests"))
        )
        for j, ref in enumerate(refs):
            _known_request(ctx, ref, f"{cpath}.requests[{j}]", requests)
        config.append(ClaimConfig(requests=refs, configuration=_opaque(ctx, cm, cpath)))
    status = ctx.mapping(obj.get("status"), "status")
    allocation = (
        _allocation(ctx, status["allocation"], "status.allocation")
        if status.get("allocation") is not None
        else None
    )
    meta = obj.get("metadata", {})
    return ResourceClaim(
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        requests=requests,
        constraints=tuple(constraints),
        config=tuple(config),
        allocation=allocation,
        raw=dict(obj),
    )


def _allocation(ctx: Ctx, raw: Any, path: str) -> AllocationResult:
    m = ctx.mapping(raw, path)
    devices = ctx.mapping(m.get("devices"), f"{path}.devices")
    results = []
    for i, r in enumerate(ctx.seq(devices.get("results"), f"{path}.devices.results")):
        rpath = f"{path}.devices.results[{i}]"
        rm = ctx.mapping(r, rpath, required=True)
        consumed_raw = ctx.mapping(rm.get("consumedCapacity"), f"{rpath}.consumedCapacity")
        results.append(
            DeviceResult(
                request=ctx.string(rm.get("request"), f"{rpath}.request", required=True),
                device=DeviceID(
                    ctx.string(rm.get("driver"), f"{rpath}.driver", required=True),
                    ctx.string(rm.get("pool"), f"{rpath}.pool", required=True),
                    ctx.string(rm.get("device"), f"{rpath}.device", required=True),
                ),
                admin_access=ctx.boolean(rm.get("adminAccess"), f"{rpath}.adminAccess"),
                share_id=ctx.string(rm.get("shareID"), f"{rpath}.shareID") or None,
                consumed_capacity={
                    str(k): ctx.quantity(v, f"{rpath}.consumedCapacity[{k}]")
                    for k, v in consumed_raw.items()
                }
                or None,
            )
        )
    selector = m.get("nodeSelector")
    if selector is not None:
        selector = _node_selector(ctx, selector, f"{path}.nodeSelector")
    return AllocationResult(results=tuple(results), node_selector=selector)


def parse_node(obj: Any) -> Node:
    if not isinstance(obj, Mapping):
        raise ObjectError("Node", "", f"must be an object, not {type(obj).__name__}")
    ctx, name, _ = read_metadata(obj, "Node", namespaced=False)
    labels = ctx.mapping(obj["metadata"].get("labels"), "metadata.labels")
    return Node(
        name=name,
        labels={
            str(k): ctx.string(v, f"metadata.labels[{cut(str(k))}]") for k, v in labels.items()
        },
    )


PARSERS: dict[str, Callable[[Any], object]] = {
    "DeviceClass": parse_device_class,
    "ResourceSlice": parse_resource_slice,
    "ResourceClaim": parse_resource_claim,
    "Node": parse_node,
}


def parse_many(items: Any, parser: Callable[[Any], T], kind: type[T]) -> list[T]:
    """Parse wire dicts (or pass through objects already parsed)."""
    given: list[Any] = list(items)
    if set(map(type, given)) <= {kind}:  # all parsed already: no Python step per item
        return cast(list[T], given)
    return [i if isinstance(i, kind) else parser(i) for i in given]

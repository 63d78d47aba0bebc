"""Parse and validate wire-form ``resource.k8s.io/v1`` objects into :mod:`.objects`.

Every problem raises :class:`~dra_jupyter.errors.ObjectError` naming the object
(``ResourceClaim default/nb-7``), the field path
(``spec.devices.requests[0].exactly.count``) and what to do.  The checks are the
ones the apiserver makes for these fields, so input accepted here would be
accepted by a cluster (CEL is compiled separately, by the allocator).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard, TypeVar, cast

from dra_jupyter.errors import ECHO_LIMIT, ObjectError, shown
from dra_jupyter.model import features, limits
from dra_jupyter.model.attributes import AttributeValue, Version
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
    plain_device,
    plain_slice,
)
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.model.recall import Recall
from dra_jupyter.model.recall import remembered_valid as _valid

API_VERSION = "resource.k8s.io/v1"
T = TypeVar("T")
V = TypeVar("V")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # Kubernetes' integers are int64


def _cut(text: str) -> str:
    """A name or key as a message shows it: at most ECHO_LIMIT characters, then ``…``."""
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "…"


class _Ctx:
    """Where we are: the object being parsed, for error messages."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, problem: str, remedy: str = "") -> ObjectError:
        return ObjectError(self.where, path, problem, remedy)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
        if value is None:
            if required:
                raise self.fail(path, "is required")
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {type(value).__name__}")
        return value

    def seq(
        self, value: Any, path: str, max_items: int | None = None, remedy: str = ""
    ) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {type(value).__name__}")
        if max_items is not None and len(value) > max_items:
            raise self.fail(
                path,
                f"has {len(value)} entries, more than the limit of {max_items}",
                remedy or f"keep at most {max_items}",
            )
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str:
        if value is None or value == "":
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, not {type(value).__name__}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, not {shown(value)}")
        return value

    def integer(self, value: Any, path: str, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {shown(value)}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise self.fail(path, f"{shown(value)} is out of range for a 64-bit integer")
        return value

    def quantity(self, value: Any, path: str) -> Quantity:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.fail(path, f"must be a quantity such as 40Gi, not {shown(value)}")
        try:
            return _quantity(value)
        except ValueError as err:
            raise self.fail(path, str(err), "write a quantity such as 80Gi, 500m or 4") from err

    def name(self, value: Any, path: str, check: Callable[[str], str | None]) -> str:
        text = self.string(value, path, required=True)
        problem = check(text)
        if problem:
            suggestion = re.sub(r"[^a-z0-9.-]+", "-", text[:63].lower()).strip("-.") or "name"
            raise self.fail(path, problem, f"rename it, for example to {suggestion!r}")
        return text

    def unique(self, names: list[str], path: str, what: str) -> None:
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise self.fail(path, f"{what} {shown(n)} appears more than once")
            seen.add(n)


def _metadata(obj: Mapping[str, Any], kind: str, *, namespaced: bool) -> tuple[_Ctx, str, str]:
    meta = obj.get("metadata")
    if meta is None:
        raise ObjectError(kind, "metadata", "is missing", "every object needs metadata.name")
    if not isinstance(meta, Mapping):
        raise ObjectError(kind, "metadata", f"must be an object, not {type(meta).__name__}")
    name = meta.get("name")
    if name is None or name == "":
        raise ObjectError(kind, "metadata.name", "is missing")
    if not isinstance(name, str):
        raise ObjectError(kind, "metadata.name", f"must be a string, not {shown(name)}")
    namespace = ""
    if namespaced:
        namespace = _Ctx(f"{kind} {_cut(name)}").name(
            meta.get("namespace") or "default", "metadata.namespace", limits.dns_label_problem
        )
    ctx = _Ctx(f"{kind} {namespace}/{_cut(name)}" if namespaced else f"{kind} {_cut(name)}")
    problem = limits.dns_subdomain_problem(name)
    if problem:
        raise ctx.fail("metadata.name", problem)
    return ctx, name, namespace


def _describe(obj: Mapping[str, Any], kind: str) -> str:
    """``ResourceClaim default/nb-7`` when the object has a name, else just the kind."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return kind
    name = _cut(meta["name"])
    if kind == "ResourceClaim":
        namespace = meta.get("namespace") or "default"
        return f"{kind} {_cut(namespace) if isinstance(namespace, str) else '?'}/{name}"
    return f"{kind} {name}"


def _check_kind(obj: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ObjectError(kind, "", f"must be an object, not {type(obj).__name__}")
    got = obj.get("kind", kind)
    where = _describe(obj, kind)
    if got != kind:
        raise ObjectError(where, "kind", f"expected {kind}, got {shown(got)}")
    version = obj.get("apiVersion", API_VERSION)
    if kind != "Node" and version != API_VERSION:
        raise ObjectError(
            where,
            "apiVersion",
            f"{shown(version)} is not supported",
            f"convert it to {API_VERSION} (kubectl get -o yaml shows v1 since Kubernetes 1.34)",
        )
    return obj


# --- DeviceClass -------------------------------------------------------------------------------


def _selectors(ctx: _Ctx, raw: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, sel in enumerate(ctx.seq(raw, path, limits.MAX_SELECTORS)):
        sel_map = ctx.mapping(sel, f"{path}[{i}]", required=True)
        cel = ctx.mapping(sel_map.get("cel"), f"{path}[{i}].cel", required=True)
        out.append(ctx.string(cel.get("expression"), f"{path}[{i}].cel.expression", required=True))
    return tuple(out)


def _opaque(ctx: _Ctx, raw: Mapping[str, Any], path: str) -> Wire:
    opaque = ctx.mapping(raw.get("opaque"), f"{path}.opaque", required=True)
    ctx.name(opaque.get("driver"), f"{path}.opaque.driver", _driver_problem)
    if "parameters" not in opaque:
        raise ctx.fail(f"{path}.opaque.parameters", "is required")
    return {"opaque": dict(opaque)}


def parse_device_class(obj: Any) -> DeviceClass:
    obj = _check_kind(obj, "DeviceClass")
    ctx, name, _ = _metadata(obj, "DeviceClass", namespaced=False)
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


def _driver_problem(name: str) -> str | None:
    return limits.dns_subdomain_problem(name, limits.MAX_DRIVER_NAME_LENGTH)


def _attribute(ctx: _Ctx, raw: Any, path: str) -> AttributeValue:
    m = ctx.mapping(raw, path, required=True)
    kinds = [
        k
        for k in ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")
        if m.get(k) is not None
    ]
    if len(kinds) != 1:
        raise ctx.fail(path, "must have exactly one of bool, int, string, version")
    kind = kinds[0]
    value = m[kind]
    if kind.endswith("s"):
        raise ctx.fail(
            f"{path}.{kind}",
            "list values need the DRAListTypeAttributes feature gate, which is off in "
            "Kubernetes 1.36 (the apiserver drops them)",
            "publish a scalar bool, int, string or version",
        )
    try:
        return _scalar(ctx, kind, value, f"{path}.{kind}")
    except ValueError as err:
        raise ctx.fail(f"{path}.{kind}", str(err)) from err


def _scalar(ctx: _Ctx, kind: str, value: Any, path: str) -> bool | int | str | Version:
    if kind == "bool":
        return ctx.boolean(value, path)
    if kind == "int":
        return ctx.integer(value, path, 0)
    text = ctx.string(value, path)
    if len(text) > limits.MAX_ATTRIBUTE_STRING_LENGTH:
        raise ctx.fail(path, f"is longer than {limits.MAX_ATTRIBUTE_STRING_LENGTH} characters")
    return _version(text) if kind == "version" else text


# Parsed values, shared: an inventory repeats a few quantities, versions and capacities on
# every device (the counters of 20,000 MIG placements on 1,000 nodes are about 350,000
# quantities of a few dozen values). One immutable object per text keeps memory down and
# the collector's full passes short (they visit every object a process holds). ``typed``:
# the integer 1 and the text "1" are kept apart, and True is never taken for 1.
@functools.lru_cache(maxsize=4096, typed=True)
def _quantity(value: str | int) -> Quantity:
    return Quantity.parse(value)


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Version:
    return Version(text)


def _zero_if_unset(value: Any) -> Any:
    """A capacity's or counter's ``value``: left out or null, it is Go's zero
    ``resource.Quantity`` once decoded, which kube-apiserver accepts (as 1.37.2 does)."""
    return 0 if value is None else value


@functools.lru_cache(maxsize=4096, typed=True)
def _plain_capacity(value: str | int) -> DeviceCapacity:
    return DeviceCapacity(value=_quantity(value))


def _qualified_keys(ctx: _Ctx, raw: Mapping[str, Any], path: str) -> None:
    for key in raw:
        problem = limits.qualified_name_problem(str(key))
        if problem:
            raise ctx.fail(f"{path}[{_cut(str(key))}]", problem)


def _capacity(ctx: _Ctx, raw: Any, path: str) -> DeviceCapacity:
    m = ctx.mapping(raw, path, required=True)
    given = _zero_if_unset(m.get("value"))
    value = ctx.quantity(given, f"{path}.value")
    if m.get("requestPolicy") is None:
        return _plain_capacity(given)
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


def _check_policy(ctx: _Ctx, policy: RequestPolicy, value: Quantity, path: str) -> None:
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


def _counters(ctx: _Ctx, raw: Any, path: str) -> dict[str, Quantity]:
    m = ctx.mapping(raw, path)
    if len(m) > limits.MAX_COUNTERS_PER_SET:
        raise ctx.fail(path, f"has more than {limits.MAX_COUNTERS_PER_SET} counters")
    out = {}
    for key, c in m.items():
        if type(key) is str and _label_ok(key):
            problem = None
        else:
            problem = limits.dns_label_problem(str(key))
        if problem:
            raise ctx.fail(f"{path}[{_cut(str(key))}]", f"a counter name {problem}")
        cm = ctx.mapping(c, f"{path}[{key}]", required=True)
        out[str(key)] = ctx.quantity(_zero_if_unset(cm.get("value")), f"{path}[{key}].value")
    return out


_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _node_requirement(ctx: _Ctx, raw: Any, path: str, *, field: bool) -> None:
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


def _node_selector(ctx: _Ctx, raw: Any, path: str) -> Wire:
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


def _node_selection(ctx: _Ctx, m: Mapping[str, Any], path: str) -> NodeSelection | None:
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


def _taint(ctx: _Ctx, raw: Any, path: str) -> Taint:
    m = ctx.mapping(raw, path, required=True)
    effect = ctx.string(m.get("effect"), f"{path}.effect", required=True)
    if effect not in ("NoSchedule", "NoExecute", "None"):
        raise ctx.fail(f"{path}.effect", f"{shown(effect)} is not NoSchedule, NoExecute or None")
    return Taint(
        key=ctx.string(m.get("key"), f"{path}.key", required=True),
        value=ctx.string(m.get("value"), f"{path}.value"),
        effect=effect,
    )


def _device(ctx: _Ctx, raw: Any, path: str, per_device: bool) -> Device:
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
    consumes = []
    for i, c in enumerate(
        ctx.seq(m.get("consumesCounters"), f"{path}.consumesCounters", limits.MAX_CONSUMES_COUNTERS)
    ):
        cpath = f"{path}.consumesCounters[{i}]"
        cm = ctx.mapping(c, cpath, required=True)
        consumes.append(
            CounterConsumption(
                counter_set=ctx.string(cm.get("counterSet"), f"{cpath}.counterSet", required=True),
                counters=_counters(ctx, cm.get("counters"), f"{cpath}.counters"),
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
        binding_conditions=tuple(
            ctx.seq(
                m.get("bindingConditions"),
                f"{path}.bindingConditions",
                limits.MAX_BINDING_CONDITIONS,
            )
        ),
        binding_failure_conditions=tuple(
            ctx.seq(
                m.get("bindingFailureConditions"),
                f"{path}.bindingFailureConditions",
                limits.MAX_BINDING_CONDITIONS,
            )
        ),
        node_selection=selection,
    )


# The fast path of a device: most devices of an inventory are plain (a name, scalar
# attributes, plain capacities, counters consumed) and valid. ``_fast_device`` reads such a
# device without building a field path or a message; for anything else, or anything wrong,
# it answers None and ``_device`` parses the device again, checking every field and naming
# the first problem. A device it accepts is one ``_device`` accepts, as the same object.
_FAST_DEVICE_KEYS = frozenset(
    {"name", "attributes", "capacity", "consumesCounters", "allowMultipleAllocations"}
)
# Names already found valid, by rule: a set lookup costs less than a call.
_LABELS: set[str] = set()
_QUALIFIED: set[str] = set()
_SUBDOMAINS: set[str] = set()
_DRIVERS: set[str] = set()
_POOLS: set[str] = set()


def _label_ok(name: object) -> TypeGuard[str]:
    return _valid(name, _LABELS, limits.dns_label_problem)


def _qualified_ok(name: object) -> TypeGuard[str]:
    return _valid(name, _QUALIFIED, limits.qualified_name_problem)


_ATTRIBUTES: Recall[dict[str, AttributeValue]] = Recall()
_CAPACITIES: Recall[dict[str, DeviceCapacity]] = Recall()
_COUNTERS: Recall[dict[str, Quantity]] = Recall()
# A device's one counter consumption, by counter set and the (kept, shared) counters dict:
# the entry holds that dict, so no other dict can have its id while the entry is there.
_CONSUMPTIONS: dict[tuple[str, int], tuple[CounterConsumption]] = {}
_MAX_CONSUMPTIONS = 1024


def _fast_attributes(raw: dict[str, Any]) -> dict[str, AttributeValue] | None:
    """Scalar attributes, each valid as ``_attribute`` checks it; else None."""
    found = _ATTRIBUTES.find(raw)
    if found is not None:
        return found
    out: dict[str, AttributeValue] = {}
    for key, wrapped in raw.items():
        if type(wrapped) is not dict or len(wrapped) != 1:
            return None
        value = wrapped.get("string")  # the commonest kind first
        if value is not None:
            if type(value) is not str or len(value) > limits.MAX_ATTRIBUTE_STRING_LENGTH:
                return None
        elif (value := wrapped.get("version")) is not None:
            if type(value) is not str or len(value) > limits.MAX_ATTRIBUTE_STRING_LENGTH:
                return None
            try:
                value = _version(value)
            except ValueError:
                return None
        elif (value := wrapped.get("int")) is not None:
            if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
                return None
        elif (value := wrapped.get("bool")) is None or type(value) is not bool:
            return None
        out[key] = value
    if not raw.keys() <= _QUALIFIED and not all(map(_qualified_ok, raw)):
        return None
    _ATTRIBUTES.keep(raw, out)
    return out


def _fast_values(
    raw: dict[str, Any],
    recall: Recall[dict[str, V]],
    name_ok: Callable[[object], bool],
    convert: Callable[[str | int], V],
) -> dict[str, V] | None:
    """``{name: {"value": quantity}}`` converted, each name and value valid; else None."""
    found = recall.find(raw)
    if found is not None:
        return found
    out: dict[str, V] = {}
    for key, wrapped in raw.items():
        if type(wrapped) is not dict or len(wrapped) != 1:
            return None
        value = wrapped.get("value")  # and nothing beside it: no request policy
        if (type(value) is not str and type(value) is not int) or not name_ok(key):
            return None
        try:
            out[key] = convert(value)
        except ValueError:
            return None
    recall.keep(raw, out)
    return out


def _fast_capacity(raw: dict[str, Any]) -> dict[str, DeviceCapacity] | None:
    """Capacities of a value and no request policy, each valid; else None."""
    return _fast_values(raw, _CAPACITIES, _qualified_ok, _plain_capacity)


def _fast_counters(raw: dict[str, Any]) -> dict[str, Quantity] | None:
    """Counters (``{name: {"value": quantity}}``), each valid as ``_counters`` checks it."""
    if len(raw) > limits.MAX_COUNTERS_PER_SET:
        return None
    return _fast_values(raw, _COUNTERS, _label_ok, _quantity)


def _consumption(counter_set: str, counters: dict[str, Quantity]) -> tuple[CounterConsumption]:
    """``(CounterConsumption(counter_set, counters),)``, shared by the devices that have it."""
    key = (counter_set, id(counters))
    found = _CONSUMPTIONS.get(key)
    if found is None or found[0].counters is not counters:
        found = (CounterConsumption(counter_set=counter_set, counters=counters),)
        if len(_CONSUMPTIONS) >= _MAX_CONSUMPTIONS:
            _CONSUMPTIONS.clear()
        _CONSUMPTIONS[key] = found
    return found


def _fast_consumes(raw: list[Any]) -> tuple[CounterConsumption, ...] | None:
    """Counter consumptions (at most MAX_CONSUMES_COUNTERS), each valid; else None."""
    if len(raw) > limits.MAX_CONSUMES_COUNTERS:
        return None
    out: tuple[CounterConsumption, ...] = ()
    for entry in raw:
        if type(entry) is not dict or len(entry) != 2:
            return None
        counter_set, counters_raw = entry.get("counterSet"), entry.get("counters")
        if type(counter_set) is not str or not counter_set or type(counters_raw) is not dict:
            return None
        counters = _fast_counters(counters_raw)
        if counters is None:
            return None
        out += _consumption(counter_set, counters)
    return out


def _fast_device(m: Any) -> Device | None:
    """The device, when it is plain and valid (see above); else None."""
    if type(m) is not dict or not m.keys() <= _FAST_DEVICE_KEYS:
        return None
    get = m.get
    name = get("name")
    if type(name) is not str or (name not in _LABELS and not _label_ok(name)):
        return None
    attributes: dict[str, AttributeValue] | None = {}
    capacity: dict[str, DeviceCapacity] | None = {}
    consumes: tuple[CounterConsumption, ...] | None = ()
    if (attrs_raw := get("attributes")) is not None:
        attributes = _fast_attributes(attrs_raw) if type(attrs_raw) is dict else None
    if (caps_raw := get("capacity")) is not None:
        capacity = _fast_capacity(caps_raw) if type(caps_raw) is dict else None
    if (consumes_raw := get("consumesCounters")) is not None:
        consumes = _fast_consumes(consumes_raw) if type(consumes_raw) is list else None
    if attributes is None or capacity is None or consumes is None:
        return None
    if len(attributes) + len(capacity) > limits.MAX_ATTRIBUTES_AND_CAPACITIES:
        return None
    multiple = get("allowMultipleAllocations")
    if multiple is not None and type(multiple) is not bool:
        return None
    return plain_device(name, attributes, capacity, consumes, multiple is True)


# The fast path of a slice: one of a node's devices (nodeName) or of every node (allNodes),
# or one of counter sets, with nothing wrong. As for devices, ``_fast_slice`` answers None
# for anything else and ``parse_resource_slice`` parses the slice in full; it reads the
# fields the full parse reads (others are ignored by both) and accepts less.
_ALL_NODES = NodeSelection(all_nodes=True)


def _unset(flag: Any) -> bool:
    """Whether a boolean field is left out or false (``_Ctx.boolean`` gives False)."""
    return flag is None or flag is False


def _fast_selection(spec: dict[str, Any]) -> NodeSelection | None:
    """A valid ``nodeName`` or ``allNodes: true`` and no other node selection; else None."""
    node_name, all_nodes = spec.get("nodeName"), spec.get("allNodes")
    if spec.get("nodeSelector") is not None or not _unset(spec.get("perDeviceNodeSelection")):
        return None
    if node_name is None:
        return _ALL_NODES if all_nodes is True else None
    if not _unset(all_nodes) or not _valid(node_name, _SUBDOMAINS, limits.dns_subdomain_problem):
        return None
    return NodeSelection(node_name=node_name)


def _fast_counter_set(raw: Any) -> CounterSet | None:
    """A shared counter set with a valid name and valid counters; else None."""
    if type(raw) is not dict:
        return None
    name, counters_raw = raw.get("name"), raw.get("counters")
    if type(counters_raw) is not dict or not counters_raw or not _label_ok(name):
        return None
    counters = _fast_counters(counters_raw)
    return None if counters is None else CounterSet(name=name, counters=counters)


def _fast_int(value: Any) -> int | None:
    """An int64 (None: 0, as ``_Ctx.integer`` defaults it); None for anything else."""
    if value is None:
        return 0
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        return None
    return value


def _fast_list(value: Any, max_items: int) -> list[Any] | None:
    """A list of at most ``max_items`` (None: empty, as ``_Ctx.seq`` reads it); else None."""
    if value is None:
        return []
    if type(value) is not list or len(value) > max_items:
        return None
    return value


def _fast_slice(obj: Any) -> ResourceSlice | None:
    """The slice, when it is one of the common shapes (see above) and valid; else None."""
    if type(obj) is not dict:
        return None
    if obj.get("kind", "ResourceSlice") != "ResourceSlice":
        return None
    if obj.get("apiVersion", API_VERSION) != API_VERSION:
        return None
    meta, spec = obj.get("metadata"), obj.get("spec")
    if type(meta) is not dict or type(spec) is not dict:
        return None
    name, pool = meta.get("name"), spec.get("pool")
    if type(name) is not str or not name or limits.dns_subdomain_problem(name) is not None:
        return None
    driver = spec.get("driver")
    if type(pool) is not dict or not _valid(driver, _DRIVERS, _driver_problem):
        return None
    pool_name = pool.get("name")
    if not _valid(pool_name, _POOLS, limits.pool_name_problem):
        return None
    generation = _fast_int(pool.get("generation"))
    count = _fast_int(pool.get("resourceSliceCount"))
    selection = _fast_selection(spec)
    if generation is None or count is None or count <= 0 or selection is None:
        return None
    devices_raw = _fast_list(spec.get("devices"), limits.MAX_DEVICES_PER_SLICE)
    shared_raw = _fast_list(spec.get("sharedCounters"), limits.MAX_COUNTER_SETS_PER_SLICE)
    if devices_raw is None or shared_raw is None or (devices_raw and shared_raw):
        return None
    devices: list[Device] = []
    device_names: set[str] = set()
    for raw in devices_raw:
        device = _fast_device(raw)
        if device is None or device.name in device_names:
            return None
        device_names.add(device.name)
        devices.append(device)
    if len(devices) > limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS and any(
        d.consumes_counters for d in devices
    ):
        return None
    shared: list[CounterSet] = []
    for raw in shared_raw:
        counter_set = _fast_counter_set(raw)
        if counter_set is None or any(s.name == counter_set.name for s in shared):
            return None
        shared.append(counter_set)
    return plain_slice(
        name, driver, pool_name, generation, count, selection, tuple(devices), tuple(shared)
    )


def parse_resource_slice(obj: Any) -> ResourceSlice:
    fast = _fast_slice(obj)
    return fast if fast is not None else _full_resource_slice(obj)


def _full_resource_slice(obj: Any) -> ResourceSlice:
    """The slice, every field checked; a problem raises naming the first one."""
    obj = _check_kind(obj, "ResourceSlice")
    ctx, name, _ = _metadata(obj, "ResourceSlice", namespaced=False)
    spec = ctx.mapping(obj.get("spec"), "spec", required=True)
    driver = ctx.name(spec.get("driver"), "spec.driver", _driver_problem)
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
        device = None if per_device else _fast_device(d)
        parsed.append(
            device if device is not None else _device(ctx, d, f"spec.devices[{i}]", per_device)
        )
    devices = tuple(parsed)
    ctx.unique([d.name for d in devices], "spec.devices", "device name")
    if len(devices) > limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS and any(
        d.taints or d.consumes_counters for d in devices
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


def _toleration(ctx: _Ctx, raw: Any, path: str) -> Toleration:
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


def _exact(ctx: _Ctx, raw: Any, path: str, name: str, *, sub: bool) -> ExactRequest:
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


def _request(ctx: _Ctx, raw: Any, path: str) -> DeviceRequest:
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


def _known_request(ctx: _Ctx, ref: str, path: str, requests: tuple[DeviceRequest, ...]) -> None:
    base, _, sub = ref.partition("/")
    for r in requests:
        if r.name == base and (not sub or any(s.name == sub for s in r.first_available)):
            return
    raise ctx.fail(path, f"names request {shown(ref)}, which the claim does not have")


def parse_resource_claim(obj: Any) -> ResourceClaim:
    obj = _check_kind(obj, "ResourceClaim")
    ctx, name, namespace = _metadata(obj, "ResourceClaim", namespaced=True)
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


def _allocation(ctx: _Ctx, raw: Any, path: str) -> AllocationResult:
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
    ctx, name, _ = _metadata(obj, "Node", namespaced=False)
    labels = ctx.mapping(obj["metadata"].get("labels"), "metadata.labels")
    return Node(
        name=name,
        labels={
            str(k): ctx.string(v, f"metadata.labels[{_cut(str(k))}]") for k, v in labels.items()
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

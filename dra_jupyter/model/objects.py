"""Typed, validated views of the ``resource.k8s.io/v1`` objects the allocator reads.

Objects are parsed from their wire form (camelCase dicts, as ``kubectl get -o yaml``
shows them) by :mod:`dra_jupyter.model.parse`; they are immutable and hold only
what allocation needs, plus the raw dict where it must be echoed back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple

from dra_jupyter.model.attributes import AttributeValue
from dra_jupyter.model.quantity import Quantity

Wire = dict[str, Any]
"""An object or field in its wire form: JSON-compatible, camelCase keys."""

AllocationMode = Literal["ExactCount", "All"]
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]


class DeviceID(NamedTuple):
    """A device's identity across the cluster: ``<driver>/<pool>/<device>``."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class PoolID(NamedTuple):
    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


@dataclass(frozen=True, slots=True)
class Node:
    """The parts of a core/v1 Node that node selectors look at."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Wire, ...] = ()  # DeviceClassConfiguration entries, as on the wire
    extended_resource_name: str | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""
    # Where the taint comes from, for explanations only (allocation never reads them):
    # ``timeAdded`` as given, and the DeviceTaintRule that put it on the device ("" when the
    # slice publishes it; :mod:`dra_jupyter.model.taintrules`).
    time_added: str = field(default="", compare=False)
    rule: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    raw: Wire = field(default_factory=dict, compare=False)

    def tolerates(self, taint: Taint) -> bool:
        """Upstream ``resourceclaim.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value


@dataclass(frozen=True, slots=True)
class ValidRange:
    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    valid_range: ValidRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Quantity
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Quantity]
    # DRADeviceCompatibilityGroups (off in 1.37): a slice with a device that names groups
    # is ignored by the allocator, which makes its pool incomplete (``compatibility_groups``
    # of :class:`ResourceSlice`)
    compatibility_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class NodeSelection:
    """Where a slice's (or, with perDeviceNodeSelection, a device's) devices are usable."""

    node_name: str | None = None
    node_selector: Wire | None = None  # core/v1 NodeSelector
    all_nodes: bool = False


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[Taint, ...] = ()
    allow_multiple_allocations: bool = False
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    node_selection: NodeSelection | None = None  # only with perDeviceNodeSelection


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_selection: NodeSelection | None  # None with perDeviceNodeSelection
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    # Made once from the fields above, for the allocator, which reads them of every slice on
    # every call: ``PoolID(driver, pool)``, whether a device consumes counters (a MIG
    # placement, a GPU that can be split) or allows several allocations (shared capacity),
    # ``local_node`` is the node of a slice of devices of one node (``nodeName``), else None.
    # ``compatibility_groups``: whether a device names compatibility groups on a counter set
    # it consumes (DRADeviceCompatibilityGroups, off in 1.37: the allocator ignores the slice).
    pool_id: PoolID = field(init=False, repr=False, compare=False)
    flexible: bool = field(init=False, repr=False, compare=False)
    local_node: str | None = field(init=False, repr=False, compare=False)
    compatibility_groups: bool = field(init=False, repr=False, compare=False)
    # what all devices publish alike, made on first use (:meth:`uniform_attributes`)
    _uniform: tuple[Mapping[str, AttributeValue], frozenset[str], object] | None = field(
        init=False, repr=False, compare=False, default=None
    )
    # the devices' IDs, made on first use (:meth:`device_ids`)
    _ids: tuple[frozenset[DeviceID], tuple[tuple[DeviceID, Device], ...]] | None = field(
        init=False, repr=False, compare=False, default=None
    )

    def uniform_attributes(self) -> tuple[Mapping[str, AttributeValue], frozenset[str]]:
        """The attributes every device publishes with the same value (and type), and the
        names any device publishes (a name outside them, every device lacks): so a
        selector that reads only attributes has one result for all the slice's devices
        when they agree on what it reads. Made once per slice object, on first use."""
        alike, names, _ = self._uniformity()
        return alike, names

    def device_shape(self) -> object:
        """A key equal for slices of one driver whose devices agree on the same attribute
        values and publish the same attribute names: a selector that reads attributes
        only, and that all devices of one such slice agree on, gives every such slice the
        same result (an index of pools by the devices they offer)."""
        return self._uniformity()[2]

    def _uniformity(self) -> tuple[Mapping[str, AttributeValue], frozenset[str], object]:
        found = self._uniform
        if found is None:
            devices = self.devices
            first = devices[0].attributes if devices else {}
            alike = {
                name: value
                for name, value in first.items()
                if all(
                    type(other := d.attributes.get(name)) is type(value) and other == value
                    for d in devices[1:]
                )
            }
            names = frozenset(name for d in devices for name in d.attributes)
            key = (self.driver, names, frozenset((k, type(v), v) for k, v in alike.items()))
            found = (alike, names, key)
            object.__setattr__(self, "_uniform", found)
        return found

    def device_ids(self) -> tuple[frozenset[DeviceID], tuple[tuple[DeviceID, Device], ...]]:
        """The IDs of the slice's devices, and each device with its ID in order; made once
        per slice object (a cold allocator counting a pool's devices reads them)."""
        found = self._ids
        if found is None:
            pairs = tuple((DeviceID(self.driver, self.pool, d.name), d) for d in self.devices)
            found = (frozenset(i for i, _ in pairs), pairs)
            object.__setattr__(self, "_ids", found)
        return found

    def __post_init__(self) -> None:
        object.__setattr__(self, "_uniform", None)
        object.__setattr__(self, "_ids", None)
        object.__setattr__(self, "pool_id", PoolID(self.driver, self.pool))
        selection = self.node_selection
        object.__setattr__(
            self,
            "local_node",
            selection.node_name if selection is not None and not self.shared_counters else None,
        )
        flexible = any(d.consumes_counters or d.allow_multiple_allocations for d in self.devices)
        object.__setattr__(self, "flexible", flexible)
        object.__setattr__(
            self,
            "compatibility_groups",
            flexible
            and any(c.compatibility_groups for d in self.devices for c in d.consumes_counters),
        )


# Plain devices and slices, made fast. The parser makes tens of thousands of devices for an
# inventory, and a frozen dataclass's ``__init__`` sets each field through
# ``object.__setattr__`` (about 0.3 us a field). The slot descriptors' own ``__set__`` write
# the same slots about four times faster; the classes stay frozen (``__setattr__`` still
# refuses), and the objects are the ones ``__init__`` makes (tests/allocator/test_parse_fast.py).
_Setter = Callable[[object, object], None]


def _setters(cls: type, names: tuple[str, ...]) -> tuple[_Setter, ...]:
    """The slot setters of ``names``, which must be all of the dataclass ``cls``'s fields."""
    if names != tuple(f.name for f in fields(cls)):
        raise AssertionError(f"{cls.__name__}: {names} are not its fields in order")
    return tuple(getattr(cls, name).__set__ for name in names)


(
    _set_name,
    _set_attributes,
    _set_capacity,
    _set_consumes_counters,
    _set_taints,
    _set_allow_multiple_allocations,
    _set_binds_to_node,
    _set_binding_conditions,
    _set_binding_failure_conditions,
    _set_node_selection,
) = _setters(
    Device,
    (
        "name",
        "attributes",
        "capacity",
        "consumes_counters",
        "taints",
        "allow_multiple_allocations",
        "binds_to_node",
        "binding_conditions",
        "binding_failure_conditions",
        "node_selection",
    ),
)


def plain_device(
    name: str,
    attributes: Mapping[str, AttributeValue],
    capacity: Mapping[str, DeviceCapacity],
    consumes_counters: tuple[CounterConsumption, ...],
    allow_multiple_allocations: bool,
) -> Device:
    """``Device(name=..., ...)`` with no taints, binding conditions or node selection."""
    device: Device = object.__new__(Device)
    _set_name(device, name)
    _set_attributes(device, attributes)
    _set_capacity(device, capacity)
    _set_consumes_counters(device, consumes_counters)
    _set_taints(device, ())
    _set_allow_multiple_allocations(device, allow_multiple_allocations)
    _set_binds_to_node(device, False)
    _set_binding_conditions(device, ())
    _set_binding_failure_conditions(device, ())
    _set_node_selection(device, None)
    return device


_slice_setters = _setters(
    ResourceSlice,
    (
        "name",
        "driver",
        "pool",
        "generation",
        "resource_slice_count",
        "node_selection",
        "per_device_node_selection",
        "devices",
        "shared_counters",
        "pool_id",
        "flexible",
        "local_node",
        "compatibility_groups",
        "_uniform",
        "_ids",
    ),
)[:9]  # the fields __init__ takes; __post_init__ sets the others


def plain_slice(
    name: str,
    driver: str,
    pool: str,
    generation: int,
    resource_slice_count: int,
    node_selection: NodeSelection,
    devices: tuple[Device, ...],
    shared_counters: tuple[CounterSet, ...],
) -> ResourceSlice:
    """``ResourceSlice(name=..., ...)`` of a slice without perDeviceNodeSelection."""
    slice_: ResourceSlice = object.__new__(ResourceSlice)
    values = (
        name,
        driver,
        pool,
        generation,
        resource_slice_count,
        node_selection,
        False,
        devices,
        shared_counters,
    )
    for setter, value in zip(_slice_setters, values, strict=True):
        setter(slice_, value)
    slice_.__post_init__()
    return slice_


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """An ``exactly`` request or one ``firstAvailable`` subrequest (which has no adminAccess)."""

    name: str
    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = "ExactCount"
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity_requests: Mapping[str, Quantity] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[ExactRequest, ...] = ()

    @property
    def alternatives(self) -> tuple[ExactRequest, ...]:
        """What can satisfy the request, in order of preference."""
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    @property
    def attribute(self) -> str:
        return self.match_attribute or self.distinct_attribute or ""


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    configuration: Wire  # the DeviceConfiguration part ({"opaque": {...}})


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One entry of ``status.allocation.devices.results``."""

    request: str
    device: DeviceID
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, Quantity] | None = None
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    def to_dict(self) -> Wire:
        out: Wire = {
            "request": self.request,
            "driver": self.device.driver,
            "pool": self.device.pool,
            "device": self.device.device,
        }
        if self.admin_access:
            out["adminAccess"] = True
        if self.tolerations:
            out["tolerations"] = [dict(t.raw) for t in self.tolerations]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {k: str(v) for k, v in sorted(self.consumed_capacity.items())}
        return out


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """A claim's ``status.allocation``."""

    results: tuple[DeviceResult, ...]
    config: tuple[Wire, ...] = ()
    node_selector: Wire | None = None
    node: str | None = field(default=None, compare=False)  # the node it was made for

    def to_dict(self) -> Wire:
        devices: Wire = {"results": [r.to_dict() for r in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: Wire = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        return out


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    name: str
    namespace: str = "default"
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    allocation: AllocationResult | None = None
    raw: Wire = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

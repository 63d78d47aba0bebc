"""The parser's fast path for plain slices and devices: the same answer as the full parse
(:mod:`dra_jupyter.model.parse`), or none.

Most slices and devices of an inventory are plain and valid. :func:`fast_slice` and
:func:`fast_device` read such an object without building a field path or a message; for
anything else, or anything wrong, they answer None and the full parse reads the object
again, checking every field and naming the first problem. What they accept, the full parse
accepts, as an equal object (tests/allocator/test_parse_fast.py checks exactly that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard, TypeVar

from dra_jupyter.model import limits, recall
from dra_jupyter.model.attributes import AttributeValue
from dra_jupyter.model.limits import API_VERSION, INT64_MAX, INT64_MIN
from dra_jupyter.model.objects import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    NodeSelection,
    ResourceSlice,
    plain_device,
    plain_slice,
)
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.model.recall import Recall
from dra_jupyter.model.recall import remembered_valid as _valid

V = TypeVar("V")


# The fast path of a device: most devices of an inventory are plain (a name, scalar
# attributes, plain capacities, counters consumed) and valid. ``fast_device`` reads such a
# device without building a field path or a message; for anything else, or anything wrong,
# it answers None and the full parse (``parse._device``) reads the device again, checking
# every field and naming the first problem. A device it accepts is one the full parse
# accepts, as the same object.
_FAST_DEVICE_KEYS = frozenset(
    {"name", "attributes", "capacity", "consumesCounters", "allowMultipleAllocations"}
)
# Names already found valid, by rule: a set lookup costs less than a call.
_LABELS: set[str] = set()
_QUALIFIED: set[str] = set()
_SUBDOMAINS: set[str] = set()
_DRIVERS: set[str] = set()
_POOLS: set[str] = set()


def label_ok(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a DNS label (remembered when it is): counter and device names."""
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
    """Scalar attributes, each valid as ``parse._attribute`` checks it; else None."""
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
                value = recall.version(value)
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
    return _fast_values(raw, _CAPACITIES, _qualified_ok, recall.plain_capacity)


def _fast_counters(raw: dict[str, Any]) -> dict[str, Quantity] | None:
    """Counters (``{name: {"value": quantity}}``), each valid as ``parse._counters`` checks it."""
    if len(raw) > limits.MAX_COUNTERS_PER_SET:
        return None
    return _fast_values(raw, _COUNTERS, label_ok, recall.quantity)


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


def fast_device(m: Any) -> Device | None:
    """The device, when it is plain and valid (see above); else None."""
    if type(m) is not dict or not m.keys() <= _FAST_DEVICE_KEYS:
        return None
    get = m.get
    name = get("name")
    if type(name) is not str or (name not in _LABELS and not label_ok(name)):
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
# or one of counter sets, with nothing wrong. As for devices, ``fast_slice`` answers None
# for anything else and the full parse reads the slice; it reads the
# fields the full parse reads (others are ignored by both) and accepts less.
_ALL_NODES = NodeSelection(all_nodes=True)


def _unset(flag: Any) -> bool:
    """Whether a boolean field is left out or false (``Ctx.boolean`` gives False)."""
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
    if type(counters_raw) is not dict or not counters_raw or not label_ok(name):
        return None
    counters = _fast_counters(counters_raw)
    return None if counters is None else CounterSet(name=name, counters=counters)


def _fast_int(value: Any) -> int | None:
    """An int64 (None: 0, as ``Ctx.integer`` defaults it); None for anything else."""
    if value is None:
        return 0
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        return None
    return value


def _fast_list(value: Any, max_items: int) -> list[Any] | None:
    """A list of at most ``max_items`` (None: empty, as ``Ctx.seq`` reads it); else None."""
    if value is None:
        return []
    if type(value) is not list or len(value) > max_items:
        return None
    return value


def fast_slice(obj: Any) -> ResourceSlice | None:
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
    if type(pool) is not dict or not _valid(driver, _DRIVERS, limits.driver_name_problem):
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
        device = fast_device(raw)
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

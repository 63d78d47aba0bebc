"""Builders of ``resource.k8s.io/v1`` wire dicts for the allocator tests.

They mirror the helpers of upstream's shared allocator test suite
(``k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting``,
v0.36.0) so that a translated case reads like the Go original:

=============================================  =========================================
upstream                                       here
=============================================  =========================================
``class(name, driver)``                        ``device_class(name, driver)``
``classWithConfig``                            ``class_with_config``
``classWithAllowMultipleAllocations``          ``class_with_allow_multiple_allocations``
``claimWithRequests(name, constraints, ...)``  ``claim(name, *requests, constraints=...)``
``claimWithRequest(name, req, class)``         ``claim_with_request(name, req, class)``
``request(name, class, count, selectors...)``  ``request(name, class, count, selectors=...)``
``allDeviceRequest(name, class)``              ``all_device_request(name, class)``
``requestWithPrioritizedList(name, ...)``      ``request_with_prioritized_list(name, ...)``
``subRequest(name, class, count, ...)``        ``sub_request(name, class, count, ...)``
``sliceWithDevices(name, node, pool, drv)``    ``slice_with_devices(name, node, pool, drv)``
``device(name, capacity, attributes)``         ``device(name, capacity=..., attributes=...)``
``.withTaints(...)`` etc.                      keyword arguments of ``device``
``deviceAllocationResult(...)``                ``device_allocation_result(...)``
``allocationResult(selector, results...)``     ``allocation_result(selector, *results)``
``allocatedDevices: []DeviceID{...}``          ``allocated_devices(("drv", "pool", "dev"))``
=============================================  =========================================

Every builder returns a fresh plain ``dict`` in wire format (camelCase, as
``kubectl get -o json`` prints it); quantities are canonical strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Wire = dict[str, Any]

# Node selection of a ResourceSlice (upstream's nodeSelectionAll / nodeSelectionPerDevice).
ALL_NODES = "nodeSelectionAll"
PER_DEVICE = "nodeSelectionPerDevice"

# The placeholder every shareID is replaced with before results are compared
# (upstream replaces them with its fixedShareID).
SHARE_ID = "<share-id>"

NodeSelection = str | Wire
"""A node name, :data:`ALL_NODES`, :data:`PER_DEVICE`, or a core/v1 NodeSelector."""

Selector = str | Wire
"""A CEL expression, or a DeviceSelector wire dict (``{}`` = unknown selector type)."""

AttributeValue = bool | int | str | Wire
"""``bool``/``int``/``str`` become ``{"bool"|"int"|"string": v}``; a dict is used as is."""

CapacityValue = str | Wire
"""A quantity string becomes ``{"value": q}``; a dict is a full DeviceCapacity."""


# --- core/v1 --------------------------------------------------------------------------


def node(name: str, region: str) -> Wire:
    """A Node labelled ``region=<region>`` and ``planet=earth`` (upstream's ``node``)."""
    return {"metadata": {"name": name, "labels": {"region": region, "planet": "earth"}}}


def node_label_selector(key: str, *values: str) -> Wire:
    """A NodeSelector with one term: label ``key`` In ``values``."""
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
        ]
    }


def local_node_selector(node_name: str) -> Wire:
    """The NodeSelector of node-local allocations: field ``metadata.name`` In [node]."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


# --- DeviceClass ----------------------------------------------------------------------


def _selector(selector: Selector) -> Wire:
    if isinstance(selector, str):
        return {"cel": {"expression": selector}}
    return dict(selector)


def device_configuration(driver: str, attribute: str) -> Wire:
    """Opaque config ``{driver, parameters: {<attribute>: "<attribute>Value"}}``."""
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def opaque(driver: str, parameters: Mapping[str, Any]) -> Wire:
    """An opaque DeviceConfiguration ``{"opaque": {driver, parameters}}``."""
    return {"opaque": {"driver": driver, "parameters": dict(parameters)}}


def device_class(
    name: str,
    driver: str | None = None,
    *,
    selectors: Sequence[Selector] = (),
    config: Sequence[Wire] = (),
    extended_resource_name: str | None = None,
) -> Wire:
    """A DeviceClass; ``driver`` adds the selector ``device.driver == "<driver>"`` first."""
    exprs: list[Wire] = []
    if driver is not None:
        exprs.append(_selector(f'device.driver == "{driver}"'))
    exprs.extend(_selector(s) for s in selectors)
    spec: Wire = {}
    if exprs:
        spec["selectors"] = exprs
    if config:
        spec["config"] = [dict(c) for c in config]
    if extended_resource_name is not None:
        spec["extendedResourceName"] = extended_resource_name
    return {"metadata": {"name": name}, "spec": spec}


def class_with_config(name: str, driver: str, attribute: str) -> Wire:
    """A driver class carrying one opaque config built by :func:`device_configuration`."""
    return device_class(name, driver, config=[device_configuration(driver, attribute)])


def class_with_allow_multiple_allocations(name: str, driver: str, multialloc: bool) -> Wire:
    """A class selecting devices of ``driver`` by ``device.allowMultipleAllocations``."""
    flag = "true" if multialloc else "false"
    return device_class(
        name,
        selectors=[f'device.driver == "{driver}" && device.allowMultipleAllocations == {flag}'],
    )


# --- ResourceClaim --------------------------------------------------------------------


def capacity_requests(**requests: str) -> Wire:
    """``{"requests": {...}}`` for ``exactly.capacity`` / a subrequest's ``capacity``."""
    return {"requests": dict(requests)}


def toleration(
    key: str,
    *,
    operator: str = "Exists",
    value: str | None = None,
    effect: str | None = None,
) -> Wire:
    """A DeviceToleration."""
    out: Wire = {"key": key, "operator": operator}
    if value is not None:
        out["value"] = value
    if effect is not None:
        out["effect"] = effect
    return out


def _exact(
    class_name: str,
    *,
    count: int | None,
    allocation_mode: str,
    selectors: Sequence[Selector],
    admin_access: bool | None,
    tolerations: Sequence[Wire],
    capacity: Mapping[str, str] | None,
) -> Wire:
    out: Wire = {"deviceClassName": class_name}
    if selectors:
        out["selectors"] = [_selector(s) for s in selectors]
    out["allocationMode"] = allocation_mode
    # upstream's tables give All requests a count of 1, which its allocator ignores and
    # kube-apiserver refuses ("must not be specified"): left out here
    if count is not None and allocation_mode != "All":
        out["count"] = count
    if admin_access is not None:
        out["adminAccess"] = admin_access
    if tolerations:
        out["tolerations"] = [dict(t) for t in tolerations]
    if capacity is not None:
        out["capacity"] = {"requests": dict(capacity)}
    return out


def request(
    name: str,
    class_name: str,
    count: int = 1,
    *,
    selectors: Sequence[Selector] = (),
    admin_access: bool | None = None,
    tolerations: Sequence[Wire] = (),
    capacity: Mapping[str, str] | None = None,
    allocation_mode: str = "ExactCount",
) -> Wire:
    """An ``exactly`` DeviceRequest (ExactCount unless ``allocation_mode`` says otherwise)."""
    return {
        "name": name,
        "exactly": _exact(
            class_name,
            count=count,
            allocation_mode=allocation_mode,
            selectors=selectors,
            admin_access=admin_access,
            tolerations=tolerations,
            capacity=capacity,
        ),
    }


def all_device_request(
    name: str,
    class_name: str,
    *,
    selectors: Sequence[Selector] = (),
    admin_access: bool | None = None,
    tolerations: Sequence[Wire] = (),
    capacity: Mapping[str, str] | None = None,
) -> Wire:
    """An ``exactly`` DeviceRequest with ``allocationMode: All`` (no count)."""
    return {
        "name": name,
        "exactly": _exact(
            class_name,
            count=None,
            allocation_mode="All",
            selectors=selectors,
            admin_access=admin_access,
            tolerations=tolerations,
            capacity=capacity,
        ),
    }


def sub_request(
    name: str,
    class_name: str,
    count: int | None = 1,
    *,
    selectors: Sequence[Selector] = (),
    tolerations: Sequence[Wire] = (),
    capacity: Mapping[str, str] | None = None,
    allocation_mode: str = "ExactCount",
) -> Wire:
    """A ``firstAvailable`` entry; ``allocation_mode="All"`` usually goes with ``count=None``."""
    out: Wire = {"name": name}
    out.update(
        _exact(
            class_name,
            count=count,
            allocation_mode=allocation_mode,
            selectors=selectors,
            admin_access=None,
            tolerations=tolerations,
            capacity=capacity,
        )
    )
    return out


def request_with_prioritized_list(name: str, *sub_requests: Wire) -> Wire:
    """A DeviceRequest with ``firstAvailable`` subrequests, tried in order."""
    return {"name": name, "firstAvailable": [dict(s) for s in sub_requests]}


def match_attribute(attribute: str, *requests: str) -> Wire:
    """A ``matchAttribute`` constraint; no requests = all requests of the claim."""
    out: Wire = {}
    if requests:
        out["requests"] = list(requests)
    out["matchAttribute"] = attribute
    return out


def distinct_attribute(attribute: str, *requests: str) -> Wire:
    """A ``distinctAttribute`` constraint; no requests = all requests of the claim."""
    out: Wire = {}
    if requests:
        out["requests"] = list(requests)
    out["distinctAttribute"] = attribute
    return out


def device_claim_config(requests: Sequence[str] | None, configuration: Wire) -> Wire:
    """A claim config entry (``spec.devices.config[]``); ``None`` requests = all."""
    out: Wire = {}
    if requests:
        out["requests"] = list(requests)
    out.update(configuration)
    return out


def claim(
    name: str,
    *requests: Wire,
    constraints: Sequence[Wire] = (),
    config: Sequence[Wire] = (),
) -> Wire:
    """A ResourceClaim (no status) with the given requests, constraints and config."""
    devices: Wire = {"requests": [dict(r) for r in requests]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return {"metadata": {"name": name}, "spec": {"devices": devices}}


def claim_with_request(name: str, req: str, class_name: str, *constraints: Wire) -> Wire:
    """A claim with one ExactCount request for one device (upstream ``claimWithRequest``)."""
    return claim(name, request(req, class_name, 1), constraints=constraints)


def claim_with_device_config(
    name: str, req: str, class_name: str, driver: str, attribute: str
) -> Wire:
    """:func:`claim_with_request` plus one claim config for all requests."""
    return claim(
        name,
        request(req, class_name, 1),
        config=[device_claim_config(None, device_configuration(driver, attribute))],
    )


# --- ResourceSlice --------------------------------------------------------------------


def version(value: str) -> Wire:
    """A ``version`` device attribute."""
    return {"version": value}


def _attribute(value: AttributeValue) -> Wire:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    return dict(value)


def _capacity(value: CapacityValue) -> Wire:
    if isinstance(value, str):
        return {"value": value}
    return dict(value)


def capacity_with_range(
    value: str, *, default: str = "2", min: str = "2", step: str = "2", max: str = "4"
) -> Wire:
    """A DeviceCapacity with a ``validRange`` policy (upstream default 2, range 2..4 step 2)."""
    return {
        "value": value,
        "requestPolicy": {
            "default": default,
            "validRange": {"min": min, "step": step, "max": max},
        },
    }


def capacity_with_valid_values(value: str, default: str, *more_valid_values: str) -> Wire:
    """A DeviceCapacity with a ``validValues`` policy ``[default, *more]``."""
    return {
        "value": value,
        "requestPolicy": {"default": default, "validValues": [default, *more_valid_values]},
    }


def taint(key: str, value: str, effect: str) -> Wire:
    """A DeviceTaint."""
    return {"key": key, "value": value, "effect": effect}


def counters(values: Mapping[str, str]) -> Wire:
    """``{name: {"value": q}}`` as used by counter sets and counter consumption."""
    return {name: {"value": q} for name, q in values.items()}


def counter_set(name: str, values: Mapping[str, str]) -> Wire:
    """A CounterSet for ``sharedCounters`` (``counters`` omitted when empty, as upstream)."""
    out: Wire = {"name": name}
    if values:
        out["counters"] = counters(values)
    return out


def device_counter_consumption(counter_set_name: str, values: Mapping[str, str]) -> Wire:
    """A ``consumesCounters`` entry (``counters`` omitted when empty, as upstream)."""
    out: Wire = {"counterSet": counter_set_name}
    if values:
        out["counters"] = counters(values)
    return out


def device(
    name: str,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
    capacity: Mapping[str, CapacityValue] | None = None,
    consumes_counters: Sequence[Wire] = (),
    taints: Sequence[Wire] = (),
    binding_conditions: Sequence[str] | None = None,
    binding_failure_conditions: Sequence[str] | None = None,
    binds_to_node: bool | None = None,
    allow_multiple_allocations: bool | None = None,
    node_name: str | None = None,
    node_selector: Wire | None = None,
    all_nodes: bool | None = None,
) -> Wire:
    """A Device (``withTaints``, ``withDeviceCounterConsumption``, ... are keywords here)."""
    out: Wire = {"name": name}
    if attributes is not None:
        out["attributes"] = {k: _attribute(v) for k, v in attributes.items()}
    if capacity is not None:
        out["capacity"] = {k: _capacity(v) for k, v in capacity.items()}
    if consumes_counters:
        out["consumesCounters"] = [dict(c) for c in consumes_counters]
    if node_name is not None:
        out["nodeName"] = node_name
    if node_selector is not None:
        out["nodeSelector"] = node_selector
    if all_nodes is not None:
        out["allNodes"] = all_nodes
    if allow_multiple_allocations is not None:
        out["allowMultipleAllocations"] = allow_multiple_allocations
    if taints:
        out["taints"] = [dict(t) for t in taints]
    if binds_to_node is not None:
        out["bindsToNode"] = binds_to_node
    if binding_conditions is not None:
        out["bindingConditions"] = list(binding_conditions)
    if binding_failure_conditions is not None:
        out["bindingFailureConditions"] = list(binding_failure_conditions)
    return out


def resource_pool(name: str, slice_count: int = 1, generation: int = 1) -> Wire:
    """A ResourcePool (upstream ``resourcePool``; a plain pool name means count 1, gen 1)."""
    return {"name": name, "generation": generation, "resourceSliceCount": slice_count}


def slice_(name: str, node_selection: NodeSelection, pool: str | Wire, driver: str) -> Wire:
    """A ResourceSlice without devices (upstream ``slice``)."""
    spec: Wire = {
        "driver": driver,
        "pool": resource_pool(pool) if isinstance(pool, str) else dict(pool),
    }
    if isinstance(node_selection, dict):
        spec["nodeSelector"] = node_selection
    elif node_selection == ALL_NODES:
        spec["allNodes"] = True
    elif node_selection == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = node_selection
    return {"metadata": {"name": name}, "spec": spec}


def slice_with_devices(
    name: str, node_selection: NodeSelection, pool: str | Wire, driver: str, *devices: Wire
) -> Wire:
    """A ResourceSlice listing ``devices`` in the given order."""
    out = slice_(name, node_selection, pool, driver)
    if devices:
        out["spec"]["devices"] = [dict(d) for d in devices]
    return out


def slice_with_one_device(
    name: str, node_selection: NodeSelection, pool: str | Wire, driver: str
) -> Wire:
    """A ResourceSlice with one plain device ``device-1``."""
    return slice_with_devices(name, node_selection, pool, driver, device("device-1"))


def slice_with_multiple_devices(
    name: str, node_selection: NodeSelection, pool: str | Wire, driver: str, count: int
) -> Wire:
    """A ResourceSlice with plain devices ``device-0`` .. ``device-<count-1>``."""
    devices = [device(f"device-{i}") for i in range(count)]
    return slice_with_devices(name, node_selection, pool, driver, *devices)


def slice_with_counter_sets(
    name: str, node_selection: NodeSelection, pool: str | Wire, driver: str, *sets: Wire
) -> Wire:
    """A ResourceSlice that only carries ``sharedCounters``."""
    out = slice_(name, node_selection, pool, driver)
    out["spec"]["sharedCounters"] = [dict(s) for s in sets]
    return out


# --- AllocationResult -----------------------------------------------------------------


def device_allocation_result(
    request_name: str,
    driver: str,
    pool: str,
    device_name: str,
    admin_access: bool = False,
    *,
    tolerations: Sequence[Wire] = (),
    binding_conditions: Sequence[str] | None = None,
    binding_failure_conditions: Sequence[str] | None = None,
    share_id: str | None = None,
    consumed_capacity: Mapping[str, str] | None = None,
) -> Wire:
    """One ``devices.results[]`` entry; empty/false fields are omitted like upstream."""
    out: Wire = {"request": request_name, "driver": driver, "pool": pool, "device": device_name}
    if admin_access:
        out["adminAccess"] = True
    if tolerations:
        out["tolerations"] = [dict(t) for t in tolerations]
    if binding_conditions:
        out["bindingConditions"] = list(binding_conditions)
    if binding_failure_conditions:
        out["bindingFailureConditions"] = list(binding_failure_conditions)
    if share_id is not None:
        out["shareID"] = share_id
    if consumed_capacity is not None:
        out["consumedCapacity"] = dict(consumed_capacity)
    return out


def shared_allocation_result(
    request_name: str,
    driver: str,
    pool: str,
    device_name: str,
    consumed_capacity: Mapping[str, str] | None = None,
) -> Wire:
    """A result on an ``allowMultipleAllocations`` device (shareID + consumed capacity)."""
    return device_allocation_result(
        request_name,
        driver,
        pool,
        device_name,
        share_id=SHARE_ID,
        consumed_capacity=consumed_capacity,
    )


def multiple_device_allocation_results(
    request_name: str, driver: str, pool: str, count: int, start_index: int = 0
) -> list[Wire]:
    """Results for ``device-<start>`` .. ``device-<start+count-1>``."""
    return [
        device_allocation_result(request_name, driver, pool, f"device-{i}")
        for i in range(start_index, start_index + count)
    ]


def allocation_config(source: str, requests: Sequence[str] | None, configuration: Wire) -> Wire:
    """A ``devices.config[]`` entry of a result; source ``FromClass`` or ``FromClaim``."""
    out: Wire = {"source": source}
    if requests:
        out["requests"] = list(requests)
    out.update(configuration)
    return out


def allocation_result(
    node_selector: Wire | None,
    *results: Wire,
    config: Sequence[Wire] = (),
) -> Wire:
    """A claim's ``status.allocation``; ``node_selector=None`` = usable on all nodes."""
    devices: Wire = {"results": [dict(r) for r in results]}
    if config:
        devices["config"] = [dict(c) for c in config]
    out: Wire = {"devices": devices}
    if node_selector is not None:
        out["nodeSelector"] = node_selector
    return out


# --- devices in use -------------------------------------------------------------------


def allocated_claim(name: str, *results: Wire, node_selector: Wire | None = None) -> Wire:
    """A ResourceClaim whose ``status.allocation`` holds ``results``."""
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": allocation_result(node_selector, *results)},
    }


def allocated_devices(*device_ids: tuple[str, str, str]) -> list[Wire]:
    """Claims holding dedicated allocations of ``(driver, pool, device)`` (one claim each).

    Mirrors upstream's ``allocatedDevices: []DeviceID{...}``.
    """
    return [
        allocated_claim(f"allocated-{i}", device_allocation_result("req-0", drv, pool, dev))
        for i, (drv, pool, dev) in enumerate(device_ids)
    ]


def allocated_capacity(
    *entries: tuple[tuple[str, str, str], Mapping[str, str]],
) -> list[Wire]:
    """Claims holding shared allocations with consumed capacity, one claim per device.

    Mirrors upstream's ``allocatedCapacityDevices: map[DeviceID]ConsumedCapacity``: the
    scheduler aggregates ``consumedCapacity`` of results that carry a ``shareID``.
    """
    return [
        allocated_claim(
            f"allocated-shared-{i}",
            device_allocation_result(
                "req-0",
                drv,
                pool,
                dev,
                share_id=f"00000000-0000-0000-0000-{i:012d}",
                consumed_capacity=consumed,
            ),
        )
        for i, ((drv, pool, dev), consumed) in enumerate(entries)
    ]


def all_of(groups: Iterable[list[Wire]]) -> list[Wire]:
    """Concatenate lists of wire dicts (e.g. several ``allocated_*`` groups)."""
    return [item for group in groups for item in group]

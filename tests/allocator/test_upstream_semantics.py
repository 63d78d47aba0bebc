"""Upstream allocator semantics, as one table: the oracle for ``dra_jupyter.allocator``.

Part 1 translates the shared test table of the upstream allocator,
``k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting``
(``allocator_testing.go`` and ``lexicographical_testing.go`` at v0.36.0), for the
**incubating** variant with the Kubernetes 1.36 default gates: AdminAccess,
PrioritizedList, PartitionableDevices, DeviceTaints, DeviceBindingAndStatus and
ConsumableCapacity on, ListTypeAttributes off. Case names are upstream's.

The expectations are exactly what upstream's incubating allocator returns for these
inputs with those gates, in upstream's order (pick order for ``devices.results``,
``FromClass`` configs before ``FromClaim`` configs, node-selector requirements in the
order they were added). Upstream's own matchers ignore the order of results and of
node-selector terms; this table is stricter on purpose, because our allocator must
reproduce upstream's first-fit choice, not just an equivalent one. shareIDs are
random upstream: every shareID is replaced by :data:`SHARE_ID` before comparing (and
checked to be unique), like upstream does with its ``fixedShareID``.

Mapping of upstream fields: ``tc.node`` (default ``node(node1, region1)``) is passed
as ``nodes=[node]`` and ``node=<its name>``; ``allocatedDevices`` become claims with
dedicated results, ``allocatedCapacityDevices`` claims with shared results (shareID +
consumedCapacity), which is how kube-scheduler derives the allocator's state from
``status.allocation`` (results with ``adminAccess: true`` do not count as in use).
An upstream error that wraps ``ErrFailedAllocationOnNode`` ("invalid resource pools
were encountered") is not fatal: allocation on another node may proceed, so here it
is ``expect=None`` (no allocation on this node). Every other upstream error is fatal
and must raise :class:`InvalidInputError` with a message matching ``error``.
``expectNumAllocateOneInvocations`` (search statistics) has no counterpart here.

Upstream cases left out (32):

* require a gate to be off, their outcome differs with the 1.36 defaults (11):
  ``admin-access-disabled``, ``binding-conditions-without-feature-gate``,
  ``consumable-capacity-disabled-feature``,
  ``consumable-capacity-disabled-feature-with-prioritized-list``,
  ``partitionable-devices-disabled-other-device-do-not-consume-counters``,
  ``partitionable-devices-disabled-per-device-node-selection``,
  ``prioritized-list-disabled``, ``tainted-admin-access-disabled``,
  ``tainted-all-devices-single-disabled``, ``tainted-disabled``,
  ``tainted-prioritized-list-disabled``;
* require ListTypeAttributes, i.e. the experimental variant (21): every
  ``list-attributes-match-constaint-*`` (11) and ``list-attributes-distinct-constraint-*``
  / ``list-attributes-distinct-constaint-*`` (10) case.

Kept although upstream runs them with a gate off, because the outcome is the same
with the 1.37 defaults (checked against upstream): ``partitionable-devices-disabled-
device-consumes-counters``, ``list-attributes-disabled-match-constraint-with-lists``,
``list-attributes-disabled-distinct-constraint-with-lists`` (ListTypeAttributes is off
in 1.37 anyway: the lists are read, and match nothing; no allocation).

Part 2 (``nvidia-*``, ``example-driver-*``) runs the published demo claims of the
NVIDIA GPU driver and of dra-example-driver against ResourceSlices shaped as those
drivers publish them (see ``/work/shared/reference/dra-drivers.md`` §1, §2); their
expectations follow upstream's rules: pools by (driver, pool name), slices by name,
devices in slice order, requests in spec order, the first complete solution wins.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import InvalidInputError

from .builders import (
    ALL_NODES,
    PER_DEVICE,
    SHARE_ID,
    Wire,
    all_device_request,
    allocated_capacity,
    allocated_claim,
    allocated_devices,
    allocation_config,
    allocation_result,
    capacity_with_range,
    capacity_with_valid_values,
    claim,
    claim_with_device_config,
    claim_with_request,
    class_with_allow_multiple_allocations,
    class_with_config,
    counter_set,
    device,
    device_allocation_result,
    device_claim_config,
    device_class,
    device_configuration,
    device_counter_consumption,
    distinct_attribute,
    local_node_selector,
    match_attribute,
    multiple_device_allocation_results,
    node,
    node_label_selector,
    opaque,
    request,
    request_with_prioritized_list,
    resource_pool,
    shared_allocation_result,
    slice_with_counter_sets,
    slice_with_devices,
    slice_with_multiple_devices,
    slice_with_one_device,
    sub_request,
    taint,
    toleration,
    version,
)


@dataclass(frozen=True)
class Case:
    """One allocation: inputs, and the expected outcome on ``node``.

    ``expect`` is the list of ``status.allocation`` dicts, one per claim, or ``None``
    when no allocation exists on the node; ``error`` is a regex that the message of
    the :class:`InvalidInputError` must match (then ``expect`` is ignored).
    """

    claims: list[Wire]
    classes: list[Wire] = field(default_factory=list)
    slices: list[Wire] = field(default_factory=list)
    allocated: list[Wire] = field(default_factory=list)
    node: Wire = field(default_factory=lambda: node("node-1", "region-1"))
    expect: list[Wire] | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "slices", _unique_names(self.slices))  # frozen


def _unique_names(slices: list[Wire]) -> list[Wire]:
    """Upstream's table reuses slice names (``slice-1`` in two pools, or in two generations
    of one), which kube-apiserver cannot hold and the allocator refuses: the second ``s``
    becomes ``s-2``, which sorts right after ``s`` and before any other name (``-`` sorts
    before the digits and letters), so the order within a pool stays upstream's."""
    seen: dict[str, int] = {}
    out = []
    for given in slices:
        name = given["metadata"]["name"]
        seen[name] = seen.get(name, 0) + 1
        renamed = given
        if seen[name] > 1:
            renamed = {**given, "metadata": {**given["metadata"], "name": f"{name}-{seen[name]}"}}
        out.append(renamed)
    return out


# Taints and tolerations, named as in upstream's TestAllocator.
TAINT_NONE = taint("taint-key", "taint-value", "None")
TAINT_NO_SCHEDULE = taint("taint-key", "taint-value", "NoSchedule")
TAINT_NO_EXECUTE = taint("taint-key", "taint-value-2", "NoExecute")
TOLERATION_NO_SCHEDULE = toleration("taint-key", operator="Exists", effect="NoSchedule")
TOLERATION_NO_EXECUTE = toleration(
    "taint-key", operator="Equal", value="taint-value-2", effect="NoExecute"
)
TOLERATION_NO_SCHEDULE_KEY1 = toleration("key1", operator="Exists", effect="NoSchedule")

CEL_UNDECLARED = r"(?i)(undeclared reference|undefined variable).*noSuchVar"

UPSTREAM_CASES: dict[str, Case] = {
    "empty": Case(
        claims=[],
        expect=[],
    ),
    "simple": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "other-node": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
            slice_with_one_device("slice-2", "node-2", "pool-2", "driver-a"),
        ],
        node=node("node-2", "region-2"),
        expect=[
            allocation_result(
                local_node_selector("node-2"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    "small-and-large": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                    ],
                ),
                request(
                    "req-1",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                    ],
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"memory": "1Gi"}),
                device("device-2", capacity={"memory": "2Gi"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    # upstream: Reversing the order in which the devices are listed causes the "large" device to be
    # allocated for the "small" request, leaving the "large" request unsatisfied. The initial
    # decision needs to be undone before a solution is found.
    "small-and-large-backtrack-requests": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                    ],
                ),
                request(
                    "req-1",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                    ],
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-2", capacity={"memory": "2Gi"}),
                device("device-1", capacity={"memory": "1Gi"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    # upstream: Reversing the order in which the devices are listed causes the "large" device to be
    # allocated for the "small" request, leaving the "large" request unsatisfied. The initial
    # decision needs to be undone before a solution is found.
    "small-and-large-backtrack-claims": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                    ],
                ),
            ),
            claim(
                "claim-1",
                request(
                    "req-1",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                    ],
                ),
            ),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-2", capacity={"memory": "2Gi"}),
                device("device-1", capacity={"memory": "1Gi"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
            ),
        ],
    ),
    "devices-split-across-different-slices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-2", "node-1", "pool-2", "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    # upstream: This makes the other slice obsolete.
    "obsolete-slice": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device(
                "slice-1-obsolete", "node-1", resource_pool("pool-1", 2), "driver-a"
            ),
            slice_with_devices(
                "slice-1-obsolete",
                "node-1",
                resource_pool("pool-1", 2, 2),
                "driver-a",
                device("device-2"),
            ),
        ],
        expect=None,
    ),
    # upstream: This simulates the problem that can (theoretically) occur when the resource slice
    # controller wants to publish a pool with two slices but ends up creating some identical slices
    # under different names because its informer cache was out-dated on another sync (see
    # resourceslicecontroller.go).
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "duplicate-slice": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_one_device("slice-1-2", "node-1", resource_pool("pool-1", 2), "driver-a"),
        ],
        expect=None,
    ),
    "no-slices": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        expect=None,
    ),
    "not-enough-suitable-devices": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-0", "req-1", "class-a"),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=None,
    ),
    "no-classes": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"device class .class-a. does not exist",
    ),
    "unknown-class": Case(
        claims=[claim_with_request("claim-0", "req-0", "unknown-class")],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"device class .unknown-class. does not exist",
    ),
    "empty-class": Case(
        claims=[claim_with_request("claim-0", "req-0", "")],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"claim-0.*requests\[0\].*deviceClassName: is required",
    ),
    "no-claims-to-allocate": Case(
        claims=[],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[],
    ),
    "all-devices-single": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "all-devices-many": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-1", "node-1", "pool-2", "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    # upstream: This makes the pool incomplete, one other slice is missing.
    "all-devices-of-the-incomplete-pool": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, allocation_mode="All"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a")],
        error=r"claim-0.*req-0.*asks for all devices.*driver-a/pool-1 is currently being updated",
    ),
    "all-devices-plus-another": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a")),
            claim_with_request("claim-1", "req-0", "class-b"),
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-b", "pool-1", "device-1"),
            ),
        ],
    ),
    "all-devices-plus-another-reversed": Case(
        claims=[
            claim_with_request("claim-1", "req-0", "class-b"),
            claim("claim-0", all_device_request("req-0", "class-a")),
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-b", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
        ],
    ),
    "all-devices-many-plus-another": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a")),
            claim_with_request("claim-1", "req-0", "class-b"),
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            ),
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-b", "pool-1", "device-1"),
            ),
        ],
    ),
    "all-devices-many-plus-another-reversed": Case(
        claims=[
            claim_with_request("claim-1", "req-0", "class-b"),
            claim("claim-0", all_device_request("req-0", "class-a")),
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            ),
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-b", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
            ),
        ],
    ),
    # upstream: One device, two claims both trying to allocate it.
    "all-devices-no-solution": Case(
        claims=[
            claim_with_request("claim-1", "req-0", "class-a"),
            claim("claim-0", all_device_request("req-0", "class-a")),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=None,
    ),
    # upstream: One device, two claims both trying to allocate it.
    "all-devices-no-solution-reversed": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a")),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=None,
    ),
    "all-devices-slice-without-devices": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_devices("slice-1", "node-1", "pool-1", "driver-a")],
        expect=None,
    ),
    "all-devices-no-slices": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        expect=None,
    ),
    "all-devices-some-allocated": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=None,
    ),
    "all-devices-some-allocated-admin-access": Case(
        claims=[
            claim(
                "claim-0", request("req-0", "class-a", 1, admin_access=True, allocation_mode="All")
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2", True),
            )
        ],
    ),
    # upstream: Second request for `All` cannot be fulfilled because the first request claims a
    # device.
    "all-devices-some-allocating-admin-access": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, admin_access=True),
                request("req-1", "class-a", 1, admin_access=True, allocation_mode="All"),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        expect=None,
    ),
    "count-devices-some-allocated-admin-access": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2, admin_access=True))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2", True),
            )
        ],
    ),
    "separate-claims-share-device-admin-access": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, admin_access=True)),
            claim("claim-1", request("req-0", "class-a", 1, admin_access=True)),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
            ),
        ],
    ),
    "admin-access-claims-device-allocating-for-non-admin-access": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim("claim-1", request("req-0", "class-a", 1, admin_access=True)),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
            ),
        ],
    ),
    "all-devices-slice-without-devices-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-b", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-2", "node-1", "pool-2", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-2", "device-1"),
            )
        ],
    ),
    "all-devices-no-slices-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-b", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[slice_with_one_device("slice-2", "node-1", "pool-2", "driver-b")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-2", "device-1"),
            )
        ],
    ),
    "all-devices-some-allocated-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-b", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            ),
            slice_with_one_device("slice-2", "node-1", "pool-2", "driver-b"),
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-2", "device-1"),
            )
        ],
    ),
    "network-attached-device": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device(
                "slice-1", node_label_selector("region", "region-1"), "pool-1", "driver-a"
            )
        ],
        expect=[
            allocation_result(
                node_label_selector("region", "region-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: Wrong region, no devices available.
    "unsuccessful-allocation-network-attached-device": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device(
                "slice-1", node_label_selector("region", "region-1"), "pool-1", "driver-a"
            )
        ],
        node=node("node-2", "region-2"),
        expect=None,
    ),
    # upstream: A union of the individual selectors.
    "many-network-attached-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 4))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device(
                "slice-1", node_label_selector("region", "region-1"), "pool-1", "driver-a"
            ),
            slice_with_one_device("slice-1", ALL_NODES, "pool-2", "driver-a"),
            slice_with_one_device(
                "slice-1", node_label_selector("planet", "earth"), "pool-3", "driver-a"
            ),
            slice_with_one_device("slice-1", local_node_selector("node-1"), "pool-4", "driver-a"),
        ],
        expect=[
            allocation_result(
                {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-1"]},
                                {"key": "planet", "operator": "In", "values": ["earth"]},
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ],
                        }
                    ]
                },
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-3", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-4", "device-1"),
            )
        ],
    ),
    # upstream: Once there is any node-local device, the selector is for that node.
    "local-and-network-attached-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device(
                "slice-1", node_label_selector("region", "region-1"), "pool-1", "driver-a"
            ),
            slice_with_one_device("slice-1", "node-1", "pool-2", "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    "several-different-drivers": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-0", "req-0", "class-b"),
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            ),
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-b", "pool-1", "device-1"),
            ),
        ],
    ),
    "already-allocated-devices": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        allocated=allocated_devices(
            ("driver-a", "pool-1", "device-1"), ("driver-a", "pool-1", "device-2")
        ),
        expect=None,
    ),
    "admin-access-enabled": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, admin_access=True))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        allocated=allocated_devices(
            ("driver-a", "pool-1", "device-1"), ("driver-a", "pool-1", "device-2")
        ),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1", True),
            )
        ],
    ),
    "with-constraint": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request("req-1", "class-a", 1),
                constraints=[
                    match_attribute("driver-a/numa"),
                    match_attribute("driver-a/driverVersion"),
                    match_attribute("driver-a/stringAttribute"),
                    match_attribute("driver-a/boolAttribute"),
                ],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={
                        "boolAttribute": True,
                        "driverVersion": version("1.0.0"),
                        "numa": 1,
                        "stringAttribute": "stringAttributeValue",
                    },
                ),
                device(
                    "device-2",
                    attributes={
                        "boolAttribute": True,
                        "driverVersion": version("1.0.0"),
                        "numa": 1,
                        "stringAttribute": "stringAttributeValue",
                    },
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "with-constraint-non-existent-attribute": Case(
        claims=[
            claim_with_request(
                "claim-0", "req-0", "class-a", match_attribute("driver-a/NonExistentAttribute")
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=None,
    ),
    "with-constraint-not-matching-int-attribute": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[match_attribute("driver-a/numa")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"numa": 1}),
                device("device-2", attributes={"numa": 2}),
            )
        ],
        expect=None,
    ),
    "with-constraint-not-matching-int-attribute-all-devices": Case(
        claims=[
            claim(
                "claim-0",
                all_device_request("req-0", "class-a"),
                constraints=[match_attribute("driver-a/numa")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"numa": 1}),
                device("device-2", attributes={"numa": 2}),
            )
        ],
        error=r"claim-0.*req-0.*cannot add device driver-a/pool-1/device-2.*claim constraint",
    ),
    "with-constraint-not-matching-string-attribute": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[match_attribute("driver-a/stringAttribute")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"stringAttribute": "stringAttributeValue"}),
                device("device-2", attributes={"stringAttribute": "stringAttributeValue2"}),
            )
        ],
        expect=None,
    ),
    "with-constraint-not-matching-bool-attribute": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[match_attribute("driver-a/boolAttribute")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"boolAttribute": True}),
                device("device-2", attributes={"boolAttribute": False}),
            )
        ],
        expect=None,
    ),
    "with-constraint-not-matching-version-attribute": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[match_attribute("driver-a/driverVersion")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"driverVersion": version("1.0.0")}),
                device("device-2", attributes={"driverVersion": version("2.0.0")}),
            )
        ],
        expect=None,
    ),
    "with-constraint-for-request": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request("req-1", "class-a", 1),
                constraints=[match_attribute("driver-a/driverVersion", "req-0")],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"driverVersion": version("1.0.0")}),
                device("device-2", attributes={"driverVersion": version("2.0.0")}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    # upstream: This device does not satisfy the second match attribute, so the allocator must
    # backtrack.
    "with-constraint-for-request-retry": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request("req-1", "class-a", 1),
                constraints=[
                    match_attribute("driver-a/driverVersion", "req-0"),
                    match_attribute("driver-a/stringAttribute"),
                ],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"driverVersion": version("1.0.0"), "stringAttribute": "a"},
                ),
                device(
                    "device-2",
                    attributes={"driverVersion": version("2.0.0"), "stringAttribute": "b"},
                ),
                device(
                    "device-3",
                    attributes={"driverVersion": version("3.0.0"), "stringAttribute": "b"},
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "with-class-device-config": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[class_with_config("class-a", "driver-a", "classAttribute")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                config=[
                    allocation_config(
                        "FromClass", None, device_configuration("driver-a", "classAttribute")
                    )
                ],
            )
        ],
    ),
    "with-class-device-config-with-multiple-request-and-configs": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request("req-1", "class-a", 1),
                request("req-2", "class-b", 1),
            )
        ],
        classes=[
            class_with_config("class-a", "driver-a", "classAttribute-A"),
            class_with_config("class-b", "driver-b", "classAttribute-B"),
        ],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-0"), device("device-1")
            ),
            slice_with_one_device("slice-2", "node-1", "pool-1", "driver-b"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-0"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-2", "driver-b", "pool-1", "device-1"),
                config=[
                    allocation_config(
                        "FromClass",
                        ["req-0", "req-1"],
                        device_configuration("driver-a", "classAttribute-A"),
                    ),
                    allocation_config(
                        "FromClass", ["req-2"], device_configuration("driver-b", "classAttribute-B")
                    ),
                ],
            )
        ],
    ),
    "claim-with-device-config": Case(
        claims=[
            claim_with_device_config("claim-0", "req-0", "class-a", "driver-a", "deviceAttribute")
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                config=[
                    allocation_config(
                        "FromClaim", None, device_configuration("driver-a", "deviceAttribute")
                    )
                ],
            )
        ],
    ),
    "unknown-selector": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, selectors=[{}]))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"selectors\[0\]\.cel: is required",
    ),
    "unknown-allocation-mode": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, allocation_mode="future-mode"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"allocationMode: .future-mode. is not ExactCount or All",
    ),
    "unknown-constraint": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a", {})],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=r"constraints\[0\]: must set exactly one of matchAttribute and distinctAttribute",
    ),
    "invalid-CEL-one-device": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, selectors=["noSuchVar"]))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=CEL_UNDECLARED,
    ),
    "invalid-CEL-one-device-class": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", selectors=["noSuchVar"])],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=CEL_UNDECLARED,
    ),
    "invalid-CEL-all-devices": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, selectors=["noSuchVar"], allocation_mode="All"),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        error=CEL_UNDECLARED,
    ),
    "too-many-devices-single-request": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 500))],
        classes=[device_class("class-a", "driver-a")],
        error=r"exceeds the claim limit",
    ),
    "many-devices-okay": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 32))],
        classes=[device_class("class-a", "driver-a")],
        expect=None,
    ),
    "too-many-devices-total": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 32), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_multiple_devices("slice-1", "node-1", "pool-1", "driver-a", 33)],
        error=r"exceeds the claim limit",
    ),
    "all-devices-invalid-CEL": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 500))],
        classes=[device_class("class-a", "driver-a")],
        error=r"exceeds the claim limit",
    ),
    "prioritized-list-first-unavailable": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-b", 1),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "prioritized-list-non-available": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-b", 2),
                    sub_request("subreq-1", "class-a", 2),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_one_device("slice-2", "node-1", "pool-2", "driver-b"),
        ],
        expect=None,
    ),
    "prioritized-list-device-config": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", 1),
                    sub_request("subreq-1", "class-b", 2),
                ),
                config=[
                    device_claim_config(
                        ["req-0/subreq-0"], device_configuration("driver-a", "foo")
                    ),
                    device_claim_config(
                        ["req-0/subreq-1"], device_configuration("driver-b", "bar")
                    ),
                ],
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-b", device("device-1"), device("device-2")
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-1", "device-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-1", "device-2"),
                config=[
                    allocation_config("FromClaim", None, device_configuration("driver-b", "bar"))
                ],
            )
        ],
    ),
    "prioritized-list-class-config": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", 2),
                    sub_request("subreq-1", "class-b", 2),
                ),
            )
        ],
        classes=[
            class_with_config("class-a", "driver-a", "foo"),
            class_with_config("class-b", "driver-b", "bar"),
        ],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-b", device("device-1"), device("device-2")
            ),
            slice_with_devices("slice-2", "node-1", "pool-2", "driver-a", device("device-3")),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-1", "device-1"),
                device_allocation_result("req-0/subreq-1", "driver-b", "pool-1", "device-2"),
                config=[
                    allocation_config("FromClass", None, device_configuration("driver-b", "bar"))
                ],
            )
        ],
    ),
    "prioritized-list-subrequests-with-expressions": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                    ],
                ),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        2,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"memory": "2Gi"}),
                device("device-2", capacity={"memory": "2Gi"}),
                device("device-3", capacity={"memory": "1Gi"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-3"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "prioritized-list-subrequests-with-constraints-ref-parent-request": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                    ],
                ),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                        ],
                    ),
                ),
                constraints=[match_attribute("driver-a/driverVersion", "req-0", "req-1")],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"driverVersion": version("1.0.0")},
                    capacity={"memory": "8Gi"},
                ),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                device(
                    "device-2",
                    attributes={"driverVersion": version("2.0.0")},
                    capacity={"memory": "2Gi"},
                ),
                device(
                    "device-3",
                    attributes={"driverVersion": version("1.0.0")},
                    capacity={"memory": "1Gi"},
                ),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-2", "device-3"),
            )
        ],
    ),
    "prioritized-list-subrequests-with-constraints-ref-sub-request": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                    ],
                ),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
                        ],
                    ),
                ),
                constraints=[match_attribute("driver-a/driverVersion", "req-0", "req-1/subreq-0")],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"driverVersion": version("1.0.0")},
                    capacity={"memory": "8Gi"},
                ),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                device(
                    "device-2",
                    attributes={"driverVersion": version("2.0.0")},
                    capacity={"memory": "2Gi"},
                ),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-2", "device-2"),
            )
        ],
    ),
    "prioritized-list-subrequests-with-allocation-mode-all": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "prioritized-list-allocation-mode-all-multiple-requests": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request_with_prioritized_list(
                    "req-1",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "prioritized-list-multi-request": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-1",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                    ],
                ),
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"memory": "8Gi"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                device("device-2", capacity={"memory": "4Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-2", "device-2"),
            )
        ],
    ),
    "prioritized-list-with-backtracking": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
                request(
                    "req-1",
                    "class-a",
                    1,
                    selectors=[
                        'device.capacity["driver-a"].memory.compareTo(quantity("8Gi")) >= 0'
                    ],
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"memory": "8Gi"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                device("device-2", capacity={"memory": "4Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-2", "device-2"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "prioritized-list-too-many-in-first-subrequest": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-b", 500),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a")],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "partitionable-devices-single-device": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "partitionable-devices-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("6Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "partitionable-devices-multiple-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "partitionable-devices-multiple-capacity-pools": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("6Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"cpus": "4", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "4"}),
                    ],
                ),
                device(
                    "device-2",
                    capacity={"cpus": "6", "memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "6"}),
                    ],
                ),
                device(
                    "device-3",
                    capacity={"cpus": "4", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "4"}),
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
                counter_set("counter-set-2", {"cpus": "8"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "partitionable-devices-multiple-counters": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"cpus": "4", "memory": "2Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "6", "memory": "4Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "4", "memory": "2Gi"}),
                    ],
                ),
                device(
                    "device-2",
                    capacity={"cpus": "6", "memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "4", "memory": "6Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "6", "memory": "6Gi"}),
                    ],
                ),
                device(
                    "device-3",
                    capacity={"cpus": "4", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "4", "memory": "4Gi"}),
                        device_counter_consumption("counter-set-2", {"cpus": "4", "memory": "4Gi"}),
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"cpus": "8", "memory": "18Gi"}),
                counter_set("counter-set-2", {"cpus": "12", "memory": "18Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "partitionable-devices-multiple-pools": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"cpus": "6", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "6", "memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"cpus": "4", "memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "4", "memory": "6Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"cpus": "4", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "4", "memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"cpus": "8", "memory": "18Gi"}),
            ),
            slice_with_devices(
                "slice-3",
                "node-1",
                resource_pool("pool-2", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"cpus": "6", "memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "6", "memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"cpus": "1", "memory": "7Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "1", "memory": "7Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"cpus": "1", "memory": "7Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpus": "1", "memory": "7Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-4",
                "node-1",
                resource_pool("pool-2", 2),
                "driver-a",
                counter_set("counter-set-1", {"cpus": "8", "memory": "18Gi"}),
            ),
        ],
        allocated=allocated_devices(
            ("driver-a", "pool-1", "device-2"),
            ("driver-a", "pool-1", "device-3"),
            ("driver-a", "pool-2", "device-1"),
        ),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-2"),
                device_allocation_result("req-1", "driver-a", "pool-2", "device-3"),
            )
        ],
    ),
    "partitionable-devices-unused-counters-in-counter-set": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "5Gi"})
                    ],
                ),
                device(
                    "device-2",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-3",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi", "unused": "1Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "partitionable-devices-no-capacity-available": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "16Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "16Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                "pool-1",
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-2")),
        expect=None,
    ),
    "partitionable-devices-overallocated-capacity-pool": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "20Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "20Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                "pool-1",
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-2")),
        expect=None,
    ),
    # upstream runs this with its gate off; the outcome is the same with the 1.36 defaults
    "partitionable-devices-disabled-device-consumes-counters": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                "pool-1",
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
        ],
        expect=None,
    ),
    "partitionable-devices-per-device-node-selection-nodename": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("6Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    node_name="node-1",
                ),
                device(
                    "device-2",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                    node_name="node-2",
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "partitionable-devices-per-device-node-selection-node-selector": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    node_selector=node_label_selector("region", "region-1"),
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                node_label_selector("region", "region-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "partitionable-devices-per-device-node-selection-node-selector-multiple-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 3), request("req-1", "class-b", 3))],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    node_selector=node_label_selector("region", "region-1"),
                ),
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    node_name="node-1",
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    all_nodes=True,
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                PER_DEVICE,
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "18Gi"}),
            ),
            slice_with_devices(
                "slice-3",
                "node-1",
                resource_pool("pool-2", 2),
                "driver-b",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-2", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-2", {"memory": "4Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-2", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-4",
                "node-1",
                resource_pool("pool-2", 2),
                "driver-b",
                counter_set("counter-set-2", {"memory": "12Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-3"),
                device_allocation_result("req-1", "driver-b", "pool-2", "device-1"),
                device_allocation_result("req-1", "driver-b", "pool-2", "device-2"),
                device_allocation_result("req-1", "driver-b", "pool-2", "device-3"),
            )
        ],
    ),
    "tainted-two-devices": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
                device("device-2", taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=None,
    ),
    "tainted-one-device-two-taints": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE]),
            )
        ],
        expect=None,
    ),
    "tainted-two-devices-tolerated": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, tolerations=[TOLERATION_NO_EXECUTE]))
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
                device("device-2", taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-2", tolerations=[TOLERATION_NO_EXECUTE]
                ),
            )
        ],
    ),
    "tainted-two-devices-prioritized-list-tolerated": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", 1),
                    sub_request("subreq-1", "class-a", 1, tolerations=[TOLERATION_NO_EXECUTE]),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
                device("device-2", taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0/subreq-1",
                    "driver-a",
                    "pool-1",
                    "device-2",
                    tolerations=[TOLERATION_NO_EXECUTE],
                ),
            )
        ],
    ),
    "tainted-no-effect": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1", taints=[TAINT_NONE])
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "tainted-one-device-two-taints-both-tolerated": Case(
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    "class-a",
                    1,
                    tolerations=[TOLERATION_NO_SCHEDULE, TOLERATION_NO_EXECUTE],
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE]),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    tolerations=[TOLERATION_NO_SCHEDULE, TOLERATION_NO_EXECUTE],
                ),
            )
        ],
    ),
    "tainted-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-b", 1),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
            )
        ],
        expect=None,
    ),
    "tainted-admin-access": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, admin_access=True))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
            )
        ],
        allocated=allocated_devices(
            ("driver-a", "pool-1", "device-1"), ("driver-a", "pool-1", "device-2")
        ),
        expect=None,
    ),
    "tainted-all-devices-single": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", taints=[TAINT_NO_SCHEDULE]),
            )
        ],
        expect=None,
    ),
    "prioritized-list-allocation-mode-all": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-a", 1),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1", "node-1", "pool-1", "driver-a", device("device-1"), device("device-2")
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-2")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: When using allocationMode:All, at least one device must be allocated, otherwise DRA
    # will attempt the next subRequest.
    "prioritized-list-allocation-mode-all-with-selectors": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v6"'],
                        allocation_mode="All",
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v5"'],
                        allocation_mode="All",
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"generation": "v5"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: All devices selected by the DeviceClass will be allocated, even if they are spread
    # across different resource pools.
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v6"'],
                        allocation_mode="All",
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v5"'],
                        allocation_mode="All",
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"generation": "v5"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                device("device-1", attributes={"generation": "v5"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    # upstream: All devices selected by the DeviceClass will be allocated, even if they are spread
    # across different resource pools, as long as they are available on the node.
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v6"'],
                        allocation_mode="All",
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v5"'],
                        allocation_mode="All",
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"generation": "v5"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-2",
                "pool-2",
                "driver-a",
                device("device-1", attributes={"generation": "v5"}),
                device("device-2", attributes={"generation": "v6"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: Only devices selected by the deviceclass will be considered
    "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v6"'],
                        allocation_mode="All",
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        None,
                        selectors=['device.attributes["driver-a"].generation == "v5"'],
                        allocation_mode="All",
                    ),
                ),
            )
        ],
        classes=[
            device_class(
                "class-a",
                selectors=['device.driver == "driver-a" && device.attributes["driver-a"].selected'],
            )
        ],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"generation": "v6", "selected": False}),
                device("device-2", attributes={"generation": "v5", "selected": False}),
                device("device-3", attributes={"generation": "v5", "selected": True}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-3"),
            )
        ],
    ),
    "max-number-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 32))],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_multiple_devices("slice-1", "node-1", "pool-1", "driver-a", 32)],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                *multiple_device_allocation_results("req-0", "driver-a", "pool-1", 32, 0),
            )
        ],
    ),
    "partitionable-devices-with-attribute-selector": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                request("req-1", "class-a", 1, selectors=['device.attributes["driver-a"].special']),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    attributes={"special": True},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpu1": "1"}),
                        device_counter_consumption("counter-set-2", {"mem": "10Gi"}),
                    ],
                ),
                device(
                    "device-2",
                    attributes={"special": False},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpu2": "1"}),
                        device_counter_consumption("counter-set-2", {"mem": "10Gi"}),
                    ],
                ),
                device(
                    "device-3",
                    attributes={"special": False},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"cpu3": "1"}),
                        device_counter_consumption("counter-set-2", {"mem": "10Gi"}),
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"cpu1": "1", "cpu2": "1", "cpu3": "1"}),
                counter_set("counter-set-2", {"mem": "30Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-3"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "prioritized-list-max-allocation-limit-request": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", 32),
                    sub_request("subreq-1", "class-a", 16),
                ),
                request_with_prioritized_list(
                    "req-1",
                    sub_request("subreq-0", "class-a", 32),
                    sub_request("subreq-1", "class-a", 16),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_multiple_devices("slice-1", "node-1", "pool-1", "driver-a", 64)],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                *multiple_device_allocation_results("req-0/subreq-1", "driver-a", "pool-1", 16, 0),
                *multiple_device_allocation_results("req-1/subreq-1", "driver-a", "pool-1", 16, 16),
            )
        ],
    ),
    "prioritized-list-max-allocation-allocation-mode-all": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", None, allocation_mode="All"),
                    sub_request("subreq-1", "class-a", 2),
                ),
                request("req-1", "class-b", 2),
            )
        ],
        classes=[device_class("class-a", "driver-a"), device_class("class-b", "driver-b")],
        slices=[
            slice_with_multiple_devices("slice-1", "node-1", "pool-1", "driver-a", 31),
            slice_with_devices(
                "slice-2", "node-1", "pool-2", "driver-b", device("device-0"), device("device-1")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-0"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-1", "driver-b", "pool-2", "device-0"),
                device_allocation_result("req-1", "driver-b", "pool-2", "device-1"),
            )
        ],
    ),
    "device-binding-conditions": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
    ),
    "binding-conditions-multiple-devices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device(
                    "device-2",
                    binding_conditions=["IsPrepare2"],
                    binding_failure_conditions=["BindingFailed2"],
                ),
                device(
                    "device-3",
                    binding_conditions=["IsPrepare3"],
                    binding_failure_conditions=["BindingFailed3"],
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-2",
                    binding_conditions=["IsPrepare2"],
                    binding_failure_conditions=["BindingFailed2"],
                ),
                device_allocation_result(
                    "req-1",
                    "driver-a",
                    "pool-1",
                    "device-3",
                    binding_conditions=["IsPrepare3"],
                    binding_failure_conditions=["BindingFailed3"],
                ),
            )
        ],
    ),
    "binding-conditions-with-and-without": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1), request("req-1", "class-a", 1))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1"),
                device(
                    "device-2",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result(
                    "req-1",
                    "driver-a",
                    "pool-1",
                    "device-2",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
    ),
    "node-restriction": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                node_label_selector("planet", "earth"),
                "pool-1",
                "driver-a",
                device("device-1", binds_to_node=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "partitionable-devices-with-binding-conditions": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
    ),
    "partitionable-devices-with-binding-conditions-multiple": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    binding_conditions=["IsPrepare2"],
                    binding_failure_conditions=["BindingFailed2"],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-2",
                    binding_conditions=["IsPrepare2"],
                    binding_failure_conditions=["BindingFailed2"],
                ),
            )
        ],
    ),
    "partitionable-devices-with-binding-conditions-some-devices-no-conditions": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 3))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "2Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "2Gi"})
                    ],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device(
                    "device-2",
                    capacity={"memory": "2Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "2Gi"})
                    ],
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    binding_conditions=["IsReady"],
                    binding_failure_conditions=["BindingTimeout"],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-3",
                    binding_conditions=["IsReady"],
                    binding_failure_conditions=["BindingTimeout"],
                ),
            )
        ],
    ),
    "partitionable-devices-with-binding-conditions-multi-slices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-4",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            ),
            slice_with_counter_sets(
                "slice-3",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-2", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                counter_set("counter-set-2", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            )
        ],
    ),
    "partitionable-devices-with-binding-conditions-and-taints": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    taints=[taint("key1", "value1", "NoSchedule")],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                "pool-1",
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=None,
    ),
    "partitionable-devices-with-binding-conditions-and-taints-tolerated": Case(
        claims=[
            claim(
                "claim-0", request("req-0", "class-a", 2, tolerations=[TOLERATION_NO_SCHEDULE_KEY1])
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    taints=[taint("key1", "value1", "NoSchedule")],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device(
                    "device-2",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    tolerations=[TOLERATION_NO_SCHEDULE_KEY1],
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-2",
                    tolerations=[TOLERATION_NO_SCHEDULE_KEY1],
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-missing-capacity-request": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-1": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request": Case(  # noqa: E501
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a", capacity={"capacity-0": "1"}))
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-1": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-2", {"capacity-0": "1"}
                ),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block": Case(  # noqa: E501
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
            claim("claim-1", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-zero-request-policy": Case(
        claims=[
            claim_with_request("claim-0", "req-0", "class-a"),
            claim_with_request("claim-1", "req-0", "class-a"),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_valid_values("1", "0")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "0"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "0"}
                ),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-violates-zero-request-policy": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_valid_values("1", "0")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=None,
    ),
    # upstream: capacity must be rounded up to default minimum (two)
    "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
            claim("claim-1", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            ),
        ],
    ),
    # upstream: capacity must be rounded up with Step (3 to 2+2 = 4)
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "3"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "4"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "2"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_valid_values("4", "1", "2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "2"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_valid_values("3", "1", "3")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "3"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
            claim("claim-1", request("req-0", "class-a", 1, capacity={"capacity-0": "2"})),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "6"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("10")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "2"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "2"})),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "2"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-2",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "2"})),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-2", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    # upstream: 2 requests with two per each
    "consumable-capacity-with-multi-allocatable-device-backtrack": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "2"}),
                request("req-1", "class-a", 1, capacity={"capacity-0": "2"}),
                constraints=[match_attribute("driver-a/stringAttribute")],
            ),
            claim("claim-1", request("req-0", "class-a", 1, capacity={"capacity-0": "2"})),
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-2",
                    attributes={"stringAttribute": "stringAttributeValue1"},
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-1",
                    attributes={"stringAttribute": "stringAttributeValue2"},
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
                shared_allocation_result(
                    "req-1", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            ),
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-2", {"capacity-0": "2"}
                ),
            ),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-subrequest": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request("subreq-0", "class-a", 1, capacity={"capacity-0": "4"}),
                    sub_request("subreq-1", "class-a", 1, capacity={"capacity-0": "2"}),
                    # upstream names this one subreq-1 too; the apiserver rejects duplicates
                    sub_request("subreq-2", "class-a", 1),
                ),
            )
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0/subreq-1", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "2"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "2"})),
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a", capacity={"capacity-0": "2"}))
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
                device("device-2", allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity": Case(  # noqa: E501
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a", capacity={"capacity-0": "2"}))
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "1"}),
                all_device_request("req-1", "class-a", capacity={"capacity-0": "1"}),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
                shared_allocation_result(
                    "req-1", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
                shared_allocation_result(
                    "req-1", "driver-a", "pool-1", "device-2", {"capacity-0": "1"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a", capacity={"capacity-0": "1"}))
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "2"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "1"})),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "1"}
                ),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-2", {"capacity-0": "1"}
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient": Case(  # noqa: E501
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "1"}),
                all_device_request("req-1", "class-a", capacity={"capacity-0": "1"}),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient": Case(
        claims=[
            claim("claim-0", all_device_request("req-0", "class-a", capacity={"capacity-0": "1"}))
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
                device("device-2", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "1"})),
        # 1.37 (v0.37.2's table): device-1's capacity is used up but it still matches, so
        # "All" fails instead of taking device-2 alone
        expect=None,
    ),
    "consumable-capacity-dedicated-device-with-consumable-capacity-request": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", False)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "1"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request": Case(
        claims=[
            claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
            claim("claim-1", request("req-0", "class-a", 1, capacity={"capacity-0": "1"})),
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", False)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": capacity_with_range("2")}),
            )
        ],
        expect=None,
    ),
    "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", False)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": "1"}, allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated": Case(  # noqa: E501
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-1")),
        expect=None,
    ),
    "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable": Case(  # noqa: E501
        claims=[claim("claim-0", request("req-0", "class-a", 1, capacity={"capacity-0": "1"}))],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", capacity={"capacity-0": capacity_with_range("2")}),
            )
        ],
        allocated=allocated_capacity((("driver-a", "pool-1", "device-1"), {"capacity-0": "1"})),
        expect=None,
    ),
    "allow-multiple-allocations-with-partitionable-device": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("6Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-2",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-3",
                    capacity={"memory": "4Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "4Gi"})
                    ],
                    allow_multiple_allocations=True,
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"memory": "4Gi"}
                ),
                shared_allocation_result(
                    "req-1/subreq-1", "driver-a", "pool-1", "device-3", {"memory": "4Gi"}
                ),
            )
        ],
    ),
    # upstream: This test case combines integration of PrioritizedList, PartitionableDevices, and
    # ConsumableCapacity features. There are two basic requests (req0 and req2), requesting 1 and 2
    # units of capacity0, respectively. In addition, there is one request (req1) with a prioritized
    # list. The prioritized request prefers devices with capacity0 >= 4 over those with capacity0 >=
    # 2. There three device option consuming counters from the PartitionableDevices's CounterSet.
    # All devices can be allocated multiple times with `allowMultipleAllocations=true`. CounterSet
    # (4, 8) device1, device2, and device3 consume (2,4), (4,4), and (2,4) for (capacity0,
    # capacity1) respectively. i.e., only two options are valid those are [device1, device3] or
    # [device2]. Capacity.RequestPolicy of ConsumableCapacity forces the capacity1 consuming with
    # range policy (min,step,max)=(2,2,4). Expected results: - [req0] The scheduler should be able
    # to allocate device1 to req0. 1 unit of capacity0 is consumed according to the requested
    # capacity, and 2 units of capacity1 are consumed according to the RequestPolicy. - [req2]
    # device1 does not have enough capacity0 remaining for req2, which requests 2 units (only 1 unit
    # remains). The scheduler must also skip device2 due to the CounterSet constraint. Therefore,
    # device3 is allocated to req2, providing 2 units of capacity0 and 2 units of capacity1. -
    # [req1] The first prioritized subrequest of req1 cannot find a device because device2 cannot be
    # selected. The second prioritized subrequest is then chosen and consumes the remaining 1 unit
    # of capacity0 on device1. Consequently, device1 is allocated to subreq1 of req1 with 1 unit of
    # capacity0 and 2 units of capacity1.
    "consumable-capacity-with-partitionable-device-multiple-capacity-pools": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "1"}),
                request("req-2", "class-a", 1, capacity={"capacity-0": "2"}),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"]["capacity-0"].compareTo(quantity("4")) >= 0'  # noqa: E501
                        ],
                        capacity={"capacity-0": "1"},
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"]["capacity-0"].compareTo(quantity("2")) >= 0'  # noqa: E501
                        ],
                        capacity={"capacity-0": "1"},
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    capacity={"capacity-0": "2", "capacity-1": capacity_with_range("4")},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"capacity-0": "2"}),
                        device_counter_consumption("counter-set-2", {"capacity-1": "4"}),
                    ],
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-2",
                    capacity={"capacity-0": "4", "capacity-1": capacity_with_range("4")},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"capacity-0": "4"}),
                        device_counter_consumption("counter-set-2", {"capacity-1": "4"}),
                    ],
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-3",
                    capacity={"capacity-0": "2", "capacity-1": capacity_with_range("4")},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"capacity-0": "2"}),
                        device_counter_consumption("counter-set-2", {"capacity-1": "4"}),
                    ],
                    allow_multiple_allocations=True,
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"capacity-0": "4"}),
                counter_set("counter-set-2", {"capacity-1": "8"}),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    {"capacity-0": "1", "capacity-1": "2"},
                ),
                shared_allocation_result(
                    "req-2",
                    "driver-a",
                    "pool-1",
                    "device-3",
                    {"capacity-0": "2", "capacity-1": "2"},
                ),
                shared_allocation_result(
                    "req-1/subreq-1",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    {"capacity-0": "1", "capacity-1": "2"},
                ),
            )
        ],
    ),
    "with-distinct-constraints": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1),
                request("req-1", "class-a", 1),
                request("req-2", "class-a", 1),
                request("req-3", "class-a", 1),
                constraints=[
                    distinct_attribute("driver-a/boolAttribute", "req-0", "req-1"),
                    distinct_attribute("driver-a/driverVersion", "req-0", "req-1", "req-2"),
                    distinct_attribute("driver-a/numa", "req-0", "req-1", "req-2", "req-3"),
                ],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={
                        "boolAttribute": True,
                        "driverVersion": version("1.0.0"),
                        "numa": 0,
                    },
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-2",
                    attributes={
                        "boolAttribute": False,
                        "driverVersion": version("1.0.1"),
                        "numa": 1,
                    },
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-3",
                    attributes={
                        "boolAttribute": True,
                        "driverVersion": version("1.0.2"),
                        "numa": 2,
                    },
                    allow_multiple_allocations=True,
                ),
                device(
                    "device-4",
                    attributes={
                        "boolAttribute": True,
                        "driverVersion": version("1.0.0"),
                        "numa": 3,
                    },
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                shared_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
                shared_allocation_result("req-2", "driver-a", "pool-1", "device-3"),
                shared_allocation_result("req-3", "driver-a", "pool-1", "device-4"),
            )
        ],
    ),
    "with-distinct-constraints-attribute-not-set": Case(
        claims=[
            claim_with_request(
                "claim-0", "req-0", "class-a", distinct_attribute("driver-a/boolAttribute", "req-0")
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", allow_multiple_allocations=True),
            )
        ],
        expect=None,
    ),
    "with-distinct-constraints-unknown-type-attribute": Case(
        claims=[
            claim_with_request(
                "claim-0", "req-0", "class-a", distinct_attribute("driver-a/boolAttribute", "req-0")
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1", attributes={"boolAttribute": {}}, allow_multiple_allocations=True
                ),
            )
        ],
        error=r"boolAttribute\]: must have exactly one of bool, int, string, version",
    ),
    # upstream: There are three requests, all preferring the boolAttribute. However, the
    # DeviceConstraint applies only to the first two requests. Because the constraint applies only
    # to req0 and req1, subreq0 cannot satisfy req1, so device2 (subreq1) is allocated instead.
    # However, req2 has no such constraint and can use device1 (subreq0).
    "with-distinct-constraints-with-subrequests": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=['device.attributes["driver-a"].boolAttribute'],
                    ),
                    sub_request("subreq-1", "class-a", 1),
                ),
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=['device.attributes["driver-a"].boolAttribute'],
                    ),
                    sub_request("subreq-1", "class-a", 1),
                ),
                request_with_prioritized_list(
                    "req-2",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=['device.attributes["driver-a"].boolAttribute'],
                    ),
                    sub_request("subreq-1", "class-a", 1),
                ),
                constraints=[distinct_attribute("driver-a/boolAttribute", "req-0", "req-1")],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1", attributes={"boolAttribute": True}, allow_multiple_allocations=True
                ),
                device(
                    "device-2", attributes={"boolAttribute": False}, allow_multiple_allocations=True
                ),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result("req-0/subreq-0", "driver-a", "pool-1", "device-1"),
                shared_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-2"),
                shared_allocation_result("req-2/subreq-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "1"}),
                request("req-1", "class-a", 1, capacity={"capacity-0": "1"}),
                constraints=[distinct_attribute("driver-a/stringAttribute")],
            )
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"stringAttribute": "stringAttributeValue"},
                    capacity={"capacity-0": capacity_with_range("2")},
                    allow_multiple_allocations=True,
                ),
            )
        ],
        expect=None,
    ),
    "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 1, capacity={"capacity-0": "2"}),
                request("req-1", "class-a", 1, capacity={"capacity-0": "2"}),
                constraints=[distinct_attribute("driver-a/stringAttribute")],
            )
        ],
        classes=[class_with_allow_multiple_allocations("class-a", "driver-a", True)],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    attributes={"stringAttribute": "stringAttributeValue1"},
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            ),
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-2",
                    attributes={"stringAttribute": "stringAttributeValue2"},
                    capacity={"capacity-0": capacity_with_range("4")},
                    allow_multiple_allocations=True,
                ),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                shared_allocation_result(
                    "req-0", "driver-a", "pool-1", "device-1", {"capacity-0": "2"}
                ),
                shared_allocation_result(
                    "req-1", "driver-a", "pool-1", "device-2", {"capacity-0": "2"}
                ),
            )
        ],
    ),
    # upstream runs this with its gate off, as the 1.37 defaults have it
    "list-attributes-disabled-match-constraint-with-lists": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[match_attribute("driver-a/stringAttribute")],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"stringAttribute": {"strings": ["value1", "value2", "value3"]}},
                ),
                device(
                    "device-2",
                    attributes={"stringAttribute": {"strings": ["value2", "value3", "value4"]}},
                ),
            )
        ],
        expect=None,  # a list matches nothing, and is distinct from nothing after the first
    ),
    # upstream runs this with its gate off, as the 1.37 defaults have it
    "list-attributes-disabled-distinct-constraint-with-lists": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", "class-a", 2),
                constraints=[distinct_attribute("driver-a/stringAttribute")],
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    attributes={"stringAttribute": {"strings": ["value1", "value2", "value3"]}},
                ),
                device(
                    "device-2",
                    attributes={"stringAttribute": {"strings": ["value2", "value3", "value4"]}},
                ),
            )
        ],
        expect=None,  # a list matches nothing, and is distinct from nothing after the first
    ),
    "allocation-mode-all-with-multi-host-resource-pool": Case(
        claims=[claim("claim-0", all_device_request("req-0", "class-a"))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-2", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: update-from-node-1-to-node-2 and vice-versa is dangerous, DRA drivers should not do
    # this: there is no guarantee that the scheduler sees the change and then might allocate a
    # device for a node where it is no longer available.  We do not have to support such a change
    # exactly as expected by these test cases if it makes the implementation too expensive because
    # of additional checks.  The support for allocation from incomplete pools is also under debate.
    # It's currently done because without scoring it makes no difference how many slices are
    # available, as long as one device can be found.
    "multi-host-resource-pool-with-stale-slice-for-current-node": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-2", resource_pool("pool-1", 2, 2), "driver-a", device("device-2")
            ),
        ],
        expect=None,
    ),
    # upstream: Node 1, generation 1. Node 2, generation 2. We'd like this to *not* be allocated,
    # but the current implementation ignores the updated slices. Allocating from the old pool is
    # also what would happen if the scheduler hadn't received the update yet, so DRA drivers
    # shouldn't depend on better handling of this situation.
    "multi-host-resource-pool-complete-update-from-node-1-to-node-2": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-1", "node-1", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
            slice_with_one_device("slice-2", "node-2", resource_pool("pool-1", 2, 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-2", resource_pool("pool-1", 2, 2), "driver-a", device("device-2")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: Node 2, generation 1. Node 1, generation 2.
    "multi-host-resource-pool-complete-update-from-node-2-to-node-1": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-2", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-1", "node-2", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
            slice_with_one_device("slice-2", "node-1", resource_pool("pool-1", 2, 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-1", resource_pool("pool-1", 2, 2), "driver-a", device("device-2")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: Node 1, generation 1. Node 2, generation 2. We'd like this to *not* be allocated,
    # but the current implementation ignores the updated slices. Allocating from the old pool is
    # also what would happen if the scheduler hadn't received the update yet, so DRA drivers
    # shouldn't depend on better handling of this situation.
    "multi-host-resource-pool-incomplete-update-from-node-1-to-node-2": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-1", "node-1", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
            slice_with_one_device("slice-2", "node-2", resource_pool("pool-1", 2, 2), "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: Node 2, generation 1. Node 1, generation 2. This does not get allocated since slice2
    # is incomplete.
    "multi-host-resource-pool-incomplete-update-from-node-2-to-node-1": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-2", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-1", "node-2", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
            slice_with_one_device("slice-2", "node-1", resource_pool("pool-1", 2, 2), "driver-a"),
        ],
        expect=None,
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "partitionable-devices-same-counter-set-name-in-different-resource-slices": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 4), "driver-a"),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                counter_set("counter-set-1", {}),
            ),
            slice_with_devices(
                "slice-3", "node-1", resource_pool("pool-1", 4), "driver-a", device("device-2")
            ),
            slice_with_counter_sets(
                "slice-4",
                "node-1",
                resource_pool("pool-1", 4),
                "driver-a",
                counter_set("counter-set-1", {}),
            ),
        ],
        expect=None,
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1", consumes_counters=[device_counter_consumption("counter-set-2", {})]
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {}),
            ),
        ],
        expect=None,
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set": Case(  # noqa: E501
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device(
                    "device-1",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "8Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                counter_set("counter-set-1", {"other-memory": "8Gi"}),
            ),
        ],
        expect=None,
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "8Gi"})
                    ],
                ),
            ),
            slice_with_counter_sets(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
        ],
        expect=None,
    ),
    "partitionable-devices-devices-on-different-nodes-consume-same-counter-set": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-0",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("6Gi")) >= 0'
                        ],
                    ),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=[
                            'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
                        ],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_counter_sets(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 3),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 3),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                ),
                device(
                    "device-2",
                    capacity={"memory": "2Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "2Gi"})
                    ],
                ),
            ),
            slice_with_devices(
                "slice-3",
                "node-2",
                resource_pool("pool-1", 3),
                "driver-a",
                device(
                    "device-3",
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                ),
            ),
        ],
        allocated=allocated_devices(("driver-a", "pool-1", "device-3")),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0/subreq-1", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "partitionable-devices-validation-error-on-non-targeting-slice": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_counter_sets(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 3),
                "driver-a",
                counter_set("counter-set-1", {"memory": "8Gi"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 3),
                "driver-a",
                device(
                    "device-1",
                    capacity={"memory": "6Gi"},
                    consumes_counters=[
                        device_counter_consumption("counter-set-1", {"memory": "6Gi"})
                    ],
                ),
            ),
            slice_with_devices(
                "slice-3",
                "node-2",
                resource_pool("pool-1", 3),
                "driver-a",
                device(
                    "device-3",
                    consumes_counters=[
                        device_counter_consumption("counter-set-2", {"memory": "6Gi"})
                    ],
                ),
            ),
        ],
        expect=None,
    ),
    "different-resourceslices-in-pool-can-target-different-nodes": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-2", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-1", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "invalid-pool-is-ok-if-devices-can-be-allocated-from-other": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_one_device("slice-2", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices("slice-3", "node-1", "pool-2", "driver-a", device("device-2")),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-2"),
            )
        ],
    ),
    # upstream: non-fatal "invalid resource pools were encountered" -> None
    "invalid-pool-is-error-if-no-other-device-can-be-allocated": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_one_device("slice-2", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices("slice-3", "node-1", "pool-2", "driver-a", device("device-2")),
        ],
        allocated=allocated_devices(("driver-a", "pool-2", "device-2")),
        expect=None,
    ),
    "no-allocation-from-incomplete-pools": Case(
        claims=[claim_with_request("claim-0", "req-0", "class-a")],
        classes=[device_class("class-a", "driver-a")],
        slices=[slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a")],
        expect=None,
    ),
    "check-combinations-within-single-request-single-pool-single-slice": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 5))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1"),
                device("device-2"),
                device("device-3"),
                device("device-4"),
            )
        ],
        expect=None,
    ),
    "check-combinations-within-single-request-single-pool-multiple-slices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 5))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device("device-1"),
                device("device-2"),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device("device-3"),
                device("device-4"),
            ),
        ],
        expect=None,
    ),
    "check-combinations-within-single-request-multiple-pools-multiple-slices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 5))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 2), "driver-a"),
            slice_with_devices(
                "slice-2", "node-1", resource_pool("pool-1", 2), "driver-a", device("device-2")
            ),
            slice_with_devices(
                "slice-3", "node-1", "pool-2", "driver-a", device("device-3"), device("device-4")
            ),
        ],
        expect=None,
    ),
    "check-combinations-within-single-request-many-pools": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 5))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-1", "driver-a"),
            slice_with_devices("slice-2", "node-1", "pool-2", "driver-a", device("device-2")),
            slice_with_devices("slice-3", "node-1", "pool-3", "driver-a", device("device-3")),
            slice_with_devices("slice-4", "node-1", "pool-4", "driver-a", device("device-4")),
        ],
        expect=None,
    ),
    # upstream: req-1 needs two generic devices. req-2 needs a specific device. The order of devices
    # is chosen such that the allocator will initially pick {device1, device2} for req1. This will
    # fail because req-2 needs device1. The allocator has to backtrack. The correct solution is
    # {device2, device3} for req-1 and {device1} for req-2. The optimized allocator avoids testing
    # {device2, device1} for req-1 and thus finds the solution faster.
    "check-combinations-with-backtracking": Case(
        claims=[
            claim(
                "claim-0",
                request("req-1", "class-a", 2),
                request(
                    "req-2", "class-a", 1, selectors=['device.attributes["driver-a"].type == "X"']
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"type": "X"}),
                device("device-2", attributes={"type": "Y"}),
                device("device-3", attributes={"type": "Y"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-3"),
                device_allocation_result("req-2", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: req-1 needs two generic devices. req-2 needs a specific device. The order of devices
    # is chosen such that the allocator will initially pick {device1, device2} for req1. This will
    # fail because req-2 needs device1. The allocator has to backtrack. The correct solution is
    # {device2, device3} for req-1 and {device1} for req-2. The optimized allocator avoids testing
    # {device2, device1} for req-1 and thus finds the solution faster. Use a binding condition here
    # to make sure pool2 is searched after pool1 when trying to allocate devices. This makes sure we
    # see the same results every time.
    "check-combinations-with-backtracking-across-slices-and-pools": Case(
        claims=[
            claim(
                "claim-0",
                request("req-1", "class-a", 2),
                request(
                    "req-2", "class-a", 1, selectors=['device.attributes["driver-a"].type == "X"']
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device("device-1", attributes={"type": "X"}),
            ),
            slice_with_devices(
                "slice-2",
                "node-1",
                resource_pool("pool-1", 2),
                "driver-a",
                device("device-2", attributes={"type": "Y"}),
            ),
            slice_with_devices(
                "slice-3",
                "node-1",
                "pool-2",
                "driver-a",
                # upstream's case has no failure conditions, which kube-apiserver requires
                # beside binding conditions (and so do we): one is added, here and below
                device(
                    "device-3",
                    attributes={"type": "Y"},
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["IsFailed"],
                ),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-1", "driver-a", "pool-1", "device-2"),
                device_allocation_result(
                    "req-1",
                    "driver-a",
                    "pool-2",
                    "device-3",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["IsFailed"],
                ),
                device_allocation_result("req-2", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: The first alternative can't be satisfied since there aren't enough devices of type
    # Y, but the allocator will try all devices before finding out. The first subrequest asks for
    # too many devices, so the second have to be chosen. The order of devices is chosen such that
    # the allocator will initially pick {device1, device2} for req1. This will fail because req-2
    # needs device1. The allocator has to backtrack. The correct solution is {device2, device3} for
    # req-1 and {device1} for req-2. The optimized allocator avoids testing {device2, device1} for
    # req-1 and thus finds the solution faster. This testcase is a smaller variant of the one in
    # https://github.com/kubernetes/kubernetes/issues/131730#issuecomment-2873598287. That one took
    # over 30 seconds, this one here only 0.07 seconds. But even that is too long when we interrupt
    # in the near future or even before starting...
    "check-combinations-with-prioritized-list": Case(
        claims=[
            claim(
                "claim-0",
                request_with_prioritized_list(
                    "req-1",
                    sub_request(
                        "subreq-0",
                        "class-a",
                        3,
                        selectors=['device.attributes["driver-a"].type == "Y"'],
                    ),
                    sub_request("subreq-1", "class-a", 2),
                ),
                request_with_prioritized_list(
                    "req-2",
                    sub_request("subreq-0", "class-a", 2),
                    sub_request(
                        "subreq-1",
                        "class-a",
                        1,
                        selectors=['device.attributes["driver-a"].type == "X"'],
                    ),
                ),
            )
        ],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device("device-1", attributes={"type": "X"}),
                device("device-2", attributes={"type": "Y"}),
                device("device-3", attributes={"type": "Y"}),
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-2"),
                device_allocation_result("req-1/subreq-1", "driver-a", "pool-1", "device-3"),
                device_allocation_result("req-2/subreq-1", "driver-a", "pool-1", "device-1"),
            )
        ],
    ),
    # upstream: pool-3 before pool-2 before pool-1 in input.
    "lexicographical-sorting-pools": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_one_device("slice-1", "node-1", "pool-3", "driver-a"),
            slice_with_one_device("slice-2", "node-1", "pool-2", "driver-a"),
            slice_with_one_device("slice-3", "node-1", "pool-1", "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-1"),
            )
        ],
    ),
    # upstream: pools with binding conditions will be considered after pools without binding
    # conditions.
    "lexicographical-sorting-pools-with-binding-conditions": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                device(
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            ),
            slice_with_devices("slice-3", "node-1", "pool-3", "driver-a", device("device-3")),
            slice_with_devices("slice-2", "node-1", "pool-2", "driver-a", device("device-2")),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-2", "device-2"),
                device_allocation_result("req-0", "driver-a", "pool-3", "device-3"),
            )
        ],
    ),
    # upstream: slice-3 before slice-2 before slice-1 in input.
    "lexicographical-sorting-slices": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-3", "node-1", resource_pool("pool-1", 3), "driver-a", device("device-3")
            ),
            slice_with_devices(
                "slice-2", "node-1", resource_pool("pool-1", 3), "driver-a", device("device-2")
            ),
            slice_with_one_device("slice-1", "node-1", resource_pool("pool-1", 3), "driver-a"),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-1"),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
    "lexicographical-sorting-slices-with-binding-conditions": Case(
        claims=[claim("claim-0", request("req-0", "class-a", 2))],
        classes=[device_class("class-a", "driver-a")],
        slices=[
            slice_with_devices(
                "slice-1",
                "node-1",
                resource_pool("pool-1", 3),
                "driver-a",
                device(
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
            ),
            slice_with_devices(
                "slice-3", "node-1", resource_pool("pool-1", 3), "driver-a", device("device-3")
            ),
            slice_with_devices(
                "slice-2", "node-1", resource_pool("pool-1", 3), "driver-a", device("device-2")
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                device_allocation_result(
                    "req-0",
                    "driver-a",
                    "pool-1",
                    "device-1",
                    binding_conditions=["IsPrepare"],
                    binding_failure_conditions=["BindingFailed"],
                ),
                device_allocation_result("req-0", "driver-a", "pool-1", "device-2"),
            )
        ],
    ),
}


# --- Part 2: published driver demo claims ------------------------------------------

NVIDIA = "gpu.nvidia.com"
NVIDIA_GPU_CLASS = device_class(
    "gpu.nvidia.com",
    selectors=[
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    ],
    extended_resource_name="nvidia.com/gpu",
)
NVIDIA_MIG_CLASS = device_class(
    "mig.nvidia.com",
    selectors=[
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    ],
)
NVIDIA_CLASSES = [NVIDIA_GPU_CLASS, NVIDIA_MIG_CLASS]


def nvidia_gpu_attributes(uuid: str, pci_bus_id: str, pcie_root: str) -> dict[str, Any]:
    """Attributes of a full A100 as ``GpuInfo.Attributes()`` publishes them (driver v25.12)."""
    return {
        "architecture": "Ampere",
        "brand": "Nvidia",
        "cudaComputeCapability": version("8.0.0"),
        "cudaDriverVersion": version("13.0.0"),
        "driverVersion": version("580.126.20"),
        "productName": "NVIDIA A100-PCIE-40GB",
        "resource.kubernetes.io/pciBusID": pci_bus_id,
        "resource.kubernetes.io/pcieRoot": pcie_root,
        "type": "gpu",
        "uuid": uuid,
    }


def nvidia_gpu(minor: int, uuid: str, pci_bus_id: str, pcie_root: str) -> Wire:
    """A full GPU ``gpu-<minor>`` (MIG mode off)."""
    return device(
        f"gpu-{minor}",
        attributes=nvidia_gpu_attributes(uuid, pci_bus_id, pcie_root),
        capacity={"memory": "40Gi"},
    )


# A100-40GB GPU-instance profiles: name -> (GI profile id, SMs, copy engines, decoders,
# memory, memory slices).
MIG_PROFILES: dict[str, tuple[int, int, int, int, str, int]] = {
    "1g.5gb": (19, 14, 1, 0, "4864Mi", 1),
    "2g.10gb": (14, 28, 2, 1, "9856Mi", 2),
    "3g.20gb": (9, 42, 3, 2, "19968Mi", 4),
}


def nvidia_mig(
    parent_minor: int,
    parent: dict[str, Any],
    profile: str,
    start: int,
    uuid: str,
) -> Wire:
    """A static MIG device ``gpu-<minor>-mig-<profile>-<GI id>-<start>`` (``mig.go``)."""
    gi_id, sms, copy_engines, decoders, memory, size = MIG_PROFILES[profile]
    attributes = dict(parent)
    attributes.update(
        {"type": "mig", "uuid": uuid, "parentUUID": parent["uuid"], "profile": profile}
    )
    capacity: dict[str, Any] = {
        "multiprocessors": str(sms),
        "copyEngines": str(copy_engines),
        "decoders": str(decoders),
        "encoders": "0",
        "jpegEngines": "0",
        "ofaEngines": "0",
        "memory": memory,
    }
    for i in range(start, start + size):
        capacity[f"memorySlice{i}"] = "1"
    name = f"gpu-{parent_minor}-mig-{profile.replace('.', '')}-{gi_id}-{start}"
    return device(name, attributes=attributes, capacity=capacity)


NV_GPU0 = nvidia_gpu_attributes(
    "GPU-2fa81118-5a5f-aa66-7660-471eed407181", "0000:65:00.0", "pci0000:64"
)
NV_GPU1 = nvidia_gpu_attributes(
    "GPU-8c3e5b2a-1d4f-6a7b-9c0d-2e3f4a5b6c7d", "0000:ca:00.0", "pci0000:c9"
)

# node-1: two A100 with MIG mode off -> two full GPUs, one slice, pool = node name.
NVIDIA_NODE1_SLICE = slice_with_devices(
    "node-1-gpu.nvidia.com-9xkq2",
    "node-1",
    "node-1",
    NVIDIA,
    nvidia_gpu(0, NV_GPU0["uuid"], "0000:65:00.0", "pci0000:64"),
    nvidia_gpu(1, NV_GPU1["uuid"], "0000:ca:00.0", "pci0000:c9"),
)

# node-2: two A100 in static MIG mode -> only the existing MIG devices are published.
# GPU 0 has four 1g.5gb and one 3g.20gb (no 2g.10gb), GPU 1 the classic 1+1+2+3 layout.
NVIDIA_NODE2_SLICE = slice_with_devices(
    "node-2-gpu.nvidia.com-4bz7t",
    "node-2",
    "node-2",
    NVIDIA,
    nvidia_mig(0, NV_GPU0, "1g.5gb", 0, "MIG-0a1b2c3d-0000-5000-8000-000000000000"),
    nvidia_mig(0, NV_GPU0, "1g.5gb", 1, "MIG-0a1b2c3d-0001-5000-8000-000000000001"),
    nvidia_mig(0, NV_GPU0, "1g.5gb", 2, "MIG-0a1b2c3d-0002-5000-8000-000000000002"),
    nvidia_mig(0, NV_GPU0, "1g.5gb", 3, "MIG-0a1b2c3d-0003-5000-8000-000000000003"),
    nvidia_mig(0, NV_GPU0, "3g.20gb", 4, "MIG-0a1b2c3d-0004-5000-8000-000000000004"),
    nvidia_mig(1, NV_GPU1, "1g.5gb", 0, "MIG-1a1b2c3d-0000-5000-8000-000000000010"),
    nvidia_mig(1, NV_GPU1, "1g.5gb", 1, "MIG-1a1b2c3d-0001-5000-8000-000000000011"),
    nvidia_mig(1, NV_GPU1, "2g.10gb", 2, "MIG-1a1b2c3d-0002-5000-8000-000000000012"),
    nvidia_mig(1, NV_GPU1, "3g.20gb", 4, "MIG-1a1b2c3d-0004-5000-8000-000000000014"),
)
NVIDIA_SLICES = [NVIDIA_NODE1_SLICE, NVIDIA_NODE2_SLICE]
NODE_2 = node("node-2", "region-2")


def nvidia_result(req: str, dev: str, pool: str = "node-1") -> Wire:
    return device_allocation_result(req, NVIDIA, pool, dev)


def mig_request(name: str, profile: str) -> Wire:
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    return request(name, "mig.nvidia.com", 1, selectors=[selector])


GPU_TEST4_CLAIM = claim(
    "pod-7d9c5-mig-devices",
    mig_request("mig-1g-5gb-0", "1g.5gb"),
    mig_request("mig-1g-5gb-1", "1g.5gb"),
    mig_request("mig-2g-10gb", "2g.10gb"),
    mig_request("mig-3g-20gb", "3g.20gb"),
    constraints=[match_attribute("gpu.nvidia.com/parentUUID")],
)
GPU_TEST4_RESULT = allocation_result(
    local_node_selector("node-2"),
    nvidia_result("mig-1g-5gb-0", "gpu-1-mig-1g5gb-19-0", "node-2"),
    nvidia_result("mig-1g-5gb-1", "gpu-1-mig-1g5gb-19-1", "node-2"),
    nvidia_result("mig-2g-10gb", "gpu-1-mig-2g10gb-14-2", "node-2"),
    nvidia_result("mig-3g-20gb", "gpu-1-mig-3g20gb-9-4", "node-2"),
)

TIME_SLICING_LONG = opaque(
    NVIDIA,
    {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    },
)
MPS_50 = opaque(
    NVIDIA,
    {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
            },
        },
    },
)

NVIDIA_CASES: dict[str, Case] = {
    # gpu-test1: two pods, each with a claim from template single-gpu -> distinct GPUs.
    "nvidia-gpu-test1-pod1": Case(
        claims=[claim_with_request("pod1-gpu-6xk2m", "gpu", "gpu.nvidia.com")],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[allocation_result(local_node_selector("node-1"), nvidia_result("gpu", "gpu-0"))],
    ),
    "nvidia-gpu-test1-pod2": Case(
        claims=[claim_with_request("pod2-gpu-q8v4n", "gpu", "gpu.nvidia.com")],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        allocated=[allocated_claim("pod1-gpu-6xk2m", nvidia_result("gpu", "gpu-0"))],
        expect=[allocation_result(local_node_selector("node-1"), nvidia_result("gpu", "gpu-1"))],
    ),
    # gpu-test2: one claim shared by two containers of one pod.
    "nvidia-gpu-test2": Case(
        claims=[claim_with_request("pod-shared-gpu-2l9rd", "gpu", "gpu.nvidia.com")],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[allocation_result(local_node_selector("node-1"), nvidia_result("gpu", "gpu-0"))],
    ),
    # gpu-test3: a ResourceClaim shared by two pods: allocated once, when the first pod
    # is scheduled.
    "nvidia-gpu-test3": Case(
        claims=[claim_with_request("single-gpu", "gpu", "gpu.nvidia.com")],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[allocation_result(local_node_selector("node-1"), nvidia_result("gpu", "gpu-0"))],
    ),
    # gpu-test4: 4 MIG devices of one parent GPU (matchAttribute parentUUID). GPU 0 has
    # no 2g.10gb, so every choice on GPU 0 fails and the search backtracks to GPU 1.
    "nvidia-gpu-test4": Case(
        claims=[GPU_TEST4_CLAIM],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        node=NODE_2,
        expect=[GPU_TEST4_RESULT],
    ),
    # The next replica of the gpu-test4 Deployment finds no complete parent left.
    "nvidia-gpu-test4-second-replica": Case(
        claims=[GPU_TEST4_CLAIM],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        allocated=[
            allocated_claim(
                "pod-5f2x8-mig-devices",
                *GPU_TEST4_RESULT["devices"]["results"],
                node_selector=local_node_selector("node-2"),
            )
        ],
        node=NODE_2,
        expect=None,
    ),
    # node-1 has MIG mode off: no MIG devices, and node-2's slice is not visible.
    "nvidia-gpu-test4-node-without-mig": Case(
        claims=[GPU_TEST4_CLAIM],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=None,
    ),
    # gpu-test5: two GPUs, each with its own GpuConfig (TimeSlicing, MPS); claim configs
    # keep their requests and come back with source FromClaim.
    "nvidia-gpu-test5": Case(
        claims=[
            claim(
                "pod0-shared-gpus-tq5wz",
                request("ts-gpu", "gpu.nvidia.com", 1),
                request("mps-gpu", "gpu.nvidia.com", 1),
                config=[
                    device_claim_config(["ts-gpu"], TIME_SLICING_LONG),
                    device_claim_config(["mps-gpu"], MPS_50),
                ],
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                nvidia_result("ts-gpu", "gpu-0"),
                nvidia_result("mps-gpu", "gpu-1"),
                config=[
                    allocation_config("FromClaim", ["ts-gpu"], TIME_SLICING_LONG),
                    allocation_config("FromClaim", ["mps-gpu"], MPS_50),
                ],
            )
        ],
    ),
    # A claim config naming two requests is copied once per matching request (upstream
    # loops over the claim's requests), each copy with the config's full request list.
    "nvidia-claim-config-for-two-requests": Case(
        claims=[
            claim(
                "pod0-shared-gpus-tq5wz",
                request("ts-gpu-0", "gpu.nvidia.com", 1),
                request("ts-gpu-1", "gpu.nvidia.com", 1),
                config=[device_claim_config(["ts-gpu-0", "ts-gpu-1"], TIME_SLICING_LONG)],
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                nvidia_result("ts-gpu-0", "gpu-0"),
                nvidia_result("ts-gpu-1", "gpu-1"),
                config=[
                    allocation_config("FromClaim", None, TIME_SLICING_LONG),
                ],
            )
        ],
    ),
    # gpu-test6 still selects on `index`, which current drivers no longer publish: the
    # missing key is a CEL runtime error, which aborts the allocation.
    "nvidia-gpu-test6-stale-index-selector": Case(
        claims=[
            claim(
                "pod-4k8r2-a100",
                request(
                    "gpu",
                    "gpu.nvidia.com",
                    1,
                    selectors=[
                        "device.attributes['gpu.nvidia.com'].productName.lowerAscii()"
                        ".matches('^.*a100.*$')\n&&\n"
                        "(device.attributes['gpu.nvidia.com'].index == 0 ||\n"
                        "device.attributes['gpu.nvidia.com'].index == 2 ||\n"
                        "device.attributes['gpu.nvidia.com'].index == 4 ||\n"
                        "device.attributes['gpu.nvidia.com'].index == 6)\n"
                    ],
                ),
                config=[device_claim_config(["gpu"], TIME_SLICING_LONG)],
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        error=r"(?i)no such key.*\bindex\b",
    ),
    "nvidia-selector-nonexistent-product": Case(
        claims=[
            claim(
                "pod-gpu",
                request(
                    "gpu",
                    "gpu.nvidia.com",
                    1,
                    selectors=[
                        "device.attributes['gpu.nvidia.com'].productName == 'NONEXISTENT-GPU-XYZ'"
                    ],
                ),
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=None,
    ),
    "nvidia-selector-driver-version-and-memory": Case(
        claims=[
            claim(
                "pod-gpu",
                request(
                    "gpu",
                    "gpu.nvidia.com",
                    2,
                    selectors=[
                        'device.attributes["gpu.nvidia.com"].driverVersion'
                        '.compareTo(semver("580.0.0")) >= 0',
                        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
                    ],
                ),
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                nvidia_result("gpu", "gpu-0"),
                nvidia_result("gpu", "gpu-1"),
            )
        ],
    ),
    "nvidia-selector-hopper-80gi": Case(
        claims=[
            claim(
                "pod-gpu",
                request(
                    "gpu",
                    "gpu.nvidia.com",
                    1,
                    selectors=[
                        "device.attributes['gpu.nvidia.com'].architecture == 'Hopper' && "
                        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity(\"80Gi\"))"
                    ],
                ),
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        expect=None,
    ),
    # Two small MIG devices; the devices of the first gpu-test4 replica are in use.
    "nvidia-mig-selector-multiprocessors": Case(
        claims=[
            claim(
                "pod-mig",
                request(
                    "mig",
                    "mig.nvidia.com",
                    2,
                    selectors=[
                        "device.capacity['gpu.nvidia.com'].multiprocessors"
                        '.isLessThan(quantity("30"))'
                    ],
                ),
            )
        ],
        classes=NVIDIA_CLASSES,
        slices=NVIDIA_SLICES,
        allocated=[
            allocated_claim("pod-5f2x8-mig-devices", *GPU_TEST4_RESULT["devices"]["results"])
        ],
        node=NODE_2,
        expect=[
            allocation_result(
                local_node_selector("node-2"),
                nvidia_result("mig", "gpu-0-mig-1g5gb-19-0", "node-2"),
                nvidia_result("mig", "gpu-0-mig-1g5gb-19-1", "node-2"),
            )
        ],
    ),
}


# dra-example-driver (gpu.example.com), profile gpu. UUIDs are what the driver derives
# from the node name "node-1" (math/rand seeded with a Java-style hash of it).
EXAMPLE = "gpu.example.com"
EXAMPLE_UUIDS = [
    "gpu-7bad7559-1636-cf0a-d725-6b33c29a8680",
    "gpu-b16f4dbe-e5b6-3be1-7a31-20865aa74d76",
    "gpu-cb96779b-7eb0-5a57-4bfa-22490dcc66a2",
    "gpu-b2faef82-2b1a-8a70-c9a8-c907e12de336",
    "gpu-6f49a8cc-0128-6abe-be95-e475703f3594",
    "gpu-2e379ed9-e840-5a2f-ceb3-c1e1eaa8550a",
    "gpu-99560044-5200-e943-a3a2-39a2e8682556",
    "gpu-76f32a39-d3cb-6ce9-9079-5790288e01de",
]
EXAMPLE_CLASS = device_class("gpu.example.com", selectors=["device.driver == 'gpu.example.com'"])


def example_attributes(i: int) -> dict[str, Any]:
    return {
        "index": i,
        "uuid": EXAMPLE_UUIDS[i],
        "model": "LATEST-GPU-MODEL",
        "driverVersion": version("1.0.0"),
    }


def example_capacity(memory: str, compute: str, *, shared: bool) -> dict[str, Any]:
    """memory/compute; with --gpu-allow-multiple-allocations a 1Gi / 1 step range policy."""
    if not shared:
        return {"memory": memory, "compute": compute}
    return {
        "memory": capacity_with_range(memory, default=memory, min="1Gi", step="1Gi", max=memory),
        "compute": capacity_with_range(compute, default=compute, min="1", step="1", max=compute),
    }


def example_slices(num_gpus: int = 8, partitions: int = 0, *, shared: bool = False) -> list[Wire]:
    """What the gpu profile publishes for node-1 (``EnumerateDevices``)."""
    devices: list[Wire] = []
    counter_sets: list[Wire] = []
    for i in range(num_gpus):
        attrs = example_attributes(i)
        if not partitions:
            devices.append(
                device(
                    f"gpu-{i}",
                    attributes=attrs,
                    capacity=example_capacity("80Gi", "100", shared=shared),
                    allow_multiple_allocations=shared,
                )
            )
            continue
        counters_name = f"gpu-{i}-counters"
        counter_sets.append(counter_set(counters_name, {"memory": "80Gi", "compute": "100"}))
        memory = f"{80 // partitions}Gi"
        compute = str(100 // partitions)
        for j in range(partitions):
            devices.append(
                device(
                    f"gpu-{i}-partition-{j}",
                    attributes={**attrs, "partition": j, "partitionable": True},
                    capacity=example_capacity(memory, compute, shared=shared),
                    consumes_counters=[
                        device_counter_consumption(
                            counters_name, {"memory": memory, "compute": compute}
                        )
                    ],
                    allow_multiple_allocations=shared,
                )
            )
        devices.append(
            device(
                f"gpu-{i}-full",
                attributes={**attrs, "partitionable": True, "full": True},
                capacity=example_capacity("80Gi", "100", shared=shared),
                consumes_counters=[
                    device_counter_consumption(counters_name, {"memory": "80Gi", "compute": "100"})
                ],
                allow_multiple_allocations=shared,
            )
        )
    if not counter_sets:
        return [
            slice_with_devices(
                "node-1-gpu.example.com-7dk2w", "node-1", "node-1", EXAMPLE, *devices
            )
        ]
    pool = resource_pool("node-1", 2)
    return [
        slice_with_counter_sets(
            "node-1-gpu.example.com-5hq8c", "node-1", pool, EXAMPLE, *counter_sets
        ),
        slice_with_devices("node-1-gpu.example.com-p2mvx", "node-1", pool, EXAMPLE, *devices),
    ]


def example_result(req: str, dev: str, *, admin_access: bool = False) -> Wire:
    return device_allocation_result(req, EXAMPLE, "node-1", dev, admin_access)


def example_shared(req: str, dev: str, memory: str, compute: str) -> Wire:
    return shared_allocation_result(
        req, EXAMPLE, "node-1", dev, {"memory": memory, "compute": compute}
    )


def example_in_use(name: str, *results: Wire) -> Wire:
    """A claim of another pod, allocated earlier (shareIDs made concrete)."""
    concrete = [
        {**r, "shareID": f"5e1f1c2a-0000-4000-8000-{i:012d}"} if "shareID" in r else r
        for i, r in enumerate(results)
    ]
    return allocated_claim(name, *concrete, node_selector=local_node_selector("node-1"))


def single_gpu_claim(name: str) -> Wire:
    return claim_with_request(name, "gpu", "gpu.example.com")


def example_capacity_claim(name: str, memory: str, compute: str) -> Wire:
    return claim(
        name, request("gpu", "gpu.example.com", 1, capacity={"memory": memory, "compute": compute})
    )


EXAMPLE_TIME_SLICING = opaque(
    EXAMPLE,
    {
        "apiVersion": "gpu.resource.example.com/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    },
)
EXAMPLE_SPACE_PARTITIONING = opaque(
    EXAMPLE,
    {
        "apiVersion": "gpu.resource.example.com/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "SpacePartitioning",
            "spacePartitioningConfig": {"partitionCount": 10},
        },
    },
)
PRIORITIZED_GPU = claim(
    "pod0-gpu-b7w2x",
    request_with_prioritized_list(
        "gpu",
        sub_request(
            "bleeding-edge-gpu",
            "gpu.example.com",
            selectors=["device.attributes['gpu.example.com'].model == 'BLEEDING-EDGE-GPU'"],
        ),
        sub_request(
            "huge-gpu",
            "gpu.example.com",
            selectors=["device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0"],
        ),
        sub_request("older-gpu", "gpu.example.com"),
    ),
)
PREFERRED_GPU = claim(
    "pod1-gpu-r4n6k",
    request_with_prioritized_list(
        "gpu",
        sub_request(
            "latest-gpu",
            "gpu.example.com",
            selectors=["device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'"],
        ),
        sub_request("older-gpu", "gpu.example.com"),
    ),
)
ADMIN_CLAIM = claim(
    "pod0-admin-gpus-x2c9v",
    all_device_request("admin-gpu", "gpu.example.com", admin_access=True),
)
ALL_ADMIN_RESULTS = allocation_result(
    local_node_selector("node-1"),
    *[example_result("admin-gpu", f"gpu-{i}", admin_access=True) for i in range(8)],
)

EXAMPLE_DRIVER_CASES: dict[str, Case] = {
    # basic-resourceclaimtemplate (gpu-test1): two pods, one GPU each.
    "example-driver-basic-resourceclaimtemplate-pod0": Case(
        claims=[single_gpu_claim("pod0-gpu-8zq4c")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-0"))],
    ),
    "example-driver-basic-resourceclaimtemplate-pod1": Case(
        claims=[single_gpu_claim("pod1-gpu-k2j7d")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        allocated=[example_in_use("pod0-gpu-8zq4c", example_result("gpu", "gpu-0"))],
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-1"))],
    ),
    # basic-multiple-requests (gpu-test2): requests named gpu-1 and gpu-2.
    "example-driver-basic-multiple-requests": Case(
        claims=[
            claim(
                "pod0-gpus-w9t3s",
                request("gpu-1", "gpu.example.com", 1),
                request("gpu-2", "gpu.example.com", 1),
            )
        ],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_result("gpu-1", "gpu-0"),
                example_result("gpu-2", "gpu-1"),
            )
        ],
    ),
    # basic-shared-claim-across-containers (gpu-test3).
    "example-driver-basic-shared-claim-across-containers": Case(
        claims=[single_gpu_claim("pod0-shared-gpu-m5r8h")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-0"))],
    ),
    # basic-shared-claim-across-pods (gpu-test4): the ResourceClaim single-gpu.
    "example-driver-basic-shared-claim-across-pods": Case(
        claims=[single_gpu_claim("single-gpu")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-0"))],
    ),
    # basic-resourceclaim-opaque-config (gpu-test5): TimeSlicing Long + SpacePartitioning 10.
    "example-driver-basic-resourceclaim-opaque-config": Case(
        claims=[
            claim(
                "pod0-shared-gpus-c6l2p",
                request("ts-gpu", "gpu.example.com", 1),
                request("sp-gpu", "gpu.example.com", 1),
                config=[
                    device_claim_config(["ts-gpu"], EXAMPLE_TIME_SLICING),
                    device_claim_config(["sp-gpu"], EXAMPLE_SPACE_PARTITIONING),
                ],
            )
        ],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_result("ts-gpu", "gpu-0"),
                example_result("sp-gpu", "gpu-1"),
                config=[
                    allocation_config("FromClaim", ["ts-gpu"], EXAMPLE_TIME_SLICING),
                    allocation_config("FromClaim", ["sp-gpu"], EXAMPLE_SPACE_PARTITIONING),
                ],
            )
        ],
    ),
    # initcontainer-shared-gpu (gpu-test6).
    "example-driver-initcontainer-shared-gpu": Case(
        claims=[single_gpu_claim("pod0-shared-gpu-v3n9f")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-0"))],
    ),
    # admin-access (gpu-test7): allocationMode All + adminAccess -> every GPU, in order.
    "example-driver-admin-access": Case(
        claims=[ADMIN_CLAIM],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[ALL_ADMIN_RESULTS],
    ),
    # ... including GPUs that other claims use.
    "example-driver-admin-access-gpus-in-use": Case(
        claims=[ADMIN_CLAIM],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        allocated=[
            example_in_use("pod0-gpu-8zq4c", example_result("gpu", "gpu-0")),
            example_in_use("pod1-gpu-k2j7d", example_result("gpu", "gpu-3")),
        ],
        expect=[ALL_ADMIN_RESULTS],
    ),
    # cel-selector (gpu-test8).
    "example-driver-cel-selector": Case(
        claims=[
            claim(
                "pod0-gpu-f4s8d",
                request(
                    "gpu",
                    "gpu.example.com",
                    1,
                    selectors=[
                        "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'",
                        "device.capacity['gpu.example.com'].memory.compareTo(quantity('4Gi')) >= 0",
                    ],
                ),
            )
        ],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(),
        expect=[allocation_result(local_node_selector("node-1"), example_result("gpu", "gpu-0"))],
    ),
    # prioritized-alternatives (driver with 2 GPUs): pod0 falls through to older-gpu, the
    # result names the request "<request>/<subrequest>".
    "example-driver-prioritized-alternatives-pod0": Case(
        claims=[PRIORITIZED_GPU],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2),
        expect=[
            allocation_result(
                local_node_selector("node-1"), example_result("gpu/older-gpu", "gpu-0")
            )
        ],
    ),
    "example-driver-prioritized-alternatives-pod1": Case(
        claims=[PREFERRED_GPU],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2),
        allocated=[example_in_use("pod0-gpu-b7w2x", example_result("gpu/older-gpu", "gpu-0"))],
        expect=[
            allocation_result(
                local_node_selector("node-1"), example_result("gpu/latest-gpu", "gpu-1")
            )
        ],
    ),
    # partitionable-devices (kubeletPlugin.gpuPartitions=4, 2 GPUs): counters in their
    # own slice, two partitions of GPU 0.
    "example-driver-partitionable-devices": Case(
        claims=[claim("pod0-gpu-partitions-h8d2k", request("gpu-partition", "gpu.example.com", 2))],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2, 4),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_result("gpu-partition", "gpu-0-partition-0"),
                example_result("gpu-partition", "gpu-0-partition-1"),
            )
        ],
    ),
    # All four partitions of GPU 0 in use: gpu-0-full has no counters left.
    "example-driver-partitionable-devices-gpu0-used-up": Case(
        claims=[claim("pod2-gpu-partitions-t6w1m", request("gpu-partition", "gpu.example.com", 2))],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2, 4),
        allocated=[
            example_in_use(
                "pod0-gpu-partitions-h8d2k",
                example_result("gpu-partition", "gpu-0-partition-0"),
                example_result("gpu-partition", "gpu-0-partition-1"),
            ),
            example_in_use(
                "pod1-gpu-partitions-z3c7q",
                example_result("gpu-partition", "gpu-0-partition-2"),
                example_result("gpu-partition", "gpu-0-partition-3"),
            ),
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_result("gpu-partition", "gpu-1-partition-0"),
                example_result("gpu-partition", "gpu-1-partition-1"),
            )
        ],
    ),
    # gpu-allow-multiple-allocations: two pods share gpu-0 (16Gi + 20 compute each).
    "example-driver-gpu-allow-multiple-allocations-pod0": Case(
        claims=[example_capacity_claim("shared-gpu-pod0", "16Gi", "20")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(shared=True),
        expect=[
            allocation_result(
                local_node_selector("node-1"), example_shared("gpu", "gpu-0", "16Gi", "20")
            )
        ],
    ),
    "example-driver-gpu-allow-multiple-allocations-pod1": Case(
        claims=[example_capacity_claim("shared-gpu-pod1", "16Gi", "20")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(shared=True),
        allocated=[example_in_use("shared-gpu-pod0", example_shared("gpu", "gpu-0", "16Gi", "20"))],
        expect=[
            allocation_result(
                local_node_selector("node-1"), example_shared("gpu", "gpu-0", "16Gi", "20")
            )
        ],
    ),
    # A request bigger than what is left on gpu-0 moves on to gpu-1.
    "example-driver-gpu-allow-multiple-allocations-remaining-capacity": Case(
        claims=[example_capacity_claim("shared-gpu-pod2", "70Gi", "20")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(shared=True),
        allocated=[example_in_use("shared-gpu-pod0", example_shared("gpu", "gpu-0", "16Gi", "20"))],
        expect=[
            allocation_result(
                local_node_selector("node-1"), example_shared("gpu", "gpu-1", "70Gi", "20")
            )
        ],
    ),
    # gpu-allow-multiple-allocations-partitionable (gpuPartitions=4): the second share of
    # gpu-0-partition-0 does not consume counters again.
    "example-driver-gpu-allow-multiple-allocations-partitionable-pod0": Case(
        claims=[example_capacity_claim("shared-partition-pod0", "8Gi", "10")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2, 4, shared=True),
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_shared("gpu", "gpu-0-partition-0", "8Gi", "10"),
            )
        ],
    ),
    "example-driver-gpu-allow-multiple-allocations-partitionable-pod1": Case(
        claims=[example_capacity_claim("shared-partition-pod1", "8Gi", "10")],
        classes=[EXAMPLE_CLASS],
        slices=example_slices(2, 4, shared=True),
        allocated=[
            example_in_use(
                "shared-partition-pod0", example_shared("gpu", "gpu-0-partition-0", "8Gi", "10")
            )
        ],
        expect=[
            allocation_result(
                local_node_selector("node-1"),
                example_shared("gpu", "gpu-0-partition-0", "8Gi", "10"),
            )
        ],
    ),
}

# Upstream cases whose ResourceSlice kube-apiserver 1.37 refuses. Upstream's allocator tests
# build such slices without the API server; ours validates its input as kube-apiserver does,
# so these cases expect the refusal (their allocations were checked against upstream before).
_MAX_ABOVE_VALUE = r"requestPolicy\.validRange\.max: 4 is larger than capacity value 2"
_NO_COUNTERS = r"sharedCounters\[0\]\.counters: is required"
_REFUSED_MAX = (
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
    "consumable-capacity-with-multi-allocatable-device-backtrack",
    "consumable-capacity-multi-allocatable-device-with-subrequest",
    "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity",
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request",
    "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated",
    "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable",
    "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
)
_REFUSED_COUNTERS = (
    "partitionable-devices-same-counter-set-name-in-different-resource-slices",
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
)
APISERVER_REFUSES = {
    **dict.fromkeys(_REFUSED_MAX, _MAX_ABOVE_VALUE),
    **dict.fromkeys(_REFUSED_COUNTERS, _NO_COUNTERS),
}
for _name, _refusal in APISERVER_REFUSES.items():
    UPSTREAM_CASES[_name] = dataclasses.replace(UPSTREAM_CASES[_name], error=_refusal)

CASES: dict[str, Case] = {**UPSTREAM_CASES, **NVIDIA_CASES, **EXAMPLE_DRIVER_CASES}


# --- the test ------------------------------------------------------------------------


def _normalize_share_ids(allocations: list[Wire]) -> list[Wire]:
    """Replace every shareID by :data:`SHARE_ID`, after checking that they are unique."""
    seen: set[tuple[str, str, str, str]] = set()
    out = copy.deepcopy(allocations)
    for allocation in out:
        for result in allocation["devices"]["results"]:
            if "shareID" not in result:
                continue
            share_id = result["shareID"]
            assert isinstance(share_id, str), share_id
            assert share_id, "empty shareID"
            key = (result["driver"], result["pool"], result["device"], share_id)
            assert key not in seen, f"shareID {share_id} used twice for one device"
            seen.add(key)
            result["shareID"] = SHARE_ID
    return out


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_case(case: Case) -> None:
    node_name = case.node["metadata"]["name"]
    inputs = copy.deepcopy((case.slices, case.classes, case.allocated, case.node, case.claims))
    counter = itertools.count()

    def build() -> Allocator:
        return Allocator(
            case.slices,
            case.classes,
            allocated_claims=case.allocated,
            strategy="first-fit",
            nodes=[case.node],
            share_id_factory=lambda: f"share-{next(counter)}",
        )

    if case.error is not None:
        with pytest.raises(InvalidInputError, match=case.error):
            build().allocate(case.claims, node=node_name)
    else:
        results = build().allocate(case.claims, node=node_name)
        if case.expect is None:
            assert results is None
        else:
            assert results is not None
            got = _normalize_share_ids([r.to_dict() for r in results])
            assert got == case.expect
    # The allocator must not modify its inputs.
    assert (case.slices, case.classes, case.allocated, case.node, case.claims) == inputs

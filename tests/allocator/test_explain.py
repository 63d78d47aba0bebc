"""``Allocator.explain``: the per-node, per-request funnel and the reasons it gives.

Small hand-built inventories where every number of the funnel is known:

    devices -> class -> selectors -> free -> capacity -> counters -> taints

Each stage counts the devices that pass it and every stage before it; the first stage
that leaves fewer devices than a request needs is its reason. When every request could
be served alone, the reason is a constraint or the competition between requests.
"""

from __future__ import annotations

import json

import pytest

from dra_jupyter.allocator import Allocator, Explanation, NodeReport, RequestReport, Strategy
from dra_jupyter.allocator.explain import STAGE_TEXT, STAGES
from dra_jupyter.errors import InvalidInputError

from .builders import (
    Wire,
    all_device_request,
    allocated_capacity,
    allocated_claim,
    allocated_devices,
    claim,
    counter_set,
    device,
    device_allocation_result,
    device_class,
    device_counter_consumption,
    distinct_attribute,
    match_attribute,
    request,
    request_with_prioritized_list,
    resource_pool,
    slice_with_counter_sets,
    slice_with_devices,
    sub_request,
    taint,
    toleration,
)

DRIVER = "gpu.example.com"
NIC_DRIVER = "nic.example.com"
NODE = "node-1"
ROOT = f"{DRIVER}/root"
UNHEALTHY = taint("example.com/unhealthy", "true", "NoSchedule")
CLASSES = [device_class("gpu", DRIVER), device_class("nic", NIC_DRIVER)]


def gpus(
    node: str = NODE,
    count: int = 8,
    *,
    tainted: tuple[int, ...] = (),
    memory: dict[int, str] | None = None,
) -> Wire:
    """``count`` GPUs ``gpu-<i>`` on ``node``, two per root ``r<i // 2>``, 80Gi each."""
    devices = [
        device(
            f"gpu-{i}",
            attributes={"root": f"r{i // 2}", "index": i},
            capacity={"memory": (memory or {}).get(i, "80Gi")},
            taints=[UNHEALTHY] if i in tainted else (),
        )
        for i in range(count)
    ]
    return slice_with_devices(f"{node}-gpus", node, node, DRIVER, *devices)


def held(node: str, *indices: int) -> list[Wire]:
    """One allocated claim per GPU (``default/allocated-<n>``)."""
    return allocated_devices(*((DRIVER, node, f"gpu-{i}") for i in indices))


def funnel(*counts: int) -> dict[str, int]:
    assert len(counts) == len(STAGES)
    return dict(zip(STAGES, counts, strict=True))


def only_node(explanation: Explanation) -> NodeReport:
    [report] = explanation.nodes
    return report


def only_request(explanation: Explanation) -> RequestReport:
    [req] = only_node(explanation).requests
    return req


# --- the funnel, stage by stage -------------------------------------------------------


def test_held_and_tainted_devices() -> None:
    """8 GPUs, 3 held by other claims, 2 of the free ones tainted: 3 eligible, 4 needed."""
    allocator = Allocator([gpus(tainted=(3, 4))], CLASSES, held(NODE, 0, 1, 2))
    explanation = allocator.explain([claim("c", request("req", "gpu", 4))])
    assert explanation.satisfiable is False
    assert explanation.node is None
    report = only_node(explanation)
    assert (report.node, report.satisfiable, report.reasons) == (NODE, False, [])
    req = only_request(explanation)
    assert (req.claim, req.request, req.device_class, req.needed) == ("default/c", "req", "gpu", 4)
    assert req.funnel == funnel(8, 8, 8, 5, 5, 5, 3)
    assert req.eligible == 3
    assert req.enough is False
    assert req.reasons == [
        "3 of the 5 free devices are not marked unusable, 4 needed; marked by a taint the "
        "request does not tolerate: "
        "example.com/unhealthy=true:NoSchedule (2 devices)"
    ]
    assert explanation.summary() == f"node {NODE}: claim default/c, request req: {req.reasons[0]}"
    # a claim the user did not name (asking whether a request could be met) goes unnamed
    assert explanation.summary(named=False) == f"node {NODE}: request req: {req.reasons[0]}"


def test_held_and_tainted_devices_enough_left() -> None:
    allocator = Allocator([gpus(tainted=(3, 4))], CLASSES, held(NODE, 0, 1, 2))
    explanation = allocator.explain([claim("c", request("req", "gpu", 3))])
    assert explanation.satisfiable is True
    assert explanation.node == NODE
    req = only_request(explanation)
    assert req.funnel == funnel(8, 8, 8, 5, 5, 5, 3)
    assert req.reasons == []
    assert explanation.summary() == f"allocatable on node {NODE}"


def test_tolerated_taint_and_effect_none_do_not_block() -> None:
    soft = taint("example.com/maintenance", "soon", "None")
    devices = [
        device("gpu-0", taints=[UNHEALTHY]),
        device("gpu-1", taints=[soft]),
        device("gpu-2", taints=[taint("example.com/lost", "", "NoExecute")]),
        device("gpu-3"),
    ]
    allocator = Allocator([slice_with_devices("s", NODE, NODE, DRIVER, *devices)], CLASSES)
    plain = allocator.explain([claim("c", request("req", "gpu", 4))])
    assert only_request(plain).funnel == funnel(4, 4, 4, 4, 4, 4, 2)
    [reason] = only_request(plain).reasons
    assert "example.com/unhealthy=true:NoSchedule" in reason
    assert "example.com/lost:NoExecute" in reason
    assert "maintenance" not in reason  # effect None never blocks

    tolerant = request(
        "req",
        "gpu",
        4,
        tolerations=[toleration("example.com/unhealthy"), toleration("example.com/lost")],
    )
    explanation = allocator.explain([claim("c", tolerant)])
    assert explanation.satisfiable is True
    assert only_request(explanation).funnel == funnel(4, 4, 4, 4, 4, 4, 4)


def test_class_stage_counts_devices_of_other_drivers() -> None:
    nics = slice_with_devices(
        "nics", NODE, NODE, NIC_DRIVER, *(device(f"nic-{i}") for i in range(4))
    )
    allocator = Allocator([gpus(), nics], CLASSES)
    explanation = allocator.explain([claim("c", request("req", "gpu", 9))])
    req = only_request(explanation)
    assert req.funnel == funnel(12, 8, 8, 8, 8, 8, 8)
    assert req.reasons == ["only 8 devices of class gpu here, 9 needed"]


def test_no_device_of_the_class() -> None:
    allocator = Allocator([gpus()], CLASSES)
    req = only_request(allocator.explain([claim("c", request("req", "nic"))]))
    assert req.funnel == funnel(8, 0, 0, 0, 0, 0, 0)
    assert req.reasons == ["no devices of class nic here (1 needed)"]


def test_selectors_stage_names_the_selector_that_rules_devices_out() -> None:
    memory = dict.fromkeys(range(4), "40Gi")
    big = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('80Gi')) >= 0"
    allocator = Allocator([gpus(memory=memory)], CLASSES)
    req = only_request(
        allocator.explain([claim("c", request("req", "gpu", 5, selectors=["true", big]))])
    )
    assert req.funnel == funnel(8, 8, 4, 4, 4, 4, 4)
    assert req.reasons == [
        "selector memory.compareTo(quantity('80Gi')) >= 0 matches only 4 of the 8 devices of "
        "class gpu (the others have at most 40Gi, gpu-0), 5 needed"
    ]


def test_free_stage_names_the_holders() -> None:
    holders = [
        allocated_claim(
            "trainer", *(device_allocation_result("r", DRIVER, NODE, f"gpu-{i}") for i in range(5))
        ),
        allocated_claim(
            "notebook", *(device_allocation_result("r", DRIVER, NODE, f"gpu-{i}") for i in (5, 6))
        ),
    ]
    allocator = Allocator([gpus()], CLASSES, holders)
    req = only_request(allocator.explain([claim("c", request("req", "gpu", 2))]))
    assert req.funnel == funnel(8, 8, 8, 1, 1, 1, 1)
    assert req.reasons == [
        "1 of the 8 matching devices are free, 2 needed; held by default/trainer (5), "
        "default/notebook (2)"
    ]


def test_free_stage_mentions_every_holder() -> None:
    """With more holders than are listed, the reason says how many more there are."""
    allocator = Allocator([gpus()], CLASSES, held(NODE, *range(8)))
    [reason] = only_request(allocator.explain([claim("c", request("req", "gpu"))])).reasons
    assert reason.startswith("0 of the 8 matching devices are free, 1 needed; held by ")
    assert "default/allocated-0 (1)" in reason
    assert "5 more" in reason or all(f"default/allocated-{i}" in reason for i in range(8)), reason


def _shared_gpus() -> Wire:
    devices = [
        device(f"gpu-{i}", capacity={"memory": "80Gi"}, allow_multiple_allocations=True)
        for i in range(4)
    ]
    return slice_with_devices("shared", NODE, NODE, DRIVER, *devices)


def test_capacity_stage_larger_than_any_device() -> None:
    allocator = Allocator([_shared_gpus()], CLASSES)
    req = only_request(
        allocator.explain([claim("c", request("req", "gpu", capacity={"memory": "100Gi"}))])
    )
    assert req.funnel == funnel(4, 4, 4, 4, 0, 0, 0)
    [reason] = req.reasons
    assert reason.startswith(
        "0 of the 4 devices of class gpu not held by others have memory >= 100Gi left to "
        "share, 1 needed; the most left is 80Gi of memory (gpu-0)"
    )


def test_capacity_stage_consumed_by_other_claims() -> None:
    """Three of four shared GPUs have 60Gi of 80Gi taken: only one has 40Gi left."""
    consumed = allocated_capacity(
        *(((DRIVER, NODE, f"gpu-{i}"), {"memory": "60Gi"}) for i in range(3))
    )
    allocator = Allocator([_shared_gpus()], CLASSES, consumed)
    explanation = allocator.explain(
        [claim("c", request("req", "gpu", 2, capacity={"memory": "40Gi"}))]
    )
    req = only_request(explanation)
    assert req.funnel == funnel(4, 4, 4, 4, 1, 1, 1)
    [reason] = req.reasons
    assert reason.startswith(
        "1 of the 4 devices of class gpu not held by others have memory >= 40Gi left to share"
    )
    # What is left is what matters: 20Gi on the shared GPUs, not their 80Gi total.
    assert "20Gi" in reason, reason


def _partitioned(*held_devices: str) -> Allocator:
    """One GPU as a counter set of 8 memory slices: the full GPU (8) and 4 partitions (2 each)."""
    pool = resource_pool(NODE, 2)
    counters = slice_with_counter_sets(
        "a-counters", NODE, pool, DRIVER, counter_set("gpu-0-counter-set", {"mem": "8"})
    )
    full = device(
        "gpu-0", consumes_counters=[device_counter_consumption("gpu-0-counter-set", {"mem": "8"})]
    )
    parts = [
        device(
            f"gpu-0-part-{i}",
            consumes_counters=[device_counter_consumption("gpu-0-counter-set", {"mem": "2"})],
        )
        for i in range(4)
    ]
    devices = slice_with_devices("b-devices", NODE, pool, DRIVER, full, *parts)
    return Allocator(
        [counters, devices], CLASSES, allocated_devices(*((DRIVER, NODE, d) for d in held_devices))
    )


def test_counters_stage() -> None:
    """A partition is held: the full GPU is blocked by the counters, 3 partitions are left."""
    allocator = _partitioned("gpu-0-part-1")
    req = only_request(allocator.explain([claim("c", request("req", "gpu", 4))]))
    assert req.funnel == funnel(5, 5, 5, 4, 4, 3, 3)
    assert req.reasons == [
        "only 3 of the 4 free devices of class gpu are not blocked by partitions in use, "
        "4 needed: the mem of gpu-0 are taken by claim default/allocated-0"
    ]


def test_counters_stage_full_device_taken() -> None:
    allocator = _partitioned("gpu-0")
    req = only_request(allocator.explain([claim("c", request("req", "gpu"))]))
    assert req.funnel == funnel(5, 5, 5, 4, 4, 0, 0)
    assert len(req.reasons) == 1


def test_counters_stage_names_the_counter_set() -> None:
    """Which device's parts ran out (the device the counter set stands for), and who holds
    what consumes them."""
    allocator = _partitioned("gpu-0")
    [reason] = only_request(allocator.explain([claim("c", request("req", "gpu"))])).reasons
    assert reason.startswith("all 4 free devices of class gpu are blocked by partitions"), reason
    assert reason.endswith(": gpu-0 is taken whole by claim default/allocated-0"), reason
    assert "counter" not in reason, reason
    assert "default/allocated-0" in reason, reason


# --- firstAvailable, constraints, competition -----------------------------------------


def test_first_available_reports_every_alternative() -> None:
    allocator = Allocator([gpus()], CLASSES, held(NODE, 0, 1, 2))
    prioritized = request_with_prioritized_list(
        "gpus", sub_request("eight", "gpu", 8), sub_request("two", "gpu", 2)
    )
    explanation = allocator.explain([claim("c", prioritized)])
    assert explanation.satisfiable is True
    eight, two = only_node(explanation).requests
    assert (eight.request, eight.needed) == ("gpus/eight", 8)
    assert (two.request, two.needed) == ("gpus/two", 2)
    assert eight.funnel == two.funnel == funnel(8, 8, 8, 5, 5, 5, 5)
    assert eight.reasons == [
        "5 of the 8 matching devices are free, 8 needed; held by default/allocated-0 (1), "
        "default/allocated-1 (1), default/allocated-2 (1)"
    ]
    assert two.reasons == []


def test_first_available_none_fits() -> None:
    allocator = Allocator([gpus(tainted=(6, 7))], CLASSES, held(NODE, *range(6)))
    prioritized = request_with_prioritized_list(
        "gpus", sub_request("four", "gpu", 4), sub_request("one", "gpu", 1)
    )
    explanation = allocator.explain([claim("c", prioritized)])
    assert explanation.satisfiable is False
    four, one = only_node(explanation).requests
    assert four.funnel == one.funnel == funnel(8, 8, 8, 2, 2, 2, 0)
    assert four.reasons[0].startswith("2 of the 8 matching devices are free, 4 needed")
    assert one.reasons[0].startswith("0 of the 2 free devices are not marked unusable, 1 needed")
    assert explanation.summary().splitlines() == [
        f"node {NODE}: claim default/c, request gpus/four: {four.reasons[0]}",
        f"node {NODE}: claim default/c, request gpus/one: {one.reasons[0]}",
    ]


def test_match_attribute_that_cannot_hold() -> None:
    """Three GPUs on one root when every root has two."""
    allocator = Allocator([gpus()], CLASSES)
    explanation = allocator.explain(
        [claim("c", request("req", "gpu", 3), constraints=[match_attribute(ROOT)])]
    )
    assert explanation.satisfiable is False
    report = only_node(explanation)
    assert report.reasons == [
        f'claim default/c: same="root" (matchAttribute {ROOT}): at most 2 of the devices that '
        "could be used have the same root (r0), 3 needed"
    ]
    req = only_request(explanation)
    assert req.funnel == funnel(8, 8, 8, 8, 8, 8, 8)
    assert req.reasons == []
    assert explanation.summary() == f"node {NODE}: {report.reasons[0]}"
    assert explanation.summary(named=False) == (
        f'node {NODE}: same="root" (matchAttribute {ROOT}): at most 2 of the devices that '
        "could be used have the same root (r0), 3 needed"
    )


def test_match_attribute_counts_only_eligible_devices() -> None:
    """Roots r0 and r1 lose a GPU each (held, tainted): only r2 and r3 keep two."""
    allocator = Allocator([gpus(tainted=(3,))], CLASSES, held(NODE, 0))
    ok = allocator.explain(
        [claim("c", request("req", "gpu", 2), constraints=[match_attribute(ROOT)])]
    )
    assert ok.satisfiable is True
    bad = allocator.explain(
        [claim("c", request("req", "gpu", 3), constraints=[match_attribute(ROOT)])]
    )
    [reason] = only_node(bad).reasons
    assert "at most 2 of the devices that could be used have the same root" in reason
    assert "(r2)" in reason or "(r3)" in reason


def test_match_attribute_across_requests() -> None:
    allocator = Allocator([gpus()], CLASSES)
    explanation = allocator.explain(
        [
            claim(
                "c",
                request("a", "gpu", 2),
                request("b", "gpu", 1),
                constraints=[match_attribute(ROOT, "a", "b")],
            )
        ]
    )
    assert explanation.satisfiable is False
    [reason] = only_node(explanation).reasons
    assert reason.startswith(
        f'claim default/c: same="root" (matchAttribute {ROOT}): at most 2 of the devices'
    )
    assert reason.endswith("3 needed")


def test_distinct_attribute_that_cannot_hold() -> None:
    allocator = Allocator([gpus(count=4)], CLASSES)
    explanation = allocator.explain(
        [claim("c", request("req", "gpu", 3), constraints=[distinct_attribute(ROOT)])]
    )
    assert explanation.satisfiable is False
    assert only_node(explanation).reasons == [
        f'claim default/c: distinct="root" (distinctAttribute {ROOT}): the devices that could '
        "be used have only 2 different root values, 3 needed"
    ]


def test_requests_that_compete() -> None:
    allocator = Allocator([gpus()], CLASSES)
    explanation = allocator.explain(
        [claim("a", request("req", "gpu", 5)), claim("b", request("req", "gpu", 5))]
    )
    assert explanation.satisfiable is False
    report = only_node(explanation)
    assert [r.claim for r in report.requests] == ["default/a", "default/b"]
    assert all(r.funnel == funnel(8, 8, 8, 8, 8, 8, 8) and not r.reasons for r in report.requests)
    [reason] = report.reasons
    assert "could be served alone, but not all together" in reason
    # who competes, and for what (issue 13)
    assert "claim default/a request req and claim default/b request req compete for " in reason
    assert "devices gpu.example.com/node-1/gpu-0, " in reason
    assert "(5 + 5 needed of 8)" in reason


def test_all_mode_reports_the_held_device() -> None:
    """allocationMode All needs every matching device; one is held, so it cannot be met."""
    allocator = Allocator([gpus()], CLASSES, held(NODE, 0))
    explanation = allocator.explain([claim("c", all_device_request("req", "gpu"))])
    assert explanation.satisfiable is False
    req = only_request(explanation)
    assert req.needed == "all"
    assert req.funnel == funnel(8, 8, 8, 7, 7, 7, 7)
    text = explanation.summary()
    assert "default/allocated-0" in text, text
    # One request: it did not compete with another one.
    assert "not all together" not in text, text


def test_all_mode_satisfiable() -> None:
    allocator = Allocator([gpus()], CLASSES)
    explanation = allocator.explain([claim("c", all_device_request("req", "gpu"))])
    assert explanation.satisfiable is True
    assert only_request(explanation).needed == "all"


# --- nodes ----------------------------------------------------------------------------


def _three_nodes(strategy: Strategy = "first-fit") -> Allocator:
    """node-a: all 4 GPUs held; node-b: 2 of 4 held; node-c: 4 free (given out of order)."""
    slices = [gpus("node-c", 4), gpus("node-a", 4), gpus("node-b", 4)]
    allocated = [*held("node-a", 0, 1, 2, 3), *held("node-b", 0, 1)]
    return Allocator(slices, CLASSES, allocated, strategy)


def test_first_fit_stops_at_the_first_satisfiable_node() -> None:
    explanation = _three_nodes().explain([claim("c", request("req", "gpu", 2))])
    assert explanation.satisfiable is True
    assert explanation.node == "node-b"
    assert [(n.node, n.satisfiable) for n in explanation.nodes] == [
        ("node-a", False),
        ("node-b", True),
    ]
    node_a, node_b = explanation.nodes
    [req] = node_a.requests
    assert req.funnel == funnel(4, 4, 4, 0, 0, 0, 0)
    assert req.reasons[0].startswith("0 of the 4 matching devices are free, 2 needed; held by ")
    assert node_b.requests[0].funnel == funnel(4, 4, 4, 2, 2, 2, 2)
    assert node_b.requests[0].reasons == []


def test_no_node_fits() -> None:
    explanation = _three_nodes().explain([claim("c", request("req", "gpu", 5))])
    assert explanation.satisfiable is False
    assert explanation.node is None
    assert [n.node for n in explanation.nodes] == ["node-a", "node-b", "node-c"]
    assert [n.requests[0].funnel for n in explanation.nodes] == [
        funnel(4, 4, 4, 0, 0, 0, 0),
        funnel(4, 4, 4, 2, 2, 2, 2),
        funnel(4, 4, 4, 4, 4, 4, 4),
    ]
    assert explanation.summary().splitlines() == [  # the same reason on each: one line
        "nodes node-a, node-b and node-c: claim default/c, request req: "
        "only 4 devices of class gpu here, 5 needed"
    ]


def test_node_argument_restricts_the_report() -> None:
    allocator = _three_nodes()
    explanation = allocator.explain([claim("c", request("req", "gpu", 2))], node="node-a")
    assert explanation.satisfiable is False
    assert [n.node for n in explanation.nodes] == ["node-a"]
    explanation = allocator.explain([claim("c", request("req", "gpu", 2))], node="node-c")
    assert (explanation.satisfiable, explanation.node) == (True, "node-c")


def test_node_without_slices() -> None:
    """A node name that nothing knows is a typo: say so and list the nodes that have devices."""
    allocator = _three_nodes()
    with pytest.raises(InvalidInputError, match=r"node 'node-z' has no ResourceSlices.*node-a"):
        allocator.explain([claim("c", request("req", "gpu"))], node="node-z")
    with pytest.raises(InvalidInputError, match=r"node 'node-z' has no ResourceSlices"):
        allocator.allocate([claim("c", request("req", "gpu"))], node="node-z")


@pytest.mark.parametrize("strategy", ["first-fit", "topology"])
def test_explain_names_the_node_allocate_chooses(strategy: Strategy) -> None:
    """The node explain calls allocatable is the node allocate() puts the claims on.

    node-a has 4 free GPUs, node-b 2 of 4: first-fit takes node-a (name order), the
    topology strategy may prefer the fuller node-b (best fit); explain must agree.
    """
    slices = [gpus("node-a", 4), gpus("node-b", 4)]
    allocator = Allocator(slices, CLASSES, held("node-b", 0, 1), strategy)
    claims = [claim("c", request("req", "gpu", 1))]
    results = allocator.allocate(claims)
    assert results is not None
    explanation = allocator.explain(claims)
    assert explanation.satisfiable is True
    assert explanation.node == results[0].node
    if strategy == "first-fit":
        assert explanation.node == "node-a"


def test_incomplete_pool_is_reported() -> None:
    incomplete = slice_with_devices(
        "s", NODE, resource_pool(NODE, 2), DRIVER, *(device(f"gpu-{i}") for i in range(2))
    )
    explanation = Allocator([incomplete], CLASSES).explain([claim("c", request("req", "gpu"))])
    assert explanation.satisfiable is False
    report = only_node(explanation)
    assert any("incomplete" in r and f"{DRIVER}/{NODE}" in r for r in report.reasons), report
    assert only_request(explanation).funnel["devices"] == 0


# --- output forms ---------------------------------------------------------------------


def test_to_dict_is_json() -> None:
    allocator = Allocator([gpus(tainted=(3, 4))], CLASSES, held(NODE, 0, 1, 2))
    explanation = allocator.explain([claim("c", request("req", "gpu", 4))])
    document = json.loads(json.dumps(explanation.to_dict()))
    assert document == {
        "satisfiable": False,
        "node": None,
        "nodes": [
            {
                "node": NODE,
                "satisfiable": False,
                "requests": [
                    {
                        "claim": "default/c",
                        "request": "req",
                        "device_class": "gpu",
                        "needed": 4,
                        "funnel": funnel(8, 8, 8, 5, 5, 5, 3),
                        "reasons": explanation.nodes[0].requests[0].reasons,
                        "enough": False,
                    }
                ],
                "reasons": [],
            }
        ],
    }


def test_to_text() -> None:
    allocator = Allocator([gpus(tainted=(3, 4))], CLASSES, held(NODE, 0, 1, 2))
    explanation = allocator.explain([claim("c", request("req", "gpu", 4))])
    lines = explanation.to_text().splitlines()
    counts = [8, 8, 8, 5, 5, 5, 3]
    assert lines == [
        "Claims are NOT allocatable.",
        "",
        f"node {NODE}: no",
        "  claim default/c, request req (class gpu, needs 4):",
        *(f"    {n:>5}  {STAGE_TEXT[s]}" for n, s in zip(counts, STAGES, strict=True)),
        f"    => {explanation.nodes[0].requests[0].reasons[0]}",
    ]


def test_to_text_satisfiable_with_node_reasons() -> None:
    allocator = _three_nodes()
    text = allocator.explain([claim("c", request("req", "gpu", 2))]).to_text()
    assert text.startswith("Claims are allocatable on node node-b.\n")
    assert "\nnode node-a: no\n" in text
    assert "\nnode node-b: ok\n" in text
    assert "node-c" not in text


def test_invalid_input_raises() -> None:
    allocator = Allocator([gpus()], CLASSES)
    with pytest.raises(InvalidInputError, match="device class 'tpu' does not exist"):
        allocator.explain([claim("c", request("req", "tpu"))])
    with pytest.raises(InvalidInputError, match=r"selectors\[0\]"):
        allocator.explain([claim("c", request("req", "gpu", selectors=["device.driver =="]))])


# --- reasons in the user's words (issue 14, item 12) ------------------------------------

NVIDIA = "gpu.nvidia.com"


def _nvidia(*architectures: str, memory: str = "140Gi") -> Allocator:
    """NVIDIA GPUs ``gpu-<i>`` (class gpu.nvidia.com) of the given architectures."""
    devices = [
        device(
            f"gpu-{i}",
            attributes={"architecture": arch, "productName": f"NVIDIA {arch[0]}200"},
            capacity={"memory": memory},
        )
        for i, arch in enumerate(architectures)
    ]
    classes = [device_class(NVIDIA, NVIDIA)]
    return Allocator([slice_with_devices("s", NODE, NODE, NVIDIA, *devices)], classes)


def _keywords(**spec: object) -> Wire:
    """The claim ``dra.request(**spec)`` makes (so that the patterns stay claimspec's)."""
    from dra_jupyter.claimspec import build_claim  # noqa: PLC0415

    return build_claim("c", spec, classes=[NVIDIA])


def test_a_selector_that_matches_none_says_what_the_devices_are() -> None:
    allocator = _nvidia(*["Blackwell"] * 8)
    selector = f'device.attributes["{NVIDIA}"].architecture == "Hopper"'
    [reason] = only_request(allocator.explain([_keywords(gpu=1, selector=selector)])).reasons
    assert reason == (
        'selector architecture == "Hopper" matches none of the 8 GPUs (they are Blackwell), '
        "1 needed"
    )


def test_a_selector_that_matches_some_counts_the_others_by_value() -> None:
    allocator = _nvidia("Hopper", "Hopper", "Blackwell", "Blackwell", "Blackwell", "Ampere")
    selector = f"device.attributes['{NVIDIA}'].architecture == 'Hopper'"
    [reason] = only_request(allocator.explain([_keywords(gpu=3, selector=selector)])).reasons
    assert reason == (
        "selector architecture == 'Hopper' matches only 2 of the 6 GPUs "
        "(the others are Blackwell (3), Ampere (1)), 3 needed"
    )


def test_model_and_memory_keywords_are_named_as_typed() -> None:
    allocator = _nvidia(*["Hopper"] * 4, memory="143771Mi")
    [model] = only_request(allocator.explain([_keywords(gpu=1, model="B200")])).reasons
    assert model == 'model="b200" matches none of the 4 GPUs (they are NVIDIA H200), 1 needed'
    [memory] = only_request(allocator.explain([_keywords(gpu=1, memory="200Gi")])).reasons
    assert memory == (
        'memory="200Gi" matches none of the 4 GPUs (the most memory is 140.4Gi, gpu-0), 1 needed'
    )
    for reason in (model, memory):
        assert "selector #" not in reason
        assert "rejects" not in reason
        assert "compareTo" not in reason
        assert "lowerAscii" not in reason


def test_two_keywords_that_rule_devices_out_are_both_named() -> None:
    allocator = _nvidia("Hopper", "Hopper", "Blackwell", "Blackwell", memory="80Gi")
    selector = f'device.attributes["{NVIDIA}"].architecture == "Hopper"'
    explanation = allocator.explain([_keywords(gpu=1, memory="100Gi", selector=selector)])
    [reason] = only_request(explanation).reasons
    assert reason.startswith("0 of the 4 GPUs match everything asked, 1 needed: "), reason
    assert 'memory="100Gi" matches none of the 4 GPUs (the most memory is 80Gi, gpu-0)' in reason
    assert (
        'selector architecture == "Hopper" matches only 2 of the 4 GPUs '
        "(the others are Blackwell)" in reason
    )


def test_class_stage_names_the_devices() -> None:
    allocator = _nvidia(*["Hopper"] * 8)
    [reason] = only_request(allocator.explain([_keywords(gpu=9)])).reasons
    assert reason == "only 8 GPUs here (class gpu.nvidia.com), 9 needed"


def test_counters_stage_in_device_words() -> None:
    """Counters named ``memory-slice-<n>`` are the memory slices of the GPU whose counter
    set they are; not the counter names, not ``+N more``."""
    pool = resource_pool(NODE, 2)
    slices = {f"memory-slice-{i}": "1" for i in range(8)}
    counters = slice_with_counter_sets(
        "a-counters",
        NODE,
        pool,
        DRIVER,
        counter_set("gpu-3-counter-set", {**slices, "decoders": "7", "copy-engines": "8"}),
    )
    full = device(
        "gpu-3",
        consumes_counters=[
            device_counter_consumption(
                "gpu-3-counter-set", {**slices, "decoders": "7", "copy-engines": "8"}
            )
        ],
    )
    part = device(
        "gpu-3-mig-1g-0",
        consumes_counters=[
            device_counter_consumption("gpu-3-counter-set", {"memory-slice-0": "1"})
        ],
    )
    allocator = Allocator(
        [counters, slice_with_devices("b-devices", NODE, pool, DRIVER, full, part)],
        CLASSES,
        [allocated_claim("x", device_allocation_result("r", DRIVER, NODE, "gpu-3-mig-1g-0"))],
    )
    [reason] = only_request(allocator.explain([claim("c", request("req", "gpu"))])).reasons
    assert reason == (
        "the free device of class gpu is blocked by partitions in use, 1 needed: "
        "the memory slices of gpu-3 are taken by claim default/x"
    )


def test_requests_that_compete_for_the_parts_of_a_gpu() -> None:
    """The whole GPU and its partitions draw on the same counter set: the competition names
    the GPU, not the counter set."""
    allocator = _partitioned()
    explanation = allocator.explain(
        [claim("a", request("one", "gpu")), claim("b", request("four", "gpu", 4))]
    )
    assert explanation.satisfiable is False
    [reason] = only_node(explanation).reasons
    assert reason.startswith("each request could be served alone, but not all together: ")
    assert reason.endswith(
        "claim default/a request one and claim default/b request four compete for devices "
        f"{DRIVER}/{NODE}/gpu-0, {DRIVER}/{NODE}/gpu-0-part-0, {DRIVER}/{NODE}/gpu-0-part-1 "
        "and 2 more (1 + 4 needed of 5) and the parts (partitions) of gpu-0"
    ), reason
    assert "counter" not in reason


def test_one_request_whose_constraints_cannot_hold_together() -> None:
    """One request, two constraints that each could hold: it is the two together that
    cannot, not requests that compete (there is one)."""
    numa = f"{DRIVER}/numa"
    slices = [
        slice_with_devices(
            "s",
            NODE,
            NODE,
            DRIVER,
            *(
                device(f"gpu-{i}", attributes={"root": f"r{i // 2}", "numa": i // 4})
                for i in range(8)
            ),
        )
    ]
    allocator = Allocator(slices, CLASSES)
    explanation = allocator.explain(
        [
            claim(
                "c",
                request("req", "gpu", 2),
                constraints=[match_attribute(ROOT), distinct_attribute(numa)],
            )
        ]
    )
    assert explanation.satisfiable is False
    assert only_node(explanation).reasons == [
        'the devices asked for are here, but no choice of them meets same="root" and '
        'distinct="numa" at once'
    ]


def test_all_mode_that_matches_nothing_needs_at_least_one() -> None:
    allocator = _nvidia(*["Hopper"] * 2)
    [reason] = only_request(allocator.explain([_keywords(gpu="all", model="B200")])).reasons
    assert reason == (
        'model="b200" matches none of the 2 GPUs (they are NVIDIA H200), at least one needed'
    )


def test_alike_nodes_are_said_once() -> None:
    """A refusal on nodes that all refuse for the same reasons is one line naming them, not
    one line per node (issue 42, item 13: N+1 lines on N nodes); a node with reasons of its
    own keeps its line."""
    from dra_jupyter.inventory import simulated  # noqa: PLC0415
    from dra_jupyter.kube.simulate import simulate  # noqa: PLC0415

    def summary(nodes: int, count: int) -> str:
        cluster = simulate(simulated.load("h200-8x"), nodes)
        allocator = Allocator(list(cluster.slices), list(cluster.device_classes))
        wanted = claim("big", request("gpus", "gpu.nvidia.com", count))
        return allocator.explain([wanted]).summary()

    reason = "claim default/big, request gpus: only 8 GPUs here (class gpu.nvidia.com), 9 needed"
    assert summary(1, 9) == f"node gpu-node-1: {reason}"
    assert summary(3, 9) == f"nodes gpu-node-1, gpu-node-2 and gpu-node-3: {reason}"
    named = "gpu-node-1, gpu-node-10, gpu-node-11"  # in the order explain lists the nodes
    assert summary(40, 9) == f"40 nodes ({named} and 37 more): {reason}"

"""Differential: the same slices and claims, allocated by the real kube-scheduler and by our
first-fit allocator. Both must be valid (each device matches its request, constraints hold)
and, because upstream's search order is deterministic (pools by driver and name, devices in
slice order, first solution wins), first-fit must pick the same devices; the cases marked
unique have only one valid answer at all.

Each case runs alone on its node: a pod pinned there with a claim from a template; our
allocator sees the cluster's slices, classes and allocated claims as listed just before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.allocator import Allocator
from dra_jupyter.cli import main as cli_main
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.connect import to_model, to_wire
from tests.k8s.conftest import wait_for
from tests.k8s.test_publish import unpublish
from tests.k8s.test_scheduling import Cluster, pod, template

Wire = dict[str, Any]
Pick = list[tuple[str, str, str, str]]  # (request, driver, pool, device) per result

H100, MIG = ("h100-8x", "h100-node-1"), ("h200-mig", "h200-mig-1")
GPUS = [f"gpu-{i}" for i in range(8)]
# inventory, node, request, and the only valid answer (devices; [] = none) where there is one
CASES: list[tuple[str, str, Wire, list[str] | None]] = [
    (*H100, {"gpu": 1}, None),
    (*H100, {"gpu": 2, "same": "pcieRoot"}, None),
    (*H100, {"gpu": 4, "same": "numaNode"}, None),
    (*H100, {"gpu": 2, "distinct": "numaNode"}, None),
    (*H100, {"gpu": 8}, GPUS),
    (
        *H100,
        {"gpu": 2, "selector": 'device.attributes["gpu.nvidia.com"].partition2 == 6'},
        ["gpu-4", "gpu-5"],
    ),
    (*H100, {"gpu": 3, "distinct": "numaNode"}, []),  # 2 NUMA nodes
    (*H100, {"alternatives": [{"gpu": 9}, {"gpu": 2, "model": "H100"}]}, None),
    (*MIG, {"mig": "3g.71gb", "count": 2}, ["gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-4"]),
    (*MIG, {"mig": "1g.18gb", "count": 7}, [f"gpu-0-mig-1g18gb-19-{i}" for i in range(7)]),
    (*MIG, {"mig": "2g.35gb", "count": 3}, [f"gpu-0-mig-2g35gb-14-{i}" for i in (0, 2, 4)]),
    (*MIG, {"mig": "1g.18gb", "count": 8}, []),  # 7 memory slices
    (*MIG, {"gpu": 1}, ["gpu-0"]),  # the whole GPU
    ("mi300x-8", "mi300x-node-1", {"gpu": 2, "same": "numaNode"}, None),
    ("tpu-v5e-8", "tpu-v5e-node-1", {"tpu": 4}, None),
]
# Cases with devices in use: a pod holding HELD[0] on the node while the case is allocated.
HELD: list[tuple[str, str, Wire, Wire]] = [  # inventory, node, held, request
    (*H100, {"gpu": 1}, {"gpu": 2, "same": "pcieRoot"}),
    (*H100, {"gpu": 3}, {"gpu": 4, "same": "numaNode"}),
    (*MIG, {"mig": "4g.71gb"}, {"mig": "3g.71gb"}),
    (*MIG, {"mig": "1g.18gb", "count": 2}, {"mig": "2g.35gb", "count": 2}),
]


@pytest.fixture(scope="module")
def inventories(kubeconfig: Path, api: client.ApiClient) -> Iterator[None]:
    """The cases' inventories, published for this module and deleted after it: the
    session's cluster is shared, and other tests expect only the published fixture's
    nodes (a leftover h100-node-1 drew their pods and reserve)."""
    for name in sorted({case[0] for case in [*CASES, *HELD]}):
        argv = ["publish-slices", "--inventory", name, "--kubeconfig", str(kubeconfig)]
        assert cli_main(argv) == 0
    yield
    unpublish(api, {case[1] for case in [*CASES, *HELD]})


def pick(allocation: Wire | None) -> Pick | None:
    if allocation is None:
        return None
    return [
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in allocation["devices"]["results"]
    ]


def ours(api: client.ApiClient, claim: Wire, node: str) -> Pick | None:
    """First-fit on what the cluster holds now."""
    resource = client.ResourceV1Api(api)
    slices = [to_wire(api, s) for s in resource.list_resource_slice().items]
    classes = [to_wire(api, c) for c in resource.list_device_class().items]
    claims = [to_wire(api, c) for c in resource.list_resource_claim_for_all_namespaces().items]
    allocated = [c for c in claims if c.get("status", {}).get("allocation")]
    allocator = Allocator(slices, classes, allocated, "first-fit")
    results = allocator.allocate([claim], node=node)
    return pick(results[0].to_dict()) if results is not None else None


def upstream(k: Cluster, name: str, node: str) -> Pick | None:
    """What kube-scheduler allocates for a pod pinned to ``node``; None if unschedulable."""
    body = pod(name, {"resourceClaimTemplateName": name})
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    k.create_pod(body)

    def outcome() -> tuple[str, Wire | None] | None:
        statuses = k.pod(name).get("status", {})
        claims = statuses.get("resourceClaimStatuses") or []
        if claims and claims[0].get("resourceClaimName"):
            allocation = (k.claim(claims[0]["resourceClaimName"]) or {}).get("status", {})
            if allocation.get("allocation"):
                return claims[0]["resourceClaimName"], allocation["allocation"]
        for condition in statuses.get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return "", None
        return None

    claim_name, allocation = wait_for(f"pod {name} allocated or unschedulable", outcome)
    generated = claim_name or k.generated_claim(name)
    k.delete_pod(name)
    wait_for(f"claim {generated} deleted", lambda: k.claim(generated) is None)
    return pick(allocation)


def valid(pick_: Pick, claim: Wire, inventory: str, node: str) -> None:
    """Every picked device exists on ``node`` and matches the constraints of ``claim``."""
    inv = simulated.load(inventory)
    devices = {d["name"]: d for s in inv.slices for d in s["spec"].get("devices", [])}
    assert all(pool == node and device in devices for _, _, pool, device in pick_)
    assert len({device for *_, device in pick_}) == len(pick_)
    for constraint in claim["spec"]["devices"].get("constraints", []):
        for kind, attribute in constraint.items():
            values = [
                tuple(devices[device]["attributes"][attribute.split("/")[-1]].values())
                if attribute.startswith("gpu.nvidia.com/")
                else tuple(devices[device]["attributes"][attribute].values())
                for *_, device in pick_
            ]
            if kind == "matchAttribute":
                assert len(set(values)) == 1, (attribute, values)
            else:
                assert len(set(values)) == len(values), (attribute, values)


def compare(api: client.ApiClient, namespace: str, inventory: str, node: str, spec: Wire) -> Pick:
    """Allocate ``spec`` both ways on ``node``; both valid and equal. Returns the pick."""
    k = Cluster(api, namespace)
    classes = [c["metadata"]["name"] for c in simulated.load(inventory).device_classes]
    body = template("case", spec, namespace, classes)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "case", "namespace": namespace},
        "spec": body["spec"]["spec"],
    }
    expected = ours(api, claim, node)
    k.resource.create_namespaced_resource_claim_template(
        namespace, body=to_model(client.V1ResourceClaimTemplate, body)
    )
    got = upstream(k, "case", node)
    if got is not None:
        valid(got, claim, inventory, node)
    if expected is not None:
        valid(expected, claim, inventory, node)
    assert got == expected
    return got or []


@pytest.mark.parametrize(
    ("inventory", "node", "spec", "only"),
    CASES,
    ids=[f"{c[1]} " + " ".join(f"{k}={v}" for k, v in c[2].items()) for c in CASES],
)
def test_kube_scheduler_and_first_fit_pick_the_same_devices(
    api: client.ApiClient,
    namespace: str,
    inventories: None,
    inventory: str,
    node: str,
    spec: Wire,
    only: list[str] | None,
) -> None:
    got = compare(api, namespace, inventory, node, spec)
    if only is not None:
        assert sorted(device for *_, device in got) == sorted(only)


@pytest.mark.parametrize(
    ("inventory", "node", "held", "spec"),
    HELD,
    ids=[f"{c[1]} " + " ".join(f"{k}={v}" for k, v in c[3].items()) for c in HELD],
)
def test_with_devices_in_use_both_pick_the_same_free_devices(
    api: client.ApiClient,
    namespace: str,
    inventories: None,
    inventory: str,
    node: str,
    held: Wire,
    spec: Wire,
) -> None:
    k = Cluster(api, namespace)
    classes = [c["metadata"]["name"] for c in simulated.load(inventory).device_classes]
    holder = template("held", held, namespace, classes)
    k.resource.create_namespaced_resource_claim_template(
        namespace, body=to_model(client.V1ResourceClaimTemplate, holder)
    )
    body = pod("holder", {"resourceClaimTemplateName": "held"})
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    k.create_pod(body)
    held_claim = k.generated_claim("holder")
    in_use = pick(k.allocated(held_claim))
    assert in_use is not None
    got = compare(api, namespace, inventory, node, spec)
    assert not {device for *_, device in got} & {device for *_, device in in_use}
    k.delete_pod("holder")
    wait_for(f"claim {held_claim} deleted", lambda: k.claim(held_claim) is None)

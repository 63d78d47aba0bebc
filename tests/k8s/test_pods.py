"""Launching a pod with our claims (what dra.run will do), against the real scheduler."""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import AllocationError, InvalidInputError
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.pods import PodLauncher, scheduler_reason, workload_pod
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.test_claims import CLASSES

IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet
ON_SIMULATED = {"dra-jupyter/inventory": "h200-8x"}


@pytest.mark.pure
def test_the_pod_uses_every_claim() -> None:
    pod = workload_pod("run-1", ["a", "b"], image=IMAGE, command=["python", "-c", "pass"])
    spec = pod["spec"]
    assert spec["resourceClaims"] == [
        {"name": "claim-0", "resourceClaimName": "a"},
        {"name": "claim-1", "resourceClaimName": "b"},
    ]
    assert spec["containers"][0]["resources"]["claims"] == [
        {"name": "claim-0"},
        {"name": "claim-1"},
    ]
    assert spec["restartPolicy"] == "Never"
    with pytest.raises(InvalidInputError, match="give at least one claim"):
        workload_pod("run-1", [], image=IMAGE)


def test_a_launched_pod_gets_its_claims_allocated_on_one_node(
    api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    claims = ClaimClient(api, namespace)
    for name, spec in (("gpus", {"gpu": 2, "same": "pcieRoot"}), ("one", {"gpu": 1})):
        claims.create(build_claim(name, spec, namespace=namespace, classes=CLASSES))
    launcher = PodLauncher(api, namespace)
    launcher.create(
        workload_pod(
            "run-1", ["gpus", "one"], image=IMAGE, namespace=namespace, node_selector=ON_SIMULATED
        )
    )
    placement = launcher.wait_placed("run-1", ["gpus", "one"], timeout=90)
    assert placement.node in published.node_names
    devices = [
        (r["pool"], r["device"])
        for allocation in placement.allocations.values()
        for r in allocation["devices"]["results"]
    ]
    assert len(devices) == len(set(devices)) == 3
    assert {pool for pool, _ in devices} == {placement.node}
    client.CoreV1Api(api).delete_namespaced_pod("run-1", namespace, grace_period_seconds=0)


def test_an_impossible_pod_reports_the_scheduler_reason(
    api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    claims = ClaimClient(api, namespace)
    claims.create(build_claim("nine", {"gpu": 9}, namespace=namespace, classes=CLASSES))
    launcher = PodLauncher(api, namespace)
    launcher.create(
        workload_pod(
            "run-2", ["nine"], image=IMAGE, namespace=namespace, node_selector=ON_SIMULATED
        )
    )
    core = client.CoreV1Api(api)
    wait_for(
        "the scheduler's first answer",
        lambda: scheduler_reason(to_wire(api, core.read_namespaced_pod("run-2", namespace))),
    )
    reasons: list[str] = []
    with pytest.raises(AllocationError) as raised:
        launcher.wait_placed("run-2", ["nine"], timeout=1, on_wait=reasons.append)
    message = str(raised.value)
    assert message.startswith("pod run-2 was not scheduled within 1 s: 0/")
    assert "cannot allocate all claims" in message
    assert len(reasons) == 1
    assert reasons[0] in message
    core.delete_namespaced_pod("run-2", namespace, grace_period_seconds=0)

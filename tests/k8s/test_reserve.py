"""The opt-in reserve mode against the real control plane: our allocator writes the claim's
``status.allocation`` (with kube-scheduler's finalizer), sees what is held cluster-wide, and a
pod that later uses the claim is placed where the devices are, on the same devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.api import Session
from dra_jupyter.errors import AllocationError, InvalidInputError
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.pods import PodLauncher, workload_pod
from dra_jupyter.kube.records import to_record
from dra_jupyter.kube.reserve import FINALIZER, clashes, withdraw
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.settings import Settings
from tests.k8s.conftest import wait_for
from tests.k8s.test_backend import session
from tests.k8s.test_pods import IMAGE, ON_SIMULATED

MAX_NODES = 30  # a bound on the nodes of the test cluster with 8 GPUs free


@pytest.mark.pure
def test_reserve_needs_the_kubernetes_backend(tmp_path: Path) -> None:
    local = Session(Settings(ledger=tmp_path / "ledger.sqlite", inventory="h200-8x"))
    with pytest.raises(InvalidInputError, match=r"^dra\.request: reserve=True applies to the K"):
        local.request(gpu=1, reserve=True)


def test_a_reserved_claim_is_allocated_and_a_pod_gets_the_same_devices(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace)
    claim = alice.request(gpu=2, same="pcieRoot", name="held", reserve=True)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # the devices are the pod's, not ours
    assert claim.state == "allocated"
    stored = ClaimClient(api, namespace).get("held")
    assert stored is not None
    assert FINALIZER in stored["metadata"]["finalizers"]
    allocation = stored["status"]["allocation"]
    [term] = allocation["nodeSelector"]["nodeSelectorTerms"]
    [node] = term["matchFields"][0]["values"]
    reserved = [(r["pool"], r["device"]) for r in allocation["devices"]["results"]]
    assert len(reserved) == 2 and {pool for pool, _ in reserved} == {node}
    assert {r.device.rsplit("/", 1)[1] for r in claim.devices.rows} == {d for _, d in reserved}

    launcher = PodLauncher(api, namespace)
    pod = workload_pod("uses-held", ["held"], image=IMAGE, namespace=namespace)
    pod["spec"]["nodeSelector"] = ON_SIMULATED
    launcher.create(pod)
    placement = launcher.wait_placed("uses-held", ["held"], timeout=90)
    assert placement.node == node
    assert [
        (r["pool"], r["device"]) for r in placement.allocations["held"]["devices"]["results"]
    ] == reserved
    client.CoreV1Api(api).delete_namespaced_pod("uses-held", namespace, grace_period_seconds=0)


def test_reservations_count_against_each_other_and_busy_leaves_nothing(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """Whole nodes of GPUs are reserved until none is left (other tests' claims may hold some,
    on more nodes): no device is reserved twice, and the refused request leaves nothing."""
    alice = session(kubeconfig, namespace)
    made = []
    with pytest.raises(AllocationError) as raised:
        for i in range(MAX_NODES):
            made.append(alice.request(gpu=8, name=f"node-{i}", reserve=True))
    assert len(made) >= 1
    refused = f"node-{len(made)}"
    assert str(raised.value).startswith(
        f"dra.request(reserve=True): claim {refused}: the devices are busy now:\n"
    )
    assert ClaimClient(api, namespace).get(refused) is None
    reserved = [
        (r["driver"], r["pool"], r["device"])
        for claim in made
        for r in claim.allocation["devices"]["results"]
    ]
    assert len(reserved) == len(set(reserved)) == 8 * len(made)
    holders = {r.device: r.holder for r in alice.devices().rows}
    for claim in made:  # each device of ours is held by our claim alone
        for r in claim.allocation["devices"]["results"]:
            assert holders[f"{r['driver']}/{r['pool']}/{r['device']}"] == f"{claim.name} (alice)"
    for claim in made:
        claim.release()
    wait_for("the reserved claims' deletion", lambda: ClaimClient(api, namespace).list() == [])


def test_a_clash_is_found_and_a_reservation_can_be_withdrawn(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace)
    claim = alice.request(gpu=1, name="mine", reserve=True)
    mine = claim.allocation
    theirs = to_record(
        {
            "metadata": {"name": "theirs", "namespace": "other"},
            "spec": {},
            "status": {"allocation": mine},
        }
    )
    assert clashes(mine, [theirs]) == ["other/theirs"]
    assert clashes(mine, [to_record({"metadata": {"name": "x", "namespace": "o"}})]) == []
    kube = alice.backend
    assert isinstance(kube, KubernetesBackend)
    withdraw(kube, "mine")
    stored = ClaimClient(api, namespace).get("mine")
    assert stored is not None
    assert not (stored.get("status") or {}).get("allocation")
    assert FINALIZER not in (stored["metadata"].get("finalizers") or [])
    assert claim.release() is True
    assert ClaimClient(api, namespace).get("mine") is None

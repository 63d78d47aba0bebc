"""``dra.request(share="20Gi")`` on Kubernetes (#40, item 5): a claim asking a device that
allows several allocations (``allowMultipleAllocations``, NVIDIA's consumable shares) for
part of its memory (``capacity.requests.memory``), and only such a device (the selector
``device.allowMultipleAllocations``). The real kube-scheduler puts two such claims on the
shared GPU, each result with its ``shareID`` and ``consumedCapacity``, and leaves a third
that would pass the GPU's memory pending, though a whole ordinary GPU beside it is free;
our own allocator, given the same slices and claims, answers the same. Where no device of
the class allows several claims, the request is refused in one line before anything is
made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_jupyter.allocator import Allocator
from dra_jupyter.cli import main as cli_main
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import nvidia
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.test_backend import session
from tests.k8s.test_publish import unpublish
from tests.k8s.test_scheduling import Cluster, pod

Wire = dict[str, Any]
NODE = "shared-node-1"  # an ordinary H200, and one (143771Mi) that up to 4 claims share
SHARED = "gpu-1"


@pytest.fixture
def shared_node(kubeconfig: Path, api: client.ApiClient, tmp_path_factory: Any) -> Iterator[None]:
    """A node with two GPUs: ``gpu-0`` a whole one only, ``gpu-1`` published as NVIDIA's
    driver does with consumable shares; gone after the test (the session's cluster is
    shared: other tests see none)."""
    ordinary, gpu = nvidia.hgx_node(NODE, nvidia.H200)["spec"]["devices"][:2]
    one = nvidia.gpu_slice(NODE, [ordinary, nvidia.consumable_shares(gpu, 4)])
    path = tmp_path_factory.mktemp("shared") / "slices.yaml"
    path.write_text(yaml.safe_dump_all([one, *nvidia.device_classes()]))
    assert (
        cli_main(["publish-slices", "--inventory", str(path), "--kubeconfig", str(kubeconfig)]) == 0
    )
    yield
    unpublish(api, {NODE})


def on_node(name: str, claim: str) -> Wire:
    body = pod(name, {"resourceClaimName": claim})
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return body


def unschedulable(k: Cluster, name: str) -> Wire | None:
    conditions = k.pod(name).get("status", {}).get("conditions") or []
    return next(
        (c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None
    )


def ours(api: client.ApiClient, claim: Wire) -> Wire | None:
    """Our allocator's answer for ``claim`` on what the cluster holds now (None: none)."""
    resource = client.ResourceV1Api(api)
    slices = [to_wire(api, s) for s in resource.list_resource_slice().items]
    classes = [to_wire(api, c) for c in resource.list_device_class().items]
    claims = [to_wire(api, c) for c in resource.list_resource_claim_for_all_namespaces().items]
    allocated = [c for c in claims if c.get("status", {}).get("allocation")]
    allocator = Allocator(slices, classes, allocated, "first-fit")
    results = allocator.allocate([claim], node=NODE)
    return results[0].to_dict() if results is not None else None


def test_two_shares_land_on_one_gpu_and_a_third_past_its_memory_waits(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    shared_node: None,
) -> None:
    k = Cluster(api, namespace)
    alice = session(kubeconfig, namespace)
    first = alice.request(share="20Gi", name="share-a")
    second = alice.request(share="10G", name="share-b")  # not a multiple of 1Mi
    assert (first.state, second.state) == ("pending", "pending")
    expected: list[Wire | None] = []
    results = []
    for name, share in (("share-a", "20Gi"), ("share-b", "10G")):
        claim = k.claim(name)
        assert claim is not None
        [request] = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["capacity"] == {"requests": {"memory": share}}
        assert request["exactly"]["selectors"] == [
            {"cel": {"expression": "device.allowMultipleAllocations"}}
        ]
        expected.append(ours(api, claim))
        k.create_pod(on_node(f"pod-{name}", name))
        [result] = k.allocated(name)["devices"]["results"]
        results.append(result)
    assert [(r["pool"], r["device"]) for r in results] == [(NODE, SHARED)] * 2
    # memory as asked, rounded up to the 1Mi step (10G is 9536.7Mi); one of the 4 shares
    assert [r["consumedCapacity"] for r in results] == [
        {"memory": "20Gi", "shares": "1"},
        {"memory": "9537Mi", "shares": "1"},
    ]
    share_ids = {r["shareID"] for r in results}
    assert len(share_ids) == 2 and all(share_ids)
    # ours, asked just before each pod, picks the same device and consumes the same
    for want, got in zip(expected, results, strict=True):
        assert want is not None
        [mine] = want["devices"]["results"]
        assert (mine["pool"], mine["device"]) == (got["pool"], got["device"])
        assert mine["consumedCapacity"] == got["consumedCapacity"]
        assert mine["shareID"]

    # 120Gi more would pass the GPU's 140.4Gi: kube-scheduler leaves it pending, as ours does,
    # and does not give it the whole gpu-0 (whose 140.4Gi a capacity filter alone would pass)
    third = alice.request(share="120Gi", name="share-c")
    claim = k.claim("share-c")
    assert claim is not None
    assert ours(api, claim) is None
    k.create_pod(on_node("pod-share-c", "share-c"))
    condition = wait_for("pod-share-c unschedulable", lambda: unschedulable(k, "pod-share-c"))
    assert condition["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in condition["message"]
    assert "\n" not in condition["message"]
    assert third.state == "pending"
    assert "allocation" not in (k.claim("share-c") or {}).get("status", {})

    for name in ("pod-share-a", "pod-share-b", "pod-share-c"):
        k.delete_pod(name)


def test_a_share_is_refused_where_no_device_allows_several_claims(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """The published H200s are whole devices only: kube-scheduler would give a whole one to
    ``share="20Gi"`` (a capacity request is a filter there), so it is refused first."""
    alice = session(kubeconfig, namespace)
    with pytest.raises(InvalidInputError) as caught:
        alice.request(share="20Gi", name="share-x")
    message = str(caught.value)
    assert message.startswith(
        "dra.request: share='20Gi' asks for part of a device that several claims hold at once "
        "(allowMultipleAllocations), and no gpu.nvidia.com device on the cluster at "
    ), message
    assert message.endswith(
        "leave share= out for a whole device, or ask the driver to share "
        "one (share='time-slicing' or share='mps')"
    ), message
    assert "\n" not in message
    assert ClaimClient(api, namespace).get("share-x") is None  # nothing was made
    assert alice.request(gpu=1, name="whole").state == "pending"  # a whole one still is

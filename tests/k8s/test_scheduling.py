"""Pods with claims on the simulated nodes: the real resourceclaim controller makes claims from
templates, the real kube-scheduler allocates devices from the published slices and binds the
pod (which then stays Pending: there is no kubelet), and deleting the pod frees the claim."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.test_claims import CLASSES

Wire = dict[str, Any]


def pod(name: str, claim: Wire) -> Wire:
    """A pod on a simulated node using ``claim`` ({resourceClaimName | ...TemplateName})."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {"dra-jupyter/inventory": "h200-8x"},
            "containers": [
                {
                    "name": "work",
                    "image": "registry.k8s.io/pause:3.10",  # never pulled: no kubelet
                    "resources": {"claims": [{"name": "devices"}]},
                }
            ],
            "resourceClaims": [{"name": "devices", **claim}],
        },
    }


def template(name: str, spec: Wire, namespace: str, classes: list[str] = CLASSES) -> Wire:
    claim = build_claim(name, spec, namespace=namespace, classes=classes)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim["spec"]},
    }


class Cluster:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def create_pod(self, body: Wire) -> None:
        self.core.create_namespaced_pod(self.namespace, body=to_model(client.V1Pod, body))

    def pod(self, name: str) -> Wire:
        return to_wire(self.api, self.core.read_namespaced_pod(name, self.namespace))

    def claim(self, name: str) -> Wire | None:
        try:
            got = self.resource.read_namespaced_resource_claim(name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return to_wire(self.api, got)

    def delete_pod(self, name: str) -> None:
        # Grace 0: no kubelet will ever confirm that the containers stopped.
        self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def generated_claim(self, pod_name: str) -> str:
        def name() -> str | None:
            statuses = self.pod(pod_name).get("status", {}).get("resourceClaimStatuses") or []
            return statuses[0].get("resourceClaimName") if statuses else None

        return wait_for(f"the claim of pod {pod_name}", name)

    def allocated(self, claim: str) -> Wire:
        return wait_for(
            f"claim {claim} allocated",
            lambda: (self.claim(claim) or {}).get("status", {}).get("allocation"),
        )

    def bound_node(self, pod_name: str) -> str:
        def node() -> str | None:
            name: str | None = self.pod(pod_name)["spec"].get("nodeName")
            return name

        return wait_for(f"pod {pod_name} bound", node)


def devices_of(published: SimulatedCluster, allocation: Wire) -> list[Wire]:
    """The published devices that ``allocation``'s results name."""
    by_id = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
        for s in published.slices
        for d in s["spec"].get("devices", [])
    }
    return [by_id[(r["driver"], r["pool"], r["device"])] for r in allocation["devices"]["results"]]


def test_the_scheduler_allocates_a_template_claim_and_deleting_the_pod_deletes_it(
    api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    k = Cluster(api, namespace)
    body = template("two-gpus", {"gpu": 2, "same": "pcieRoot"}, namespace)
    k.resource.create_namespaced_resource_claim_template(
        namespace, body=to_model(client.V1ResourceClaimTemplate, body)
    )
    k.create_pod(pod("train", {"resourceClaimTemplateName": "two-gpus"}))

    name = k.generated_claim("train")  # made by the resourceclaim controller
    allocation = k.allocated(name)  # by kube-scheduler
    node = k.bound_node("train")
    assert node in published.node_names
    results = allocation["devices"]["results"]
    assert [(r["request"], r["driver"], r["pool"]) for r in results] == [
        ("gpu", "gpu.nvidia.com", node)
    ] * 2
    roots = {
        d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
        for d in devices_of(published, allocation)
    }
    assert len(roots) == 1  # matchAttribute pcieRoot held
    assert allocation["nodeSelector"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    ]
    claim = k.claim(name)
    assert claim is not None
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["train"]
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "devices"
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    assert k.pod("train")["status"]["phase"] == "Pending"  # bound, never run: no kubelet

    k.delete_pod("train")
    wait_for(f"claim {name} deleted", lambda: k.claim(name) is None)


def test_a_claim_of_our_own_is_allocated_for_its_pod_and_freed_after_it(
    api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    """What dra.request() on Kubernetes will do: create the claim, let a pod use it."""
    k = Cluster(api, namespace)
    claim = build_claim("nb-mig", {"gpu": 1, "model": "H200"}, namespace=namespace, classes=CLASSES)
    k.resource.create_namespaced_resource_claim(
        namespace, body=to_model(client.ResourceV1ResourceClaim, claim)
    )
    k.create_pod(pod("job", {"resourceClaimName": "nb-mig"}))
    allocation = k.allocated("nb-mig")
    assert [
        d["attributes"]["productName"]["string"] for d in devices_of(published, allocation)
    ] == ["NVIDIA H200"]
    assert allocation["devices"]["results"][0]["pool"] == k.bound_node("job")

    k.delete_pod("job")

    # The controller drops the deleted pod from reservedFor, deallocates the claim and then
    # lifts its finalizer; the claim stays (it is ours to delete): the devices are free again.
    def free() -> Wire | None:
        claim = k.claim("nb-mig")
        assert claim is not None, "the controller deleted a claim it does not own"
        status = claim.get("status", {})
        held = status.get("reservedFor") or status.get("allocation")
        return None if held or claim["metadata"].get("finalizers") else claim

    wait_for("claim nb-mig freed", free)


def test_a_pod_asking_for_more_than_a_node_has_stays_unschedulable(
    api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    k = Cluster(api, namespace)
    body = template("nine-gpus", {"gpu": 9}, namespace)
    k.resource.create_namespaced_resource_claim_template(
        namespace, body=to_model(client.V1ResourceClaimTemplate, body)
    )
    k.create_pod(pod("too-big", {"resourceClaimTemplateName": "nine-gpus"}))

    def unschedulable() -> Wire | None:
        conditions = k.pod("too-big").get("status", {}).get("conditions") or []
        return next(
            (c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"),
            None,
        )

    condition = wait_for("PodScheduled=False", unschedulable)
    assert condition["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in condition["message"]
    assert condition["message"].startswith("0/")  # "0/N nodes are available: ..."
    name = k.generated_claim("too-big")
    claim = k.claim(name)
    assert claim is not None
    assert "allocation" not in claim.get("status", {})
    k.delete_pod("too-big")

"""DeviceTaintRules on the real control plane (Kubernetes 1.37.2, where ``resource.k8s.io/v1``
serves them and the DRADeviceTaintRules gate is on by default: no flag is needed): a
NoSchedule rule keeps kube-scheduler and our allocator agreeing on which devices may be
allocated, in dra.request's check, reserve mode and the hub's explanation; once the rule is
deleted, both allocate again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import AllocationError
from dra_jupyter.kube.connect import api_client, to_model
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.kube.spawn import explain_pending
from dra_jupyter.kube.taints import read_taint_rules
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.test_backend import session
from tests.k8s.test_rbac import SA, service_account_kubeconfig
from tests.k8s.test_scheduling import Cluster, pod, template

Wire = dict[str, Any]
XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


@contextmanager
def taint_rule(api: client.ApiClient, name: str, selector: Wire) -> Iterator[None]:
    """A DeviceTaintRule with the XID 79 taint, deleted at the end (the cluster is shared)."""
    resource = client.ResourceV1Api(api)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": dict(XID)},
    }
    resource.create_device_taint_rule(body=to_model(client.V1DeviceTaintRule, body))
    try:
        yield
    finally:
        try:
            resource.delete_device_taint_rule(name)
        except ApiException as error:
            if error.status != 404:
                raise


def unschedulable(k: Cluster, name: str) -> Wire:
    def condition() -> Wire | None:
        conditions = k.pod(name).get("status", {}).get("conditions") or []
        return next(
            (c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"),
            None,
        )

    return wait_for(f"pod {name} unschedulable", condition)


def test_a_rule_on_every_gpu_stops_both_allocators_until_it_is_deleted(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    k = Cluster(api, namespace)
    alice = session(kubeconfig, namespace)
    body = template("one-gpu", {"gpu": 1}, namespace)
    with taint_rule(api, "xid-79-everywhere", {"driver": "gpu.nvidia.com"}):
        # ours, as dra.request checks a request: never on this cluster as it is, and why
        with pytest.raises(AllocationError) as raised:
            alice.request(gpu=1, name="refused")
        message = str(raised.value)
        assert message.startswith("the request can never be met on the cluster at ")
        assert "gpu.nvidia.com/xid=79:NoSchedule (DeviceTaintRule xid-79-everywhere)" in message
        # the hub's explanation of a server's claim
        text = explain_pending(api, namespace, {"spec": body["spec"]["spec"]})
        assert text.startswith("can never be met on this cluster, even with every device free")
        assert "(DeviceTaintRule xid-79-everywhere)" in text
        # kube-scheduler: the pod's claim cannot be allocated on any node
        k.resource.create_namespaced_resource_claim_template(
            namespace, body=to_model(client.V1ResourceClaimTemplate, body)
        )
        k.create_pod(pod("waits", {"resourceClaimTemplateName": "one-gpu"}))
        condition = unschedulable(k, "waits")
        assert condition["reason"] == "Unschedulable"
        assert "cannot allocate all claims" in condition["message"]
        claim = k.claim(k.generated_claim("waits"))
        assert claim is not None and "allocation" not in claim.get("status", {})
    # the rule deleted: kube-scheduler places the pod, and once dra.devices() has read the
    # cluster again (the backend keeps what it read until then), our check lets it by too
    assert k.bound_node("waits") in published.node_names
    alice.devices()
    assert alice.request(gpu=1, name="allowed").state == "pending"
    k.delete_pod("waits")


def test_reserve_and_the_scheduler_both_avoid_a_tainted_pool(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """A rule on the devices of gpu-node-1's pool: reserve mode allocates on gpu-node-2, and
    so does kube-scheduler for a pod."""
    k = Cluster(api, namespace)
    alice = session(kubeconfig, namespace)
    tainted, other = "gpu-node-1", "gpu-node-2"
    assert {tainted, other} == set(published.node_names)
    with taint_rule(api, "xid-79-node-1", {"driver": "gpu.nvidia.com", "pool": tainted}):
        reserved = alice.request(gpu=1, name="held", reserve=True)
        assert reserved.state == "allocated"
        assert {row.device.split("/")[1] for row in reserved.devices.rows} == {other}
        body = template("one-gpu", {"gpu": 1}, namespace)
        k.resource.create_namespaced_resource_claim_template(
            namespace, body=to_model(client.V1ResourceClaimTemplate, body)
        )
        k.create_pod(pod("placed", {"resourceClaimTemplateName": "one-gpu"}))
        assert k.bound_node("placed") == other
        allocation = k.allocated(k.generated_claim("placed"))
        assert {r["pool"] for r in allocation["devices"]["results"]} == {other}
        k.delete_pod("placed")
        reserved.release()


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """dra_jupyter's records (urllib3's retries of another test's client, to a cluster that
    has stopped, may come in the same seconds: they are not what is counted)."""
    return [r for r in caplog.records if r.name.startswith("dra_jupyter")]


def test_rbac_that_hides_the_rules_gives_none_and_one_log_line(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A service account that may list the slices and classes but not the rules: the
    inventory is read all the same, without rules, and the log says what is missing."""
    rbac = client.RbacAuthorizationV1Api(api)
    name = f"slices-only-{namespace}"
    rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "deviceclasses"],
            "verbs": ["list"],
        }
    ]
    rbac.create_cluster_role(
        body=to_model(client.V1ClusterRole, {"metadata": {"name": name}, "rules": rules})
    )
    binding = {
        "metadata": {"name": name},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
    }
    rbac.create_cluster_role_binding(body=to_model(client.V1ClusterRoleBinding, binding))
    try:
        path = service_account_kubeconfig(api, cluster, namespace, tmp_path / "kubeconfig")
        with (
            taint_rule(api, "xid-79-hidden", {}),
            api_client(str(path)) as restricted,
            caplog.at_level(logging.INFO, logger="dra_jupyter"),
        ):
            assert read_taint_rules(api) != ()  # the cluster has the rule
            caplog.clear()
            assert read_taint_rules(restricted) == ()
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
    [record] = ours(caplog)
    assert record.levelno == logging.WARNING
    assert "RBAC hides the cluster's DeviceTaintRules" in record.getMessage()


def test_a_cluster_that_serves_no_rules_gives_none_and_one_log_line(
    api: client.ApiClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What a cluster before 1.37 answers (404 for resource.k8s.io/v1 devicetaintrules), at
    the client's one call."""

    def not_served(self: client.ResourceV1Api, **_: object) -> None:
        raise ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(client.ResourceV1Api, "list_device_taint_rule", not_served)
    with caplog.at_level(logging.INFO, logger="dra_jupyter"):
        assert read_taint_rules(api) == ()
    [record] = ours(caplog)
    assert "serves no resource.k8s.io/v1 DeviceTaintRules" in record.getMessage()

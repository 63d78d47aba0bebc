"""``dra-jupyter taint | untaint`` on the real control plane: under an account with the
ClusterRole of deploy/device-admin-rbac.yaml (and refused without it), ``taint`` creates a
DeviceTaintRule that kube-scheduler honours and our explanation names; ``untaint`` deletes
it, and both allocate on the device again."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ForbiddenError, NeverPossibleError, NotFoundError
from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.model.admintaints import DEFAULT_KEY, rule_name
from dra_jupyter.types import DeviceTaint, Tainting
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.test_backend import session
from tests.k8s.test_rbac import SA, service_account_kubeconfig
from tests.k8s.test_scheduling import Cluster, pod, template
from tests.k8s.test_taint_rules import unschedulable

ROLE = Path(__file__).parents[2] / "deploy" / "device-admin-rbac.yaml"
GPU0 = "gpu.nvidia.com/gpu-node-1/gpu-0"
GPU0_2 = "gpu.nvidia.com/gpu-node-2/gpu-0"


def first_taint(taints: Tainting) -> DeviceTaint | None:
    """The first taint once the API server's RBAC cache has the new binding (None before)."""
    try:
        return taints.taint(GPU0, "NoSchedule", "fan failing", DEFAULT_KEY)
    except ForbiddenError:
        return None


def test_taint_makes_a_rule_the_scheduler_honours_and_untaint_deletes_it(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    tmp_path: Path,
    published: SimulatedCluster,
) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    path = service_account_kubeconfig(api, cluster, namespace, tmp_path / "kubeconfig")
    admin = session(path, namespace, user="admin")
    with pytest.raises(ForbiddenError, match="dra-jupyter-device-admin"):  # no role yet
        admin.tainting("taint").taint(GPU0, "NoSchedule", "fan failing", DEFAULT_KEY)
    role = yaml.safe_load(ROLE.read_text())
    role["metadata"]["name"] = name = f"device-admin-{namespace}"
    rbac.create_cluster_role(body=to_model(client.V1ClusterRole, role))
    binding = {
        "metadata": {"name": name},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
    }
    rbac.create_cluster_role_binding(body=to_model(client.V1ClusterRoleBinding, binding))
    resource = client.ResourceV1Api(api)
    k = Cluster(api, namespace)
    taints = admin.tainting("taint")
    try:
        made = wait_for("the role to take effect", lambda: first_taint(taints))
        assert (made.device, made.effect, made.reason, made.user) == (
            GPU0,
            "NoSchedule",
            "fan failing",
            "admin",
        )
        assert made.rule == rule_name(GPU0, DEFAULT_KEY) and made.added is not None
        other = taints.taint(GPU0_2, "NoExecute", "xid-79", DEFAULT_KEY)
        listed = {t.rule: t for t in taints.taints()}
        assert (listed[made.rule].device, listed[made.rule].reason) == (GPU0, "fan failing")
        assert listed[other.rule].effect == "NoExecute"
        # ours: eight GPUs of one node can no longer be had, and explain names the rules
        alice = session(cluster.kubeconfig, namespace)
        with pytest.raises(NeverPossibleError) as never:
            alice.request(gpu=8, name="whole-node")
        assert f"{DEFAULT_KEY}:NoSchedule (DeviceTaintRule {made.rule})" in str(never.value)
        # kube-scheduler: no node has eight usable GPUs
        body = template("eight", {"gpu": 8}, namespace)
        k.resource.create_namespaced_resource_claim_template(
            namespace, body=to_model(client.V1ResourceClaimTemplate, body)
        )
        k.create_pod(pod("waits", {"resourceClaimTemplateName": "eight"}))
        assert unschedulable(k, "waits")["reason"] == "Unschedulable"
        # untaint gpu-node-2's: the rule is gone and kube-scheduler places the pod there
        gone = admin.tainting("untaint").untaint(GPU0_2, DEFAULT_KEY)
        assert gone.rule == other.rule
        with pytest.raises(ApiException) as missing:
            resource.read_device_taint_rule(other.rule)
        assert missing.value.status == 404
        assert k.bound_node("waits") == "gpu-node-2"
        k.delete_pod("waits")
        with pytest.raises(NotFoundError, match=f"{GPU0_2} has no taint {DEFAULT_KEY}"):
            admin.tainting("untaint").untaint(GPU0_2, DEFAULT_KEY)
        admin.tainting("untaint").untaint(GPU0, DEFAULT_KEY)
        alice.devices()  # read the cluster again: ours allows it too
        assert alice.request(gpu=8, name="allowed").state == "pending"
    finally:
        for device in (GPU0, GPU0_2):
            try:
                resource.delete_device_taint_rule(rule_name(device, DEFAULT_KEY))
            except ApiException as error:
                if error.status != 404:
                    raise
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)

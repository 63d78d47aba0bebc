"""The Kubernetes backend behind the Python API, against the real control plane: requests
become labelled ResourceClaims (pending until a pod uses them), release deletes them, claims()
is per user, devices() shows the cluster's slices and who holds them, impossible requests are
refused before anything is made, RBAC and an unreachable server give one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from dra_jupyter.api import Session
from dra_jupyter.errors import (
    EXIT_UNAVAILABLE,
    AllocationError,
    ClusterError,
    ForbiddenError,
    InvalidInputError,
)
from dra_jupyter.kube.backend import KubernetesBackend, default_namespace
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.pods import PodLauncher, workload_pod
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.helpers import free_port
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.test_pods import IMAGE, ON_SIMULATED
from tests.k8s.test_rbac import service_account_kubeconfig

QUOTA_KEY = "count/resourceclaims.resource.k8s.io"


def owner(user: str, kernel: str = "k-1") -> Owner:
    return Owner(user=user, host="notebook", pid=1, kernel_id=kernel)


def session(kubeconfig: Path, namespace: str, user: str = "alice", **kw: object) -> Session:
    settings = Settings(
        ledger=Path("/nonexistent/unused.sqlite"),
        backend="kubernetes",
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        kube_backoff=0.001,
        **kw,  # type: ignore[arg-type]
    )
    return Session(settings, owner=owner(user))


def test_request_creates_a_labelled_pending_claim_and_release_deletes_it(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace)
    claim = alice.request(gpu=2, same="pcieRoot", name="nb-1")
    assert claim.name == "nb-1"
    assert claim.state == "pending"
    assert claim.env == {}
    stored = ClaimClient(api, namespace).get("nb-1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {
        "dra-jupyter/user": "alice",
        "dra-jupyter/kernel": "k-1",
    }
    assert yaml.safe_load(claim.to_yaml())["spec"] == stored["spec"]
    assert claim.release() is True
    assert ClaimClient(api, namespace).get("nb-1") is None
    assert claim.state == "released"
    assert claim.release() is False
    with pytest.raises(InvalidInputError, match=r"^dra\.history: device metrics come from this"):
        alice.history("gpu-0")


def test_unnamed_requests_get_the_users_prefix(kubeconfig: Path, namespace: str) -> None:
    claim = session(kubeconfig, namespace).request(gpu=1)
    assert claim.name.startswith("alice-")
    claim.release()


def test_claims_lists_only_the_users_own(
    kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice, bob = session(kubeconfig, namespace), session(kubeconfig, namespace, "bob")
    alice.request(gpu=1, name="a-1")
    alice.request(gpu=1, name="a-2")
    bob.request(gpu=1, name="b-1")
    mine = alice.claims()
    assert sorted((r.claim, r.state) for r in mine) == [("a-1", "pending"), ("a-2", "pending")]
    assert mine.columns[-2:] == ["state", "used_by"]  # used_by: the pods that use it
    assert {r.used_by for r in mine} == {""}
    assert str(mine).startswith(f"namespace {namespace}\n")
    assert [r.claim for r in bob.claims()] == ["b-1"]
    assert sorted(r.claim for r in alice.claims(all_users=True)) == ["a-1", "a-2", "b-1"]
    with pytest.raises(ForbiddenError, match="claim b-1 belongs to user bob"):
        alice.release("b-1")
    assert sorted(alice.release_all()) == ["a-1", "a-2"]
    assert [r.claim for r in alice.claims(all_users=True)] == ["b-1"]


def test_hub_user_names_that_are_no_label_values_own_their_claims(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """JupyterHub allows ``alice@example.com``, which no label value may be: the label is a
    readable cut with a hash, the full name an annotation, and ownership goes by the
    full name (two names cut alike stay two users)."""
    long = "x" * 63
    alice = session(kubeconfig, namespace, user="alice@example.com")
    cut = session(kubeconfig, namespace, user=long + "y")
    claim = alice.request(gpu=1, name="mail-1")
    cut.request(gpu=1, name="cut-1")
    stored = ClaimClient(api, namespace).get("mail-1")
    assert stored is not None
    label = stored["metadata"]["labels"]["dra-jupyter/user"]
    assert label.startswith("alice-example.com-") and len(label) <= 63
    assert stored["metadata"]["annotations"]["dra-jupyter/user"] == "alice@example.com"
    assert [r.claim for r in alice.claims()] == ["mail-1"]
    assert [r.user for r in alice.claims()] == ["alice@example.com"]
    prefix = session(kubeconfig, namespace, user=long)  # the first 63 characters of "cut"'s
    assert [r.claim for r in prefix.claims()] == []
    with pytest.raises(ForbiddenError, match=f"claim cut-1 belongs to user {long}y"):
        prefix.release("cut-1")
    assert claim.release()
    assert cut.release("cut-1")


def test_a_lease_is_refused_before_anything_is_made(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """A cluster's claims end when released: a lease would be a promise nobody keeps."""
    alice = session(kubeconfig, namespace)
    with pytest.raises(InvalidInputError, match=r"^dra\.request: lease='2h' does not apply"):
        alice.request(gpu=1, lease="2h", name="leased")
    assert ClaimClient(api, namespace).get("leased") is None


def test_an_impossible_request_is_refused_before_anything_is_created(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace)
    with pytest.raises(AllocationError) as raised:
        alice.request(gpu=9, name="nine")
    message = str(raised.value)
    assert message.startswith("the request can never be met on the cluster at https://127.0.0.1:")
    # the nodes alike said once (gpu-node-1 and gpu-node-2, and any other of the cluster)
    assert re.search(r"\bnodes [^:\n]*gpu-node-2[^:\n]*: claim", message), message
    assert "request gpu: only 8 GPUs here (class gpu.nvidia.com), 9 needed" in message
    assert raised.value.explanation is not None
    with pytest.raises(AllocationError, match=r"^dra\.request: no TPU devices on the cluster at "):
        alice.request(tpu=1, name="tpu")
    assert ClaimClient(api, namespace).list() == []


def test_a_claim_deleted_behind_our_back_reads_released_with_a_note(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    claim = session(kubeconfig, namespace).request(gpu=1, name="nb-gone")
    ClaimClient(api, namespace).delete("nb-gone")
    assert claim.state == "released"
    assert claim.notes == [
        f"claim nb-gone was deleted in namespace {namespace} by someone else; its devices are "
        "no longer yours: request them again"
    ]
    assert claim.release() is False


def test_devices_shows_the_slices_and_who_holds_them_once_a_pod_is_placed(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace)
    before = alice.devices()
    assert len(before.rows) == 8 * len(published.node_names)
    assert all(r.holder == "" for r in before.rows)
    claim = alice.request(gpu=2, same="pcieRoot", name="nb-pod")
    launcher = PodLauncher(api, namespace)
    pod = workload_pod("run-1", ["nb-pod"], image=IMAGE, namespace=namespace)
    pod["spec"]["nodeSelector"] = ON_SIMULATED
    launcher.create(pod)
    placement = launcher.wait_placed("run-1", ["nb-pod"], timeout=90)
    assert claim.state in ("allocated", "reserved")
    got = {
        f"{r['driver']}/{r['pool']}/{r['device']}"
        for r in placement.allocations["nb-pod"]["devices"]["results"]
    }
    after = alice.devices()
    held = {r.device for r in after.rows if r.holder}
    assert held == got
    assert {r.holder for r in after.rows if r.holder} == {"nb-pod (alice)"}
    assert {r.device for r in claim.devices.rows} == got
    [row] = alice.claims()
    assert (row.claim, row.state, set(row.devices.split(", "))) == (
        "nb-pod",
        "reserved",
        {d.rsplit("/", 1)[1] for d in got},
    )
    client.CoreV1Api(api).delete_namespaced_pod("run-1", namespace, grace_period_seconds=0)


def test_a_restricted_service_account_gets_the_forbidden_line(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    tmp_path: Path,
    published: SimulatedCluster,
) -> None:
    path = service_account_kubeconfig(api, cluster, namespace, tmp_path / "kubeconfig")
    restricted = session(path, namespace)
    with pytest.raises(ClusterError) as raised:
        restricted.request(gpu=1, name="nb-1")
    assert str(raised.value) == (
        f"dra.request: RBAC forbids create on resourceclaims.resource.k8s.io in namespace "
        f'{namespace} for User "system:serviceaccount:{namespace}:notebook"; ask a cluster '
        "admin for a Role that allows it"
    )


def test_an_unreachable_server_is_retried_then_one_line(kubeconfig: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    port = free_port()  # nothing listens there
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    closed = tmp_path / "kubeconfig"
    closed.write_text(yaml.safe_dump(config))
    settings = Settings(
        ledger=tmp_path / "unused.sqlite",
        backend="kubernetes",
        kubeconfig=str(closed),
        namespace="team-a",
        kube_retries=3,
        kube_backoff=0.001,
    )
    slept: list[float] = []
    backend = KubernetesBackend(settings, owner("alice"), sleep=slept.append)
    with pytest.raises(ClusterError) as raised:
        backend.claims()
    message = str(raised.value)
    assert message.startswith(
        f"dra.claims: cannot reach the API server at https://127.0.0.1:{port}"
    )
    assert message.endswith("(3 attempts)")
    assert "\n" not in message
    assert slept == [0.001, 0.002]


def test_the_namespace_comes_from_the_pod_else_the_kubeconfig_context(
    kubeconfig: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    no_pod = tmp_path / "no-service-account"
    assert default_namespace(str(kubeconfig), no_pod) == "default"
    config["contexts"][0]["context"]["namespace"] = "team-b"
    with_ns = tmp_path / "kubeconfig"
    with_ns.write_text(yaml.safe_dump(config))
    assert default_namespace(str(with_ns), no_pod) == "team-b"
    pod = tmp_path / "serviceaccount"
    pod.mkdir()
    (pod / "token").write_text("t")
    (pod / "namespace").write_text("team-a\n")
    assert default_namespace(str(with_ns), pod) == "team-a"
    settings = Settings(
        ledger=tmp_path / "unused.sqlite", backend="kubernetes", kubeconfig=str(with_ns)
    )
    assert Session(settings, owner=owner("alice")).namespace == "team-b"


def test_a_resource_quota_refusal_names_the_quota(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    core = client.CoreV1Api(api)
    quota = {"metadata": {"name": "claims"}, "spec": {"hard": {QUOTA_KEY: "1"}}}
    core.create_namespaced_resource_quota(namespace, body=to_model(client.V1ResourceQuota, quota))

    def counted() -> bool:  # the quota controller fills in status.hard first
        status = core.read_namespaced_resource_quota("claims", namespace).status
        return status is not None and bool(status.hard)

    wait_for("the quota's status", counted)
    alice = session(kubeconfig, namespace)
    alice.request(gpu=1, name="first")
    with pytest.raises(ClusterError) as raised:
        alice.request(gpu=1, name="second")
    message = str(raised.value)
    assert message.startswith(
        f"dra.request: a ResourceQuota of namespace {namespace} refuses it (exceeded quota: claims"
    )
    assert message.endswith("; release claims you no longer need or ask for a larger quota")
    assert [r.claim for r in alice.claims()] == ["first"]


def test_a_namespace_that_does_not_exist_is_said_as_such(
    kubeconfig: Path, published: SimulatedCluster
) -> None:
    """A wrong DRA_JUPYTER_NAMESPACE: the request says the namespace does not exist and
    where it is set (issue 42, item 12: `… answered 404: namespaces "nosuch" not found`)."""
    alice = session(kubeconfig, "nosuch")
    with pytest.raises(ClusterError) as raised:
        alice.request(gpu=1, name="one")
    assert re.fullmatch(
        r"dra\.request: namespace 'nosuch' does not exist on the cluster at https://127\.0\.0\.1:"
        r"\d+; set DRA_JUPYTER_NAMESPACE to one that does \(or unset it: the kubeconfig "
        r"context's namespace, else 'default'\)",
        str(raised.value),
    ), str(raised.value)
    with pytest.raises(ClusterError) as ran:
        session(kubeconfig, "nosuch", image="busybox").run("true", gpu=1, name="r")
    assert str(ran.value).startswith("dra.run: namespace 'nosuch' does not exist"), str(ran.value)
    # a list there is empty, not refused: "(none)" would hide the wrong namespace
    with pytest.raises(ClusterError) as listed:
        alice.claims()
    assert str(listed.value).startswith("dra.claims: namespace 'nosuch' does not exist")
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "DRA_JUPYTER_BACKEND": "kubernetes",
        "DRA_JUPYTER_NAMESPACE": "nosuch",
    }
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "dra-jupyter"), "claims"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (cli.returncode, cli.stdout) == (EXIT_UNAVAILABLE, ""), cli
    assert "namespace 'nosuch' does not exist" in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr

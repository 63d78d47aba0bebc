"""The Event that says why dra-jupyter deleted a claim: recorded on the claim (its uid) when
RBAC allows, and when it forbids Events the claim is deleted all the same, with one log line
for the whole process."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.errors import ClusterError
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.objects import events_of
from tests.k8s.test_rbac import allow, service_account_kubeconfig


def backend(kubeconfig: Path, namespace: str) -> KubernetesBackend:
    settings = Settings(
        ledger=Path("/nonexistent/unused.sqlite"),
        backend="kubernetes",
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        server_id="nb-events",
        kube_backoff=0.001,
    )
    return KubernetesBackend(settings, Owner("alice", "notebook", 1, kernel_id="k-1"))


@pytest.fixture
def restricted(
    api: client.ApiClient, cluster: testenv.Cluster, namespace: str, tmp_path: Path
) -> Iterator[KubernetesBackend]:
    """A backend whose service account may manage claims but not create Events."""
    path = service_account_kubeconfig(api, cluster, namespace, tmp_path / "kubeconfig")
    allow(api, namespace, ["create", "get", "list", "delete"])
    limited = backend(path, namespace)

    def granted() -> bool:  # the authorizer learns of new bindings through a watch
        try:
            limited.claims()
        except ClusterError as error:
            if error.status == 403:
                return False
            raise
        return True

    wait_for("the Role to take effect", granted)
    yield limited


def test_a_servers_deletion_leaves_an_event_and_a_users_none(
    kubeconfig: Path, namespace: str, api: client.ApiClient, published: SimulatedCluster
) -> None:
    alice = backend(kubeconfig, namespace)
    held = alice.allocate(alice_claim(namespace), checked=True)
    uid = ClaimClient(api, namespace).get(held.name)["metadata"]["uid"]  # type: ignore[index]
    assert alice.release(held.name, "server-stop", any_owner=True) is True
    (event,) = events_of(api, namespace, held.name)
    assert (event["reason"], event["type"], event["involvedObject"]["uid"]) == (
        "DraJupyterServerStop",
        "Normal",
        uid,
    )
    assert event["message"] == (
        f"dra-jupyter server nb-events deleted claim {held.name}: the Jupyter server stopped"
    )
    mine = alice.allocate(alice_claim(namespace), checked=True)
    assert alice.release(mine.name) is True
    assert events_of(api, namespace, mine.name) == []


def test_without_the_right_to_create_events_claims_are_deleted_and_it_is_logged_once(
    restricted: KubernetesBackend,
    namespace: str,
    api: client.ApiClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = restricted.allocate(alice_claim(namespace), checked=True)
    second = restricted.allocate(alice_claim(namespace), checked=True)
    with caplog.at_level(logging.WARNING, logger="dra_jupyter"):
        assert restricted.release(first.name, "idle", any_owner=True) is True
        assert restricted.with_owner(restricted.owner).release(second.name, "idle") is True
    assert ClaimClient(api, namespace).list() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"dra_jupyter: RBAC forbids create on events in namespace {namespace}, so claims are "
        "deleted without an Event saying why; allow 'create' on 'events' to have them"
    ]


def alice_claim(namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "", "namespace": namespace, "labels": {"dra-jupyter/user": "alice"}},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
                ]
            }
        },
    }

"""Claims as the Kubernetes backend keeps them, under a real service account: RBAC refusals
name the verb, resource and namespace; granted, the claims are created, listed per owner,
found gone when deleted behind our back, and deleted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import ClusterError
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import api_client, to_model
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.test_claims import CLASSES

SA = "notebook"


def service_account_kubeconfig(
    api: client.ApiClient, cluster: testenv.Cluster, namespace: str, path: Path
) -> Path:
    """A kubeconfig with a bound token of service account ``notebook`` (a pod's identity)."""
    import yaml  # noqa: PLC0415

    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(
        namespace, body=client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SA))
    )
    request = to_model(client.AuthenticationV1TokenRequest, {"spec": {"expirationSeconds": 3600}})
    token = core.create_namespaced_service_account_token(SA, namespace, body=request)
    assert token.status is not None
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": SA, "user": {"token": token.status.token}}]
    config["contexts"][0]["context"]["user"] = SA
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def restricted(
    api: client.ApiClient, cluster: testenv.Cluster, namespace: str, tmp_path: Path
) -> Iterator[client.ApiClient]:
    path = service_account_kubeconfig(api, cluster, namespace, tmp_path / "kubeconfig")
    with api_client(str(path)) as restricted_api:
        yield restricted_api


def allow(api: client.ApiClient, namespace: str, verbs: list[str]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        body=to_model(
            client.V1Role,
            {
                "metadata": {"name": "claims"},
                "rules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "resources": ["resourceclaims"],
                        "verbs": verbs,
                    }
                ],
            },
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        body=to_model(
            client.V1RoleBinding,
            {
                "metadata": {"name": "claims"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "claims",
                },
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}],
            },
        ),
    )


def test_a_restricted_service_account_gets_one_clear_line(
    restricted: client.ApiClient, namespace: str
) -> None:
    claims = ClaimClient(restricted, namespace)
    claim = build_claim("nb-1", {"gpu": 1}, namespace=namespace, classes=CLASSES)
    with pytest.raises(ClusterError) as raised:
        claims.create(claim)
    assert raised.value.status == 403
    assert str(raised.value) == (
        f"dra.request: RBAC forbids create on resourceclaims.resource.k8s.io in namespace "
        f'{namespace} for User "system:serviceaccount:{namespace}:{SA}"; ask a cluster admin '
        "for a Role that allows it"
    )
    with pytest.raises(ClusterError, match=r"^dra\.claims: RBAC forbids list on resourceclaims"):
        claims.list(user="alice")


def test_granted_claims_are_created_listed_found_gone_and_deleted(
    api: client.ApiClient, restricted: client.ApiClient, namespace: str
) -> None:
    allow(api, namespace, ["create", "get", "list", "delete"])
    claims = ClaimClient(restricted, namespace)

    def made(name: str, user: str, kernel: str) -> None:
        labels = {"dra-jupyter/user": user, "dra-jupyter/kernel": kernel}
        claims.create(
            build_claim(name, {"gpu": 1}, namespace=namespace, classes=CLASSES, labels=labels)
        )

    def granted() -> bool:  # the authorizer learns of new bindings through a watch
        try:
            claims.list()
        except ClusterError as error:
            if error.status == 403:
                return False
            raise
        return True

    wait_for("the Role to take effect", granted)
    made("alice-1", "alice", "k1")
    made("alice-2", "alice", "k2")
    made("bob-1", "bob", "k3")
    names = [c["metadata"]["name"] for c in claims.list(user="alice")]
    assert sorted(names) == ["alice-1", "alice-2"]
    assert [c["metadata"]["name"] for c in claims.list(user="alice", kernel="k2")] == ["alice-2"]
    assert len(claims.list()) == 3

    ClaimClient(api, namespace).delete("alice-1")  # behind our back
    assert claims.get("alice-1") is None
    assert claims.delete("alice-1") is False
    assert claims.delete("alice-2") is True
    assert claims.get("alice-2") is None

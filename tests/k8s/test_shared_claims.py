"""A hub profile's shared claim (:mod:`dra_jupyter.kube.sharedclaims`, #40 item 4) against the
real API server: the first join makes it with the profile's sharing config, a leave deletes it
only when no other pod uses it, and a join that comes between a leave's look and its delete
keeps it (the delete's precondition fails). The hub's side, with a real JupyterHub, is in
tests/hub/test_kubespawner.py."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.sharedclaims import (
    JOINED_ANNOTATION,
    PROFILE_LABEL,
    SHARED_LABEL,
    SharedClaims,
)
from dra_jupyter.kube.spawn import ServerDevices
from dra_jupyter.sharing.joins import shared_claim_name
from tests.k8s.fixtures import wait_for

PROFILE = "h200-mps-25"
REQUEST = {"gpu": 1, "model": "H200", "share": "mps", "threads": 25}


def profile_claim(namespace: str) -> dict[str, Any]:
    return build_claim(
        shared_claim_name(PROFILE), REQUEST, namespace=namespace, classes=["gpu.nvidia.com"]
    )


def read(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        got = client.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return to_wire(api, got)


def user_pod(api: client.ApiClient, namespace: str, name: str, claim: str) -> None:
    """Another server's pod that uses the claim (never scheduled: no node is asked for)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {SHARED_LABEL: claim}},
        "spec": {
            "schedulingGates": [{"name": "dra-jupyter.test/held"}],
            "containers": [{"name": "c", "image": "never-pulled:0", "command": ["true"]}],
            "resourceClaims": [{"name": "dra", "resourceClaimName": claim}],
        },
    }
    client.CoreV1Api(api).create_namespaced_pod(namespace, to_model(client.V1Pod, pod))


def test_the_first_join_makes_the_claim_with_the_profiles_sharing(
    api: client.ApiClient, namespace: str
) -> None:
    shared = SharedClaims(ServerDevices(api, namespace))
    name = shared_claim_name(PROFILE)
    first = shared.join(profile_claim(namespace), PROFILE)
    assert first["metadata"]["labels"][PROFILE_LABEL] == PROFILE
    [config] = first["spec"]["devices"]["config"]
    sharing = config["opaque"]["parameters"]["sharing"]
    assert sharing == {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}
    again = shared.join(profile_claim(namespace), PROFILE)  # made once, marked joined again
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    marks = (first, again)
    assert (
        marks[0]["metadata"]["annotations"][JOINED_ANNOTATION]
        < (marks[1]["metadata"]["annotations"][JOINED_ANNOTATION])
    )
    assert shared_claim_name("Shared H200 (MPS, 25%)") == "dra-shared-shared-h200-mps-25"
    assert read(api, namespace, name) is not None


def test_a_leave_deletes_the_claim_only_after_its_last_user(
    api: client.ApiClient, namespace: str
) -> None:
    shared = SharedClaims(ServerDevices(api, namespace))
    name = shared_claim_name(PROFILE)
    shared.join(profile_claim(namespace), PROFILE)
    user_pod(api, namespace, "carols-server", name)
    assert shared.users(name) == ["carols-server"]
    assert shared.leave(name, "alices-server") is False  # carol's server still uses it
    assert read(api, namespace, name) is not None
    client.CoreV1Api(api).delete_namespaced_pod("carols-server", namespace, grace_period_seconds=0)
    wait_for("carol's pod to go", lambda: not shared.users(name))
    assert shared.leave(name, "alices-server") is True
    assert read(api, namespace, name) is None
    assert shared.leave(name, "alices-server") is False  # gone: nothing to do


def test_a_join_between_a_leaves_look_and_its_delete_keeps_the_claim(
    api: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving a stop and a spawn can have: the stop reads the claim and finds no
    other pod; a spawn joins (marks the claim) before the stop deletes it. The delete is
    refused by its precondition, and the claim stays for the new server."""
    shared = SharedClaims(ServerDevices(api, namespace))
    name = shared_claim_name(PROFILE)
    shared.join(profile_claim(namespace), PROFILE)
    looked = SharedClaims.users
    spawning = SharedClaims(ServerDevices(api, namespace))

    def users_then_a_spawn_joins(self: SharedClaims, claim: str, *, leaving: str = "") -> Any:
        found = looked(self, claim, leaving=leaving)
        spawning.join(profile_claim(namespace), PROFILE)  # after the look, before the delete
        return found

    monkeypatch.setattr(SharedClaims, "users", users_then_a_spawn_joins)
    assert shared.leave(name, "alices-server") is False
    assert read(api, namespace, name) is not None

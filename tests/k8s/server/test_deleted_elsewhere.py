"""A claim the server announced allocated that something else deleted on Kubernetes is
announced released once, with why as far as the cluster tells (issue 42): deleted with
kubectl (no word of dra-jupyter's on it), reason ``deleted``; released through dra-jupyter
by an admin (the note dra-jupyter sets before it deletes), ``admin`` with the admin's
name; by its own user in another process (a kernel's ``c.release()``), ``user``."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.deletions import DELETED_WORDS
from dra_jupyter.server import claim_events
from dra_jupyter.types import Owner
from tests.k8s.server.conftest import WAIT_TRIES
from tests.server.conftest import Events, Fetch, eventually, release_announced, start_extensions
from tests.server.test_rest import body, extension, post


@pytest.fixture(autouse=True)
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim gone from a check's read is gone, however new."""
    monkeypatch.setattr(claim_events, "GONE_AFTER", 0.0)


WHYS = ("kubectl", "admin", "its-user")


def released(events: Events, claim: str) -> list[str]:
    return [d["reason"] for kind, d in events if kind == "claim_released" and d["claim"] == claim]


async def test_a_claim_deleted_in_the_cluster_is_announced_once_with_why(
    jp_serverapp: Any, jp_fetch: Fetch, api: client.ApiClient, namespace: str, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    claims = {why: body(await post(jp_fetch, {"gpu": 1})) for why in WHYS}
    made = {why: claim["name"] for why, claim in claims.items()}
    user = claims["its-user"]["user"]
    # kubectl delete resourceclaim: the cluster says nothing of why
    client.ResourceV1Api(api).delete_namespaced_resource_claim(made["kubectl"], namespace)
    # another process of dra-jupyter's: an admin's, and the user's own (a kernel's)
    backend = app.service.backend
    assert isinstance(backend, KubernetesBackend)
    settings = replace(backend.settings, watch=False)
    admin = KubernetesBackend(settings, Owner("an-admin", socket.gethostname(), os.getpid()))
    assert admin.release(made["admin"], "admin", any_owner=True)  # as the REST API's
    own = KubernetesBackend(settings, Owner(user, socket.gethostname(), os.getpid()))
    assert own.release(made["its-user"])

    await eventually(
        lambda: all(release_announced(events, n) for n in made.values()), tries=WAIT_TRIES
    )
    await asyncio.sleep(1)  # five checks more: none announces one again
    assert {why: released(events, name) for why, name in made.items()} == {
        "kubectl": ["deleted"],
        "admin": ["admin"],
        "its-user": ["user"],
    }
    gone = body(await jp_fetch("dra", "api", "claims", made["kubectl"]))["released"]
    assert (gone["reason"], gone["message"]) == ("deleted", DELETED_WORDS)
    gone = body(await jp_fetch("dra", "api", "claims", made["admin"]))["released"]
    assert (gone["reason"], gone["message"]) == ("admin", "released by admin an-admin")

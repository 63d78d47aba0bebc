"""The REST API of a server on the Kubernetes backend answers as on the local backend: the
same shapes (claims pending until a pod uses them: no devices, no environment), another
user's claim refused (403), the per-user limit (409) counting what pending claims ask for,
what does not apply refused (400), and its claims deleted when it stops."""

from __future__ import annotations

import getpass
import os
from typing import Any

from kubernetes import client

from dra_jupyter.server.claims import Caller
from tests.k8s.objects import claims_in, deleted_because, events_of, holder, names
from tests.server.conftest import Fetch
from tests.server.test_rest import body, extension, post


async def test_claims_over_rest_with_another_users_refused(
    jp_fetch: Fetch, jp_serverapp: Any, api: client.ApiClient, namespace: str, server_id: str
) -> None:
    r = await post(jp_fetch, {"gpu": 2, "same": "pcieRoot"})
    assert r.code == 201, r.body
    claim = body(r)
    assert (claim["namespace"], claim["user"], claim["kernel_id"]) == (
        namespace,
        getpass.getuser(),
        None,
    )
    assert (claim["devices"], claim["env"], claim["lease_expires"]) == ([], {}, None)
    (stored,) = claims_in(api, namespace)
    assert stored["metadata"]["name"] == claim["name"]
    assert stored["metadata"]["labels"]["dra-jupyter/server"] == server_id
    assert holder(stored)["pid"] == os.getpid()  # held by the server: it ends with it

    assert [c["name"] for c in body(await jp_fetch("dra", "api", "claims"))["claims"]] == [
        claim["name"]
    ]
    assert body(await jp_fetch("dra", "api", "claims", claim["name"]))["name"] == claim["name"]
    devices = body(await jp_fetch("dra", "api", "devices"))
    assert devices["simulated"] is False
    assert devices["inventory"].startswith("the cluster at https://127.0.0.1:")
    assert len(devices["devices"]) == 16
    assert {d["state"] for d in devices["devices"]} == {"free"}  # pending claims hold nothing

    app = extension(jp_serverapp)
    theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    assert [c["name"] for c in body(await jp_fetch("dra", "api", "claims"))["claims"]] == [
        claim["name"]
    ]
    for method in ("GET", "DELETE"):
        r = await jp_fetch("dra", "api", "claims", theirs.name, method=method, raise_error=False)
        assert r.code == 403
        assert body(r)["message"] == (
            f"claim {theirs.name} belongs to user someone-else; only its owner (or an admin) "
            "can see or release it"
        )
    r = await jp_fetch("dra", "api", "claims", claim["name"], "keep", method="POST", body="")
    assert body(r)["last_activity"] > claim["last_activity"]

    r = await jp_fetch("dra", "api", "claims", claim["name"], method="DELETE")
    assert r.code == 204
    assert names(api, namespace) == [theirs.name]
    assert events_of(api, namespace, claim["name"]) == []  # a user's release needs no Event
    gone = body(await jp_fetch("dra", "api", "claims", claim["name"]))  # released lately
    assert (gone["name"], gone["released"]["reason"]) == (claim["name"], "user")
    r = await jp_fetch("dra", "api", "claims", "no-such-claim", raise_error=False)
    assert r.code == 404


async def test_the_per_user_limit_counts_what_pending_claims_ask_for(
    jp_fetch: Fetch, jp_serverapp: Any, api: client.ApiClient, namespace: str
) -> None:
    extension(jp_serverapp).service.max_devices_per_user = 2
    first = await post(jp_fetch, {"gpu": 2})
    assert first.code == 201, first.body
    r = await post(jp_fetch, {"gpu": 1})
    assert r.code == 409
    assert body(r)["message"] == (
        f"user {getpass.getuser()} holds 2 devices, the limit per user is 2; release a claim first"
    )
    await jp_fetch("dra", "api", "claims", body(first)["name"], method="DELETE")
    r = await post(jp_fetch, {"alternatives": [{"gpu": 3}, {"gpu": 1}]})  # the first counts
    assert r.code == 409
    assert "would hold 3 devices, the limit per user is 2" in body(r)["message"]
    r = await post(jp_fetch, {"gpu": "all"})  # what it would get on idle devices: one node's
    assert r.code == 409
    assert "would hold 8 devices" in body(r)["message"]
    assert names(api, namespace) == []  # each was created, counted, then deleted
    assert (await post(jp_fetch, {"gpu": 1})).code == 201
    assert (await post(jp_fetch, {"gpu": 1})).code == 201
    assert (await post(jp_fetch, {"gpu": 1})).code == 409


async def test_what_does_not_apply_on_kubernetes_is_refused_in_words(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    r = await post(jp_fetch, {"gpu": 1, "lease": "1h"})
    assert r.code == 400
    assert body(r)["message"].startswith("lease does not apply on the Kubernetes backend")
    r = await post(jp_fetch, {"gpu": 17})
    assert r.code == 422
    metrics = body(await jp_fetch("dra", "api", "metrics"))
    assert (metrics["source"], metrics["simulated"], metrics["devices"]) == ("none", False, [])
    assert metrics["problem"].startswith("no device metrics here: the devices of the Kubernetes")
    kernel_id = await jp_serverapp.kernel_manager.start_kernel(kernel_name="python3")
    try:
        r = await jp_fetch(
            "dra", "api", "kernels", kernel_id, "restart-with-claims",
            method="POST", body="", raise_error=False,
        )  # fmt: skip
        assert r.code == 400  # no claim to move into a pod with (test_kernel_moves.py)
        assert body(r)["message"].startswith(
            f"kernel {kernel_id}: it has no devices to restart with; request some first"
        )
    finally:
        await jp_serverapp.kernel_manager.shutdown_kernel(kernel_id, now=True)


async def test_the_servers_claims_are_deleted_when_it_stops(
    jp_fetch: Fetch, jp_serverapp: Any, api: client.ApiClient, namespace: str
) -> None:
    mine = body(await post(jp_fetch, {"gpu": 1}))
    app = extension(jp_serverapp)
    theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    stored = {c["metadata"]["name"]: c for c in claims_in(api, namespace)}
    await jp_serverapp.extension_manager.stop_all_extensions()
    for name in (mine["name"], theirs.name):
        assert deleted_because(api, namespace, stored[name], "DraJupyterServerStop")

"""The REST API on a real server: round trip, errors, users, authorization, the spec."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jupyter_server.auth import Authorizer

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.app import DRAExtensionApp
from dra_jupyter.server.claims import Caller
from dra_jupyter.server.handlers import FALLBACK, routes
from tests.server.conftest import Events, Fetch

SPEC = Path(__file__).parents[2] / "specification" / "dra-rest-api.yml"


def body(response: Any) -> Any:
    return json.loads(response.body)


def extension(serverapp: Any) -> DRAExtensionApp:
    app = serverapp.extension_manager.extension_points["dra_jupyter"].app
    assert isinstance(app, DRAExtensionApp)
    return app


async def post(jp_fetch: Fetch, payload: Any) -> Any:
    return await jp_fetch(
        "dra", "api", "claims", method="POST", body=json.dumps(payload), raise_error=False
    )


async def test_round_trip(jp_fetch: Fetch, ledger: Ledger, events: Events) -> None:
    r = await post(jp_fetch, {"gpu": 2, "same": "pcieRoot"})
    assert r.code == 201, r.body
    claim = body(r)
    assert len(claim["devices"]) == 2
    assert claim["env"]["CUDA_VISIBLE_DEVICES"]
    assert r.headers["Location"].endswith(f"/dra/api/claims/{claim['name']}")

    listed = body(await jp_fetch("dra", "api", "claims"))["claims"]
    assert [c["name"] for c in listed] == [claim["name"]]
    one = body(await jp_fetch("dra", "api", "claims", claim["name"]))
    assert one["devices"] == claim["devices"]
    devices = body(await jp_fetch("dra", "api", "devices"))
    assert devices["simulated"] is True
    assert sum(d["state"] == "held" for d in devices["devices"]) == 2

    r = await jp_fetch("dra", "api", "claims", claim["name"], method="DELETE")
    assert r.code == 204
    assert body(await jp_fetch("dra", "api", "claims"))["claims"] == []
    assert [(x.name, x.reason) for x in ledger.releases()] == [(claim["name"], "user")]
    assert [(kind, data.get("reason")) for kind, data in events] == [
        ("claim_allocated", None),
        ("claim_released", "user"),
    ]
    r = await jp_fetch("dra", "api", "claims", claim["name"], method="DELETE", raise_error=False)
    assert r.code == 404
    assert "does not exist" in body(r)["message"]
    gone = body(await jp_fetch("dra", "api", "claims", claim["name"]))  # readable a while
    assert gone["released"]["reason"] == "user"
    assert gone["released"]["message"] == "released by its user"


async def test_a_claim_for_no_kernel_gets_a_lease_unless_it_asks_for_one(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """A claim made through the REST API for no kernel (the panel's form with its notebook
    unticked) has no kernel whose idle release would free it: it gets the server's
    unattached_lease (8 h) instead of being held until the server stops (issue 42, item 6);
    a lease asked for is kept, and 0 turns the default off."""
    made = body(await post(jp_fetch, {"gpu": 1}))
    assert made["kernel_id"] is None
    assert made["lease_expires"] - made["created"] == pytest.approx(8 * 3600, abs=5)
    asked = body(await post(jp_fetch, {"gpu": 1, "lease": "1h"}))
    assert asked["lease_expires"] - asked["created"] == pytest.approx(3600, abs=5)
    extension(jp_serverapp).service.unattached_lease = 0
    endless = body(await post(jp_fetch, {"gpu": 1}))
    assert endless["lease_expires"] is None
    listed = body(await jp_fetch("dra", "api", "claims"))
    assert listed["pushed"] is False  # the local ledger tells no changes: the lab polls


async def test_a_claim_released_by_another_process_reads_as_released(
    jp_fetch: Fetch, ledger_path: Path, events: Events
) -> None:
    """The ledger keeps each release's claim and reason (schema version 2): a claim that
    another process released (the CLI, another server) answers GET with why, not 404."""
    claim = body(await post(jp_fetch, {"gpu": 1}))
    other = Ledger(ledger_path)  # another writer of the ledger: not this server
    when = time.time()
    with other.transaction() as tx:
        [record] = [r for r in Ledger.claims(tx) if r.name == claim["name"]]
        Ledger.delete(tx, record, "expired", when, "its lease ended at night")
    gone = body(await jp_fetch("dra", "api", "claims", claim["name"]))
    assert gone["name"] == claim["name"] and gone["devices"] == claim["devices"]
    assert gone["released"] == {
        "reason": "expired",
        "time": when,
        "message": "its lease ended at night",
    }
    r = await jp_fetch("dra", "api", "claims", "nobody-1", raise_error=False)
    assert r.code == 404


async def test_another_users_claim_released_elsewhere_is_refused_as_when_live(
    jp_fetch: Fetch, jp_serverapp: Any, ledger_path: Path
) -> None:
    """What the ledger keeps of another user's released claim is theirs: GET answers 403
    (who owned it, as for their live claim), not its devices, reason or message."""
    app = extension(jp_serverapp)
    theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    other = Ledger(ledger_path)  # another writer of the ledger: not this server
    with other.transaction() as tx:
        [record] = [r for r in Ledger.claims(tx) if r.name == theirs.name]
        Ledger.delete(tx, record, "user", time.time(), "their own words")
    r = await jp_fetch("dra", "api", "claims", theirs.name, raise_error=False)
    assert r.code == 403
    text = r.body.decode()
    assert "someone-else" in body(r)["message"]
    assert "their own words" not in text and "devices" not in text


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"gpu": -1}, "positive number"),
        ({"bogus": 1}, "unknown keyword 'bogus'"),
        ({"gpu": 1, "timeout": "5m"}, "timeout: only 0 is supported"),
        ({"gpu": 1, "lease": "soon"}, "not a duration"),
        ([1, 2], "JSON object"),
    ],
)
async def test_bad_input_is_400_with_a_message(jp_fetch: Fetch, payload: Any, words: str) -> None:
    r = await post(jp_fetch, payload)
    assert r.code == 400
    assert words in body(r)["message"]
    # in the words of the request, not of the Python API or the REST route
    assert not body(r)["message"].startswith(("dra.request", "POST claims")), body(r)


async def test_body_that_is_not_json_is_400(jp_fetch: Fetch) -> None:
    r = await jp_fetch("dra", "api", "claims", method="POST", body="{gpu", raise_error=False)
    assert r.code == 400


async def test_busy_is_409_and_impossible_is_422(jp_fetch: Fetch) -> None:
    assert (await post(jp_fetch, {"gpu": 8})).code == 201
    busy = await post(jp_fetch, {"gpu": 1})
    assert busy.code == 409
    assert "busy" in body(busy)["message"]
    never = await post(jp_fetch, {"gpu": 9})
    assert never.code == 422
    assert body(never)["message"]


async def test_unknown_kernel_is_404(jp_fetch: Fetch) -> None:
    r = await post(jp_fetch, {"gpu": 1, "kernel_id": "no-such-kernel"})
    assert r.code == 404
    r = await jp_fetch("dra", "api", "kernels", "no-such-kernel", "claims", raise_error=False)
    assert r.code == 404


async def test_another_users_claim_is_hidden_and_refused(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    app = extension(jp_serverapp)
    theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    assert body(await jp_fetch("dra", "api", "claims"))["claims"] == []
    for method in ("GET", "DELETE"):
        r = await jp_fetch("dra", "api", "claims", theirs.name, method=method, raise_error=False)
        assert r.code == 403
        assert "someone-else" in body(r)["message"]
    devices = body(await jp_fetch("dra", "api", "devices"))["devices"]
    assert sum(d["state"] == "held" for d in devices) == 1  # devices show every holder


async def test_per_user_limit(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    app = extension(jp_serverapp)
    app.service.max_devices_per_user = 2
    assert (await post(jp_fetch, {"gpu": 2})).code == 201
    r = await post(jp_fetch, {"gpu": 1})
    assert r.code == 409
    assert "limit per user" in body(r)["message"]


async def test_polling_is_not_activity(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    settings = jp_serverapp.web_app.settings
    before = settings.get("api_last_activity")
    await jp_fetch("dra", "api", "claims")
    await jp_fetch("dra", "api", "devices")
    assert settings.get("api_last_activity") == before
    await post(jp_fetch, {"gpu": 1})
    assert settings.get("api_last_activity") != before


async def test_no_token_is_refused(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str
) -> None:
    r = await http_server_client.fetch(f"{jp_base_url}dra/api/claims", raise_error=False)
    assert r.code == 403  # jupyter_server answers unauthenticated API calls with 403


@pytest.fixture
def open_access_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    """jupyter_server lets unauthenticated requests reach the handlers."""
    jp_server_config["ServerApp"]["allow_unauthenticated_access"] = True
    return jp_server_config


async def test_no_user_is_refused_before_the_body_even_with_open_access(
    open_access_config: dict[str, Any], http_server_client: Any, jp_base_url: str
) -> None:
    """Authentication before anything else: a body over the limit from no user is a 403,
    not a 413 that would answer before who asks is known (a GET: other methods meet
    jupyter_server's XSRF check first)."""
    for path in ("claims", "devices", "nope"):
        r = await http_server_client.fetch(
            f"{jp_base_url}dra/api/{path}",
            method="GET",
            body="x" * 300_000,
            allow_nonstandard_methods=True,
            raise_error=False,
        )
        assert r.code == 403, (path, r.code, r.body)


class DenyDRA(Authorizer):
    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "dra"


@pytest.fixture
def deny_dra_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["ServerApp"]["authorizer_class"] = DenyDRA
    return jp_server_config


async def test_an_authorizer_that_denies_dra_is_honoured(
    deny_dra_config: dict[str, Any], jp_fetch: Fetch
) -> None:
    for parts, method in (
        (("devices",), "GET"),
        (("claims",), "GET"),
        (("claims",), "POST"),
        (("claims", "Upper"), "GET"),  # refused before the name is looked at
        (("nope",), "GET"),  # no such endpoint: the same 403
    ):
        kwargs = {"body": "{}"} if method == "POST" else {}
        r = await jp_fetch("dra", "api", *parts, method=method, raise_error=False, **kwargs)
        assert r.code == 403, parts
    r = await jp_fetch("api", "status", raise_error=False)
    assert r.code == 200  # only dra is denied


async def test_no_route_comes_after_the_fallback(jp_serverapp: Any) -> None:
    """Any other path under /dra/api/ is a JSON 404 (FALLBACK): a route of the extension
    added after it would never be reached."""
    app = extension(jp_serverapp)
    assert app.handlers[-1] == FALLBACK
    assert [h for h in app.handlers if h[0].startswith("/dra/api")][-1] == FALLBACK


@pytest.mark.pure
def test_every_route_is_in_the_spec() -> None:
    spec = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    base = spec["servers"][0]["url"]
    *described, fallback = routes()
    assert fallback == FALLBACK  # any other path under /dra/api/: a JSON 404, the last route
    for regex, handler in described:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", regex)
        assert path.startswith(base), path
        item = spec["paths"].get(path[len(base) :])
        assert item is not None, f"{path} is not in {SPEC.name}"
        verbs = {v for v in ("get", "post", "put", "patch", "delete") if v in vars(handler)}
        assert verbs == set(item) - {"parameters"}, path


class DenyKernelWrites(Authorizer):
    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return not (resource == "kernels" and action == "write")


@pytest.fixture
def deny_kernel_writes_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["ServerApp"]["authorizer_class"] = DenyKernelWrites
    return jp_server_config


async def test_restart_with_claims_needs_the_right_to_restart_kernels(
    deny_kernel_writes_config: dict[str, Any], jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    kernel_id = await jp_serverapp.kernel_manager.start_kernel(kernel_name="python3")
    try:
        r = await jp_fetch(
            "dra", "api", "kernels", kernel_id, "restart-with-claims",
            method="POST", body="", raise_error=False,
        )  # fmt: skip
        assert r.code == 403
        assert (await jp_fetch("dra", "api", "claims")).code == 200  # dra itself is allowed
    finally:
        await jp_serverapp.kernel_manager.shutdown_kernel(kernel_id, now=True)


def strict(response: Any) -> Any:
    """The body, parsed as a browser's JSON.parse would: no NaN, no Infinity."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(response.body, parse_constant=refuse)


async def test_endless_settings_answer_strict_json(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    """An idle timeout of inf ("never") reads as 0 ("off"), never as Infinity."""
    app = extension(jp_serverapp)
    app.idle_timeout = app.idle_warning = float("inf")
    metrics = strict(await jp_fetch("dra", "api", "metrics"))
    assert (metrics["idle_timeout"], metrics["idle_warning"]) == (0, 0)
    assert (await post(jp_fetch, {"gpu": 1})).code == 201
    [claim] = strict(await jp_fetch("dra", "api", "claims"))["claims"]
    assert claim["idle_deadline"] is None


async def test_devices_show_who_waits_in_line(jp_fetch: Fetch, ledger_path: Path) -> None:
    """A holder sees the queue: a command-line request waiting behind a REST claim."""
    import asyncio  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    held = body(await post(jp_fetch, {"gpu": 8}))
    env = {**os.environ, "DRA_JUPYTER_LEDGER": str(ledger_path), "DRA_JUPYTER_INVENTORY": "h200-8x",
           "DRA_JUPYTER_POLL_INTERVAL": "0.05"}  # fmt: skip
    code = "from dra_jupyter.cli import main; raise SystemExit(main())"
    argv = [sys.executable, "-c", code, "request", "gpu=2", "--timeout", "5m", "--lease", "1m"]
    waiter = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(600):  # bounded: until the request is in line
            waiting = body(await jp_fetch("dra", "api", "devices"))["waiting"]
            if waiting:
                break
            await asyncio.sleep(0.1)
        [entry] = waiting
        assert entry["what"] == "gpu=2"  # in the words of dra.request
        assert entry["user"] == held["user"]
        assert entry["kernel_id"] is None
        assert entry["since"] >= held["created"]
        assert entry["position"] in (0, 1)  # first, where the backend says
        assert isinstance(entry["why"], str)
        await jp_fetch("dra", "api", "claims", held["name"], method="DELETE")
        assert waiter.wait(timeout=120) == 0  # it got the devices
        assert body(await jp_fetch("dra", "api", "devices"))["waiting"] == []
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()

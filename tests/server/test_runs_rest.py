"""The REST API of background runs (``GET runs``, ``POST runs/{name}/cancel``, ``GET
runs/{name}/logs``) on a real server, with real runs started through the backend on the
simulated h200-8x: each user reaches their own runs only, an admin sees everyone's and
cancels none of theirs, and bad input is a 4xx with a one-line message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.settings import Settings
from tests.server.conftest import Fetch
from tests.server.named_users import NamedUsers, as_user

COMMAND = [
    "python",
    "-c",
    "import time\nfor i in range(30): print('line', i)\nprint('ready', flush=True)\n"
    "time.sleep(300)",
]


@pytest.fixture
def jp_server_config(  # overrides tests/server/conftest.py's
    ledger_path: Path, dra_config: dict[str, Any]
) -> dict[str, Any]:
    """A server whose identity provider names its users (as JupyterHub's does)."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"dra_jupyter": True},
            "identity_provider_class": NamedUsers,
        },
        "DRAExtensionApp": {"ledger": str(ledger_path), "inventory": "h200-8x", **dra_config},
    }


def start_run(monkeypatch: pytest.MonkeyPatch, ledger: Path, user: str, name: str) -> None:
    """A run of ``user``'s started as their notebook starts one (dra.run, one GPU)."""
    monkeypatch.setenv("JUPYTERHUB_USER", user)  # the launcher's user, as in their kernel
    Session(Settings(ledger=ledger, inventory="h200-8x")).run(COMMAND, gpu=1, name=name)


@pytest.fixture
def runs(jp_serverapp: Any, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """alice's run ``train`` and bob's run ``sweep``, both running; cancelled after."""
    try:
        start_run(monkeypatch, ledger_path, "alice", "train")
        start_run(monkeypatch, ledger_path, "bob", "sweep")
        yield
    finally:
        for user in ("alice", "bob"):
            monkeypatch.setenv("JUPYTERHUB_USER", user)
            for run in Session(Settings(ledger=ledger_path, inventory="h200-8x")).runs():
                run.cancel()


async def call(jp_fetch: Fetch, user: str, method: str, *path: str, **params: str) -> Any:
    kwargs: dict[str, Any] = {"body": ""} if method == "POST" else {}
    return await jp_fetch(
        "dra", "api", "runs", *path, method=method, headers=as_user(user), params=params,
        raise_error=False, **kwargs,
    )  # fmt: skip


def answer(r: Any, code: int = 200) -> Any:
    assert r.code == code, (r.code, r.body)
    return json.loads(r.body)


def error(r: Any, code: int) -> str:
    message: str = answer(r, code)["message"]
    assert "\n" not in message
    return message


async def test_each_user_lists_cancels_and_reads_their_own_runs_only(
    jp_fetch: Fetch, ledger: Ledger, runs: None
) -> None:
    listed = answer(await call(jp_fetch, "alice", "GET"))
    assert listed["more"] == 0
    [train] = listed["runs"]
    assert train["name"] == "train" and train["user"] == "alice"
    assert train["phase"] == "Running" and train["cancellable"] is True
    assert (train["device_count"], train["processes"]) == (1, 1)
    assert len(train["devices"]) == 1 and train["devices"][0].startswith("gpu.nvidia.com/")
    assert train["started"] is not None and train["ended"] is None
    assert train["exit_code"] is None and train["where"] == "this machine"
    # one line, its newlines as \n
    assert " -c 'import time\\nfor i in range(30)" in train["command"]
    [sweep] = answer(await call(jp_fetch, "bob", "GET"))["runs"]
    assert sweep["name"] == "sweep" and sweep["user"] == "bob"
    # the run's claim says whose launcher holds it
    claims = answer(await jp_fetch("dra", "api", "claims", headers=as_user("alice")))["claims"]
    assert [(c["run"], c["devices"]) for c in claims] == [("train", train["devices"])]

    # bob reaches none of alice's: neither its output nor its cancel
    assert "no run train of yours" in error(
        await call(jp_fetch, "bob", "GET", "train", "logs"), 404
    )
    assert "no run train of yours" in error(
        await call(jp_fetch, "bob", "POST", "train", "cancel"), 404
    )
    [train] = answer(await call(jp_fetch, "alice", "GET"))["runs"]
    assert train["phase"] == "Running"

    # alice's last lines, bounded by tail
    async def ready() -> bool:
        logs = answer(await call(jp_fetch, "alice", "GET", "train", "logs", tail="3"))
        return bool(logs["text"].endswith("ready\n"))

    for _ in range(300):
        if await ready():
            break
        await asyncio.sleep(0.1)
    logs = answer(await call(jp_fetch, "alice", "GET", "train", "logs", tail="3"))
    assert logs == {
        "name": "train", "text": "line 28\nline 29\nready\n", "lines": 3, "truncated": True
    }  # fmt: skip
    whole = answer(await call(jp_fetch, "alice", "GET", "train", "logs"))  # the last 20
    assert (whole["lines"], whole["truncated"]) == (20, True)

    # alice cancels hers: it ends, its claim is released; bob's runs on
    cancelled = answer(await call(jp_fetch, "alice", "POST", "train", "cancel"))
    assert cancelled["phase"] == "Cancelled" and cancelled["cancellable"] is False
    assert cancelled["ended"] is not None
    assert [r.owner.user for r in ledger.read_claims()] == ["bob"]
    again = answer(await call(jp_fetch, "alice", "POST", "train", "cancel"))  # ended: as it is
    assert again["phase"] == "Cancelled"
    [sweep] = answer(await call(jp_fetch, "bob", "GET"))["runs"]
    assert sweep["phase"] == "Running"


async def test_bad_input_is_a_4xx_in_one_line(jp_fetch: Fetch, runs: None) -> None:
    assert "no run nope of yours" in error(
        await call(jp_fetch, "alice", "POST", "nope", "cancel"), 404
    )
    assert "no run nope of yours" in error(
        await call(jp_fetch, "alice", "GET", "nope", "logs"), 404
    )
    for bad in ("Upper", "a_b", "-x", "x.", "a" * 254):
        assert "run name" in error(await call(jp_fetch, "alice", "POST", bad, "cancel"), 400)
        assert "run name" in error(await call(jp_fetch, "alice", "GET", bad, "logs"), 400)
    for tail in ("0", "x", "-1", "1001", "1.5", "0" * 5000, "9" * 5000):
        message = error(await call(jp_fetch, "alice", "GET", "train", "logs", tail=tail), 400)
        assert "tail must be a whole number of lines from 1 to 1000" in message
    assert (
        answer(await call(jp_fetch, "alice", "GET", "train", "logs", tail="0" * 5000 + "1"))[
            "lines"
        ]
        <= 1
    )
    r = await call(jp_fetch, "alice", "DELETE", "train", "cancel")
    assert r.code == 405


class TestAdminView:
    @pytest.fixture
    def dra_config(self) -> dict[str, Any]:
        """Every user may read dra-admin (jupyter_server's authorizer allows all)."""
        return {"allow_admin_view": True, "check_interval": 0.2}

    async def test_an_admin_sees_every_users_runs_and_cancels_only_theirs(
        self, jp_fetch: Fetch, runs: None
    ) -> None:
        listed = answer(await call(jp_fetch, "alice", "GET"))["runs"]
        assert [(r["name"], r["user"], r["cancellable"]) for r in listed] == [
            ("train", "alice", True),
            ("sweep", "bob", False),
        ]
        message = error(await call(jp_fetch, "alice", "POST", "sweep", "cancel"), 403)
        assert "run sweep belongs to user bob" in message
        error(await call(jp_fetch, "alice", "GET", "sweep", "logs"), 403)
        [sweep] = answer(await call(jp_fetch, "bob", "GET"))["runs"][1:]
        assert sweep["phase"] == "Running"

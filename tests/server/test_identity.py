"""One identity: under JupyterHub (``JUPYTERHUB_USER=alice`` in the server's environment)
a claim made in a kernel and one made over REST both belong to ``alice``; ``bob``, another
server's user on the same ledger, can neither see nor release them through REST, his
kernels, the magics or the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from dra_jupyter.local.ledger import Ledger
from tests.browser.conftest import Lab, running_lab
from tests.server.conftest import Fetch
from tests.server.test_kernels import started_kernel
from tests.server.test_rest import body, post


@pytest.fixture
def jp_server_config(  # overrides tests/server/conftest.py's
    ledger_path: Path, dra_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Alice's single-user server, as JupyterHub's spawner starts it: the hub's user in
    the environment (the kernels inherit it), before the server is made."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    return {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {"ledger": str(ledger_path), "inventory": "h200-8x", **dra_config},
    }


@pytest.fixture
def bobs_server(tmp_path: Path, ledger_path: Path) -> Iterator[Lab]:
    """Bob's server: another process, the same ledger, his hub user."""
    extension = [f"--DRAExtensionApp.ledger={ledger_path}", "--DRAExtensionApp.inventory=h200-8x"]
    tmp = tmp_path / "bob"
    tmp.mkdir()
    with running_lab(tmp, extension, {"JUPYTERHUB_USER": "bob"}) as lab:
        yield lab


def bob_env(ledger_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(
        JUPYTERHUB_USER="bob", DRA_JUPYTER_LEDGER=str(ledger_path), DRA_JUPYTER_INVENTORY="h200-8x"
    )
    return env


def bob_cli(ledger_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dra_jupyter.cli", *argv]
    env = bob_env(ledger_path)
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True)


def in_bobs_kernel(ledger_path: Path, code: str) -> dict[str, Any]:
    """Run ``code`` in a kernel of bob's; returns the execute reply's content."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=bob_env(ledger_path))
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        reply: dict[str, Any] = client.execute_interactive(code, timeout=120)
        content: dict[str, Any] = reply["content"]
        return content
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


async def test_the_hub_user_owns_kernel_and_rest_claims_and_no_one_else_reaches_them(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, ledger_path: Path, bobs_server: Lab
) -> None:
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run("import dra_jupyter as dra; c = dra.request(gpu=1)")
        r = await post(jp_fetch, {"gpu": 1})
        assert r.code == 201, r.body
        over_rest = body(r)
        assert over_rest["user"] == "alice"
        owners = {record.name: record.owner.user for record in ledger.read_claims()}
        assert sorted(owners.values()) == ["alice", "alice"]  # the kernel's and REST's alike
        names = sorted(owners)
        assert all(name.startswith("alice-") for name in names)
        mine = body(await jp_fetch("dra", "api", "claims"))["claims"]
        assert sorted(c["name"] for c in mine) == names

        # bob's server (REST): his list has neither; named, each is refused, not released
        assert bobs_server.api("GET", "/dra/api/claims") == {
            "claims": [],
            "joined": [],
            "pushed": False,
        }
        for name in names:
            for method in ("GET", "DELETE"):
                status, problem = refused(bobs_server, method, f"/dra/api/claims/{name}")
                assert status == 403, (method, name, problem)
                assert f"claim {name} belongs to user alice" in problem

        # bob's CLI
        listed = bob_cli(ledger_path, "claims")
        assert listed.returncode == 0, listed.stderr
        assert not any(name in listed.stdout for name in names)
        cli = bob_cli(ledger_path, "release", names[0])
        assert (cli.returncode, cli.stderr) == (
            2,
            f"error: claim {names[0]} belongs to user alice; only its owner can release it\n",
        )

        # bob's kernel: the API and the magics
        code = (
            "import dra_jupyter as dra\n"
            f"names = {names!r}\n"
            "assert [r.name for r in dra.claims()] == []\n"
            "try:\n"
            "    dra.release(names[0])\n"
            "except dra.ForbiddenError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('bob released a claim of alice')\n"
            "%load_ext dra_jupyter\n"
            f"%dra release {names[1]}\n"
        )
        reply = in_bobs_kernel(ledger_path, code)
        assert reply["status"] == "error"  # the magic's one line fails the cell
        assert reply["ename"] == "MagicError"
        assert f"claim {names[1]} belongs to user alice" in reply["evalue"]

        assert sorted(r.name for r in ledger.read_claims()) == names  # nothing was released


def refused(lab: Lab, method: str, path: str) -> tuple[int, str]:
    try:
        lab.api(method, path)
    except urllib.error.HTTPError as err:
        return err.code, str(json.loads(err.read()).get("message", ""))
    raise AssertionError(f"{method} {path} was not refused")

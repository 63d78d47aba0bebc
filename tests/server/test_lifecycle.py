"""Reconciliation when the server starts, release when it stops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.claims import Caller
from dra_jupyter.types import Owner
from tests.server.conftest import Events, Fetch, start_extensions
from tests.server.test_rest import extension


@pytest.fixture
def left_over(ledger_path: Path) -> str:
    """A claim of a kernel that is gone, left in the ledger before the server starts."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    owner = Owner(user="me", host=Owner.current().host, pid=child.pid, kernel_id="gone-kernel")
    backend = LocalBackend(resolve_inventory("h200-8x"), Ledger(ledger_path), owner)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
                ]
            }
        },
    }
    return backend.allocate(claim).name


async def test_claims_of_gone_kernels_are_released_at_start(
    left_over: str, jp_serverapp: Any, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    assert ledger.read_claims() == []
    assert [(r.name, r.reason) for r in ledger.releases()] == [(left_over, "kernel-shutdown")]


async def test_claims_are_released_when_the_server_stops(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    r = await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1}))
    name = json.loads(r.body)["name"]
    app = extension(jp_serverapp)
    other = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    await jp_serverapp.extension_manager.stop_all_extensions()
    reasons = {r.name: r.reason for r in ledger.releases()}
    assert reasons == {name: "server-stop", other.name: "server-stop"}  # both made here
    assert ("claim_released", "server-stop") in [(k, d.get("reason")) for k, d in events]


async def test_a_read_while_the_server_stops_is_a_503_in_one_line(
    jp_serverapp: Any, jp_fetch: Fetch
) -> None:
    """The lab polls while the server stops: its reader threads are gone then, and a read
    was a 500 with a traceback ("cannot schedule new futures after shutdown")."""
    await start_extensions(jp_serverapp)
    await jp_serverapp.extension_manager.stop_all_extensions()
    r = await jp_fetch("dra", "api", "claims", raise_error=False)
    assert r.code == 503
    message = json.loads(r.body)["message"]
    assert message == "the Jupyter server is stopping; try again once it is back", message

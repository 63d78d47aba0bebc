"""``examples/04-idle-release.ipynb`` run the way a user runs it: in a kernel of a real
Jupyter server with the extension, executed cell by cell with nbclient, with a pause where
the notebook says "walk away". Assertions are on the notebook's outputs, the ledger and the
server's events; the pause lasts until the release is announced, whatever that takes."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from nbclient import NotebookClient

from dra_jupyter.local.ledger import Ledger
from tests.examples.notebooks import TIMEOUT, read, text
from tests.server.conftest import Events, eventually, release_announced, start_extensions

WALK_AWAY = "after-walk-away"


@pytest.fixture
def dra_config() -> dict[str, Any]:
    # shorter than the notebook's 3 s "training" cell, so that cell shows busy is not idle
    return {"idle_timeout": 2.0, "idle_warning": 1.0, "check_interval": 0.2}


async def test_walking_away_releases_the_claim_with_a_warning_first(
    jp_serverapp: Any, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3")
    nb = read("04-idle-release.ipynb")
    client = NotebookClient(nb, km=km.get_kernel(kernel_id), timeout=TIMEOUT)
    try:
        async with client.async_setup_kernel():
            claim = None
            for index, c in enumerate(nb.cells):
                if WALK_AWAY in c.metadata.get("tags", []):
                    (record,) = ledger.read_claims()  # the busy cell did not lose it
                    claim = record.name
                    await eventually(partial(release_announced, events, claim))
                await client.async_execute_cell(c, index)
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        await km.shutdown_kernel(kernel_id, now=True)

    assert claim is not None
    assert claim in text(nb, "request")
    assert claim in text(nb, "status")
    assert "2s after the last cell" in text(nb, "status")  # the server's idle_timeout
    assert "'allocated'" in text(nb, "busy")  # a running cell is activity
    assert "'released'" in text(nb, WALK_AWAY)
    assert claim not in text(nb, "status-after") or "idle" in text(nb, "status-after")
    assert [r.reason for r in ledger.releases() if r.name == claim] == ["idle"]
    kinds = [kind for kind, data in events if data["claim"] == claim]
    assert kinds == ["claim_allocated", "idle_warning", "claim_released"]

"""Reclaim under pressure on the embedded ledger, from a Jupyter server with a real kernel:
the kernel holds every GPU of the simulated h200-8x and idles (its server reports its
cells to the ledger); bob, a process of its own on the same ledger, waits for one GPU and
takes turns while it waits. The kernel's claim is warned (the ``reclaim_warning`` event on
the server's bus, once, as on the service), its second Keep is refused in one line (409),
it is released with reason ``fair-share``, and bob gets a GPU.

bob is a worker process under another user name (the ledger's users are its rows'). Timing
is never asserted: everything is waited for as an event or a state."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.claim_events import RECLAIM_WARNING
from tests.local.worker import WorkerProcess
from tests.server.conftest import Fetch, eventually, start_extensions
from tests.server.test_kernels import started_kernel
from tests.server.test_reclaims import keep_twice, listened

GRACE = 3  # reclaim_grace: seconds from the warning to the release
IDLE = 1  # reclaim_idle: seconds without activity before a holder counts as idle


@pytest.fixture
def dra_config() -> dict[str, Any]:
    """The server (and its kernels) on the embedded ledger, with a short grace and idle
    time; its reclaim checks often."""
    return {
        "idle_timeout": 3600.0,
        "check_interval": 0.2,
        "reclaim_interval": 0.2,
        "reclaim_grace": GRACE,
        "reclaim_idle": IDLE,
    }


async def test_an_idle_kernel_is_warned_kept_once_then_released_for_a_waiter(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, ledger_path: Path
) -> None:
    warnings = listened(jp_serverapp, RECLAIM_WARNING)
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run("import dra_jupyter as dra; c = dra.request(gpu=8, apply_env=False)")
        [held] = ledger.read_claims()
        assert held.owner.kernel_id == kernel.id
        # the cell's end, told to the ledger by the server: its activity is known
        await eventually(lambda: reported(ledger_path))

        spec = json.dumps({"gpu": 1})
        args = ("press", str(ledger_path), "h200-8x", spec, "60", "bob", str(GRACE), str(IDLE))
        bob = WorkerProcess(*args)
        try:
            waiting = await asyncio.to_thread(bob.event, 60)
            assert waiting["event"] == "waiting", waiting
            await eventually(lambda: bool(warnings))
            [event] = warnings
            assert event["claim"] == held.name and event["kernel_id"] == kernel.id
            assert len(event["devices"]) == 8
            assert (event["waiter"], event["what"]) == ("bob", "1× NVIDIA H200")
            assert event["keeps_left"] == 1
            assert 0 < event["seconds_left"] <= GRACE
            assert event["message"].startswith(
                f"bob is waiting for 1× NVIDIA H200; your {held.name}, idle for "
            )
            await keep_twice(jp_fetch, held.name, "bob")
            got = await asyncio.to_thread(bob.event, 60)
            assert got["event"] == "held", got
            assert len(got["devices"]) == 1
            bob.send("release")
            assert await asyncio.to_thread(bob.wait) == 0
        finally:
            bob.close()
        gone = ledger.released(held.name)
        assert gone is not None and gone.reason == "fair-share"
        assert gone.message is not None and gone.message.startswith("released for bob, ")
        # the claim's card, which polls it, reads why it went
        gone_wire = json.loads((await jp_fetch("dra", "api", "claims", held.name)).body)
        assert gone_wire["released"]["reason"] == "fair-share"
        assert gone_wire["released"]["message"] == gone.message
        assert len(warnings) == 1  # told once, the Keep's new deadline included


def reported(path: Path) -> bool:
    """Some claim's activity is reported in the ledger at ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM claim_activity").fetchone()[0]) > 0

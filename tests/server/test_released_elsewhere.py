"""A claim this server announced allocated is announced released, once, with the reason
the ledger recorded, whoever released it: the lab decides from that reason whether the
user is told (issue 42, item 4), not from whether one of its reads saw the claim alive."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server import claim_events
from dra_jupyter.server.claim_events import event_reason
from tests.server.conftest import Events, Fetch, eventually, release_announced, start_extensions
from tests.server.test_kernels import REQUEST, started_kernel


@pytest.fixture(autouse=True)
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim gone from a check's read is gone, however new (the tests make and release
    them within a second)."""
    monkeypatch.setattr(claim_events, "GONE_AFTER", 0.0)


def released(events: Events, claim: str) -> list[str]:
    return [d["reason"] for kind, d in events if kind == "claim_released" and d["claim"] == claim]


def release_elsewhere(ledger_path: Path, name: str, reason: str, message: str | None) -> None:
    """Another writer of the ledger (the CLI, another server, a kernel) releases ``name``."""
    other = Ledger(ledger_path)
    with other.transaction() as tx:
        [record] = [r for r in Ledger.claims(tx) if r.name == name]
        Ledger.delete(tx, record, reason, time.time(), message)


async def test_a_rest_claim_released_by_another_process_is_announced_with_its_reason(
    jp_serverapp: Any, jp_fetch: Fetch, ledger_path: Path, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    made = {}
    for name in ("by-admin", "by-its-user", "by-the-server"):
        reply = await jp_fetch(
            "dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1, "name": name})
        )
        made[name] = json.loads(reply.body)
    release_elsewhere(ledger_path, "by-admin", "admin", None)
    release_elsewhere(ledger_path, "by-its-user", "user", None)
    await jp_fetch("dra", "api", "claims", "by-the-server", method="DELETE")
    await eventually(lambda: all(release_announced(events, n) for n in made))
    await asyncio.sleep(1)  # five checks more: none announces one again
    assert released(events, "by-admin") == ["admin"]
    assert released(events, "by-its-user") == ["user"]
    assert released(events, "by-the-server") == ["user"]
    assert [
        d["devices"] for k, d in events if k == "claim_released" and d["claim"] == "by-admin"
    ] == [made["by-admin"]["devices"]]


async def test_a_kernels_claim_it_released_itself_is_announced_as_the_users(
    jp_serverapp: Any, ledger: Ledger, events: Events
) -> None:
    """``c.release()`` in a notebook of this server: the kernel's process writes the ledger,
    the server announces it at its next check, reason ``user``, with the kernel."""
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        await eventually(
            lambda: any(k == "claim_allocated" and d["claim"] == record.name for k, d in events)
        )
        await kernel.run("c.release()")
        await eventually(lambda: release_announced(events, record.name))
        [event] = [d for k, d in events if k == "claim_released" and d["claim"] == record.name]
        assert (event["reason"], event["kernel_id"]) == ("user", kernel.id)


def test_a_reason_in_anothers_words_is_said_as_whose_it_is() -> None:
    assert event_reason("expired") == "expired"
    assert event_reason("done-for-today") == "user"  # a user's own words (the service)
    assert event_reason("maintenance", "released by admin carol (maintenance)") == "admin"

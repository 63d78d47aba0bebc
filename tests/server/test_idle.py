"""Idle release end to end with short timeouts, on a real kernel. Assertions are on events
and ledger state, never on durations."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.claims import release_message, spoken_duration
from dra_jupyter.server.idle import Decision, IdlePolicy
from tests.server.conftest import (
    Events,
    Fetch,
    eventually,
    release_announced,
    start_extensions,
)
from tests.server.test_kernels import REQUEST, started_kernel


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"idle_timeout": 2.0, "idle_warning": 1.0, "check_interval": 0.2}


async def test_a_running_cell_keeps_the_claim_then_warning_then_release(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        assert record.owner.kernel_id == kernel.id
        # a cell that runs longer than idle_timeout: the kernel is busy, never idle
        await kernel.run("import time; time.sleep(3)")
        assert [r.name for r in ledger.read_claims()] == [record.name]
        assert [kind for kind, data in events if data["claim"] == record.name] in (
            ["claim_allocated"],
            ["claim_allocated", "idle_warning"],  # the warning may follow the cell's end
        )

        def released() -> bool:
            """the claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released)
        assert [r.reason for r in ledger.releases() if r.name == record.name] == ["idle"]
        kinds = [(kind, data.get("reason")) for kind, data in events]
        assert kinds == [
            ("claim_allocated", None),
            ("idle_warning", None),
            ("claim_released", "idle"),
        ]
        warning = events[1][1]
        assert warning["kernel_id"] == kernel.id
        assert warning["deadline"] > 0
        r = await jp_fetch("dra", "api", "kernels", kernel.id, "claims")
        assert json.loads(r.body)["claims"] == []
        # the released claim stays readable, with why and when (the card says it)
        gone = json.loads((await jp_fetch("dra", "api", "claims", record.name)).body)
        assert gone["name"] == record.name
        assert gone["released"]["reason"] == "idle"
        assert gone["released"]["message"] == "idle for 2 s"
        assert gone["released"]["time"] >= warning["deadline"]
        assert gone["idle_deadline"] is None
        listed = json.loads((await jp_fetch("dra", "api", "claims")).body)["claims"]
        assert listed == []  # live claims only


async def test_a_running_cell_pauses_the_countdown_and_it_restarts_when_the_cell_ends(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    """REST never reports a deadline in the past: while a cell runs longer than
    idle_timeout the claim is ``busy`` and its deadline a full idle_timeout away; when the
    cell ends, the countdown starts again from there."""
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        cell = kernel.client.execute("import time; time.sleep(5)")  # idle_timeout is 2 s
        seen_busy = 0
        last_busy = 0.0
        for _ in range(600):  # bounded: until the cell has ended
            asked = time.time()
            claim = json.loads((await jp_fetch("dra", "api", "claims", record.name)).body)
            assert claim["idle_deadline"] >= asked, claim  # never in the past
            if claim["busy"]:
                assert claim["idle_deadline"] >= asked + 2.0, claim  # paused: all of it left
                seen_busy += 1
                last_busy = asked
            elif seen_busy:
                break
            await asyncio.sleep(0.1)
        assert seen_busy > 1
        assert not claim["busy"]
        assert claim["idle_deadline"] >= last_busy + 2.0  # restarted when the cell ended
        reply = await kernel.client.get_shell_msg(timeout=120)
        assert reply["parent_header"]["msg_id"] == cell
        assert [r.name for r in ledger.read_claims()] == [record.name]


async def test_a_kernel_restarted_during_a_cell_is_not_busy_after_it(
    jp_serverapp: Any, jp_fetch: Fetch
) -> None:
    """A restart that cuts a cell short (a kernel that moves into a pod from its own cell,
    dra.request(..., restart=True) or join=): the new kernel is not busy after it. Where
    jupyter_server's own watch of the new kernel misses its first statuses (a pod's new
    address, a loaded machine), it kept the cut cell's ``busy``: the kernel was never idle
    (a joiner's pod stayed, once in CI). This local restart keeps jupyter_server's watch
    connected, so it guards the outcome; it did not fail without the fix."""
    await start_extensions(jp_serverapp)
    km = jp_serverapp.kernel_manager
    async with started_kernel(jp_serverapp) as kernel:
        kernel.client.execute("import time; time.sleep(120)")
        await eventually(lambda: km.get_kernel(kernel.id).execution_state == "busy")
        await km.restart_kernel(kernel.id)
        await eventually(lambda: km.get_kernel(kernel.id).execution_state != "busy")
        model = json.loads((await jp_fetch("api", "kernels", kernel.id)).body)
        assert model["execution_state"] != "busy", model


async def test_comm_traffic_does_not_keep_a_claim(
    jp_serverapp: Any, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        client = kernel.client
        for _ in range(300):  # widget-like traffic until the claim goes (bounded)
            if not ledger.read_claims():
                break
            msg = client.session.msg("comm_msg", {"comm_id": "no-such-comm", "data": {}})
            client.shell_channel.send(msg)
            await asyncio.sleep(0.1)
        assert [r.reason for r in ledger.releases() if r.name == record.name] == ["idle"]
        await eventually(lambda: release_announced(events, record.name))
        assert ("claim_released", "idle") in [(k, d.get("reason")) for k, d in events]


async def test_keep_moves_the_deadline_then_the_claim_is_released_later(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()

        def warnings() -> list[dict[str, Any]]:
            return [data for kind, data in events if kind == "idle_warning"]

        await eventually(lambda: len(warnings()) == 1)
        original = warnings()[0]["deadline"]
        r = await jp_fetch("dra", "api", "claims", record.name, "keep", method="POST", body="")
        kept = json.loads(r.body)
        assert kept["name"] == record.name
        assert kept["last_activity"] > record.last_activity
        assert kept["idle_deadline"] > original

        # The warning for the new deadline comes from a check pass at or after the original
        # deadline (the keep came at most idle_warning before it): that pass kept the claim.
        await eventually(lambda: len(warnings()) == 2)
        second = warnings()[1]
        assert second["deadline"] > original
        assert second["deadline"] - second["seconds_left"] >= original  # the pass's clock
        assert not any(r.name == record.name for r in ledger.releases())

        def released() -> bool:
            """the kept claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released)
        assert [r.reason for r in ledger.releases() if r.name == record.name] == ["idle"]
        assert [(kind, data.get("reason")) for kind, data in events] == [
            ("claim_allocated", None),
            ("idle_warning", None),
            ("idle_warning", None),
            ("claim_released", "idle"),
        ]


@pytest.mark.parametrize(
    "dra_config", [{"idle_timeout": 3.0, "idle_warning": 1.5, "check_interval": 120.0}]
)
async def test_the_warning_and_the_release_come_at_their_times_not_at_the_next_sweep(
    jp_serverapp: Any, ledger: Ledger, events: Events
) -> None:
    """With a sweep every 120 s, a claim whose deadline is 3 s after its last cell is
    warned of and released at its times (a timer per deadline), long before the sweep."""
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()

        def released() -> bool:
            """the claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released, tries=300, pause=0.1)  # 30 s at most: a quarter sweep
        [gone] = [r for r in ledger.releases() if r.name == record.name]
        assert gone.reason == "idle"
        [warning] = [data for kind, data in events if kind == "idle_warning"]
        assert gone.time >= warning["deadline"]  # not before its deadline
        assert [kind for kind, _ in events] == ["claim_allocated", "idle_warning", "claim_released"]


async def test_keep_of_an_unknown_claim_is_404(jp_fetch: Fetch) -> None:
    r = await jp_fetch(
        "dra", "api", "claims", "no-such-claim", "keep", method="POST", body="", raise_error=False
    )
    assert r.code == 404
    assert "does not exist" in json.loads(r.body)["message"]


@pytest.mark.pure
def test_policy() -> None:
    policy = IdlePolicy(timeout=10, warning=3)
    deadline = policy.deadline(100, 95)
    assert deadline == 110
    assert policy.decide(now=105, busy=False, deadline=deadline, warned_for=None) is Decision.KEEP
    assert policy.decide(now=108, busy=False, deadline=deadline, warned_for=None) is Decision.WARN
    assert policy.decide(now=108, busy=False, deadline=deadline, warned_for=110) is Decision.KEEP
    assert policy.decide(now=110, busy=False, deadline=deadline, warned_for=110) is (
        Decision.RELEASE
    )
    assert policy.decide(now=500, busy=True, deadline=deadline, warned_for=None) is Decision.KEEP
    assert policy.deadline(100, 120) == 130  # a claim's own activity (a "keep") counts
    # what REST shows: paused while a cell runs, never in the past
    assert policy.reported(deadline, now=105, busy=False) == 110
    assert policy.reported(deadline, now=500, busy=False) == 500
    assert policy.reported(deadline, now=105, busy=True) == 115
    assert policy.reported(None, now=105, busy=True) is None
    off = IdlePolicy(timeout=0, warning=3)
    assert off.deadline(100, 100) is None
    assert off.decide(now=1e9, busy=False, deadline=None, warned_for=None) is Decision.KEEP


@pytest.mark.pure
def test_release_reasons_in_a_users_words() -> None:
    assert release_message("idle", 2400) == "idle for 40 min"
    assert release_message("idle", 3600) == "idle for 1 h"
    assert release_message("kernel-shutdown", 3600).startswith(
        "its kernel shut down or was restarted (a plain restart gives the devices back"
    )
    assert release_message("expired", 0) == "its lease ended"
    assert release_message("something-new", 0) == "something-new"
    assert [spoken_duration(s) for s in (2, 90, 120, 5400, 7200)] == [
        "2 s",
        "1 min 30 s",  # a 90 s timeout is not "2 min"
        "2 min",
        "1 h 30 min",
        "2 h",
    ]

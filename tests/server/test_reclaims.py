"""Reclaim under pressure from a Jupyter server on the real service, with a real kernel and
a real waiting user: the server reports its kernels' cells (the ``activity`` op), so a
kernel running a long cell keeps its GPUs while bob waits; once its cell has ended and it
idles, it is warned (the ``reclaim_warning`` event on the server's bus, once, in the
service's words), its second Keep is refused in one line (409), and bob gets a GPU.

The server and its kernel run as root (the service sees user ``root``); bob is a real Unix
user in a forked process. Timing is never asserted: bob's first wait runs out (an answer),
and everything else is waited for as an event or a state."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from dra_jupyter.api import Session
from dra_jupyter.server.claim_events import RECLAIM_WARNING, RELEASED
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.settings import Settings
from dra_jupyter.types import ReclaimNotice
from tests.server.conftest import Fetch, eventually, start_extensions
from tests.server.test_kernels import started_kernel
from tests.service.accounts import Child, Service, User, service
from tests.service.conftest import users  # noqa: F401  # the real Unix users, a fixture
from tests.service.test_isolation import admin_policy, read

GRACE = 3  # reclaim_grace: seconds from the warning to the release
IDLE = 1  # reclaim_idle: seconds without activity before a holder counts as idle
FIRST_WAIT = IDLE + GRACE + 3  # bob's first wait: longer than a reclaim of an idle holder


@pytest.fixture
def svc(
    users: dict[str, User],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Service]:
    """The service, with a short grace (a test's own as its parameter) and idle time; the
    server (made after) uses it. The environment is put back afterwards (a server with a
    startup claim puts its devices' there)."""
    grace = getattr(request, "param", GRACE)
    policy = admin_policy(users, f"reclaim_grace = {grace}\nreclaim_idle = {IDLE}\n")
    before = dict(os.environ)
    with service(policy) as made:
        for key, value in made.env().items():
            monkeypatch.setenv(key, value)
        yield made
    os.environ.clear()
    os.environ.update(before)


@pytest.fixture
def dra_config(svc: Service, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A test's own traits as its parameter."""
    return {
        "backend": "service",
        "idle_timeout": 3600.0,
        "check_interval": 0.2,
        "reclaim_interval": 0.2,
        **getattr(request, "param", {}),
    }


def ask(timeout: float) -> Any:
    """bob asks for one GPU and waits up to ``timeout`` seconds for it."""
    claim = Session(Settings.from_env()).request(gpu=1, timeout=timeout, apply_env=False)
    return claim._record.device_keys


def last_activity(svc: Service, name: str) -> float:
    [(when,)] = read(svc, f"SELECT last_activity FROM claims WHERE name = '{name}'")
    return float(when)


def listened(jp_serverapp: Any, schema: str) -> list[dict[str, Any]]:
    """Every event of ``schema`` the server emits from now on."""
    seen: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=schema, listener=listen)
    return seen


async def answer(child: Child) -> dict[str, Any]:
    """``child``'s answer, the server's loop running while it comes."""
    try:
        await eventually(child.answered)
        return child.result()
    finally:
        child.kill()


async def keep_twice(jp_fetch: Fetch, name: str, waiter: str) -> None:
    """The card's Keep under pressure: once allowed, then a 409 in one line."""
    kept = await jp_fetch("dra", "api", "claims", name, "keep", method="POST", body="{}")
    assert kept.code == 200
    with pytest.raises(HTTPClientError) as second:
        await jp_fetch("dra", "api", "claims", name, "keep", method="POST", body="{}")
    assert second.value.code == 409
    assert second.value.response is not None
    answer = json.loads(second.value.response.body)
    message = answer["message"]
    assert answer["reason"] == "no Keep left while someone waits"  # not a per-user limit
    assert message.startswith(f"claim {name}: Keep refused: {waiter} is waiting for ")
    assert "\n" not in message


async def test_a_running_cell_keeps_its_gpus_then_its_idle_claim_is_warned_and_reclaimed(
    jp_serverapp: Any,
    jp_fetch: Fetch,
    users: dict[str, User],  # noqa: F811
    svc: Service,
    tmp_path: Path,
) -> None:
    bob = users["bob"]
    warnings = listened(jp_serverapp, RECLAIM_WARNING)
    released = listened(jp_serverapp, RELEASED)
    await start_extensions(jp_serverapp)
    flag = tmp_path / "done"
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run("import dra_jupyter as dra; c = dra.request(gpu=8, apply_env=False)")
        [(name, owner)] = read(svc, "SELECT name, owner FROM claims")
        assert json.loads(owner)["kernel_id"] == kernel.id
        before = last_activity(svc, name)

        # a long cell, on the CPU: the server tells the service it is busy
        cell = kernel.client.execute(
            f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)"
        )
        await eventually(lambda: last_activity(svc, name) > before)  # the cell's start, told

        refused = await answer(Child(bob, svc.env(), lambda: ask(FIRST_WAIT)))
        assert refused.get("error") == "BusyError", refused  # nothing was taken for bob
        assert [row[0] for row in read(svc, "SELECT name FROM claims")] == [name]
        assert "reclaim:" not in svc.log.read_text()  # never warned while it ran
        assert warnings == []

        # the cell ends; the kernel idles: now it gives way to bob, warned first
        started = last_activity(svc, name)
        flag.touch()
        reply = await kernel.client.get_shell_msg(timeout=120)
        assert reply["parent_header"]["msg_id"] == cell
        await eventually(lambda: last_activity(svc, name) > started)  # the cell's end, told
        waiter = Child(bob, svc.env(), lambda: ask(60))
        try:
            await eventually(lambda: bool(warnings))
            [event] = warnings
            assert event["claim"] == name and event["kernel_id"] == kernel.id
            assert event["user"] == "root" and len(event["devices"]) == 8
            assert (event["waiter"], event["what"]) == (bob.name, "1× NVIDIA H200")
            assert event["keeps_left"] == 1
            assert 0 < event["seconds_left"] <= GRACE
            assert event["message"].startswith(
                f"{bob.name} is waiting for 1× NVIDIA H200; your {name}, idle for "
            )
            assert ", will be released in 0:0" in event["message"]
            await keep_twice(jp_fetch, name, bob.name)
        finally:
            got = await answer(waiter)
        assert "ok" in got, got  # bob got a GPU
        [(reason,)] = read(svc, f"SELECT reason FROM releases WHERE name = '{name}'")
        assert reason == "fair-share"
        await eventually(lambda: bool(released))  # the server tells its user why
        assert [(e["claim"], e["reason"]) for e in released] == [(name, "fair-share")]
        assert len(warnings) == 1  # told once, the Keep's new deadline included


def logged(svc: Service, line: str, times: int) -> bool:
    """The service logged ``line`` ``times`` times (at least)."""
    return svc.log.read_text().count(line) >= times


def notices_of(name: str) -> list[ReclaimNotice]:
    """The warnings in force on ``name``, as root (an admin) reads them."""
    backend = Session(Settings.from_env()).backend
    assert isinstance(backend, ServiceBackend)
    try:
        return [n for n in backend.notices() if n.claim == name]
    finally:
        backend.channel.close()


@pytest.mark.parametrize("svc", [60], indirect=True)  # a grace the test never reaches
@pytest.mark.parametrize("dra_config", [{"startup_request": '{"gpu": 8}'}], indirect=True)
async def test_the_startup_claim_is_active_with_the_kernels_never_kept(
    jp_serverapp: Any,
    users: dict[str, User],  # noqa: F811
    svc: Service,
) -> None:
    """The server's own claim (made at start) is active while its kernels run cells: the
    server says so with ``activity``, not a Keep, so a warning on it is withdrawn when a
    cell runs, and no Keep under pressure is used (a Keep's second would be refused)."""
    await start_extensions(jp_serverapp)
    [(name,)] = read(svc, "SELECT name FROM claims")
    async with started_kernel(jp_serverapp) as kernel:
        waiter = Child(users["bob"], svc.env(), lambda: ask(120))
        try:
            await eventually(lambda: bool(notices_of(name)))
            withdrawn = f"reclaim: claim {name} of root is not released"
            for turn in (1, 2):  # each cell withdraws the warning; idle again, it comes back
                [notice] = notices_of(name)
                assert notice.keeps_left == 1  # no Keep was used
                await kernel.run("1 + 1")
                await eventually(partial(logged, svc, withdrawn, turn))
                await eventually(lambda: bool(notices_of(name)))
        finally:
            waiter.kill()

"""On the shared-machine service, as on the embedded ledger (test_waiters.py): another
user's request waiting in line names the claims it waits on in ``GET /dra/api/devices``
(``holders``, which the lab turns into the holder's notification), and leaves the answer
once served. The server runs as root against the real daemon; bob is a real Unix user."""

from __future__ import annotations

import json
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.server.conftest import Fetch, start_extensions
from tests.server.test_reclaims import dra_config, svc  # noqa: F401  # the service's fixtures
from tests.server.test_waiters import BOUND, waiting_within
from tests.service.accounts import Child, Service, User
from tests.service.conftest import users  # noqa: F401  # the real Unix users, a fixture


def ask() -> Any:
    """bob asks for one GPU and waits in line up to two minutes for it."""
    claim = Session(Settings.from_env()).request(gpu=1, timeout=120, apply_env=False)
    return claim._record.device_keys


async def test_another_users_waiter_names_the_claim_it_waits_on(
    jp_serverapp: Any,
    jp_fetch: Fetch,
    users: dict[str, User],  # noqa: F811
    svc: Service,  # noqa: F811
) -> None:
    await start_extensions(jp_serverapp)
    payload = json.dumps({"gpu": 8})
    held = json.loads((await jp_fetch("dra", "api", "claims", method="POST", body=payload)).body)
    waiter = Child(users["bob"], svc.env(), ask)
    try:
        # the Child's start (a fork that becomes bob) is not the server's part: no bound
        waiting, _ = await waiting_within(jp_fetch, 60, empty=False)
        [entry] = waiting
        assert entry["user"] == users["bob"].name
        assert entry["what"] == "1 gpu.nvidia.com"
        assert entry["holders"] == [held["name"]]
        await jp_fetch("dra", "api", "claims", held["name"], method="DELETE")
        waiting, took = await waiting_within(jp_fetch, BOUND, empty=True)
        assert waiting == [], f"still in line {took:.1f} s after its devices were freed"
    finally:
        waiter.kill()

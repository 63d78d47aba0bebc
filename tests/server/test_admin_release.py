"""A REST release by an admin (as the server's authorizer says) of another user's claim is
the admin's: recorded with the reason ``admin`` and the admin's name in the usage book, its
words naming the admin, and announced to the holder (issue 42, the REST admin release). A
user's own REST release stays ``user``, by that user."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Events, Fetch, eventually, release_announced, start_extensions
from tests.server.named_users import NamedUsers, as_user


@pytest.fixture
def dra_config() -> dict[str, Any]:
    """Every user may read dra-admin (jupyter_server's authorizer allows all)."""
    return {"allow_admin_view": True, "check_interval": 0.2}


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


async def make(jp_fetch: Fetch, user: str, name: str) -> None:
    await jp_fetch(
        "dra", "api", "claims", method="POST", headers=as_user(user),
        body=json.dumps({"gpu": 1, "name": name}),
    )  # fmt: skip


def book(ledger_path: Path, claim: str) -> tuple[str, str | None]:
    """The usage book's reason and releaser of ``claim``'s interval."""
    with sqlite3.connect(ledger_path) as conn:
        reason, by = conn.execute(
            "SELECT reason, released_by FROM usage WHERE claim = ?", (claim,)
        ).fetchone()
    return reason, by


async def test_an_admins_release_of_another_users_claim_is_the_admins(
    jp_serverapp: Any, jp_fetch: Fetch, ledger_path: Path, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    await make(jp_fetch, "bob", "bobs")
    await make(jp_fetch, "carol", "carols")
    await jp_fetch("dra", "api", "claims", "bobs", method="DELETE", headers=as_user("alice"))
    await jp_fetch("dra", "api", "claims", "carols", method="DELETE", headers=as_user("carol"))
    await eventually(lambda: all(release_announced(events, n) for n in ("bobs", "carols")))
    reasons = {d["claim"]: d["reason"] for k, d in events if k == "claim_released"}
    assert reasons == {"bobs": "admin", "carols": "user"}
    assert book(ledger_path, "bobs") == ("admin", "alice")
    assert book(ledger_path, "carols") == ("user", "carol")
    reply = await jp_fetch("dra", "api", "claims", "bobs", headers=as_user("bob"))
    released = json.loads(reply.body)["released"]
    assert (released["reason"], released["message"]) == ("admin", "released by admin alice")

"""A real jupyter_server with the extension, a temporary ledger and the simulated h200-8x.

pytest-jupyter's fixtures are imported here rather than enabled as a plugin for the whole
suite: they add autouse fixtures (an event loop, server cleanup) that only these tests need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  # the jp_* fixtures, for this folder only

from dra_jupyter.local.ledger import Ledger

Fetch = Callable[..., Awaitable[Any]]
Events = list[tuple[str, dict[str, Any]]]

DRA_SCHEMAS = ("claim_allocated", "idle_warning", "claim_released")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


@pytest.fixture
def dra_config() -> dict[str, Any]:
    """Traits of DRAExtensionApp; a test module may override this fixture."""
    return {"idle_timeout": 3600.0, "idle_warning": 300.0, "check_interval": 0.2}


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's fixture
def jp_server_config(ledger_path: Path, dra_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {"ledger": str(ledger_path), "inventory": "h200-8x", **dra_config},
    }


@pytest.fixture
def ledger(ledger_path: Path) -> Ledger:
    return Ledger(ledger_path)


@pytest.fixture
def events(jp_serverapp: Any) -> Events:
    """Every dra_jupyter event the server emits, in order."""
    seen: Events = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append((schema_id.rsplit("/", 2)[-2], dict(data)))

    for name in DRA_SCHEMAS:
        jp_serverapp.event_logger.add_listener(
            schema_id=f"https://events.dra-jupyter.dev/dra_jupyter/{name}/v1", listener=listen
        )
    return seen


async def eventually(check: Callable[[], bool], *, tries: int = 300, pause: float = 0.1) -> None:
    """Wait until ``check()`` holds, for at most ``tries`` pauses (no timing asserted)."""
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(pause)
    raise AssertionError(f"condition not met after {tries} tries: {check.__doc__ or check}")


def release_announced(events: Events, claim: str) -> bool:
    """The claim_released event of ``claim`` was received. The ledger commits a release
    before the event is emitted, and listeners run as tasks: wait on this before asserting
    on events."""
    return any(kind == "claim_released" and data["claim"] == claim for kind, data in events)


async def start_extensions(serverapp: Any) -> None:
    """What ``ServerApp.start_ioloop`` does once the loop runs (pytest-jupyter does not):
    start the extensions' background work (here, the periodic check)."""
    await serverapp.extension_manager.start_all_extensions()

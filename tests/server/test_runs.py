"""A background run started in a server's kernel (one machine): its claim is the run's, so
the server's idle release and the kernel's shutdown, which end the kernel's own claims,
leave it."""

from __future__ import annotations

from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.settings import Settings
from tests.server.conftest import Events, eventually, release_announced, start_extensions
from tests.server.test_kernels import REQUEST, started_kernel

RUN = "r = dra.run(['python', '-c', 'import time; time.sleep(120)'], gpu=2, name='train')"


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"idle_timeout": 2.0, "idle_warning": 1.0, "check_interval": 0.2}


async def test_idle_release_and_shutdown_of_the_kernel_leave_its_run(
    jp_serverapp: Any, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    try:
        async with started_kernel(jp_serverapp) as kernel:
            await kernel.run(f"{REQUEST}\n{RUN}")
            held = ledger.read_claims()
            [own] = [r for r in held if r.owner.kernel_id == kernel.id]
            [runs] = [r for r in held if r.owner.kernel_id is None]
            await eventually(lambda: release_announced(events, own.name))
            assert [r.reason for r in ledger.releases() if r.name == own.name] == ["idle"]
            assert [r.name for r in ledger.read_claims()] == [runs.name]
        # the kernel is shut down: what the server releases for it is the kernel's alone
        assert [r.name for r in ledger.read_claims()] == [runs.name]
        assert not any(r.name == runs.name for r in ledger.releases())
    finally:
        session = Session(Settings(ledger=ledger.path, inventory="h200-8x"))
        for run in session.runs():
            run.cancel()
    assert ledger.read_claims() == []

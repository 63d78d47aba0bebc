"""Paths in the extension's configuration are made absolute when the server starts: its
kernels start in their notebook's folder and must open the same ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.server.kernels import LEDGER_ENV
from tests.server.test_rest import extension


@pytest.fixture
def jp_server_config(  # overrides tests/server/conftest.py's
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)
    return {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {"ledger": "relative/ledger.sqlite", "inventory": "h200-8x"},
    }


async def test_a_relative_ledger_is_the_servers_for_every_kernel(
    jp_serverapp: Any, tmp_path: Path
) -> None:
    app = extension(jp_serverapp)
    expected = (tmp_path / "relative" / "ledger.sqlite").resolve()
    assert app.service.session.settings.ledger == expected
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3", path="some/notebook/folder")
    try:
        launched = km.get_kernel(kernel_id)._launch_args["env"]
        assert launched[LEDGER_ENV] == str(expected)
    finally:
        await km.shutdown_kernel(kernel_id, now=True)

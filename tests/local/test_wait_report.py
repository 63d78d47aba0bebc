"""A request that waits says where it stands, on stderr, when its place changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_jupyter.api import Session
from dra_jupyter.errors import AllocationError
from dra_jupyter.inventory import simulated
from dra_jupyter.settings import Settings


def test_waiting_request_reports_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(ledger=tmp_path / "ledger.sqlite", poll_interval=0.05)
    session = Session(settings, inventory=simulated.load("h200-8x"))
    holder = session.request(gpu=8, apply_env=False)
    with pytest.raises(AllocationError, match="busy after waiting"):
        session.request(gpu=2, timeout=1.2, apply_env=False)
    err = capsys.readouterr().err
    assert err.count("dra: waiting for gpu=2: next in line") == 1, err
    holder.release()
    assert session.request(gpu=2, timeout="1s", apply_env=False).devices[0].state == "held"
    assert capsys.readouterr().err == ""  # served at once: nothing to report

"""What the claim card says while its kernel runs a long cell and after the server released
the claim, in a real JupyterLab in Debian's chromium: ``busy`` with the countdown paused
(the board too), then why and when it was released, and no more polling (no 404s)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import (
    WAIT_MS,
    Lab,
    open_notebook,
    run_all_cells,
    running_lab,
    screenshots_dir,
)

CELLS = [
    "import dra_jupyter as dra\nc = dra.request(gpu=1)\nc",
    "%load_ext dra_jupyter\n%dra devices",
    "import time\ntime.sleep(12)  # longer than idle_timeout",
]


@pytest.fixture(scope="module")
def idle_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab with the extension and idle release after 4 seconds."""
    tmp = tmp_path_factory.mktemp("lab-idle")
    extension = [
        f"--DRAExtensionApp.ledger={tmp / 'ledger.sqlite'}",
        "--DRAExtensionApp.inventory=h200-8x",
        "--DRAExtensionApp.check_interval=0.5",
        "--DRAExtensionApp.idle_timeout=4",
        "--DRAExtensionApp.idle_warning=2",
    ]
    with running_lab(tmp, extension) as server:
        yield server


def test_card_says_busy_while_a_cell_runs_then_why_it_was_released(
    idle_lab: Lab, page: Any, tmp_path: Path
) -> None:
    open_notebook(page, idle_lab, "idle.ipynb", CELLS)
    run_all_cells(page)
    card = page.locator(".dra-card")
    board = page.locator(".dra-board")
    card.wait_for(timeout=WAIT_MS)
    [claim] = idle_lab.api("GET", "/dra/api/claims")["claims"]

    # the long cell runs: busy, never "idle: releasing", though idle_timeout has passed
    card.get_by_text("busy: a cell is running").wait_for(timeout=WAIT_MS)
    board.locator(".dra-busy").first.wait_for(timeout=WAIT_MS)
    card.screenshot(path=str(screenshots_dir(tmp_path) / "card-busy.png"))
    board.screenshot(path=str(screenshots_dir(tmp_path) / "board-busy.png"))
    assert card.get_by_text("idle: releasing").count() == 0
    assert idle_lab.api("GET", f"/dra/api/claims/{claim['name']}")["busy"] is True

    # the cell ends, the countdown starts again, and the server releases the claim
    card.get_by_text("idle for 4 s").wait_for(timeout=WAIT_MS)
    text = card.inner_text()
    # a 24-hour clock, as the lab's toasts say it (the browser's locale is en-US: 12-hour)
    assert re.search(r"released at \d\d:\d\d: ", text), text
    assert "released" in card.locator(".dra-pill").inner_text()
    card.screenshot(path=str(screenshots_dir(tmp_path) / "card-released-idle.png"))
    gone = idle_lab.api("GET", f"/dra/api/claims/{claim['name']}")
    assert gone["released"]["reason"] == "idle"
    log = (idle_lab.root.parent / "lab.log").read_text()
    assert f"/dra/api/claims/{claim['name']}" not in "".join(
        line for line in log.splitlines() if " 404 " in line
    )

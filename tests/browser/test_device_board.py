"""The device board and the claim card in a real JupyterLab, in Debian's chromium.

The notebook is run through the page (Run All Cells); then claims are made and released
behind the notebook's back (REST) and from the card's button, and the widgets must follow
by themselves, with no cell run: their JavaScript polls the server extension.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.conftest import (
    HELD,
    WAIT_MS,
    Lab,
    open_notebook,
    run_all_cells,
    screenshots_dir,
)

CELLS = [
    "import dra_jupyter as dra\nclaim = dra.request(gpu=2)\nclaim",
    "%load_ext dra_jupyter\n%dra devices",
]


def test_board_and_card_follow_claims_made_anywhere(lab: Lab, page: Any, tmp_path: Path) -> None:
    open_notebook(page, lab, "board.ipynb", CELLS)
    run_all_cells(page)
    card = page.locator(".dra-card")
    board = page.locator(".dra-board")
    card.wait_for(timeout=WAIT_MS)
    board.wait_for(timeout=WAIT_MS)
    [claim] = lab.api("GET", "/dra/api/claims")["claims"]
    assert card.get_by_text(claim["name"]).count() >= 1
    page.wait_for_function("() => document.querySelectorAll('.dra-board tr').length >= 9")
    assert board.get_by_text("SIMULATED", exact=False).count() >= 1
    page.wait_for_function(HELD.format(2), timeout=WAIT_MS)

    # a claim made behind the notebook's back appears on the board without running a cell
    other = lab.api("POST", "/dra/api/claims", {"gpu": 1, "name": "from-rest"})
    page.wait_for_function(HELD.format(3), timeout=WAIT_MS)
    assert board.get_by_text("from-rest", exact=False).count() >= 1
    board.screenshot(path=str(screenshots_dir(tmp_path) / "device-board.png"))
    card.screenshot(path=str(screenshots_dir(tmp_path) / "claim-card.png"))

    # the card's Release button gives the notebook's claim back
    card.locator("button.dra-release").click()
    page.wait_for_function(HELD.format(1), timeout=WAIT_MS)
    names = [c["name"] for c in lab.api("GET", "/dra/api/claims")["claims"]]
    assert names == [other["name"]]
    lab.api("DELETE", f"/dra/api/claims/{other['name']}")
    page.wait_for_function(HELD.format(0), timeout=WAIT_MS)

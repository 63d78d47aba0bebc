"""The device board and the claim card in a real JupyterLab, in Debian's chromium.

The notebook is run through the page (a user's Shift+Enter); then claims are made and
released behind the notebook's back (REST) and from the card's button, and the widgets
must follow by themselves, with no cell run: their JavaScript polls the server extension.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from tests.browser.conftest import Lab, screenshots_dir

WAIT_MS = 60_000  # how long the page may take to show a state (a hang, not a timing)
CELLS = [
    "import dra_jupyter as dra\nclaim = dra.request(gpu=2)\nclaim",
    "%load_ext dra_jupyter\n%dra devices",
]


def write_notebook(root: Path) -> str:
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(nb, root / "board.ipynb")  # type: ignore[no-untyped-call]
    return "board.ipynb"


def accept_kernel_dialog_until(page: Any, shown: Any) -> None:
    """Until ``shown`` is visible: when JupyterLab asks which kernel to start (it may, if
    the run starts while it still connects the notebook's session), accept its choice,
    the notebook's own kernel."""
    for _ in range(WAIT_MS // 200):
        if shown.count() and shown.first.is_visible():
            return
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        page.wait_for_timeout(200)


def test_board_and_card_follow_claims_made_anywhere(lab: Lab, page: Any, tmp_path: Path) -> None:
    name = write_notebook(lab.root)
    # the notebook's kernel session exists before the page opens, so JupyterLab attaches to
    # it rather than asking which kernel to start
    lab.api(
        "POST",
        "/api/sessions",
        {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}},
    )
    page.goto(f"{lab.url}/lab/tree/{name}?token={lab.token}")
    first = page.locator(".jp-Notebook .jp-Cell").first
    first.wait_for(timeout=WAIT_MS)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
        state="attached", timeout=WAIT_MS
    )
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    card = page.locator(".dra-card")
    board = page.locator(".dra-board")
    accept_kernel_dialog_until(page, card)
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


# the board's rows that say "held", counted in the page
HELD = (
    "() => [...document.querySelectorAll('.dra-board tr')]"
    ".filter(r => r.textContent.includes('held')).length === {}"
)

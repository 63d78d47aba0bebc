"""The claim card's "Restart kernel with these devices" (the server's restart-with-claims),
and what the card says after a plain restart, in a real JupyterLab in Debian's chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.conftest import WAIT_MS, Lab, open_notebook, run_all_cells, screenshots_dir

CELLS = ["import dra_jupyter as dra\nc = dra.request(gpu=1)\nc"]


def test_restart_with_these_devices_keeps_them_a_plain_restart_says_they_went(
    lab: Lab, page: Any, tmp_path: Path
) -> None:
    open_notebook(page, lab, "restart.ipynb", CELLS)
    run_all_cells(page)
    card = page.locator(".dra-card")
    card.wait_for(timeout=WAIT_MS)
    [claim] = lab.api("GET", "/dra/api/claims")["claims"]
    button = card.locator("button.dra-restart")
    button.wait_for(timeout=WAIT_MS)
    assert button.inner_text() == "Restart kernel with these devices"

    page.on("dialog", lambda dialog: dialog.accept())  # "Restart the kernel, keeping ...?"
    button.click()
    card.get_by_text("kernel restarted with these devices").wait_for(timeout=WAIT_MS)
    assert claim["env"]["CUDA_VISIBLE_DEVICES"] in card.inner_text()
    card.screenshot(path=str(screenshots_dir(tmp_path) / "card-restarted-with-devices.png"))
    assert [c["name"] for c in lab.api("GET", "/dra/api/claims")["claims"]] == [claim["name"]]

    # a plain restart (Kernel > Restart) gives the devices back, and the card says so
    lab.api("POST", f"/api/kernels/{claim['kernel_id']}/restart")
    card.get_by_text("its kernel shut down or was restarted").wait_for(timeout=WAIT_MS)
    assert "released at " in card.inner_text()
    card.screenshot(path=str(screenshots_dir(tmp_path) / "card-released-by-restart.png"))
    assert lab.api("GET", "/dra/api/claims")["claims"] == []

"""The widgets where no dra-jupyter server extension answers (VS Code, Colab, a server
without it), in a real JupyterLab in Debian's chromium: the board and the card fall back
to asking their kernel (a ``refresh`` message), Keep is disabled, Release goes through
the kernel. The server here runs JupyterLab with the extension turned off."""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from tests.browser.conftest import HELD, WAIT_MS, Lab, open_notebook, run_all_cells, running_lab

CELLS = [
    "import dra_jupyter as dra\nfrom dra_jupyter.widgets import DeviceBoard\nDeviceBoard()",
    "c = dra.request(gpu=3)\nc",
]


@pytest.fixture(scope="module")
def lab_without_extension(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("lab-plain")
    kernels = {  # the kernels inherit these: nothing sets them up for them here
        "DRA_JUPYTER_LEDGER": str(tmp / "ledger.sqlite"),
        "DRA_JUPYTER_INVENTORY": "h200-8x",
    }
    with running_lab(tmp, ["--ServerApp.jpserver_extensions=dra_jupyter=False"], kernels) as lab:
        yield lab


def test_without_the_extension_the_widgets_ask_their_kernel(
    lab_without_extension: Lab, page: Any
) -> None:
    lab = lab_without_extension
    with pytest.raises(urllib.error.HTTPError) as refused:
        lab.api("GET", "/dra/api/devices")  # no extension: the widgets cannot poll it
    refused.value.close()  # its socket, not left to the garbage collector
    open_notebook(page, lab, "plain.ipynb", CELLS)
    run_all_cells(page)
    board, card = page.locator(".dra-board"), page.locator(".dra-card")
    board.get_by_text("from kernel").wait_for(timeout=WAIT_MS)
    page.mouse.move(200, 200)  # someone is here: the fallback polls only then
    # the claim made in the next cell reached the board through the kernel, no cell rerun
    page.wait_for_function(HELD.format(3), timeout=WAIT_MS)
    keep = card.locator("button.dra-keep")
    assert keep.is_disabled()
    assert "server extension" in (keep.get_attribute("title") or "")
    card.locator("button.dra-release").click()  # a message to the kernel, which releases
    card.locator(".dra-pill-released").wait_for(timeout=WAIT_MS)
    page.wait_for_function(HELD.format(0), timeout=WAIT_MS)
    assert Ledger(lab.ledger).read_claims() == []  # released in the shared ledger

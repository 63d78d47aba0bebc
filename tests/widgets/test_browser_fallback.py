"""The widgets where no dra-jupyter server extension answers (VS Code, Colab, a server
without it), in a real JupyterLab in Debian's chromium: the board and the card fall back
to asking their kernel (a ``refresh`` message), Keep is disabled, Release goes through
the kernel. The server here runs JupyterLab with the extension turned off (``browser``
and ``page`` are the browser tests' fixtures, see ``conftest.py``)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from dra_jupyter.local.ledger import Ledger
from tests.browser.conftest import CHROMIUM, START_TRIES, Lab, free_port

WAIT_MS = 60_000  # how long the page may take to show a state (a hang, not a timing)
CELLS = [
    "import dra_jupyter as dra\nfrom dra_jupyter.widgets import DeviceBoard\nDeviceBoard()",
    "c = dra.request(gpu=3)\nc",
]
HELD = (
    "() => [...document.querySelectorAll('.dra-board tr')]"
    ".filter(r => r.textContent.includes('held')).length === {}"
)


@pytest.fixture(scope="module")
def lab_without_extension(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run 'make test' (it installs Debian's chromium)")
    tmp = tmp_path_factory.mktemp("lab-plain")
    root = tmp / "notebooks"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    ledger = tmp / "ledger.sqlite"
    settings = tmp / "lab-settings"
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(  # the kernels inherit these: nothing sets them up for them here
        DRA_JUPYTER_LEDGER=str(ledger),
        DRA_JUPYTER_INVENTORY="h200-8x",
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "rt"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
    )
    argv = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.jpserver_extensions=dra_jupyter=False",
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    with (tmp / "lab.log").open("w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        server = Lab(f"http://127.0.0.1:{port}", token, root, ledger)
        try:
            for _ in range(START_TRIES):
                if proc.poll() is not None:
                    raise AssertionError(f"jupyter lab exited: {(tmp / 'lab.log').read_text()}")
                try:
                    server.api("GET", "/api/status")
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.1)
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_without_the_extension_the_widgets_ask_their_kernel(
    lab_without_extension: Lab, page: Any
) -> None:
    lab = lab_without_extension
    with pytest.raises(urllib.error.HTTPError):
        lab.api("GET", "/dra/api/devices")  # no extension: the widgets cannot poll it
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, lab.root / "plain.ipynb")  # type: ignore[no-untyped-call]
    lab.api(
        "POST",
        "/api/sessions",
        {"path": "plain.ipynb", "name": "plain.ipynb", "type": "notebook",
         "kernel": {"name": "python3"}},
    )  # fmt: skip
    page.goto(f"{lab.url}/lab/tree/plain.ipynb?token={lab.token}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=WAIT_MS)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
        state="attached", timeout=WAIT_MS
    )
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    board, card = page.locator(".dra-board"), page.locator(".dra-card")
    for _ in range(WAIT_MS // 200):  # JupyterLab may still ask which kernel to use
        if card.count() and card.first.is_visible():
            break
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        page.wait_for_timeout(200)
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

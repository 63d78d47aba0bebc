"""Someone waits in line for the notebook's devices, in a real JupyterLab (issue 42, item
7; docs/labextension.md, "The notification rules"): the holder is told within a refresh
who waits, for what, since when and which notebook holds what it needs, once, and the
notification goes when the request gives up. The waiter is another user's
``dra-jupyter request --timeout`` on the same ledger (``JUPYTERHUB_USER=bob``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

from dra_jupyter.local.ledger import Ledger
from tests.browser.conftest import Lab, run_all_cells
from tests.lab.test_devices_panel import TOAST, X, claims, cli_env, notebook, released, until

__all__ = ["released"]  # the fixture: each test starts and ends with no claim held

BOUND = 8.0  # seconds: a refresh (5 s), its reads and the toast's drawing
SETTLE_MS = 6000  # past a refresh or two: a repeat would show by then


def test_the_holder_is_told_who_waits_once_and_the_notice_goes_when_the_wait_ends(
    lab: Lab, page: Any, released: None
) -> None:
    notebook(page, lab, "busy.ipynb", ["import dra_jupyter as dra\nc = dra.request(gpu=8)"])
    run_all_cells(page)
    until("the notebook's claim", lambda: claims(lab))
    env = {**cli_env(lab), "JUPYTERHUB_USER": "bob", "DRA_JUPYTER_POLL_INTERVAL": "0.05"}
    argv = [sys.executable, "-m", "dra_jupyter.cli", "request", "gpu=2", "--timeout", "5m"]
    waiter = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    notices = page.locator(TOAST).filter(has_text="bob waits for")
    try:
        until("bob in line", lambda: Ledger(lab.ledger).waiters())
        start = time.monotonic()
        until("the holder told", lambda: notices.count() > 0, BOUND)
        took = time.monotonic() - start
        text = notices.first.inner_text()
        assert text.startswith("bob waits for 2 GPUs since "), text
        assert f"your busy.ipynb (8{X} H200) holds what it needs." in text, text
        assert took < BOUND
        page.wait_for_timeout(SETTLE_MS)
        assert notices.count() == 1  # not repeated on each read
        waiter.send_signal(signal.SIGINT)  # bob gives up
        waiter.wait(timeout=60)
        until("the notice withdrawn", lambda: notices.count() == 0, BOUND)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()

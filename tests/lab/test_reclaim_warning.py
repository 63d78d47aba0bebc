"""The reclaim_warning event in a real JupyterLab: the shared-machine service warns the
holder of an idle claim that another user waits for its devices. The page says who waits
for what and the clock time at which the claim goes, with Keep while Keeps are left, and
Release; Release gives the claim back.

The service's side is tested with the real daemon (``tests/server/test_reclaims.py``). Here
the event reaches the page as the server emits it, on jupyter_server's event bus, posted
through jupyter_server's own ``POST /api/events`` (checked against its schema), for a real
claim of the page's notebook on the local backend: the page's part is what is tested.
"""

from __future__ import annotations

import time
from typing import Any

from tests.browser.conftest import Lab, run_all_cells
from tests.lab.test_devices_panel import TOAST, claims, notebook, released, toast, until

__all__ = ["released"]  # the fixture: each test starts and ends with no claim held

RECLAIM_WARNING = "https://events.dra-jupyter.dev/dra_jupyter/reclaim_warning/v1"


def emit_warning(lab: Lab, claim: dict[str, Any], keeps_left: int) -> None:
    deadline = time.time() + 300
    data = {
        "claim": claim["name"],
        "user": claim["user"],
        "kernel_id": claim["kernel_id"],
        "devices": claim["devices"],
        "waiter": "bob",
        "what": "1× NVIDIA H200",
        "deadline": deadline,
        "seconds_left": 300.0,
        "keeps_left": keeps_left,
        "message": f"bob is waiting for 1× NVIDIA H200; your {claim['name']} will be released",
    }
    lab.api("POST", "/api/events", {"schema_id": RECLAIM_WARNING, "version": "1", "data": data})


def test_a_reclaim_warning_names_the_waiter_and_offers_keep_then_release(
    lab: Lab, page: Any, released: None
) -> None:
    notebook(page, lab, "idle.ipynb", ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)"])
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    emit_warning(lab, claim, keeps_left=1)
    warning = toast(page, "bob waits for 1× NVIDIA H200: your idle")
    text = warning.inner_text()
    assert "of idle.ipynb goes at " in text, text
    assert "(Keep once more)." in text, text
    warning.get_by_role("button", name="Keep").click()
    shown = page.locator(TOAST).filter(has_text="bob waits for")
    until("the warning withdrawn by Keep", lambda: shown.count() == 0)
    assert [c["name"] for c in claims(lab)] == [claim["name"]]  # kept

    emit_warning(lab, claim, keeps_left=0)
    last = toast(page, "(no Keep left).")
    assert last.get_by_role("button", name="Keep").count() == 0
    last.get_by_role("button", name="Release").click()
    until("the claim released", lambda: claims(lab) == [])

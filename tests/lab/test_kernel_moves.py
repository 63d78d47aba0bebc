"""The kernel_moved event in a real JupyterLab: a notebook's kernel back on the server
without its devices is a warning that names its notebook and offers the restart in a pod
with them; one moved into its pod is a note.

Kernels move only on the Kubernetes backend (``tests/k8s/test_kernel_moves.py`` moves real
ones). Here the event reaches the page as the server emits it, on jupyter_server's event
bus, posted through jupyter_server's own ``POST /api/events`` (it emits any registered
event, checked against its schema): the page's part is what is tested, not a move. The
restart its button asks for is the real ``restart-with-claims`` of the local backend,
which keeps the notebook's claim.
"""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import Lab, run_all_cells
from tests.lab.test_devices_panel import TOAST, X, claims, notebook, released, toast, until

__all__ = ["released"]  # the fixture: each test starts and ends with no claim held

KERNEL_MOVED = "https://events.dra-jupyter.dev/dra_jupyter/kernel_moved/v1"
ASKED = "gpu=1, model='NVIDIA H200'"
AGAIN = f"dra.request({ASKED}, restart=True)"


def emit_moved(lab: Lab, kernel_id: str, where: str, message: str) -> None:
    """The kernel_moved event of ``kernel_id``, on the server's event bus."""
    data = {
        "kernel_id": kernel_id,
        "user": "",  # the page knows the kernel: it is one of its server's
        "where": where,
        "devices": ASKED,
        "again": AGAIN if where == "server" else "",
        "message": message,
    }
    lab.api("POST", "/api/events", {"schema_id": KERNEL_MOVED, "version": "1", "data": data})


def test_a_kernel_back_on_the_server_offers_the_restart_in_a_pod_with_its_devices(
    lab: Lab, page: Any, released: None
) -> None:
    notebook(page, lab, "moved.ipynb", ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)"])
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    kernel = claim["kernel_id"]
    note = (
        f"this kernel's pod with {ASKED} was stopped and its claim {claim['name']} released "
        f"(idle for 40 min), so its variables are gone; {AGAIN} starts it again on such devices"
    )
    emit_moved(lab, kernel, "server", note)
    warning = toast(page, "Kernel of moved.ipynb is back on the server, without devices")
    # what matters first: JupyterLab cuts the text at 140 characters
    assert warning.inner_text().startswith(
        "Kernel of moved.ipynb is back on the server, without devices; its variables are gone. "
        f"This kernel's pod with {ASKED}"
    )
    buttons = warning.get_by_role("button")
    restart = warning.get_by_role("button", name=f"Restart on 1{X} H200")
    assert restart.count() == 1
    assert [b for b in buttons.all_inner_texts() if b.startswith("Restart")] == [
        f"Restart on 1{X} H200"
    ]
    restart.click()
    toast(page, f"Kernel restarted in a pod with 1{X} H200.")
    moved_back = page.locator(TOAST).filter(has_text="is back on the server")
    until("the warning withdrawn after its restart", lambda: moved_back.count() == 0)
    [after] = claims(lab)
    assert (after["name"], after["kernel_id"]) == (claim["name"], kernel)  # kept

    emit_moved(lab, kernel, "pod", f"The kernel runs in pod p with {ASKED} now")
    toast(page, re.compile(rf"^Kernel of moved\.ipynb moved into a pod with 1{X} H200; its"))
    assert (
        page.locator(TOAST)
        .filter(has_text="moved into a pod")
        .get_by_role("button", name=re.compile("^Restart"))
        .count()
        == 0
    )

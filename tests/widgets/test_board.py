"""The device board in a real kernel: its rows, the refresh message, and what close leaves."""

from __future__ import annotations

from pathlib import Path

from tests.widgets.conftest import WIDGET_MIME, Kernel

ROW_FIELDS = ["device", "kind", "model", "memory", "mig_profile", "node", "state", "holder"]

SETUP = """
from dra_jupyter.widgets import DeviceBoard
b = DeviceBoard()
"""


def test_rows_are_the_devices_and_follow_a_claim_after_a_refresh_message(
    kernel: Kernel,
) -> None:
    kernel.run(SETUP)
    rows = kernel.value("b.rows")
    devices = kernel.value("dra.devices().to_records()")
    assert [{k: r[k] for k in ROW_FIELDS} for r in rows] == [
        {k: d[k] for k in ROW_FIELDS} for d in devices
    ]
    assert len(rows) == 8
    assert all(r["state"] == "free" and r["claims"] == [] for r in rows)
    assert all(r["utilization"] == 0.0 and r["memory_total"] for r in rows)
    assert kernel.value("[b.simulated, b.interval]") == [True, 1.0]

    claim = kernel.value("(c := dra.request(gpu=1)).name")
    comm_id = kernel.value("b.model_id")
    assert all(r["state"] == "free" for r in kernel.value("b.rows"))  # not refreshed yet

    before = len(kernel.updates(comm_id))
    sent = kernel.custom(comm_id, {"type": "refresh"})  # what the view sends without a server
    rows = kernel.value("b.rows")
    (held,) = [r for r in rows if r["state"] == "held"]
    assert [c["name"] for c in held["claims"]] == [claim]
    assert held["claims"][0]["user"] == kernel.value("c._record.owner.user")
    assert held["utilization"] > 0  # simulated load on a held device
    assert held["device"] == kernel.value("c._record.device_keys[0]")
    # the kernel answered the message itself (main thread), with one update of the rows
    answers = [
        m
        for m in kernel.iopub
        if m["msg_type"] == "comm_msg" and m["parent_header"].get("msg_id") == sent
    ]
    assert [sorted(m["content"]["data"]["state"]) for m in answers] == [["revision", "rows"]]
    assert len(kernel.updates(comm_id)) == before + 1


def test_other_messages_are_ignored(kernel: Kernel) -> None:
    kernel.run(SETUP)
    comm_id = kernel.value("b.model_id")
    kernel.custom(comm_id, {"type": "nonsense"})
    kernel.custom(comm_id, ["not", "a", "dict"])  # type: ignore[arg-type]
    assert len(kernel.value("b.rows")) == 8
    assert kernel.updates(comm_id) == []


CLOSED_CHECK = """
import asyncio, comm
from ipywidgets.widgets.widget import _instances
loop = asyncio.get_running_loop()
def ours():
    handles = [*asyncio.all_tasks(loop), *loop._scheduled, *loop._ready]
    return [repr(h) for h in handles if "dra_jupyter" in repr(h)]
open_comms = set(comm.get_comm_manager().comms)
"""


def test_closing_leaves_no_comm_widget_task_or_timer(kernel: Kernel) -> None:
    kernel.run(CLOSED_CHECK + "before = set(comm.get_comm_manager().comms)")
    kernel.run(SETUP + "c = dra.request(gpu=1)\ncard = c.card()\nb.refresh(); card.refresh()")
    ids = kernel.value("[b.model_id, b.layout.model_id, card.model_id, card.layout.model_id]")
    assert set(ids) <= set(kernel.value("list(comm.get_comm_manager().comms)"))
    assert kernel.value("ours()") == []  # the board and card run nothing in the kernel
    kernel.run("b.close(); card.close()")
    assert kernel.value("sorted(set(comm.get_comm_manager().comms) - before)") == []
    assert kernel.value(f"[k for k in _instances if k in {ids!r}]") == []
    assert kernel.value("ours()") == []
    closed = {m["content"]["comm_id"] for m in kernel.iopub if m["msg_type"] == "comm_close"}
    assert set(ids) <= closed  # the front end is told: its views clean up their timers


def test_the_board_displays_as_a_widget_with_a_text_table(kernel: Kernel) -> None:
    kernel.run(SETUP + "c = dra.request(gpu=1); b.refresh()")
    (result,) = [m for m in kernel.run("b") if m["msg_type"] == "execute_result"]
    data = result["content"]["data"]
    assert data[WIDGET_MIME]["model_id"] == kernel.value("b.model_id")
    title, header, *lines = data["text/plain"].splitlines()
    assert title.endswith("(SIMULATED)")
    assert header.split() == ["device", "model", "memory", "util", "temp", "state", "holder"]
    assert len(lines) == 8
    (held,) = [line for line in lines if " held " in line]
    assert kernel.value("c.name") in held


def test_a_refresh_that_fails_keeps_the_rows_and_says_why(
    kernel: Kernel, ledger_path: Path
) -> None:
    kernel.run(SETUP)
    comm_id = kernel.value("b.model_id")
    for path in ledger_path.parent.glob(ledger_path.name + "*"):
        path.unlink()
    ledger_path.write_bytes(b"this is not a ledger\n" * 200)
    kernel.custom(comm_id, {"type": "refresh"})
    assert len(kernel.value("b.rows")) == 8
    error = kernel.value("b.error")
    assert str(ledger_path) in error
    assert kernel.updates(comm_id)[-1]["error"] == error

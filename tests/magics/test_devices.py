"""``%dra devices``: the live board (a widget view) or, with ``--table``, a plain table."""

from __future__ import annotations

from tests.magics.conftest import Kernel, kernel_fixture

module_kernel = kernel_fixture("h200-mig")

WIDGET = "application/vnd.jupyter.widget-view+json"


def test_devices_displays_the_live_board(kernel: Kernel) -> None:
    out = kernel.ok("%dra devices")
    [view] = out.results(WIDGET)
    opened = [m for m in out.messages if m["msg_type"] == "comm_open"]
    models = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in opened}
    assert view["model_id"] in models
    state = models[view["model_id"]]
    assert state["simulated"] is True
    assert "MIG" in state["inventory"]
    assert out.results("text/plain")  # a text form for front ends without widgets
    # the board is the kernel's DeviceBoard, and closing it closes its comm
    check = kernel.ok(
        "from ipywidgets import Widget\n"
        "from dra_jupyter.widgets import DeviceBoard\n"
        f"board = Widget.widgets[{view['model_id']!r}]\n"
        "print(type(board).__name__)\n"
        "board.close()\n"
        f"print({view['model_id']!r} in Widget.widgets)"
    )
    assert check.stdout.split() == ["DeviceBoard", "False"]


def test_devices_table_is_a_plain_table(kernel: Kernel) -> None:
    kernel.ok("c = %dra request mig=3g.71gb")
    out = kernel.ok("%dra devices --table")
    assert not out.results(WIDGET)
    lines = out.result.splitlines()
    assert "SIMULATED" in lines[0]
    held = [line for line in lines if "3g.71gb" in line and " held " in line]
    assert len(held) == 1
    rows = kernel.ok("t = %dra devices -t\nprint(len(t) == len(t.to_pandas()), len(t) > 8)")
    assert rows.stdout.split() == ["True", "True"]

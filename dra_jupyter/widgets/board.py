"""The live device board: ``DeviceBoard()`` in a notebook cell (``%dra devices``).

**How it refreshes.** The widget's JavaScript polls the server extension's REST API
(``/dra/api/devices``, ``claims``, ``metrics``, with ``?no_track_activity=1``) every
``interval`` seconds while it is on screen; nothing goes through the kernel, so the
refresh is not kernel activity for any culler. Where no server extension answers (VS
Code, a plain kernel, Colab) it asks the kernel instead: a ``{"type": "refresh"}``
message, answered here, on the kernel's main thread, by updating :attr:`rows`; it does so
only while someone uses the page, so a forgotten tab does not keep the kernel busy for
jupyter_server's or JupyterHub's cullers (they count comm messages). The kernel runs no
timer and no thread for the board; :meth:`close` closes its comm, and the view's
clean-up stops the browser's timers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import traitlets

from dra_jupyter.api import default_session
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.widgets.assets import esm
from dra_jupyter.widgets.base import DraWidget
from dra_jupyter.widgets.rows import board_rows

if TYPE_CHECKING:
    from dra_jupyter.api import Session


class DeviceBoard(DraWidget):
    """Every device (and MIG partition): model, memory, utilisation, temperature, holder
    and idle countdown, refreshed live. ``rows`` holds what the kernel last computed."""

    _esm = esm("board.js")

    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    inventory = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)  # why the last refresh failed

    def __init__(self, session: Session | None = None, *, interval: float = 1.0) -> None:
        if session is None:
            session = default_session()
        self.session = session
        inventory = session.inventory
        super().__init__(
            interval=self.checked_interval("DeviceBoard", interval),
            simulated=inventory.simulated,
            inventory=inventory.description,
            rows=board_rows(session),
        )
        self.on_msg(self._on_message)

    def refresh(self) -> None:
        """Recompute :attr:`rows` (devices, holders, metrics) now: one update message."""
        with self.hold_sync():
            try:
                self.rows = board_rows(self.session)
                self.error = ""
            except DraJupyterError as err:  # e.g. the ledger cannot be read: shown, kept
                self.error = str(err)
            self.revision += 1

    def _on_message(self, widget: Any, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "refresh":
            self.refresh()

    def __repr__(self) -> str:
        title = self.inventory + (" (SIMULATED)" if self.simulated else "")
        return f"<DeviceBoard {title}: {len(self.rows)} devices>"

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The widget, with the rows as a text table for front ends without widgets (a
        terminal, nbconvert, an executed notebook's text output)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        return {**data, "text/plain": board_text(self.inventory, self.simulated, self.rows)}, (
            metadata
        )


def _percent(value: Any) -> str:
    return f"{value:.0f}%" if isinstance(value, int | float) else ""


def board_text(title: str, simulated: bool, rows: list[dict[str, Any]]) -> str:
    """The board as a text table (device, model, memory, util, temp, state, holder)."""
    lines = []
    for r in rows:
        used, total = r.get("memory_used"), r.get("memory_total")
        memory = r["memory"]
        if isinstance(used, int) and isinstance(total, int) and total:
            memory = f"{used / 2**30:.1f}/{total / 2**30:.1f}Gi"
        temp = r.get("temperature")
        lines.append(
            {
                "device": r["name"],
                "model": r["model"] + (f" {r['mig_profile']}" if r["mig_profile"] else ""),
                "memory": memory,
                "util": _percent(r.get("utilization")),
                "temp": f"{temp:.0f}C" if isinstance(temp, int | float) else "",
                "state": r["state"],
                "holder": r["holder"],
            }
        )
    columns = ["device", "model", "memory", "util", "temp", "state", "holder"]
    cells = [[line[c] for c in columns] for line in lines]
    widths = [max([len(c), *(len(x[i]) for x in cells)]) for i, c in enumerate(columns)]
    out = [title + (" (SIMULATED)" if simulated else "")]
    out += [
        "  ".join(v.ljust(w) for v, w in zip(x, widths, strict=True)) for x in [columns, *cells]
    ]
    return "\n".join(line.rstrip() for line in out)

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

import anywidget
import traitlets

from dra_jupyter.widgets.assets import asset, esm
from dra_jupyter.widgets.rows import board_rows

if TYPE_CHECKING:
    from dra_jupyter.api import Session


class DeviceBoard(anywidget.AnyWidget):
    """Every device (and MIG partition): model, memory, utilisation, temperature, holder
    and idle countdown, refreshed live. ``rows`` holds what the kernel last computed."""

    _esm = esm("board.js")
    _css = asset("widgets.css")

    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    simulated = traitlets.Bool(False).tag(sync=True)
    inventory = traitlets.Unicode("").tag(sync=True)
    interval = traitlets.Float(1.0).tag(sync=True)

    def __init__(self, session: Session | None = None, *, interval: float = 1.0) -> None:
        if session is None:
            from dra_jupyter.api import default_session  # noqa: PLC0415  # no cycle at import

            session = default_session()
        if interval <= 0:
            from dra_jupyter.errors import InvalidInputError  # noqa: PLC0415

            raise InvalidInputError(
                f"DeviceBoard: interval must be a positive number of seconds, not {interval!r}"
            )
        self.session = session
        inventory = session.inventory
        super().__init__(
            interval=float(interval),
            simulated=inventory.simulated,
            inventory=inventory.description,
            rows=board_rows(session),
        )
        self.on_msg(self._on_message)

    def close(self) -> None:
        """Close the widget and its layout (ipywidgets gives each widget a Layout widget
        with a comm of its own): no comm of it is left open."""
        layout = self.layout
        super().close()
        if layout is not None:
            layout.close()

    def refresh(self) -> None:
        """Recompute :attr:`rows` (devices, holders, metrics) now."""
        self.rows = board_rows(self.session)

    def _on_message(self, widget: Any, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "refresh":
            self.refresh()

    def __repr__(self) -> str:
        title = self.inventory + (" (SIMULATED)" if self.simulated else "")
        return f"<DeviceBoard {title}: {len(self.rows)} devices>"

"""What the board and the card share: their style sheet, the traits their views poll by,
and a ``close()`` that leaves no comm open."""

from __future__ import annotations

import anywidget
import traitlets

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.widgets.assets import asset


class DraWidget(anywidget.AnyWidget):
    _css = asset("widgets.css")

    simulated = traitlets.Bool(False).tag(sync=True)
    interval = traitlets.Float(1.0).tag(sync=True)  # seconds between the view's polls
    revision = traitlets.Int(0).tag(sync=True)  # counts refreshes: the view's answer

    @staticmethod
    def checked_interval(widget: str, interval: float) -> float:
        if interval <= 0:
            raise InvalidInputError(
                f"{widget}: interval must be a positive number of seconds, not {interval!r}"
            )
        return float(interval)

    def close(self) -> None:
        """Close the widget and its layout (ipywidgets gives each widget a Layout widget
        with a comm of its own): no comm of it is left open."""
        layout = self.layout
        super().close()
        if layout is not None:
            layout.close()

"""Notebook widgets (anywidget): the live device board and the claim card.

>>> from dra_jupyter.widgets import DeviceBoard     # doctest: +SKIP
>>> DeviceBoard()                                   # doctest: +SKIP

Importing this package loads anywidget and ipywidgets; ``import dra_jupyter`` does not.
"""

from __future__ import annotations

from dra_jupyter.widgets.board import DeviceBoard
from dra_jupyter.widgets.card import ClaimCard
from dra_jupyter.widgets.history import HistoryChart

__all__ = ["ClaimCard", "DeviceBoard", "HistoryChart"]

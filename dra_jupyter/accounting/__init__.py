"""Usage accounting: the book of claim intervals (who held which devices, from when to
when, how much of it their GPUs were used) and its arithmetic, pure (no I/O).

:mod:`~dra_jupyter.accounting.book` holds an interval and the totals of a window, by user,
group, claim, device or model; :mod:`~dra_jupyter.accounting.weights` how many GPUs a claim's
devices are worth (a whole GPU is 1, a MIG instance or a share its part of the parent
GPU's memory); :mod:`~dra_jupyter.accounting.prometheus` the Prometheus collector over a book;
:mod:`~dra_jupyter.accounting.frame` a report as a pandas DataFrame. The ledger keeps the
intervals (:mod:`dra_jupyter.local.book`).
"""

from __future__ import annotations

from dra_jupyter.accounting.book import (
    BY,
    DIMENSIONS,
    Book,
    DevicePart,
    Interval,
    Totals,
    UsageRow,
    report,
)

__all__ = ["BY", "DIMENSIONS", "Book", "DevicePart", "Interval", "Totals", "UsageRow", "report"]

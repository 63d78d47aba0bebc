"""A session's view of the usage book: ``dra.usage()``, ``dra-jupyter usage``, the REST
``GET usage`` and the Prometheus scrape all read it here.

The book itself (its intervals, their arithmetic, the DataFrame, the collector) is
:mod:`dra_jupyter.accounting`; this module asks a session's backend for the part of it a
user may see, and says so in one line where the backend keeps none (Kubernetes). Pandas
and the Prometheus collector load only when asked for.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dra_jupyter.accounting.book import Book, UsageRow, dimensions_of, window
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.types import accounting_of

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.accounting.prometheus import Snapshot
    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.types import Backend


def book_for(backend: Backend, since: str | float = "7d", *, what: str = "dra.usage") -> Book:
    """The book's intervals of the last ``since`` that this user may see (``inf``: all);
    ``what``: the caller, named in the error where ``backend`` keeps no book."""
    book = accounting_of(backend)
    if book is None:
        raise InvalidInputError(
            f"{what}: {backend.capabilities.where} keeps no usage book (claims of "
            "this machine's ledger or of the shared-machine service do); use the "
            "cluster's own accounting"
        )
    return book.usage_book(math.inf if since == math.inf else window(since))


def report_for(
    backend: Backend, since: str | float = "7d", by: str = "user"
) -> tuple[tuple[str, ...], list[UsageRow]]:
    """The columns of the key (``by``'s dimensions) and a row per key: GPU-seconds held,
    active, idle and unknown, and energy, over the last ``since``."""
    dims = dimensions_of(by)
    return dims, book_for(backend, since).report(dims)


def frame_for(backend: Backend, since: str | float = "7d", by: str = "user") -> pd.DataFrame:
    """:func:`report_for` as a DataFrame (see :mod:`dra_jupyter.accounting.frame`)."""
    from dra_jupyter.accounting.frame import to_frame  # noqa: PLC0415  # pandas when asked

    dims, rows = report_for(backend, since, by)
    return to_frame(rows, dims)


def snapshot_for(book: Book, backend: Backend, inventory: Inventory) -> Snapshot:
    """What a Prometheus scrape reads: the whole ``book`` (read first, by
    :func:`book_for`: a backend without one reads no devices to say so), the devices by
    model and state (``held``: in a live claim, else ``free``), the requests waiting in
    line."""
    from dra_jupyter.accounting.prometheus import Snapshot  # noqa: PLC0415
    from dra_jupyter.accounting.weights import Weights  # noqa: PLC0415

    held = {key for r in backend.holders() for key in r.device_keys}
    models = Weights(inventory).models()
    devices = [(model, "held" if key in held else "free") for key, model in models.items()]
    return Snapshot(book, devices, len(backend.waiting()))

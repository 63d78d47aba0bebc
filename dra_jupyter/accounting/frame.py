"""A usage report as records (the command line's table, CSV and JSON) and as a pandas
DataFrame (``dra.usage``): the same columns for both."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dra_jupyter.accounting.book import UsageRow

if TYPE_CHECKING:
    import pandas as pd

# After the key's columns, in this order.
VALUES = (
    "gpu_hours",
    "gpu_seconds",
    "active_gpu_seconds",
    "idle_gpu_seconds",
    "unknown_gpu_seconds",
    "energy_j",
    "idle_share",
)


def records(rows: Sequence[UsageRow], dims: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per row: the key's columns (``dims``), then :data:`VALUES` (``idle_share``:
    idle over active + idle, None where neither is known)."""
    out = []
    for row in rows:
        t = row.totals
        share = t.idle_share
        out.append(
            {
                **dict(zip(dims, row.key, strict=True)),
                "gpu_hours": t.held / 3600,
                "gpu_seconds": t.held,
                "active_gpu_seconds": t.active,
                "idle_gpu_seconds": t.idle,
                "unknown_gpu_seconds": t.unknown,
                "energy_j": t.energy,
                "idle_share": None if math.isnan(share) else share,
            }
        )
    return out


def to_frame(rows: Sequence[UsageRow], dims: Sequence[str]) -> pd.DataFrame:
    """The report as a DataFrame: a row per key, the largest held first."""
    import pandas as pd  # noqa: PLC0415  # only when a DataFrame is asked for

    frame = pd.DataFrame.from_records(records(rows, dims), columns=[*dims, *VALUES])
    frame["idle_share"] = frame["idle_share"].astype(float)
    return frame

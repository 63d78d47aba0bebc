"""The board's rows, as the kernel computes them: devices, holders and metrics joined.

The widget's JavaScript builds the same rows from the server extension's REST API
(``devices``, ``claims``, ``metrics``) when a server answers; this is the fallback and
what ``DeviceBoard.rows`` holds.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from dra_jupyter.tables import device_rows

if TYPE_CHECKING:
    from dra_jupyter.api import Session

SPARK_LENGTH = 40  # samples in a row's sparkline


def board_rows(session: Session, now: float | None = None) -> list[dict[str, Any]]:
    """One row per device (and MIG partition) of the session's inventory."""
    now = time.time() if now is None else now
    records = session.backend.claims(all_users=True)
    holders: dict[str, list[dict[str, Any]]] = {}
    # this kernel's own notebook (jupyter_server names it to the kernels it starts)
    own = session.owner.kernel_id
    notebook = PurePosixPath(os.environ.get("JPY_SESSION_NAME", "")).name
    for record in records:
        for result in record.allocation.get("devices", {}).get("results", []):
            key = f"{result['driver']}/{result['pool']}/{result['device']}"
            holders.setdefault(key, []).append(
                {
                    "name": record.name,
                    "user": record.owner.user,
                    "kernel": record.owner.kernel_id or "",
                    "notebook": notebook if own and record.owner.kernel_id == own else "",
                    "idle_deadline": None,  # only the server extension knows it
                    "busy": False,
                }
            )
    recorder = session.metrics
    current = {s.device: s for s in recorder.sample(set(holders), now)}
    rows = []
    for row in device_rows(session.inventory.patched_slices, records):
        sample = current.get(row.device)
        spark = [s.utilization for s in recorder.history.series(row.device, SPARK_LENGTH)]
        rows.append(
            {
                **asdict(row),
                "name": row.device.rsplit("/", 1)[-1],
                "claims": holders.get(row.device, []),
                "memory_used": sample.memory_used if sample else None,
                "memory_total": sample.memory_total if sample else None,
                "utilization": sample.utilization if sample else None,
                "temperature": sample.temperature if sample else None,
                "spark": spark,
            }
        )
    return rows

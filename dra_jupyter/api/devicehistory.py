"""``dra.history("gpu-0")``: a device's utilisation, memory and temperature over time, as
this process sees them.

A simulated device's past is computed for the whole window (its values are a function of
time and of the claims that held it); a real GPU's is the samples this process took, one
per call (and per refresh of a board in this kernel). The live board shows the server
extension's longer history instead. Only a backend whose devices are this machine's has
one: a cluster's devices are on its nodes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory.resolve import resolve_device

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.metrics.recorder import Recorder
    from dra_jupyter.types import Backend

HISTORY_STEP = 5.0  # seconds between the points of a simulated device's history


def here_only(backend: Backend) -> None:
    """Refuse, before anything is read, where the devices are not this machine's."""
    if not backend.capabilities.devices_here:
        raise InvalidInputError(
            "dra.history: device metrics come from this machine (NVML); the Kubernetes "
            "backend's devices are on the cluster's nodes: use the cluster's monitoring "
            "(e.g. the DCGM exporter)"
        )


def device_history(
    backend: Backend,
    inventory: Inventory,
    recorder: Recorder,
    devices: str | list[str],
    *,
    since: float | None = None,
    last: str | float = "10m",
    held: Mapping[str, list[tuple[float, float]]] | None = None,
) -> pd.DataFrame:
    """The devices' samples from ``since`` (else the last ``last``) to now, one row per
    device and time (``held``: device -> intervals a released claim held it, besides the
    live claims'), read with ``recorder`` (this process's metrics of ``inventory``); where
    the devices are not this machine's, :func:`here_only` refused first."""
    from dra_jupyter.metrics.history import to_frame  # noqa: PLC0415

    here_only(backend)
    now = time.time()
    if since is None:
        since = now - (parse_duration(last, what="last") or 0)
    named = [devices] if isinstance(devices, str) else devices
    keys = [resolve_device(inventory, d) for d in named]
    spans: dict[str, list[tuple[float, float]]] = {k: list(v) for k, v in (held or {}).items()}
    live = set()
    for record in backend.claims(all_users=True):
        for key in record.device_keys:
            spans.setdefault(key, []).append((record.created, math.inf))
            live.add(key)
    recorder.sample(live, now)
    samples = [
        s
        for key in keys
        for s in recorder.series(key, since=since, now=now, held=spans, step=HISTORY_STEP)
    ]
    return to_frame(samples)

"""Devices taken out of service under a claim: a taint with effect ``NoSchedule`` or
``NoExecute`` on a device the claim holds (an admin's ``dra-jupyter taint``, the health
watcher's after a GPU error, a cluster's DeviceTaintRule), said to its holder in words:
which device, what happened, what it means for their work, and what they can do. The
Jupyter server says it on its event bus and in JupyterLab (``device_unhealthy``, with Move
and Release, whose Move, ``POST /dra/api/claims/{name}/move``, asks for the same again on
an equivalent device, releases the old claim (reason ``device-moved``) and restarts the
kernel with its claims); the kernel that holds the claim says it
once, before its next cell (:mod:`dra_jupyter.widgets.notebook`).

A ``NoExecute`` taint on a device of this machine releases the claims that hold it once
the grace (``health_grace``, ``DRA_JUPYTER_HEALTH_GRACE``, 300 s; none for a GPU lost) has
passed since the taint (:func:`release_at`, :func:`due`), whoever put it, on every backend
of this machine: the Jupyter server's health check, the service daemon's tick and the
health watcher release them (the backend's ``release_taken_out``). What is said gives that
clock time: the toast, the server's log, the notebook and ``dra-jupyter taint`` say the
same. ``NoSchedule`` takes nothing away: the claim keeps the device until it is moved or
released. On a cluster the grace is not ours: the cluster evicts the pods that use a
device tainted ``NoExecute``.

Pure: what is said is made from the claims and the taints.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from dra_jupyter.model.health import LOST_KEY, gpu_name
from dra_jupyter.types import ClaimRecord, DeviceTaint

EFFECTS = ("NoSchedule", "NoExecute")  # what takes a device out; "None" only marks it
DEVICE_MOVED = "device-moved"  # the reason the claim of a Move goes
RELEASED = "device-failed"  # the reason of a release after a NoExecute taint's grace
IN_LAB = (
    "Move asks for an equivalent device and restarts the kernel on it (its variables go); "
    "Release gives the claim back"
)


def device_name(key: str) -> str:
    """``gpu-3`` of ``gpu.nvidia.com/node-1/gpu-3``."""
    return key.rsplit("/", 1)[-1]


def release_at(taint: DeviceTaint, grace: float | None) -> float | None:
    """When the claims on ``taint``'s device are released: a live ``NoExecute`` taint's
    time plus ``grace`` seconds (none for a GPU lost: its work is gone already); None for
    any other taint, or where this machine does not release (``grace`` None: a cluster)."""
    if taint.effect != "NoExecute" or grace is None or taint.added is None:
        return None
    if taint.removed is not None:
        return None
    return taint.added + (0.0 if taint.key == LOST_KEY else grace)


def due(taints: Iterable[DeviceTaint], grace: float, now: float) -> dict[str, DeviceTaint]:
    """The live ``NoExecute`` taints whose grace is over at ``now``, by device."""
    out: dict[str, DeviceTaint] = {}
    for taint in taints:
        at = release_at(taint, grace)
        if at is not None and now >= at:
            out.setdefault(taint.device, taint)
    return out


def released_words(taint: DeviceTaint) -> str:
    """``gpu-3 was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)``: why a
    claim was released after its grace, as its user reads it."""
    shown = taint.value and taint.value != taint.reason  # an admin's value is its reason
    what = f"{taint.key}={taint.value}" if shown else taint.key
    return f"{gpu_name(taint.device)} was taken out ({what}: {taint.reason or taint.effect})"


def clock(when: float) -> str:
    """``14:32:05``: a moment in this machine's local time."""
    return time.strftime("%H:%M:%S", time.localtime(when))


def means(taint: DeviceTaint, at: float | None) -> str:
    """What the taint means for the claim's work, with the release's clock time."""
    if taint.effect != "NoExecute":
        return (
            "work on it may fail, and no new claim gets it; the claim keeps it until moved "
            "or released"
        )
    if at is None:
        return "it cannot be used: save what you can now; the cluster evicts the pods that use it"
    return f"it cannot be used: save what you can now, the claim will be released at {clock(at)}"


def message(
    record: ClaimRecord,
    device: str,
    taint: DeviceTaint,
    act: str = IN_LAB,
    grace: float | None = None,
) -> str:
    """What the holder reads: which device, what happened, what it means (with the clock
    time of the release after ``grace``, :func:`release_at`), what to do (``act``: the way
    offered where it is read)."""
    why = taint.reason or taint.key
    by = f" by {taint.user}" if taint.user and taint.user != "?" else ""
    return (
        f"{device_name(device)} of claim {record.name} was taken out of service{by}: {why} "
        f"(taint {taint.key}, {taint.effect}); {means(taint, release_at(taint, grace))}. "
        f"{act}"
    )


def unhealthy(
    records: Iterable[ClaimRecord], taints: Sequence[DeviceTaint]
) -> list[tuple[ClaimRecord, str, DeviceTaint]]:
    """Each claim of ``records``, device it holds and live taint on it that takes it out."""
    live: dict[str, list[DeviceTaint]] = {}
    for taint in taints:
        if taint.removed is None and taint.effect in EFFECTS:
            live.setdefault(taint.device, []).append(taint)
    return [
        (record, device, taint)
        for record in records
        for device in record.device_keys
        for taint in live.get(device, ())
    ]


def unhealthy_events(
    records: Iterable[ClaimRecord], taints: Sequence[DeviceTaint], grace: float | None = None
) -> list[dict[str, Any]]:
    """The ``device_unhealthy`` events of ``records``' devices that carry a live taint
    (``grace``: this machine's, :func:`release_at`; None on a cluster)."""
    return [
        {
            "claim": record.name,
            "user": record.owner.user,
            "kernel_id": record.owner.kernel_id,
            "device": device,
            "key": taint.key,
            "effect": taint.effect,
            "reason": taint.reason,
            "tainted_by": taint.user,
            "release_at": release_at(taint, grace),
            "message": message(record, device, taint, grace=grace),
        }
        for record, device, taint in unhealthy(records, taints)
    ]


class Told:
    """Which (claim, device, taint key) its holder was told of: each once while it lasts;
    told again if the taint goes and comes back."""

    def __init__(self) -> None:
        self.told: set[tuple[str, str, str]] = set()

    def new(self, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Those of ``events`` not told yet; forgets what is no longer listed."""
        now = {(e["claim"], e["device"], e["key"]) for e in events}
        fresh = [e for e in events if (e["claim"], e["device"], e["key"]) not in self.told]
        self.told = now
        return fresh

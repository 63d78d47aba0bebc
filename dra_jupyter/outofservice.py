"""Devices taken out of service under a claim: a taint with effect ``NoSchedule`` or
``NoExecute`` on a device the claim holds (an admin's ``dra-jupyter taint``, the health
watcher's after a GPU error, a cluster's DeviceTaintRule), said to its holder in words:
which device, what happened, what it means for their work, and what they can do. The
Jupyter server says it on its event bus and in JupyterLab (``device_unhealthy``, with Move
and Release, whose Move, ``POST /dra/api/claims/{name}/move``, asks for the same again on
an equivalent device, releases the old claim (reason ``device-moved``) and restarts the
kernel with its claims); the kernel that holds the claim says it
once, before its next cell (:mod:`dra_jupyter.widgets.notebook`).

Pure: what is said is made from the claims and the taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dra_jupyter.types import ClaimRecord, DeviceTaint

EFFECTS = ("NoSchedule", "NoExecute")  # what takes a device out; "None" only marks it
DEVICE_MOVED = "device-moved"  # the reason the claim of a Move goes
IN_LAB = (
    "Move asks for an equivalent device and restarts the kernel on it (its variables go); "
    "Release gives the claim back"
)


def device_name(key: str) -> str:
    """``gpu-3`` of ``gpu.nvidia.com/node-1/gpu-3``."""
    return key.rsplit("/", 1)[-1]


def message(record: ClaimRecord, device: str, taint: DeviceTaint, act: str = IN_LAB) -> str:
    """What the holder reads: which device, what happened, what it means, what to do
    (``act``: the way offered where it is read)."""
    why = taint.reason or taint.key
    by = f" by {taint.user}" if taint.user and taint.user != "?" else ""
    means = (
        "it cannot be used: save what you can now, the claim will be released"
        if taint.effect == "NoExecute"
        else "work on it may fail, and no new claim gets it"
    )
    return (
        f"{device_name(device)} of claim {record.name} was taken out of service{by}: {why} "
        f"(taint {taint.key}, {taint.effect}); {means}. {act}"
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
    records: Iterable[ClaimRecord], taints: Sequence[DeviceTaint]
) -> list[dict[str, Any]]:
    """The ``device_unhealthy`` events of ``records``' devices that carry a live taint."""
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
            "message": message(record, device, taint),
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

"""Devices taken out of service under a claim of this server's kernels: a taint with effect
``NoSchedule`` or ``NoExecute`` on a device a claim holds (an admin's ``dra-jupyter taint``,
or the health watcher's after an XID, in the ledger; a DeviceTaintRule on a cluster). Its
holder is told once per claim, device and taint key, on the event bus
(``device_unhealthy``: the lab shows it with its two actions, Move and Release) and in the
server's log, in words that say which device, what happened, what it means for their work
and what they can do.

Move (``POST /dra/api/claims/{name}/move``) asks for the same again (the claim's spec: the
taint keeps the allocator off the device), releases the old claim (reason ``device-moved``) and
restarts the kernel with its claims; Release gives the claim back.

Pure: what is said is made from the claims and the taints; the server reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dra_jupyter.types import ClaimRecord, DeviceTaint

EFFECTS = ("NoSchedule", "NoExecute")  # what takes a device out; "None" only marks it
DEVICE_MOVED = "device-moved"  # the reason the claim of a Move goes


def device_name(key: str) -> str:
    """``gpu-3`` of ``gpu.nvidia.com/node-1/gpu-3``."""
    return key.rsplit("/", 1)[-1]


def message(record: ClaimRecord, device: str, taint: DeviceTaint) -> str:
    """What the holder reads: which device, what happened, what it means, what to do."""
    why = taint.reason or taint.key
    by = f" by {taint.user}" if taint.user and taint.user != "?" else ""
    means = (
        "it cannot be used: save what you can now, the claim will be released"
        if taint.effect == "NoExecute"
        else "work on it may fail, and no new claim gets it"
    )
    return (
        f"{device_name(device)} of claim {record.name} was taken out of service{by}: {why} "
        f"(taint {taint.key}, {taint.effect}); {means}. Move asks for an equivalent device "
        "and restarts the kernel on it (its variables go); Release gives the claim back"
    )


def unhealthy_events(
    records: Iterable[ClaimRecord], taints: Sequence[DeviceTaint]
) -> list[dict[str, Any]]:
    """The ``device_unhealthy`` events of ``records``' devices that carry a live taint."""
    live: dict[str, list[DeviceTaint]] = {}
    for taint in taints:
        if taint.removed is None and taint.effect in EFFECTS:
            live.setdefault(taint.device, []).append(taint)
    events = []
    for record in records:
        for device in record.device_keys:
            for taint in live.get(device, ()):
                events.append(
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
                )
    return events


class HealthNotices:
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

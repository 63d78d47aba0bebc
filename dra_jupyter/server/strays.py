"""The server's user's processes on GPUs that none of the user's claims holds (a kernel's
CUDA context that outlived its claim's release, a script that never claimed one): each
said once, in the user's words, on the event bus (``gpu_process``: the lab shows it), and
in the server's log. On the shared-machine service the daemon decides what is done about
them (its ``[enforce]``: reported, or ended after a grace), and the words say so."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.processes import ProcessUse

GIB = 2**30


def stray_events(
    uid: int, uses: Iterable[ProcessUse], listed: Sequence[DeviceProcess]
) -> list[dict[str, Any]]:
    """The ``gpu_process`` events of the processes of the user ``uid`` in ``uses`` that
    count under no claim; ``listed``: the source's rows of the same reading (the
    service's say what it does about each)."""
    enforce = {(p.pid, p.device): p.enforce for p in listed if p.enforce}
    events = []
    for use in uses:
        if use.claim is not None or use.uid != uid or use.pid <= 0:
            continue
        decision = enforce.get((use.pid, use.device)) or {}
        action = "terminate" if decision.get("action") == "terminate" else "report"
        deadline = decision.get("deadline") if action == "terminate" else None
        events.append(
            {
                "user": use.user or str(uid),
                "pid": use.pid,
                "device": use.device,
                "command": use.command,
                "memory_used": use.memory_used,
                "since": use.since,
                "action": action,
                "deadline": deadline,
                "message": _words(use, action, deadline, managed=bool(decision)),
            }
        )
    return events


def _words(use: ProcessUse, action: str, deadline: float | None, *, managed: bool) -> str:
    what = use.command.split()[0].rsplit("/", 1)[-1] if use.command else "a process"
    detail = [what]
    if use.memory_used:
        detail.append(f"{use.memory_used / GIB:.1f} GiB")
    device = use.device.rsplit("/", 1)[-1]
    line = (
        f"Your process {use.pid} ({', '.join(detail)}) uses {device}, which none of your "
        "claims holds: another user may be given it"
    )
    if action == "terminate" and deadline is not None:
        at = time.strftime("%H:%M:%S", time.localtime(deadline))
        return f"{line}; the service ends it at {at}: save your work, or request the device."
    if managed:
        return f"{line}; the service reported it to its admins: end it, or request the device."
    return f"{line}: end it, or request the device."

"""The claim events the server extension emits on jupyter_server's event logger: a claim
allocated (through the REST API or in a kernel), an idle warning, a claim released, a
process on a GPU its user does not hold, a kernel that moved (into its pod, or back), a
device of a claim taken out of service, a warning that another user waits for an idle
claim's devices (the service's reclaim under pressure). Their schemas are
``events/*.json``; each claim is announced once and each idle deadline warned of once.

Each claim announced allocated is announced released, once, with the reason its release
has where it was recorded, whoever released it: this server (its event at once), or
another process (its kernel's ``c.release()``, ``dra-jupyter release`` in a terminal, a
lease ended as another process read the ledger, the service's daemon): the next check
finds it gone and reads why (:meth:`ClaimEvents.gone`, :meth:`ClaimEvents.emit_gone`), so
that the lab's notifications are decided by that reason, not by whether a read of its own
happened to see the claim alive.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Collection
from pathlib import Path
from typing import Any

from jupyter_events import EventLogger

from dra_jupyter.types import ClaimRecord, Ended

EVENTS_DIR = Path(__file__).parent / "events"
EVENT_BASE = "https://events.dra-jupyter.dev/dra_jupyter"
ALLOCATED = f"{EVENT_BASE}/claim_allocated/v1"
IDLE_WARNING = f"{EVENT_BASE}/idle_warning/v1"
RELEASED = f"{EVENT_BASE}/claim_released/v1"
GPU_PROCESS = f"{EVENT_BASE}/gpu_process/v1"
KERNEL_MOVED = f"{EVENT_BASE}/kernel_moved/v1"
DEVICE_UNHEALTHY = f"{EVENT_BASE}/device_unhealthy/v1"
RECLAIM_WARNING = f"{EVENT_BASE}/reclaim_warning/v1"
CHANGED = f"{EVENT_BASE}/changed/v1"  # server/pushes.py
ENDED_KEPT = 1000  # released claims remembered, so that a stale read never announces one
# A claim announced allocated this long before a check (s) is in that check's read if it
# is live: one made since may be missing from it without being gone.
GONE_AFTER = 5.0
# The reasons a claim_released event may carry (its schema's)
RELEASE_REASONS = frozenset(
    json.loads((EVENTS_DIR / "claim_released.json").read_text())["properties"]["reason"]["enum"]
)


def event_reason(reason: str, message: str | None = None) -> str:
    """A recorded release's reason as the event says it: one of :data:`RELEASE_REASONS`. A
    reason of another's words (the service lets a user, or an admin, give their own) is
    ``admin`` where an admin released another user's claim (the service's words say so),
    else ``user``."""
    if reason in RELEASE_REASONS:
        return reason
    if message is not None and message.startswith("released by admin"):
        return "admin"
    return "user"


def register_schemas(logger: EventLogger) -> None:
    """Make the events of this module known to ``logger`` (before the first is emitted)."""
    for path in sorted(EVENTS_DIR.glob("*.json")):
        logger.register_event_schema(path)


def _claim_data(record: ClaimRecord) -> dict[str, Any]:
    return {
        "claim": record.name,
        "user": record.owner.user,
        "kernel_id": record.owner.kernel_id,
        "devices": record.device_keys,
    }


class ClaimEvents:
    """The claim events of one server on ``logger``; ``released``: what the claim service
    released (queued on its threads), announced by :meth:`emit_releases` on the loop."""

    def __init__(
        self, logger: EventLogger, released: queue.SimpleQueue[tuple[ClaimRecord, str]]
    ) -> None:
        self._logger = logger
        self._released = released
        self.seen: dict[str, float] = {}  # claims announced allocated -> their creation time
        self.warned: dict[str, float] = {}  # claim -> the idle deadline it was warned of
        self.gpu_warned: dict[str, float] = {}  # claim -> the GPU-idle deadline warned of
        self.joiner_warned: dict[str, float] = {}  # joiner's kernel -> its deadline warned of
        self.strays: set[tuple[int, float | None, str]] = set()  # (pid, start, device) said
        # claims announced released -> their creation time: a check pass that read the
        # live claims before a release (passes overlap; the writer ran them back to back)
        # goes on with that read, and must not announce or warn of such a claim again
        self.ended: dict[str, float] = {}

    def released_since(self, record: ClaimRecord) -> bool:
        """Whether ``record`` (as read, maybe before its release) was announced released."""
        return self.ended.get(record.name) == record.created

    def _emit(self, schema_id: str, data: dict[str, Any]) -> None:
        self._logger.emit(schema_id=schema_id, data=data)

    def emit_allocated(self, record: ClaimRecord, source: str) -> None:
        self.seen[record.name] = record.created
        self._emit(ALLOCATED, {**_claim_data(record), "source": source})

    def emit_idle_warning(
        self, record: ClaimRecord, deadline: float, now: float, *, gpu: bool = False
    ) -> None:
        """``gpu``: the claim goes because its GPU is idle (release_gpu_idle), not its
        kernel."""
        (self.gpu_warned if gpu else self.warned)[record.name] = deadline
        data = {**_claim_data(record), "deadline": deadline, "seconds_left": deadline - now}
        if gpu:
            data["gpu_idle"] = True
        self._emit(IDLE_WARNING, data)

    def emit_joiner_idle_warning(
        self, kernel_id: str, claim: str, user: str, deadline: float, now: float
    ) -> None:
        """A kernel in a pod of a claim it joined (``dra.request(join=...)``) is idle: at
        ``deadline`` its own pod is stopped and the claim stays, its maker's (``joined``;
        ``devices`` empty: they are the claim's, listed by ``GET /claims``' ``joined``)."""
        self.joiner_warned[kernel_id] = deadline
        data = {
            "claim": claim,
            "user": user,
            "kernel_id": kernel_id,
            "devices": [],
            "deadline": deadline,
            "seconds_left": deadline - now,
            "joined": True,
        }
        self._emit(IDLE_WARNING, data)

    def emit_gpu_processes(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each process on a GPU its user does not hold, once while it is listed (see
        :mod:`~dra_jupyter.server.strays`); returns those emitted now."""
        now = {(e["pid"], e.get("since"), e["device"]) for e in events}
        new = [e for e in events if (e["pid"], e.get("since"), e["device"]) not in self.strays]
        self.strays = now
        for event in new:
            self._emit(GPU_PROCESS, event)
        return new

    def emit_kernel_moved(self, data: dict[str, Any]) -> None:
        """A kernel moved into its pod or back onto the server (:mod:`.moves`)."""
        self._emit(KERNEL_MOVED, data)

    def emit_device_unhealthy(self, data: dict[str, Any]) -> None:
        """A device of a claim was taken out of service (:mod:`.health`)."""
        self._emit(DEVICE_UNHEALTHY, data)

    def emit_reclaim_warning(self, data: dict[str, Any]) -> None:
        """Another user waits for a claim's devices (:mod:`.reclaims`)."""
        self._emit(RECLAIM_WARNING, data)

    def emit_releases(self) -> None:
        """Emit what the service released (it runs on the worker thread; events are emitted
        on the loop). Bounded by what is queued now."""
        for _ in range(self._released.qsize()):
            try:
                record, reason = self._released.get_nowait()
            except queue.Empty:
                return
            self._emit_released(record, reason)

    def gone(self, live: Collection[str], now: float) -> dict[str, float]:
        """The claims announced allocated (at least :data:`GONE_AFTER` before ``now``) that
        are not among ``live`` (a check's read of every live claim it watches) and whose
        release was not announced: released by another process, or not watched any more.
        They are forgotten here: :meth:`emit_gone` announces those whose release is known."""
        gone = {
            name: created
            for name, created in self.seen.items()
            if name not in live and created < now - GONE_AFTER
        }
        for name in gone:
            del self.seen[name]
        return gone

    def emit_gone(self, ended: Ended) -> None:
        """Announce the release of a claim of :meth:`gone` as the backend recorded it."""
        self._emit_released(ended.record, event_reason(ended.reason, ended.message))

    def _emit_released(self, record: ClaimRecord, reason: str) -> None:
        """The claim_released event, once per claim (a check's and a release's may cross)."""
        self.seen.pop(record.name, None)
        if self.released_since(record):
            return  # announced already
        self.ended.pop(record.name, None)  # the newest last, the oldest first out
        self.ended[record.name] = record.created
        while len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]
        self.warned.pop(record.name, None)
        self.gpu_warned.pop(record.name, None)
        self._emit(RELEASED, {**_claim_data(record), "reason": event_reason(reason)})

"""A claim as the API sees it (:class:`ClaimRecord`), a request's place in line
(:class:`Waiting`, :class:`Waiter`), and what a backend remembers or warns of a claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_jupyter.types.owner import RUN_LABEL, Owner


def run_of(record: ClaimRecord) -> str | None:
    """The run whose launcher holds the claim (``dra.run`` on one machine), or None: a
    run's claim is stopped with its run (released elsewhere, the run's command stops)."""
    labels = record.spec.get("metadata", {}).get("labels") or {}
    run = labels.get(RUN_LABEL)
    return run if isinstance(run, str) and run else None


# --- claims --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRecord:
    """A live claim: the ResourceClaim and its ``status.allocation`` (empty while a
    Kubernetes claim waits for a pod), its owner, and its times (seconds since the epoch)."""

    name: str
    namespace: str
    owner: Owner
    spec: dict[str, Any]  # the ResourceClaim, without status
    allocation: dict[str, Any]  # its status.allocation
    created: float
    last_activity: float
    lease_expires: float | None = None
    users: tuple[str, ...] = ()  # the pods that use it now (a Kubernetes claim's reservedFor)

    def to_object(self) -> dict[str, Any]:
        """The full ResourceClaim wire object, with ``status.allocation``."""
        return {**self.spec, "status": {"allocation": self.allocation}}

    @property
    def device_keys(self) -> list[str]:
        """``driver/pool/device`` of each allocated device."""
        return [
            f"{r['driver']}/{r['pool']}/{r['device']}"
            for r in self.allocation.get("devices", {}).get("results", [])
        ]


@dataclass(frozen=True)
class Waiting:
    """Progress of a request that waits for devices."""

    position: int  # 1 = next of its shape
    waited: float  # seconds so far
    timeout: float | None


@dataclass(frozen=True)
class Waiter:
    """A request waiting in line (``dra.request(timeout=...)``, ``request --timeout``), as a
    holder sees it: who, for what, since when."""

    owner: Owner
    what: str  # the request in short: "8 gpu.nvidia.com"
    since: float  # seconds since the epoch
    position: int = 0  # its place in the line, 1 first (0: the backend does not say)
    why: str = ""  # why there: "behind carol, who has used less of their share (...)"
    classes: tuple[str, ...] = ()  # the device classes it asks for; () where not said


@dataclass(frozen=True)
class ReclaimNotice:
    """A warning of reclaim under pressure on one of the caller's claims (the service's
    ``notices``): ``waiter`` waits for ``what``; the claim is released at ``deadline``
    (seconds since the epoch) unless the wait ends first; ``keeps_left`` Keeps may postpone
    it; ``message`` says it all in one line; ``warned``: when the warning was given (a
    warning's identity, with ``claim``)."""

    claim: str
    waiter: str
    what: str
    deadline: float
    keeps_left: int
    message: str
    warned: float = 0.0


@dataclass(frozen=True)
class Ended:
    """A claim that was released, as the backend remembers it: the claim as it was, why
    (``user``, ``idle``, ``expired``, ...), when, and the words said to its user (None: the
    reason says it)."""

    record: ClaimRecord
    reason: str
    time: float
    message: str | None = None

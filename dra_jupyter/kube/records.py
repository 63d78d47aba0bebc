"""A ResourceClaim of the cluster as the API's :class:`~dra_jupyter.types.ClaimRecord`,
and its state."""

from __future__ import annotations

import datetime as dt
import time

from dra_jupyter.inventory.base import Wire
from dra_jupyter.kube.claims import KERNEL_LABEL, USER_LABEL
from dra_jupyter.types import ClaimRecord, Owner


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return time.time()
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def to_record(claim: Wire) -> ClaimRecord:
    """A ResourceClaim from the cluster as the API's claim record (owner from its labels)."""
    meta = claim["metadata"]
    labels = meta.get("labels") or {}
    owner = Owner(
        user=labels.get(USER_LABEL) or f"({meta['namespace']})",
        host="",
        pid=0,
        kernel_id=labels.get(KERNEL_LABEL),
    )
    created = _epoch(meta.get("creationTimestamp"))
    spec = {k: v for k, v in claim.items() if k != "status"}
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return ClaimRecord(
        name=meta["name"],
        namespace=meta["namespace"],
        owner=owner,
        spec=spec,
        allocation=allocation,
        created=created,
        last_activity=created,
    )


def claim_state(claim: Wire | None) -> str:
    """``deleted`` (gone), ``reserved`` (a pod holds it), ``allocated``, or ``pending``."""
    if claim is None:
        return "deleted"
    status = claim.get("status") or {}
    if status.get("reservedFor"):
        return "reserved"
    return "allocated" if status.get("allocation") else "pending"

"""A ResourceClaim of the cluster as the API's :class:`~dra_jupyter.types.ClaimRecord`,
and its state."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping

from dra_jupyter.kube.claims import (
    ACTIVITY_ANNOTATION,
    HOLDER_ANNOTATION,
    KERNEL_LABEL,
    USER_LABEL,
)
from dra_jupyter.model.objects import Wire
from dra_jupyter.sharing.joins import users_of
from dra_jupyter.types import (
    USER_ANNOTATION,
    ClaimRecord,
    Owner,
)


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return time.time()
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def holder_annotation(owner: Owner) -> str:
    """The process that holds a claim, as :data:`HOLDER_ANNOTATION` keeps it."""
    return json.dumps(
        {"host": owner.host, "pid": owner.pid, "start_time": owner.start_time},
        separators=(",", ":"),
    )


def _holder(annotations: Mapping[str, str]) -> tuple[str, int, int | None]:
    """host, pid and start time of the holder; ``("", 0, None)`` (no process: alive as long
    as the claim exists) when the annotation is missing or not ours."""
    try:
        held = json.loads(annotations.get(HOLDER_ANNOTATION) or "{}")
        host, pid, start = held.get("host", ""), held.get("pid", 0), held.get("start_time")
    except (ValueError, AttributeError):
        return "", 0, None
    if not isinstance(host, str) or not isinstance(pid, int) or isinstance(pid, bool):
        return "", 0, None
    return host, pid, start if isinstance(start, int) else None


def _activity(annotations: Mapping[str, str], created: float) -> float:
    """The last "keep" (:data:`ACTIVITY_ANNOTATION`), else the claim's creation."""
    try:
        return max(created, float(annotations.get(ACTIVITY_ANNOTATION) or created))
    except ValueError:
        return created


def to_record(claim: Wire) -> ClaimRecord:
    """A ResourceClaim from the cluster as the API's claim record (owner from its labels and
    holder annotation, last activity from its annotation)."""
    meta = claim["metadata"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    host, pid, start_time = _holder(annotations)
    owner = Owner(
        user=annotations.get(USER_ANNOTATION) or labels.get(USER_LABEL) or f"({meta['namespace']})",
        host=host,
        pid=pid,
        start_time=start_time,
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
        last_activity=_activity(annotations, created),
        users=users_of(claim),
    )


def claim_state(claim: Wire | None) -> str:
    """``deleted`` (gone), ``reserved`` (a pod holds it), ``allocated``, or ``pending``."""
    if claim is None:
        return "deleted"
    status = claim.get("status") or {}
    if status.get("reservedFor"):
        return "reserved"
    return "allocated" if status.get("allocation") else "pending"

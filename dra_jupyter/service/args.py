"""What the daemon takes from a request's ``args``, checked and bounded before any work, and
the small values its messages show."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from dra_jupyter.accounting.weights import share_parts
from dra_jupyter.allocator import Strategy
from dra_jupyter.errors import DraJupyterError, InvalidInputError, UnavailableError, shown
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.service.peer import Peer
from dra_jupyter.types import USER_ANNOTATION, USER_LABEL, Owner, label_value

MAX_KERNEL_ID = 128
MAX_NAME = 253


def device_kinds(inventory: Inventory) -> dict[str, str]:
    kinds = {}
    for s in inventory.slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            kind = ((d.get("attributes") or {}).get("type") or {}).get("string", "")
            kinds[f"{spec['driver']}/{spec['pool']['name']}/{d['name']}"] = str(kind)
    return kinds


def device_capacities(inventory: Inventory) -> dict[str, dict[str, Fraction]]:
    """Each device's capacities (``memory``, ``shares``, ...) by device key, as numbers."""
    out: dict[str, dict[str, Fraction]] = {}
    for s in inventory.slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            caps: dict[str, Fraction] = {}
            for name, cap in (d.get("capacity") or {}).items():
                with contextlib.suppress(DraJupyterError, TypeError, ValueError, AttributeError):
                    value = cap.get("value")  # none, or null: zero, as Kubernetes 1.37 reads it
                    caps[str(name)] = Quantity.parse("0" if value is None else value).value
            out[f"{spec['driver']}/{spec['pool']['name']}/{d['name']}"] = caps
    return out


def share_percent(result: Mapping[str, Any], capacity: Mapping[str, Fraction]) -> float:
    """How much of its device a result holds, in percent: for a share (``shareID``), its
    consumed memory of the device's (else its largest part of any capacity); 0 for a whole
    device (the ``gpus`` limit counts those)."""
    if not result.get("shareID"):
        return 0.0
    parts = share_parts(result.get("consumedCapacity") or {}, capacity)
    if "memory" in parts:
        return parts["memory"] * 100
    return max(parts.values(), default=0.0) * 100


def percent_text(value: float) -> str:
    return f"{round(value, 1):g}%"


def strategy_named(name: str) -> Strategy:
    return "first-fit" if name == "first-fit" else "topology"


def duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def process_owner(peer: Peer, kernel_id: str | None, host: str) -> Owner:
    """The owner of claims held by the peer's process (which must still be known)."""
    if peer.start_time is None:
        raise UnavailableError(f"pid {peer.pid} ended before the service could tie claims to it")
    return Owner(
        user=peer.user, host=host, pid=peer.pid, start_time=peer.start_time, kernel_id=kernel_id
    )


def claim_arg(args: dict[str, Any]) -> dict[str, Any]:
    claim = args.get("claim")
    if (
        not isinstance(claim, dict)
        or not isinstance(claim.get("metadata"), dict)
        or not isinstance(claim.get("spec"), dict)
    ):
        raise InvalidInputError("request: claim must be a ResourceClaim with metadata and spec")
    name = claim["metadata"].get("name")
    if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME):
        raise InvalidInputError(f"request: metadata.name {shown(name)} is not a claim name")
    return claim


def labelled(claim: dict[str, Any], user: str) -> dict[str, Any]:
    """``claim`` with its user's label and annotation those of the kernel's user (what the
    client wrote there is what it believes, or claims)."""
    meta = dict(claim["metadata"])
    labels = meta.get("labels")
    annotations = meta.get("annotations")
    if isinstance(labels, dict) and USER_LABEL in labels:
        meta["labels"] = {**labels, USER_LABEL: label_value(user)}
    if isinstance(annotations, dict) and USER_ANNOTATION in annotations:
        meta["annotations"] = {**annotations, USER_ANNOTATION: user}
    return {**claim, "metadata": meta}


def probe(claim: dict[str, Any]) -> dict[str, Any]:
    meta = claim["metadata"]
    return {**claim, "metadata": {**meta, "name": meta.get("name") or "new-request"}}


def name_arg(args: dict[str, Any]) -> str:
    name = args.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise InvalidInputError(f"claim name {shown(name)} is not a claim name")
    return name


def kernel_id_arg(args: dict[str, Any]) -> str | None:
    kernel_id = args.get("kernel_id")
    if kernel_id is None:
        return None
    if not isinstance(kernel_id, str) or not 0 < len(kernel_id) <= MAX_KERNEL_ID:
        raise InvalidInputError(
            f"kernel_id {shown(kernel_id)}; use at most {MAX_KERNEL_ID} characters"
        )
    return kernel_id


def seconds_arg(args: dict[str, Any], key: str, default: float | None) -> float | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e10:
        raise InvalidInputError(f"request: {key} {shown(value)}; use seconds (or null)")
    return float(value)

"""The ``reserve`` mode (opt-in): our allocator allocates a claim that no pod uses yet and
writes ``status.allocation`` itself, as kube-scheduler would (its finalizer first), so the
devices are held from ``dra.request(..., reserve=True)`` on and a pod that later uses the claim
is placed on their node.

Risk: kube-scheduler is the cluster's allocator; a second one can double-book a device when
both decide at the same time from what each saw (kubernetes/kubernetes#128980). Guarded as
far as the API allows: the allocation is computed over every allocated claim of the cluster
(so it needs the right to list them all), written with the claim's ``resourceVersion``
(optimistic concurrency), and checked again afterwards: if another claim took one of the same
devices meanwhile, ours is withdrawn and the request fails.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import AllocationError, ClusterError
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.kube.records import to_record
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import ClaimRecord

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

FINALIZER = "resource.kubernetes.io/delete-protection"  # what kube-scheduler sets


def device_keys(allocation: Wire) -> set[tuple[str, str, str]]:
    """Exclusively held devices of an allocation (shared, admin-access ones excluded)."""
    return {
        (r["driver"], r["pool"], r["device"])
        for r in allocation.get("devices", {}).get("results", [])
        if not r.get("adminAccess") and not r.get("shareID")
    }


def clashes(mine: Wire, others: Iterable[ClaimRecord]) -> list[str]:
    """Names of other claims holding one of ``mine``'s devices."""
    keys = device_keys(mine)
    return [f"{r.namespace}/{r.name}" for r in others if keys & device_keys(r.allocation)]


def reserve(backend: ClusterAccess, claim: Wire) -> ClaimRecord:
    """Allocate the (just created) ``claim`` and write its ``status.allocation``."""
    name = claim["metadata"]["name"]
    action = f"dra.request(reserve=True): claim {name}"
    resource = client.ResourceV1Api(backend.api)
    if not backend.slices_readable:
        raise AllocationError(f"{action}: RBAC hides the cluster's ResourceSlices, so no reserve")
    held = [r for r in backend.holders(cluster_wide=True) if r.name != name]
    inventory = backend.inventory()
    allocator = Allocator(
        inventory.patched_slices,
        inventory.device_classes,
        [r.to_object() for r in held],
        backend.settings.strategy,
    )
    results = allocator.allocate([claim])
    if results is None:
        explanation = allocator.explain([claim])
        raise AllocationError(
            f"{action}: the devices are busy now:\n{explanation.summary()}", explanation
        )
    # kube-scheduler stamps an allocation without allocationTimestamp when it reserves the
    # claim for a pod, which the API server refuses (allocations are immutable): stamp it here
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    allocation = {**results[0].to_dict(), "allocationTimestamp": stamp}
    try:
        meta = claim["metadata"]
        finalizers = [*(meta.get("finalizers") or []), FINALIZER]
        patched = resource.patch_namespaced_resource_claim(
            name,
            backend.namespace,
            body={
                "metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}
            },
        )
        body = {**to_wire(backend.api, patched), "status": {"allocation": allocation}}
        written = resource.replace_namespaced_resource_claim_status(
            name, backend.namespace, body=to_model(client.ResourceV1ResourceClaim, body)
        )
    except ApiException as error:
        if error.status == 409:
            raise AllocationError(f"{action}: the claim changed meanwhile; request again") from None
        raise cluster_error(error, action, backend.api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, action, backend.api) from error
    record = to_record(to_wire(backend.api, written))
    others = [
        r
        for r in backend.holders(cluster_wide=True)
        if (r.namespace, r.name)
        != (
            record.namespace,
            name,
        )
    ]
    taken = clashes(allocation, others)
    if taken:
        withdraw(backend, name)
        raise AllocationError(
            f"{action}: {', '.join(taken)} took the same devices meanwhile (another allocator, "
            "most likely kube-scheduler); the reservation was withdrawn: request again"
        )
    return record


def withdraw(backend: ClusterAccess, name: str) -> None:
    """Clear a reservation we wrote (status first, then our finalizer)."""
    resource = client.ResourceV1Api(backend.api)
    model = client.ResourceV1ResourceClaim
    try:
        current = to_wire(
            backend.api, resource.read_namespaced_resource_claim(name, backend.namespace)
        )
        current["status"] = {}
        cleared = to_wire(
            backend.api,
            resource.replace_namespaced_resource_claim_status(
                name, backend.namespace, body=to_model(model, current)
            ),
        )
        meta = cleared["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        resource.replace_namespaced_resource_claim(
            name, backend.namespace, body=to_model(model, cleared)
        )
    except (ApiException, urllib3.exceptions.HTTPError) as error:
        raise ClusterError(
            f"dra.request(reserve=True): claim {name}: withdrawing the reservation failed "
            f"({cluster_error(error, 'withdraw', backend.api)}); delete the claim"
        ) from error

"""Kueue's word on what waits in its line: a kernel pod or a run's Job labelled with a
LocalQueue (``kueue.x-k8s.io/queue-name``) waits, gated or suspended, until Kueue admits its
Workload within the ClusterQueue's quota. While it waits the user reads Kueue's reason (the
Workload's ``QuotaReserved`` condition: ``couldn't assign flavors to pod set main:
insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 1 more needed``) and
the place in the LocalQueue, not just "Pending".

The place is counted among the namespace's Workloads of the same LocalQueue that wait (no
quota reserved, not finished), in Kueue's order: higher priority first, then older. That
is what the user may read (the visibility API's ``positionInLocalQueue`` needs Kueue's
aggregated API server, which clusters often leave off); other namespaces' Workloads of the
same ClusterQueue are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.model.objects import Wire

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # Kueue 0.15 and later serve v1beta2; older, v1beta1
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # on a pod until its Workload is admitted
TIMEOUT = (5, 15)


def _condition(workload: Wire, kind: str) -> Wire | None:
    for condition in (workload.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return None


def waiting(workload: Wire) -> bool:
    """True while Kueue has not reserved quota for it and it has not finished."""
    for kind in ("QuotaReserved", "Admitted", "Finished"):
        condition = _condition(workload, kind)
        if condition is not None and condition.get("status") == "True":
            return False
    return True


def _order(workload: Wire) -> tuple[int, str, str]:
    spec, meta = workload.get("spec") or {}, workload.get("metadata") or {}
    return (
        -int(spec.get("priority") or 0),
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("name") or ""),
    )


def owned_by(workloads: Iterable[Wire], uid: str) -> Wire | None:
    """The Workload of the object whose uid is ``uid``."""
    for workload in workloads:
        owners = (workload.get("metadata") or {}).get("ownerReferences") or ()
        if any(o.get("uid") == uid for o in owners):
            return workload
    return None


def word(workload: Wire, workloads: Iterable[Wire]) -> str:
    """What Kueue says of ``workload`` while it waits, with its place among ``workloads``
    (those the user reads: the namespace's); "" once admitted."""
    if not waiting(workload):
        return ""
    queue = str((workload.get("spec") or {}).get("queueName") or "")
    line = sorted(
        (w for w in workloads if waiting(w) and (w.get("spec") or {}).get("queueName") == queue),
        key=_order,
    )
    name = (workload.get("metadata") or {}).get("name")
    place = next(
        (i for i, w in enumerate(line, 1) if (w.get("metadata") or {}).get("name") == name),
        len(line) + 1,
    )
    reserved = _condition(workload, "QuotaReserved") or {}
    why = str(reserved.get("message") or reserved.get("reason") or "not yet considered")
    if "failed to get claim spec" in why and "not found" in why:
        # Kueue looked before the pod's (Job's) ResourceClaimTemplate existed: ours make
        # the template first, so the object was made by another tool, or its template
        # deleted
        why = "Kueue has not counted its devices yet"
    return f"waiting in Kueue's queue {queue}, {place} of {max(len(line), place)}: {why}"


def served(api: client.ApiClient) -> bool:
    """True when the cluster serves Kueue's API (discovery; False when it cannot be read)."""
    try:
        groups = client.ApisApi(api).get_api_versions(_request_timeout=TIMEOUT).groups
    except (ApiException, urllib3.exceptions.HTTPError):
        return False
    return any(g.name == GROUP for g in groups or ())


def namespace_workloads(api: client.ApiClient, namespace: str) -> list[Wire] | None:
    """The namespace's Workloads; None when Kueue is not there or RBAC hides them."""
    objects = client.CustomObjectsApi(api)
    for version in VERSIONS:
        try:
            listed = objects.list_namespaced_custom_object(
                GROUP, version, namespace, "workloads", _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                continue  # not this version (or no Kueue)
            return None
        except urllib3.exceptions.HTTPError:
            return None
        return list(listed.get("items") or ()) if isinstance(listed, dict) else None
    return None


def word_for(api: client.ApiClient, namespace: str, uid: str) -> str:
    """Kueue's word on the object ``uid`` (a pod or a Job) of ``namespace``; "" when it has
    no Workload (yet) or the Workloads cannot be read."""
    workloads = namespace_workloads(api, namespace)
    if not workloads:
        return ""
    mine = owned_by(workloads, uid)
    if mine is None:
        return ""
    return word(mine, workloads)


def gated(pod: Wire) -> bool:
    """True while the pod waits for Kueue's admission (its scheduling gate)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return any(g.get("name") == ADMISSION_GATE for g in gates)


def uncountable(claim_spec: Wire) -> str:
    """What in a claim's spec Kueue's DRA quota accounting (0.17) cannot count, in the
    user's words ("" when it counts it all): it takes only requests of an exact count of a
    DeviceClass, and leaves a Workload with anything else unadmitted for good."""
    devices = claim_spec.get("devices") or {}
    if devices.get("constraints"):
        return "same= (a matchAttribute constraint)"
    if devices.get("config"):
        return "a device configuration"
    for request in devices.get("requests") or ():
        if request.get("firstAvailable"):
            return "alternatives (firstAvailable)"
        exactly = request.get("exactly") or {}
        if exactly.get("selectors"):
            return "a selector (memory=, model= or where=)"
        if exactly.get("adminAccess"):
            return "admin access"
        if exactly.get("allocationMode") == "All":
            return "every device of a kind (allocationMode All)"
    return ""


def refusal(where: str, queue: str, claim_spec: Wire) -> str:
    """The one line refusing devices that ``queue`` could never admit ("" when it can)."""
    why = uncountable(claim_spec)
    if not why:
        return ""
    return (
        f"{where}: Kueue's queue {queue} counts devices only by DeviceClass and number, and "
        f"this request has {why}; ask for devices by count alone (gpu=N), or ask the admin "
        "for a DeviceClass that selects those devices"
    )

"""The devices a pod holds, read while it runs, and which of them were taken out once it was
stopped: what a kernel pod's user reads when kube-controller-manager evicted it for a
``NoExecute`` device taint (:mod:`dra_jupyter.model.takenout` says it).

The eviction deletes the pod, and the claims made from its template go with it, so the
devices are read when the pod starts: afterwards they may be gone. Reading is best effort:
a cluster that refuses (RBAC, a network error) gives nothing, and the pod's ending is then
said as before ("the pod was deleted"), with one log line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ClusterError
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.taints import read_taint_rules
from dra_jupyter.model.takenout import HeldDevice, held_devices, taken_out

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.model.objects import Wire

log = logging.getLogger(__name__)
TIMEOUT = 10


def held_by(api: ApiClient, namespace: str, pod: Wire) -> tuple[HeldDevice, ...]:
    """The devices the claims of a running ``pod`` (wire form) were allocated."""
    resource = client.ResourceV1Api(api)
    held: list[HeldDevice] = []
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        name = status.get("resourceClaimName")
        if not name:
            continue
        try:
            claim = resource.read_namespaced_resource_claim(
                name, namespace, _request_timeout=TIMEOUT
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            log.info("claim %s of pod %s could not be read: %s", name, _name(pod), error)
            continue
        held.extend(held_devices(to_wire(api, claim)))
    return tuple(held)


def taken_out_now(api: ApiClient, held: tuple[HeldDevice, ...]) -> str | None:
    """Which of ``held`` carry a ``NoExecute`` taint now, in one line; None when none does
    or the cluster cannot say."""
    if not held:
        return None
    drivers = {h.driver for h in held}
    try:
        listed = client.ResourceV1Api(api).list_resource_slice(_request_timeout=TIMEOUT).items
        rules = read_taint_rules(api)
    except (ApiException, urllib3.exceptions.HTTPError, ClusterError) as error:
        log.info("the slices of %s could not be read: %s", sorted(drivers), error)
        return None
    slices = [
        s for s in (to_wire(api, item) for item in listed) if s["spec"].get("driver") in drivers
    ]
    return taken_out(held, slices, rules)


def _name(pod: Wire) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))

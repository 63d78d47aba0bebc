"""The server's pod as KubeSpawner makes it (a ``kubernetes_asyncio`` V1Pod), given its
claim: ``spec.resourceClaims`` names the template, the notebook container's
``resources.claims`` names the pod's claim, and its ``limits`` and ``requests`` stay.

New fields are wire dicts (camelCase), as KubeSpawner's own ``extra_pod_config`` are: the
client serializes dicts as they are, so this module needs no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_jupyter.kube.spawn import POD_CLAIM

NOTEBOOK_CONTAINER = "notebook"  # KubeSpawner's name for the server's container


def _name(item: Any) -> Any:
    return item.get("name") if isinstance(item, Mapping) else getattr(item, "name", None)


def notebook_container(pod: Any) -> Any:
    """The container that runs the server (KubeSpawner's ``notebook``, else the first)."""
    containers = list(pod.spec.containers or [])
    if not containers:
        raise ValueError(f"pod {pod.metadata.name}: no container to give the devices to")
    return next((c for c in containers if _name(c) == NOTEBOOK_CONTAINER), containers[0])


def add_claim(
    pod: Any,
    template: str | None,
    *,
    claim: str = "",
    pod_claim: str = POD_CLAIM,
    labels: Mapping[str, str] | None = None,
    active_deadline: float | None = None,
) -> Any:
    """``pod`` with the claim of ``template`` (None: no devices), or the existing claim
    ``claim`` used by name (a profile's shared claim), ``labels`` added and
    ``active_deadline`` seconds as ``activeDeadlineSeconds``; returned for chaining."""
    if labels:
        pod.metadata.labels = {**(pod.metadata.labels or {}), **labels}
    if active_deadline is not None:
        pod.spec.active_deadline_seconds = max(1, int(active_deadline))
    if template is None and not claim:
        return pod
    claims = [c for c in (pod.spec.resource_claims or []) if _name(c) != pod_claim]
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    claims.append({"name": pod_claim, **source})
    pod.spec.resource_claims = claims
    container = notebook_container(pod)
    ref = {"name": pod_claim}
    if container.resources is None:
        container.resources = {"claims": [ref]}
    elif isinstance(container.resources, dict):
        kept = [c for c in container.resources.get("claims") or [] if _name(c) != pod_claim]
        container.resources = {**container.resources, "claims": [*kept, ref]}
    else:
        kept = [c for c in (container.resources.claims or []) if _name(c) != pod_claim]
        container.resources.claims = [*kept, ref]
    return pod

"""What dra-jupyter leaves in the test cluster, read back: the claims of a namespace and the
Events that explain their deletion."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from dra_jupyter.kube.claims import HOLDER_ANNOTATION, ClaimClient
from dra_jupyter.model.objects import Wire


def claims_in(api: client.ApiClient, namespace: str) -> list[Wire]:
    """The dra-jupyter claims of the namespace now, by name."""
    return sorted(ClaimClient(api, namespace).list(), key=lambda c: c["metadata"]["name"])


def names(api: client.ApiClient, namespace: str) -> list[str]:
    return [c["metadata"]["name"] for c in claims_in(api, namespace)]


def events_of(api: client.ApiClient, namespace: str, claim: str) -> list[Wire]:
    """The Events recorded on the claim (it may be gone already)."""
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={claim}"
    )
    return [api.sanitize_for_serialization(e) for e in listed.items]  # type: ignore[no-untyped-call]


def deleted_because(api: client.ApiClient, namespace: str, claim: Wire, reason: str) -> bool:
    """The claim is gone and exactly one Event on it, with its uid, says ``reason``."""
    meta = claim["metadata"]
    if meta["name"] in names(api, namespace):
        return False
    found = events_of(api, namespace, meta["name"])
    return [(e["reason"], e["involvedObject"]["uid"]) for e in found] == [(reason, meta["uid"])]


def holder(claim: Wire) -> dict[str, Any]:
    """The process that holds the claim, as its annotation says."""
    held: dict[str, Any] = json.loads(claim["metadata"]["annotations"][HOLDER_ANNOTATION])
    return held

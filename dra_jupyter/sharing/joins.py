"""Joining a claim that exists (``dra.request(join="team-gpu")``), pure: what is refused, in
one line, before anything is made, and who uses a claim.

On Kubernetes a GPU kernel that joins runs in a pod whose ``spec.resourceClaims`` names the
claim (``resourceClaimName``), not a template of its own: several pods of one claim share its
devices (their driver time-slices them, or shares them through MPS where the claim's config
says so: :mod:`~dra_jupyter.sharing.gpushare`). The claim decides the devices, so no device
keyword goes with ``join``; the joiner never deletes it (its maker's rules do: its lease, its
idle release, its release), and stopping the joiner's kernel stops its own pod only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from dra_jupyter.errors import shown

JOIN = "join"
CLAIM_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS subdomain
LIST_CLAIMS = "kubectl get resourceclaims -n {namespace} lists them (dra.claims() yours)"
SHARED_PREFIX = "dra-shared-"  # a hub profile's shared claim (dra_jupyter.kube.sharedclaims)


def shared_claim_name(slug: str) -> str:
    """The shared claim of the hub profile ``slug`` (the servers of everyone who chooses it
    join it): ``dra-shared-<slug>`` as a DNS label."""
    tail = re.sub(r"[^a-z0-9-]+", "-", slug.lower()).strip("-")
    return (SHARED_PREFIX + (tail or "profile"))[:63].rstrip("-")


def with_keywords(join: object, given: Iterable[str]) -> str | None:
    """Why ``join`` cannot go with the other keywords ``given`` (``gpu=``, ``share=`` ...,
    ``name=``, ``lease=``, ``reserve=``: the claim exists, so it decides them), else None."""
    others = [k for k in given if k != JOIN]
    if not others:
        return None
    said = ", ".join(f"{k}=" for k in others)
    return (
        f"join={shown(join)} uses that claim's devices and sharing as its maker made them; "
        f"leave out {said} (the claim decides), or make a claim of your own without join="
    )


def makes_none(join: object) -> str:
    """``join`` where a claim is to be made (the REST API's ``POST claims``, ``%dra yaml``)."""
    return (
        f"join={shown(join)} joins a claim that exists and makes none; a notebook's kernel "
        "joins it with dra.request(join=...); leave it out to make a claim"
    )


def no_cluster(join: object, where: str) -> str:
    """``join`` on a backend without ResourceClaims shared by pods."""
    return (
        f"join={shown(join)} joins a ResourceClaim of a Kubernetes namespace, which GPU kernels' "
        f"pods share; {where} has none: it works on the Kubernetes backend "
        "(DRA_JUPYTER_BACKEND=kubernetes); here use share='20Gi' where a device allows several "
        "claims"
    )


def name_problem(join: object) -> str | None:
    """Why ``join`` names no claim (not a string, not a DNS subdomain name), else None."""
    if isinstance(join, str) and CLAIM_NAME.fullmatch(join):
        return None
    return f"join={shown(join)} is not a claim's name; name one, e.g. join='team-gpu'"


def claim_problem(join: str, namespace: str, claim: Mapping[str, Any] | None) -> str | None:
    """Why the claim ``join`` (as read now: None when there is none) cannot be joined: it does
    not exist, or its maker released it (being deleted: a new pod cannot use it); else None."""
    if claim is None:
        return (
            f"join={shown(join)}: there is no claim {join} in namespace {namespace}; "
            + LIST_CLAIMS.format(namespace=namespace)
        )
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return (
            f"join={shown(join)}: claim {join} is being deleted (its maker released it; it goes "
            "once the pods that use it end), so no new pod can use it; "
            + LIST_CLAIMS.format(namespace=namespace)
        )
    return None


def users_of(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The pods that use the claim now (its ``status.reservedFor``), by name."""
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return tuple(str(r.get("name")) for r in reserved if isinstance(r, Mapping) and r.get("name"))

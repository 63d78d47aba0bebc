"""The cluster's devices counted per shape: what a hub's shared view
(:mod:`dra_jupyter.kube.sharedview`) serves and a user's server passes on in
``GET /dra/api/devices`` (:mod:`dra_jupyter.server.models`, ``ShapeCount`` of the REST
contract)."""

from __future__ import annotations

from typing import TypedDict


class ShapeCount(TypedDict):
    """The devices of one shape (kind, model, memory, MIG profile) of the cluster, by
    state: ``held`` and ``shared`` are a claim's, ``blocked`` a partition or its whole GPU
    is, ``tainted`` a taint keeps new claims off (``free + ... + tainted == total``)."""

    kind: str
    model: str
    memory: str
    mig_profile: str
    total: int
    free: int
    held: int
    shared: int
    blocked: int
    tainted: int

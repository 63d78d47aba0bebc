"""Joining a claim that exists (``dra.request(join=...)``): each refusal is one line, said
before anything is made; who uses a claim is read from its ``status.reservedFor``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.claimspec import REQUEST_KEYS, build_claim
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.records import to_record
from dra_jupyter.magics.parsing import parse_line
from dra_jupyter.settings import Settings
from dra_jupyter.sharing.joins import claim_problem, name_problem, users_of, with_keywords
from dra_jupyter.tables import cluster_claim_rows

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "team-gpu", "namespace": "team-a"},
    "spec": {"devices": {"requests": []}},
    "status": {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [
            {"resource": "pods", "name": "kernel-1a2b3c4d-x7k2p9", "uid": "1"},
            {"resource": "pods", "name": "kernel-5e6f7a8b-q1w2e3", "uid": "2"},
        ],
    },
}


def test_join_with_a_keyword_the_claim_decides_is_one_line_naming_them() -> None:
    assert with_keywords("team-gpu", []) is None
    assert with_keywords("team-gpu", ["gpu", "share"]) == (
        "join='team-gpu' uses that claim's devices and sharing as its maker made them; leave "
        "out gpu=, share= (the claim decides), or make a claim of your own without join="
    )


def test_a_claim_that_is_not_there_or_going_cannot_be_joined() -> None:
    assert claim_problem("team-gpu", "team-a", CLAIM) is None
    assert claim_problem("team-gpu", "team-a", None) == (
        "join='team-gpu': there is no claim team-gpu in namespace team-a; kubectl get "
        "resourceclaims -n team-a lists them (dra.claims() yours)"
    )
    going = {
        **CLAIM,
        "metadata": {**CLAIM["metadata"], "deletionTimestamp": "2026-12-07T17:00:00Z"},
    }
    said = claim_problem("team-gpu", "team-a", going)
    assert said is not None and "is being deleted (its maker released it" in said
    assert name_problem("team-gpu") is None
    assert name_problem("Team GPU") == (
        "join='Team GPU' is not a claim's name; name one, e.g. join='team-gpu'"
    )
    assert name_problem(3) is not None


def test_one_machine_refuses_join_before_anything_is_made(tmp_path: Path) -> None:
    session = Session(
        Settings(ledger=tmp_path / "ledger.sqlite"), inventory=simulated.load("h200-8x")
    )
    with pytest.raises(InvalidInputError) as caught:
        session.request(join="team-gpu")
    message = str(caught.value)
    assert message == (
        "dra.request: join='team-gpu' joins a ResourceClaim of a Kubernetes namespace, which "
        "GPU kernels' pods share; this machine has none: it works on the Kubernetes backend "
        "(DRA_JUPYTER_BACKEND=kubernetes); here use share='20Gi' where a device allows "
        "several claims"
    )
    with pytest.raises(InvalidInputError, match=r"^dra.request: join='team-gpu' uses that "):
        session.request(join="team-gpu", gpu=1, share="mps", lease="1h")
    assert len(session.claims()) == 0  # nothing was made


def test_the_magic_takes_join_as_a_keyword_or_a_flag() -> None:
    assert parse_line("request join=team-gpu").spec == {"join": "team-gpu"}
    assert parse_line("request --join team-gpu").spec == {"join": "team-gpu"}
    assert parse_line("request --join=team-gpu").spec == {"join": "team-gpu"}
    with pytest.raises(InvalidInputError, match="--join needs a claim's name"):
        parse_line("request --join")


def test_a_claims_listing_says_which_pods_use_it() -> None:
    assert users_of(CLAIM) == ("kernel-1a2b3c4d-x7k2p9", "kernel-5e6f7a8b-q1w2e3")
    assert users_of({"status": {}}) == ()
    record = to_record(CLAIM)
    assert record.users == users_of(CLAIM)
    [row] = cluster_claim_rows([(record, "reserved")])
    assert row.used_by == "kernel-1a2b3c4d-x7k2p9, kernel-5e6f7a8b-q1w2e3"


def test_where_a_claim_is_made_join_is_refused_in_one_line() -> None:
    """The REST API's ``POST claims`` builds its body's claim: a join there makes nothing."""
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", {"join": "team-gpu", "gpu": 1}, keywords=REQUEST_KEYS)
    assert str(caught.value) == (
        "dra.request: join='team-gpu' joins a claim that exists and makes none; a notebook's "
        "kernel joins "
        "it with dra.request(join=...); leave it out to make a claim"
    )

"""Why a spawn waits, explained by the hub's shared view (issue #38), over real HTTP on
loopback, without a cluster: the view's ``POST api/explain`` (behind
:func:`~dra_jupyter.hub.sharedview.make_server`, on a reader of a bundled inventory)
answers the text the hub builds itself (:func:`dra_jupyter.kube.spawn.explain_on` on the
same state), to the hub's own token; :func:`dra_jupyter.hub.formview.explain_waiting` asks
it, and reads the cluster itself only where the view does not answer. (The same with a
real hub and control plane, counted: tests/hub/test_spawn_form_view.py.)"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.hub.formview import FormView, explain_waiting
from dra_jupyter.hub.formwire import explain_ask
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.spawn import claim_template, explain_on
from dra_jupyter.types import ClaimRecord
from tests.helpers import free_port
from tests.hub.test_form import record
from tests.hub.test_form_view import OWN, Counts, serving

NAMESPACE = "team-a"


def reader(held: list[ClaimRecord]) -> Any:
    """What :func:`explain_on` reads of a Kubernetes backend, on ``h200-8x`` with ``held``."""
    inventory = simulated.load("h200-8x")
    return SimpleNamespace(
        inventory=lambda: inventory,
        slices_readable=True,
        holders=lambda: list(held),
        allocator=lambda taken: Allocator(
            inventory.patched_slices,
            inventory.device_classes,
            [r.to_object() for r in taken],
            "first-fit",
        ),
    )


def spawn_claim(request: dict[str, Any]) -> dict[str, Any]:
    """A waiting spawn's claim, as the hub holds it (its template's claim)."""
    template = claim_template(
        "jupyter-alice-dra", request, namespace=NAMESPACE, user="alice", pod="jupyter-alice"
    )
    return {"metadata": template["metadata"], "spec": template["spec"]["spec"]}


class Devices:
    """The hub's own :class:`~dra_jupyter.kube.spawn.ServerDevices` as explain_waiting uses
    it: its namespace, and its explanation read from the cluster (counted)."""

    def __init__(self, backend: Any) -> None:
        self.namespace = NAMESPACE
        self.backend = backend
        self.read = 0

    def explain(self, claim: dict[str, Any], request: dict[str, Any] | None = None) -> str:
        self.read += 1
        return explain_on(self.backend, self.namespace, claim, request)


def post(url: str, token: str | None, body: bytes) -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"{}")


@pytest.mark.parametrize(
    ("request_", "carols", "first"),
    [
        ({"gpu": 1}, 4, "not now: the devices it needs are held by others"),
        ({"gpu": 9}, 3, "can never be met on this cluster, even with every device free"),
        ({"gpu": 1}, 3, "devices are free now on node"),
    ],
)
def test_the_view_explains_a_waiting_spawn_as_the_hub_would(
    request_: dict[str, Any], carols: int, first: str
) -> None:
    bob = record("bob-1", "bob", {"gpu": 4}, [])
    carol = record("carol-1", "carol", {"gpu": carols}, [bob])
    backend = reader([bob, carol])
    counts = Counts(simulated.load("h200-8x"), [bob, carol])
    counts.reader = backend
    claim = spawn_claim(request_)
    devices = Devices(backend)
    hubs = explain_on(backend, NAMESPACE, claim, request_)
    with serving(counts) as url:
        views = explain_waiting(FormView(url, OWN), devices, claim, request_)  # type: ignore[arg-type]
    assert views == hubs
    assert views.startswith(first), views
    assert devices.read == 0  # the hub read nothing itself
    if carols == 4:
        assert views.splitlines()[-1] == (
            "held now on the cluster: 8 devices by 2 users (bob 4, carol 4)"
        )


def test_the_view_refuses_a_question_that_is_not_one_or_not_the_hubs() -> None:
    counts = Counts(simulated.load("h200-8x"), [])
    counts.reader = reader([])
    ask = json.dumps(explain_ask(NAMESPACE, spawn_claim({"gpu": 1}), {"gpu": 1})).encode()
    with serving(counts) as url:
        explain = url + "api/explain"
        assert post(explain, None, ask)[0] == 401
        assert post(explain, "made-up", ask)[0] == 403
        assert post(explain, "alice-token", ask)[0] == 403  # the hub's question alone
        status, body = post(explain, OWN, ask)
        assert status == 200 and body["explanation"].startswith("devices are free now")
        for bad in (b"[]", b"{", json.dumps({"namespace": "", "claim": {}}).encode()):
            status, body = post(explain, OWN, bad)
            assert status == 400 and "\n" not in body["message"], body
        assert post(explain, OWN, b"x" * 70_000)[0] == 413
        counts.problem = "the shared view's watches of the cluster are not synced"
        status, body = post(explain, OWN, ask)
        assert (status, body["message"]) == (503, counts.problem)


def test_with_the_view_down_the_hub_explains_it_itself_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bob = record("bob-1", "bob", {"gpu": 8}, [])
    devices = Devices(reader([bob]))
    claim = spawn_claim({"gpu": 1})
    down = FormView(f"http://127.0.0.1:{free_port()}/services/dra-devices/", OWN)
    with caplog.at_level(logging.WARNING, logger="dra_jupyter"):
        text = explain_waiting(down, devices, claim, {"gpu": 1})  # type: ignore[arg-type]
    assert text.startswith("not now: the devices it needs are held by others"), text
    assert text.splitlines()[-1] == "held now on the cluster: 8 devices by 1 users (bob 8)"
    assert devices.read == 1
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "cannot be reached" in said[0], said
    assert "the hub reads the cluster itself" in said[0]
    # no view: the hub's own reading
    assert explain_waiting(None, devices, claim, {"gpu": 1}) == text  # type: ignore[arg-type]
    assert devices.read == 2

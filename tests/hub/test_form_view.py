"""The spawn form served by the hub's shared view (issue #38), over real HTTP on loopback,
without a cluster: the view's ``GET api/choices`` (:class:`dra_jupyter.hub.sharedview.Choosing`
on counts of a bundled inventory, behind :func:`~dra_jupyter.hub.sharedview.make_server`),
read by the hub's side (:class:`dra_jupyter.hub.formview.FormView`); the view down, not the
view's, or refusing; and ``cluster_profiles`` on a spawner configured with a view that does
not answer, which still renders its choices and asks nothing of any cluster. (The same with
a real hub and control plane: tests/hub/test_spawn_form_view.py.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub import kubespawner
from dra_jupyter.hub.choices import NONE, Choice, choices
from dra_jupyter.hub.form import service_world
from dra_jupyter.hub.formview import FormView, form_view
from dra_jupyter.hub.formwire import UNCOUNTED, choices_answer, choices_of, uncounted
from dra_jupyter.hub.sharedview import Choosing, make_server, shared_view_service
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.types import ClaimRecord, Owner
from tests.helpers import free_port

PREFIX = "/services/dra-devices/"
OWN = "the-views-own-token"
USERS = {"alice-token": "alice"}


class Counts:
    """ClusterCounts's side that Choosing reads: the views' versions, the inventory, the
    claims; ``problem``: the views not synced."""

    def __init__(self, inventory: Inventory, holders: list[ClaimRecord]) -> None:
        self.inventory = inventory
        self.holders: list[ClaimRecord] = holders
        self.reader = SimpleNamespace(holders=lambda: list(self.holders))
        self.version = 1
        self.problem: str | None = None
        self.made = 0

    def synced(self) -> tuple[tuple[object, ...], Inventory]:
        if self.problem is not None:
            raise UnavailableError(self.problem)
        return (self.version,), self.inventory


def shared_claim(namespace: str, users: int) -> ClaimRecord:
    return ClaimRecord(
        name="dra-shared-h200-x1-mps-25",
        namespace=namespace,
        owner=Owner(user="hub", host="", pid=0),
        spec={},
        allocation={"devices": {"results": []}},
        created=0.0,
        last_activity=0.0,
        users=tuple(f"pod-{i}" for i in range(users)),
    )


@contextlib.contextmanager
def serving(counts: Counts) -> Iterator[str]:
    server = make_server(
        ("127.0.0.1", 0),
        counts,  # type: ignore[arg-type]
        USERS.get,
        PREFIX,
        choose=Choosing(counts),  # type: ignore[arg-type]
        own_token=OWN,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"{}")


def test_the_view_offers_the_choices_counted_on_its_state_to_the_hub_and_users() -> None:
    inventory = simulated.load("h200-8x")
    counts = Counts(inventory, [shared_claim("team-a", 2), shared_claim("team-b", 1)])
    expected = choices(service_world(inventory, []))
    with serving(counts) as url:
        assert get(url + "api/choices", None)[0] == 401
        assert get(url + "api/choices", "made-up")[0] == 403
        status, body = get(url + "api/choices?namespace=team-a", OWN)
        assert status == 200, body
        assert get(url + "api/choices?namespace=team-a", "alice-token") == (200, body)
        assert get(url + "api/devices", OWN)[0] == 403  # the view's own token is no user's
        offered, sharing = FormView(url, OWN).choices("team-b")[:2]
    assert body["inventory"] == inventory.description
    assert body["sharing"] == {"dra-shared-h200-x1-mps-25": 2}  # team-a's only
    assert sharing == {"dra-shared-h200-x1-mps-25": 1}
    assert [(c.slug, c.description, c.available) for c in offered] == [
        (c.slug, c.description, c.available) for c in expected
    ]
    assert offered[1].request == {"gpu": 1, "model": "NVIDIA H200"}


def test_the_choices_are_counted_again_only_when_a_view_changed() -> None:
    counts = Counts(simulated.load("h200-8x"), [])
    choosing = Choosing(counts)  # type: ignore[arg-type]
    first = choosing("a")
    again = choosing("a")
    assert again == first
    made = choosing._made
    assert choosing("b")["choices"] == first["choices"] and choosing._made is made
    counts.version += 1
    choosing("a")
    assert choosing._made is not made


def test_a_choice_round_trips_with_when_it_changed() -> None:
    changed = dt.datetime(2026, 12, 7, 14, 2, tzinfo=dt.UTC)
    choice = Choice("h200-x1", "1\u00d7 H200", "none free now", {"gpu": 1}, 0, "why", changed)
    [back], sharing = choices_of(json.loads(json.dumps(choices_answer("c", [choice], {}))))
    assert back == choice and sharing == {}
    garbage: object
    for garbage in (
        [],
        {"choices": {}},
        {"choices": [{"slug": 1}]},
        {"choices": [], "sharing": {"x": "2"}},
    ):
        with pytest.raises(UnavailableError) as said:
            choices_of(garbage)
        assert "\n" not in said.value.message


def test_without_the_view_the_form_keeps_its_choices_and_says_why_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = Counts(simulated.load("h200-8x"), [])
    with serving(counts) as url:
        view = FormView(url, OWN)
        counted, _, problem = view.choices("a")
        assert problem == "" and counted[1].description == "8 can start now"
        counts.problem = "the shared view's watches of the cluster are not synced"
        with caplog.at_level(logging.INFO, logger="dra_jupyter"):
            offered, sharing, problem = view.choices("a")
            assert view.choices("a")[2] == problem  # said once in the log
    assert problem == (
        f"{UNCOUNTED}: the shared view at {url} answered 503: "
        "the shared view's watches of the cluster are not synced"
    )
    assert [c.slug for c in offered] == [c.slug for c in counted] and sharing == {}
    assert offered[0] == counted[0]  # "no GPU" asks for nothing: nothing to count
    assert {c.description for c in offered[1:]} == {problem}
    assert all(c.available > 0 and c.reason is None for c in offered[1:])
    # down: nothing listens there now
    offered, _, down = view.choices("a")
    assert down.startswith(f"{UNCOUNTED}: the shared view at {url} cannot be reached: ")
    assert "\n" not in down and [c.slug for c in offered] == [c.slug for c in counted]
    said = [r.getMessage() for r in caplog.records]
    # each problem once in the log, as it changes
    assert said == [f"dra_jupyter: the spawn form: {p}" for p in (problem, down)]


def test_a_view_never_reached_offers_no_gpu_saying_why() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    [only], _, problem = FormView(url, OWN).choices("a")
    assert only.slug == NONE and only.description.endswith(f"; {problem}")
    assert uncounted([], "a\nb")[0].description.endswith(f"{UNCOUNTED}: a b")


class _NotTheView(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>a login page</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_an_answer_that_is_not_the_views_is_one_line() -> None:
    server = HTTPServer(("127.0.0.1", 0), _NotTheView)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        problem = FormView(url, OWN).choices("a")[2]
    finally:
        server.shutdown()
        server.server_close()
    assert (
        problem == f"{UNCOUNTED}: the shared view at {url} answered something that is not its JSON"
    )


def test_the_service_entry_names_the_view_for_the_spawner() -> None:
    entry = shared_view_service("http://127.0.0.1:8181", environ={})
    assert len(entry["api_token"]) == 64
    assert shared_view_service("http://h:1", environ={}, api_token="t")["api_token"] == "t"
    view = form_view([{"name": "test"}, entry], "dra-devices")
    assert view is not None and view.token == entry["api_token"]
    assert view.url == "http://127.0.0.1:8181/"
    assert form_view([entry], "dra-devices") is view  # one per URL and token
    assert form_view([entry], "") is None
    assert form_view([{"name": "dra-devices"}], "dra-devices") is None  # no URL
    assert form_view(None, "dra-devices") is None


def test_cluster_profiles_with_a_view_down_render_and_read_no_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spawner configured with a view that does not answer: its profiles are "no GPU"
    saying why, and nothing of the Kubernetes side is touched."""

    def no_cluster(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the form read the cluster itself")

    monkeypatch.setattr(kubespawner, "_devices", no_cluster)
    config = Config()
    # appended to, as the docs' setup does (traitlets keeps it as a lazy value then)
    config.JupyterHub.services.append(
        shared_view_service(f"http://127.0.0.1:{free_port()}", environ={}, api_token="x" * 16)
    )
    spawner = SimpleNamespace(
        config=config,
        dra_shared_view_service="dra-devices",
        namespace="team-a",
        user=SimpleNamespace(name="alice", groups=[]),
    )
    monkeypatch.setattr(
        kubespawner, "DRAProfiles", lambda parent: SimpleNamespace(policy=lambda: None)
    )
    [profile] = kubespawner._cluster_profiles(spawner)
    assert profile["slug"] == NONE and profile["display_name"] == "No GPU"
    assert f"; {UNCOUNTED}: the shared view at http://127.0.0.1:" in profile["description"]
    assert "\n" not in profile["description"]

"""The hub's shared view and a server's reads of it, over real HTTP on loopback, without a
cluster: the service (:func:`dra_jupyter.hub.sharedview.make_server`) on counts of rows
made here and a stand-in for the hub's word on tokens; the server's side
(:class:`dra_jupyter.server.sharedcounts.SharedCounts`) against it, against nothing, and
against answers that are not the service's. (The same on the real control plane and a real
hub: tests/hub/test_shared_view.py.)"""

from __future__ import annotations

import contextlib
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub.sharedview import HubIdentity, make_server, shared_view_service
from dra_jupyter.kube import watching
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.sharedview import HeldRow, SharedDevices, shape_counts
from dra_jupyter.kube.views import CLASSES, RULES, SLICES
from dra_jupyter.server.sharedcounts import UNAVAILABLE, SharedCounts
from dra_jupyter.settings import Settings
from dra_jupyter.tables import DeviceRow
from dra_jupyter.types import Owner
from tests.helpers import free_port

PREFIX = "/services/dra-devices/"


def row(device: str, state: str, holder: str = "", model: str = "H200") -> DeviceRow:
    return DeviceRow(
        device=f"gpu.example.com/node-1/{device}",
        kind="gpu",
        model=model,
        memory="140Gi",
        mig_profile="",
        node="node-1",
        numa_node="0",
        pcie_root="",
        state=state,
        holder=holder,
    )


ROWS = [
    row("gpu-0", "held", "c1 (alice)"),
    row("gpu-1", "free"),
    row("gpu-2", "tainted"),
    row("gpu-3", "held", "c2 (bob)"),
    row("gpu-4", "free", model="B200"),
]


class Counts:
    """What the service answers from (ClusterCounts's ``answer``), on the rows above."""

    def __init__(self) -> None:
        self.problem: str | None = None

    def answer(self, user: str) -> SharedDevices:
        if self.problem is not None:
            raise UnavailableError(self.problem)
        held = [r for r in ROWS if r.holder.endswith(f"({user})")]
        return SharedDevices(
            inventory="the cluster at https://k8s",
            user=user,
            shapes=shape_counts(ROWS),
            held=[HeldRow(**vars(r)) for r in held],  # type: ignore[typeddict-item]
        )


USERS = {"alice-token": "alice", "bob-token": "bob"}


def ask(spec: Mapping[str, Any], name: str) -> tuple[list[str] | None, str]:
    """A kernel's question, answered as on a cluster of 8 GPUs (:func:`asked`'s shape)."""
    if spec.get("gpu", 1) > 8:
        return None, f"gpu={spec['gpu']} can never be met: only 8 GPUs here"
    return (["gpu.nvidia.com"], "") if name != "unreadable" else (None, "")


@contextlib.contextmanager
def serving(counts: Counts) -> Iterator[str]:
    server = make_server(("127.0.0.1", 0), counts, USERS.get, PREFIX, ask)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"
    finally:
        server.shutdown()
        server.server_close()


def test_counts_per_shape_add_up_by_state() -> None:
    h200, b200 = shape_counts(ROWS)
    assert (h200["model"], h200["total"], h200["free"], h200["held"], h200["tainted"]) == (
        "H200",
        4,
        1,
        2,
        1,
    )
    assert (b200["model"], b200["total"], b200["free"]) == ("B200", 1, 1)


def test_a_server_shows_its_users_devices_and_the_clusters_counts() -> None:
    with serving(Counts()) as url:
        answer = SharedCounts(url, "alice-token").devices()
    assert [d["device"] for d in answer["devices"]] == ["gpu.example.com/node-1/gpu-0"]
    assert answer["inventory"] == "the cluster at https://k8s"
    cluster = answer["cluster"]
    assert cluster["problem"] == "" and cluster["source"] == url
    assert [(s["model"], s["held"]) for s in cluster["shapes"]] == [("H200", 2), ("B200", 0)]


def test_who_asks_is_the_hubs_word_on_the_token() -> None:
    with serving(Counts()) as url:
        bob = SharedCounts(url, "bob-token").devices()
        assert [d["holder"] for d in bob["devices"]] == ["c2 (bob)"]
        stranger = SharedCounts(url, "made-up").devices()
        nobody = SharedCounts(url, "").devices()
    assert stranger["devices"] == [] and stranger["cluster"]["shapes"] == []
    assert stranger["cluster"]["problem"] == (
        f"{UNAVAILABLE}: the shared view at {url} answered 403: the hub knows this token as "
        "no user's"
    )
    assert nobody["cluster"]["problem"] == (
        f"{UNAVAILABLE}: the shared view at {url}: this server has no hub API token to present"
    )


def test_unreachable_or_unsynced_the_server_says_so_in_one_line_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/services/dra-devices/"
    shared = SharedCounts(url, "alice-token")
    with caplog.at_level(logging.INFO, logger="dra_jupyter"):
        first, second = shared.devices(), shared.devices()
    problem = first["cluster"]["problem"]
    assert problem.startswith(f"{UNAVAILABLE}: the shared view at {url} cannot be reached: ")
    assert "\n" not in problem and second["cluster"]["problem"] == problem
    assert first["devices"] == [] and first["waiting"] == []
    assert [r.getMessage() for r in caplog.records] == [f"dra_jupyter: {problem}"]

    counts = Counts()
    counts.problem = "the shared view's watches of the cluster are not synced"
    with serving(counts) as url, caplog.at_level(logging.INFO, logger="dra_jupyter"):
        caplog.clear()
        shared = SharedCounts(url, "alice-token")
        assert shared.devices()["cluster"]["problem"] == (
            f"{UNAVAILABLE}: the shared view at {url} answered 503: {counts.problem}"
        )
        counts.problem = None
        assert shared.devices()["cluster"]["problem"] == ""
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and said[0].startswith(f"dra_jupyter: {UNAVAILABLE}: ")
    assert said[1] == f"dra_jupyter: the hub's shared view at {url} answers again"


class _Garbage(BaseHTTPRequestHandler):
    body = b'{"shapes": [{"kind": "gpu"}], "held": []}'

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"<html>a login page</html>", "answered something that is not its JSON"),
        (b'{"shapes": [{"kind": "gpu"}], "held": []}', "counts that are not counts"),
        (b'{"shapes": [], "held": [{"device": 1}]}', "a device row that is not one"),
    ],
)
def test_an_answer_that_is_not_the_services_is_one_line(body: bytes, said: str) -> None:
    handler = type("Garbage", (_Garbage,), {"body": body})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        problem = SharedCounts(url, "alice-token").devices()["cluster"]["problem"]
    finally:
        server.shutdown()
        server.server_close()
    assert problem.startswith(UNAVAILABLE) and said in problem and "\n" not in problem


def test_a_kernels_question_is_passed_to_the_view_and_its_answer_back() -> None:
    """A server under the shared view asks the view what its kernels ask (#38): possible
    with the classes, never with the view's line, or nothing said; and only for a user's
    token, with the body bounded."""
    with serving(Counts()) as url:
        server = SharedCounts(url, "alice-token")
        assert server.possible({"gpu": 1}, "") == (["gpu.nvidia.com"], "")
        assert server.possible({"gpu": 9}, "") == (None, "gpu=9 can never be met: only 8 GPUs here")
        assert server.possible({"gpu": 1}, "unreadable") == (None, "")
        assert SharedCounts(url, "nobody").possible({"gpu": 1}, "") == (None, "")
        assert server.possible({"gpu": 1, "model": "x" * 70_000}, "") == (None, "")
        for body, status in ((b"[]", 400), (b"{}", 400), (b"x" * 70_000, 413)):
            request = urllib.request.Request(
                url + "api/possible",
                data=body,
                headers={"Authorization": "token alice-token"},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            with refused.value:
                assert refused.value.code == status
    with serving(Counts()) as url:  # nothing listens where the view was: not said
        pass
    assert SharedCounts(url, "alice-token").possible({"gpu": 1}, "") == (None, "")


def test_the_hubs_answer_on_a_token_is_kept_a_while() -> None:
    asked: list[str] = []

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            token = (self.headers.get("Authorization") or "").partition(" ")[2]
            body = b'{"kind": "user", "name": "alice"}' if token == "t1" else b"{}"
            self.send_response(200 if token == "t1" else 403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        identify = HubIdentity(f"http://127.0.0.1:{server.server_address[1]}/hub/api")
        assert [identify("t1"), identify("t1"), identify("t2"), identify("t2")] == [
            "alice",
            "alice",
            None,
            None,
        ]
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/hub/api/user", "/hub/api/user"]  # once per token


def test_the_service_entry_carries_the_hubs_kubernetes_credentials() -> None:
    entry = shared_view_service(
        "http://hub:8181",
        environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    assert entry["name"] == "dra-devices" and entry["url"] == "http://hub:8181"
    assert entry["command"][1:] == ["-m", "dra_jupyter.hub.sharedview"]
    assert entry["environment"] == {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }


def test_a_backend_given_a_shared_view_reads_no_cluster_wide_kind(tmp_path: Path) -> None:
    """Its inventory is none and its cluster views never start: no request is made (the API
    client's host is a closed port)."""
    env = {"DRA_JUPYTER_SHARED_VIEW_URL": " http://proxy/services/x/ "}
    settings = replace(Settings.from_env(env), namespace="team-a", watch=True)
    assert settings.shared_view_url == "http://proxy/services/x/"
    assert Settings.from_env({}).shared_view_url == ""
    closed = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    with closed:
        backend = KubernetesBackend(settings, Owner(user="alice", host="", pid=0), api=closed)
        inventory = backend.inventory()
        assert inventory.slices == () and not backend.slices_readable
        assert "counted by the hub's shared view at http://proxy/services/x/" in (
            inventory.description
        )
        assert all(backend.views.cluster(kind) is None for kind in (SLICES, CLASSES, RULES))
        assert backend.views.inventory() is None
        assert not watching.of_api(closed)  # nothing started

"""The reflector's rules (:mod:`dra_jupyter.kube.watching`) on scripted answers, without a
cluster: one list, watches resumed from the last resourceVersion, a 410 lists once, errors
back off, a garbled stream is an error, this process's writes show at once. The same on the
real control plane, counted by the API server: tests/k8s/test_watching.py."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ClusterError
from dra_jupyter.kube import views, watching
from dra_jupyter.kube.watching import Kind, Reflector
from dra_jupyter.model.objects import Wire
from tests.k8s.fixtures import wait_for

WAIT_S = 10.0


def thing(name: str, rv: int, **labels: str) -> Wire:
    meta = {"name": name, "resourceVersion": str(rv), "labels": labels}
    return {"metadata": meta}


def event(kind: str, obj: Wire) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(rv: int) -> bytes:
    return event("BOOKMARK", {"kind": "Thing", "metadata": {"resourceVersion": str(rv)}})


def gone() -> bytes:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    return event("ERROR", status)


class Socket:
    """What ``Watch.stop`` shuts down: ends the stream."""

    def __init__(self) -> None:
        self.down = threading.Event()

    def shutdown(self, how: int) -> None:
        self.down.set()


class Stream:
    """A watch's answer: the scripted lines, then open until shut down (``hold``) or ended
    as by the server's timeout."""

    status = 200

    def __init__(self, lines: list[bytes], *, hold: bool) -> None:
        self.lines, self.hold = lines, hold
        self.sock = Socket()
        self.connection = self
        self.closed = False

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        yield from self.lines
        if self.hold:
            self.sock.down.wait(WAIT_S)

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


class Listing:
    def __init__(self, items: list[Wire], rv: int) -> None:
        body = {"kind": "ThingList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
        self.body = json.dumps({**body, "items": items}).encode()
        self.released = False

    def read(self) -> bytes:
        return self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


class Server:
    """The API server's answers, in order: lists and watches (a list of lines, or an
    error to raise); when the script ends, watches stay open until stopped."""

    def __init__(self) -> None:
        self.lists: deque[Listing | Exception] = deque()
        self.watches: deque[list[bytes] | Exception] = deque()
        self.calls: list[dict[str, Any]] = []
        self.streams: list[Stream] = []

    def list_things(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        script: Any
        if kwargs.get("watch"):
            script = self.watches.popleft() if self.watches else []
            hold = not self.watches
        else:
            script = self.lists.popleft() if self.lists else Listing([], 1)
        if isinstance(script, Exception):
            raise script
        if not kwargs.get("watch"):
            return script
        stream = Stream(script, hold=hold)
        self.streams.append(stream)
        return stream

    def watch_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c.get("watch")]

    def list_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if not c.get("watch")]


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host="https://127.0.0.1:1")) as api:
        yield api


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watching, "SHORT_WATCH_S", 0.0)


@contextlib.contextmanager
def reflector(
    api: client.ApiClient, server: Server, handler: Any = None, **options: Any
) -> Iterator[Reflector]:
    """The reflector of ``server``'s things, started (with ``handler``), stopped after."""
    kind = Kind("things", lambda _api: server, None, "list_things")
    made = Reflector(api, kind, label_selector="app", first_backoff=0.01, **options)
    if handler is not None:
        made.add_handler(handler)
    made.start()
    try:
        yield made
    finally:
        made.stop()
        assert made._thread is not None
        assert not made._thread.is_alive()


def test_it_lists_once_then_resumes_each_watch_from_the_last_resource_version(
    api: client.ApiClient, server: Server
) -> None:
    server.lists.append(Listing([thing("a", 5)], 10))
    server.watches.extend(
        [
            [event("ADDED", thing("b", 11)), bookmark(15)],  # ended by its timeout
            [event("MODIFIED", thing("a", 16)), event("DELETED", thing("b", 17))],
            [],  # ended with nothing to say; the next one stays open
        ]
    )
    heard: list[tuple[str, str]] = []

    def hear(kind: str, obj: Wire) -> None:
        heard.append((kind, obj["metadata"]["name"]))

    with reflector(api, server, hear) as view:
        assert view.wait_synced(WAIT_S)
        wait_for("the changes", lambda: len(server.watch_calls()) == 3, WAIT_S)
        assert [o["metadata"]["name"] for o in view.list()] == ["a"]
        assert view.get("a") == thing("a", 16)
        assert view.stats().lists == 1
        assert view.stats().restarts == 2
        assert view.error is None
    assert heard == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    (listed,) = server.list_calls()
    assert listed["_headers"] == {"Accept-Encoding": "gzip"}
    assert listed["label_selector"] == "app"
    versions = [c["resource_version"] for c in server.watch_calls()]
    assert versions == ["10", "15", "17"]
    assert all(c["allow_watch_bookmarks"] for c in server.watch_calls())
    assert all(s.closed for s in server.streams)


def test_a_list_item_reads_as_a_get_would(api: client.ApiClient, server: Server) -> None:
    server.lists.append(Listing([thing("a", 5, app="x")], 10))
    with reflector(api, server) as view:
        assert view.wait_synced(WAIT_S)
        got = view.get("a")
        assert got is not None
        assert (got["kind"], got["apiVersion"]) == ("Thing", "v1")
        assert view.list({"app": "x"}) == [got]
        assert view.list({"app": "y"}) == []


@pytest.mark.parametrize("how", ["an ERROR event", "an ApiException"])
def test_a_410_lists_again_once(api: client.ApiClient, server: Server, how: str) -> None:
    server.lists.extend([Listing([thing("a", 5)], 10), Listing([thing("b", 30)], 30)])
    expired = ApiException(status=410, reason="Gone")
    server.watches.extend([[gone()] if how == "an ERROR event" else expired])
    with reflector(api, server) as view:
        wait_for("the relist", lambda: len(server.watch_calls()) == 2, WAIT_S)
        assert [o["metadata"]["name"] for o in view.list()] == ["b"]
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors) == (2, 1, 0)
    assert [c["resource_version"] for c in server.watch_calls()] == ["10", "30"]


def test_410_after_410_backs_off_and_still_lists_once_each(
    api: client.ApiClient, server: Server
) -> None:
    server.lists.extend([Listing([], 10), Listing([], 20), Listing([], 30)])
    server.watches.extend([[gone()], [gone()]])
    with reflector(api, server) as view:
        wait_for("two relists", lambda: len(server.watch_calls()) == 3, WAIT_S)
        assert (view.stats().lists, view.stats().relists) == (3, 2)


def test_an_error_backs_off_says_so_once_and_resumes_without_a_list(
    api: client.ApiClient, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.lists.append(Listing([thing("a", 5)], 10))
    refused = ApiException(status=500, reason="Internal Server Error")
    server.watches.extend([refused, refused, refused, [event("ADDED", thing("b", 12))]])
    with caplog.at_level(logging.DEBUG, logger="dra_jupyter"), reflector(api, server) as view:
        wait_for("b", lambda: view.get("b"), WAIT_S)
        assert view.stats().errors == 3
        assert view.stats().lists == 1
        assert view.error is None  # well again
    # ours, once (urllib3's own "Retrying ... after connection broken" lines, where the
    # scripted server's connection broke under load, are not the view's words)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "dra_jupyter"]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert "answered 500" in warned[0].getMessage()
    assert "retrying with backoff" in warned[0].getMessage()
    assert all(c["resource_version"] == "10" for c in server.watch_calls())


def test_a_refused_list_is_an_error_state_with_bounded_retries(
    api: client.ApiClient, server: Server
) -> None:
    body = json.dumps({"kind": "Status", "message": 'things is forbidden: User "nobody"'})
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = body
    server.lists.extend([refused] * 100)
    with reflector(api, server, max_backoff=0.05) as view:
        wait_for("three tries", lambda: view.stats().errors >= 3, WAIT_S)
        assert not view.wait_synced(0.01)
        assert view.error is not None
        assert "answered 403" in view.error
        assert 'User "nobody"' in view.error
        assert view.list() == []
    assert server.watch_calls() == []


def test_a_dead_api_server_is_retried_after_doubling_waits_with_full_jitter(
    api: client.ApiClient, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38, item 1: errors back off with jitter. Each wait after a refused connection is
    drawn from 0 to a ceiling that doubles from the first backoff to the longest, never a
    retry at once for good."""
    broken = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    refused = urllib3.exceptions.MaxRetryError(None, "/things", broken)  # type: ignore[arg-type]
    server.lists.extend([refused] * 6)
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return 0.0  # no wait in the test: what matters is what it was drawn from

    monkeypatch.setattr(random, "uniform", uniform)  # the stdlib's, as the reflector draws
    with reflector(api, server, max_backoff=0.04) as view:  # the first: 0.01
        wait_for("the list once the server answers", lambda: view.synced, WAIT_S)
        assert view.stats().errors == 6
        assert view.error is None  # well again once the server answers
    assert drawn == [(0, 0.01), (0, 0.02), (0, 0.04), (0, 0.04), (0, 0.04), (0, 0.04)]


def forbidden(verb: str) -> ApiException:
    refused = ApiException(status=403, reason="Forbidden")
    message = f'things is forbidden: User "nobody" cannot {verb} resource "things"'
    refused.body = json.dumps({"kind": "Status", "message": message})
    return refused


def test_a_view_refused_after_it_watched_says_so_and_one_never_watched_reads_on(
    api: client.ApiClient,
) -> None:
    """A read of a view in error (:mod:`dra_jupyter.kube.views`): once it watched (an RBAC
    change took the right away since), one line that says what is unavailable and why, not
    its last objects; where the API server never took its WATCH (an account that may list
    but not watch), None: the caller reads from the API server."""
    never, since = Server(), Server()
    for server in (never, since):
        server.lists.append(Listing([thing("a", 5)], 10))
    never.watches.extend([forbidden("watch")] * 100)
    since.watches.extend([[bookmark(11)], *[forbidden("watch")] * 100])
    with reflector(api, never, max_backoff=0.05) as view:
        wait_for("the refusal", lambda: view.error, WAIT_S)
        assert views._answering(view, "things") is None
    with reflector(api, since, max_backoff=0.05) as view:
        wait_for("the refusal", lambda: view.error, WAIT_S)
        with pytest.raises(ClusterError) as raised:
            views._answering(view, "things")
    message = raised.value.message
    assert message.startswith("things unavailable: watching things (app): "), message
    assert 'answered 403: things is forbidden: User "nobody" cannot watch' in message
    assert message.endswith("; retrying")
    assert "\n" not in message


@pytest.mark.parametrize(
    "line",
    [
        b"this is no json\n",
        b'{"type": "ADDED"}\n',
        b'["ADDED"]\n',
        b'{"type": "X", "object": {}}\n',
    ],
)
def test_a_garbled_stream_is_an_error_and_the_watch_resumes(
    api: client.ApiClient, server: Server, line: bytes
) -> None:
    server.lists.append(Listing([], 10))
    server.watches.extend([[bookmark(11), line], [event("ADDED", thing("b", 12))]])
    with reflector(api, server) as view:
        wait_for("b", lambda: view.get("b"), WAIT_S)
        assert view.stats().errors == 1
        assert view.stats().lists == 1
    assert [c["resource_version"] for c in server.watch_calls()] == ["10", "11"]


def test_its_own_writes_show_at_once_and_older_events_do_not_undo_them(
    api: client.ApiClient, server: Server
) -> None:
    server.lists.append(Listing([thing("a", 5)], 10))
    with reflector(api, server) as view:
        assert view.wait_synced(WAIT_S)
        view.applied(thing("new", 12))
        view.deleted("a")
        assert [o["metadata"]["name"] for o in view.list()] == ["new"]
        # the watch then brings what came before those writes: no change
        view._apply("MODIFIED", thing("a", 5))
        view._apply("ADDED", thing("new", 11))
        assert view.get("a") is None
        assert view.get("new") == thing("new", 12)
        # and what came after: it wins (a finalizer kept "a", a newer change of "new")
        view._apply("MODIFIED", thing("a", 13))
        view._apply("MODIFIED", thing("new", 14))
        assert view.get("a") == thing("a", 13)
        assert view.get("new") == thing("new", 14)


def test_shared_reflectors_are_one_per_view_and_stop_together(api: client.ApiClient) -> None:
    one = watching.shared(api, "resourceclaims", namespace="ns", label_selector="app")
    try:
        assert watching.shared(api, "resourceclaims", namespace="ns", label_selector="app") is one
        assert watching.shared(api, "resourceclaims", namespace="other") is not one
    finally:
        watching.stop_all()
    assert one._thread is not None
    assert not one._thread.is_alive()

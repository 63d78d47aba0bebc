"""A reflector (:mod:`dra_jupyter.kube.watching`) on the real control plane: it lists once
and then watches; a watch the server ends resumes with no list; a too-old resourceVersion
lists once more; a user RBAC refuses gets one error line and bounded retries. Every count is
the API server's own (``/metrics``, :mod:`tests.k8s.apimetrics`)."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.claimspec import build_claim
from dra_jupyter.inventory import simulated
from dra_jupyter.kube import watching
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.watching import Reflector
from dra_jupyter.model.objects import Wire
from dra_jupyter.settings import Settings
from dra_jupyter.types import USER_LABEL, Owner
from tests.k8s import testenv
from tests.k8s.apimetrics import open_watches, requests
from tests.k8s.fixtures import wait_for

CLASSES = [c["metadata"]["name"] for c in simulated.load("h200-8x").device_classes]
CLAIMS = "resourceclaims"
WAIT_S = 30.0


def claim(name: str, namespace: str, user: str | None = "alice") -> Wire:
    labels = {USER_LABEL: user} if user else {}
    return build_claim(name, {"gpu": 1}, namespace=namespace, classes=CLASSES, labels=labels)


def lists(cluster: testenv.Cluster, **labels: str) -> int:
    """Namespaced LISTs of claims the API server served (ours: nothing else lists claims in
    one namespace while a test of this module runs)."""
    return requests(cluster, "LIST", CLAIMS, scope="namespace", **labels)


@contextlib.contextmanager
def watched(api: client.ApiClient, namespace: str, **options: Any) -> Iterator[Reflector]:
    view = Reflector(api, CLAIMS, namespace=namespace, label_selector=USER_LABEL, **options)
    try:
        yield view.start()
    finally:
        view.stop()


def names(view: Reflector) -> list[str]:
    return [o["metadata"]["name"] for o in view.list()]


def test_changes_show_and_fire_handlers_with_one_list_in_all(
    cluster: testenv.Cluster, api: client.ApiClient, namespace: str
) -> None:
    claims = ClaimClient(api, namespace)
    claims.create(claim("before", namespace))
    listed = lists(cluster)
    heard: list[tuple[str, str]] = []
    with watched(api, namespace) as view:
        view.add_handler(lambda kind, obj: heard.append((kind, obj["metadata"]["name"])))
        assert view.wait_synced(WAIT_S)
        assert names(view) == ["before"]
        for name in ("a", "b", "c"):
            claims.create(claim(name, namespace))
            wait_for(f"{name} in the view", functools.partial(view.get, name))
        claims.create(claim("not-ours", namespace, user=None))  # no label: not selected
        claims.annotate("a", {"dra-jupyter/last-activity": "12.5"})
        wait_for(
            "a's annotation",
            lambda: (
                (view.get("a") or {})["metadata"]
                .get("annotations", {})
                .get("dra-jupyter/last-activity")
            ),
        )
        claims.delete("b")
        wait_for("b gone", lambda: view.get("b") is None)
        # reads for a while, answered from memory
        deadline, reads = time.monotonic() + 10.0, 0
        while time.monotonic() < deadline:
            assert names(view) == ["a", "before", "c"]
            reads += 1
        assert reads > 1000
        wait_for("one watch", lambda: open_watches(cluster, CLAIMS, scope="namespace") == 1)
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors, stats.objects) == (1, 0, 0, 3)
        wait_for("the API server's count", lambda: lists(cluster) == listed + 1)
        assert lists(cluster) == listed + 1
    assert ("ADDED", "before") in heard
    for name in ("a", "b", "c"):
        assert ("ADDED", name) in heard
    assert ("MODIFIED", "a") in heard
    assert heard.index(("DELETED", "b")) > heard.index(("ADDED", "b"))
    assert not any(name == "not-ours" for _, name in heard)
    wait_for("the watch closed", lambda: open_watches(cluster, CLAIMS, scope="namespace") == 0)


def test_a_watch_the_server_ends_resumes_without_a_list(
    cluster: testenv.Cluster, api: client.ApiClient, namespace: str
) -> None:
    claims = ClaimClient(api, namespace)
    listed = lists(cluster)
    ended = requests(cluster, "WATCH", CLAIMS, scope="namespace")
    with watched(api, namespace, watch_timeout=2) as view:
        assert view.wait_synced(WAIT_S)
        wait_for("a second watch", lambda: view.stats().watches >= 2)
        claims.create(claim("after-a-restart", namespace))
        wait_for("the claim", lambda: view.get("after-a-restart"))
        wait_for("a third watch", lambda: view.stats().watches >= 3)
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors) == (1, 0, 0)
        assert stats.restarts >= 2
        assert names(view) == ["after-a-restart"]
    wait_for(
        "the ended watches counted",
        lambda: requests(cluster, "WATCH", CLAIMS, scope="namespace") - ended >= 3,
    )
    assert lists(cluster) == listed + 1


def test_a_too_old_resource_version_lists_once_more(
    cluster: testenv.Cluster, api: client.ApiClient, namespace: str
) -> None:
    claims = ClaimClient(api, namespace)
    claims.create(claim("kept", namespace))
    claims.create(claim("gone-meanwhile", namespace))
    listed = lists(cluster)
    with watched(api, namespace) as view:
        assert view.wait_synced(WAIT_S)
        wait_for("the watch", lambda: open_watches(cluster, CLAIMS, scope="namespace") == 1)
        # what a watch from a resourceVersion etcd compacted away meets: 410 Gone
        view.restart(resource_version="1")
        claims.delete("gone-meanwhile")
        claims.create(claim("new-meanwhile", namespace))
        wait_for("the relist", lambda: view.stats().relists == 1)
        wait_for("the true state", lambda: names(view) == ["kept", "new-meanwhile"])
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors) == (2, 1, 0)
        wait_for("the API server's count", lambda: lists(cluster) == listed + 2)
        claims.create(claim("later", namespace))
        wait_for("a claim after the relist", lambda: view.get("later"))
    assert lists(cluster) == listed + 2


def test_a_user_rbac_refuses_gets_one_error_line_and_bounded_retries(
    cluster: testenv.Cluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    refused = lists(cluster, code="403")
    kubeconfig = cluster.kubeconfig_for("watch-nobody")
    with (
        caplog.at_level(logging.DEBUG, logger="dra_jupyter"),
        api_client(str(kubeconfig)) as api,
        watched(api, namespace) as view,
    ):
        wait_for("two tries", lambda: view.stats().errors >= 2)
        time.sleep(4.0)  # how often it tries in 4 s is the point
        assert not view.synced
        assert view.error is not None
        assert "answered 403" in view.error
        assert 'User "watch-nobody"' in view.error
        assert view.list() == []
    tries = view.stats().lists
    assert 2 <= tries <= 15  # backoff: 0.2 s doubling, with jitter
    assert view.stats().watches == 0
    wait_for("the API server's count", lambda: lists(cluster, code="403") - refused == tries)
    ours = [r for r in caplog.records if "watching resourceclaims" in r.getMessage()]
    warned = [r for r in ours if r.levelno >= logging.WARNING]
    assert len(warned) == 1
    assert not any(r.exc_info for r in caplog.records)


def test_a_watching_backend_reads_its_claims_from_the_view_and_its_own_writes_at_once(
    cluster: testenv.Cluster, kubeconfig: Path, api: client.ApiClient, namespace: str
) -> None:
    settings = Settings(
        ledger=Path("/nonexistent/unused.sqlite"),
        backend="kubernetes",
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        watch=True,
    )
    alice = KubernetesBackend(settings, Owner(user="alice", host="nb", pid=1, kernel_id="k-1"))
    bob = alice.with_owner(Owner(user="bob", host="nb", pid=1))
    listed = lists(cluster)
    try:
        assert alice.claims() == []
        made = alice.allocate(claim("mine", namespace), checked=True)
        assert [r.name for r in alice.claims()] == ["mine"]  # no wait for the watch
        assert alice.state("mine") == "pending"
        assert bob.claims() == []
        theirs = bob.allocate(claim("theirs", namespace, user="bob"), checked=True)
        assert [r.name for r in alice.claims(all_users=True)] == ["mine", "theirs"]
        assert alice.release(made.name) is True
        assert alice.claims() == []  # no wait for the watch either
        ClaimClient(api, namespace).delete(theirs.name)  # by someone else: the watch says
        wait_for("theirs gone", lambda: bob.claims() == [])
        for _ in range(100):
            assert alice.claims(all_users=True) == []
        wait_for("the API server's count", lambda: lists(cluster) == listed + 1)
        assert lists(cluster) == listed + 1
    finally:
        watching.stop_all()
        alice.api.close()  # type: ignore[no-untyped-call]

"""A reflector (:mod:`dra_jupyter.kube.watching`) on the real control plane: it lists once
and then watches; a watch the server ends resumes with no list; a too-old resourceVersion
gets 410 Gone and lists once more (on a CRD made for it: a built-in kind's watch cache
holds every event since the API server started, so no version of this test's is too old);
a user RBAC refuses gets one error line and bounded retries; a watching backend reads its
claims from the view and sees its own writes at once. Every count is the API server's own,
of one user's requests (:func:`tests.k8s.apimetrics.counted_user`)."""

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
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.inventory import simulated
from dra_jupyter.kube import watching
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.watching import Kind, Reflector
from dra_jupyter.model.objects import Wire
from dra_jupyter.settings import Settings
from dra_jupyter.types import USER_LABEL, Owner
from tests.k8s import testenv
from tests.k8s.apimetrics import Counted, counted_user, open_watches
from tests.k8s.fixtures import wait_for

CLASSES = [c["metadata"]["name"] for c in simulated.load("h200-8x").device_classes]
CLAIMS = "resourceclaims"


def claim(name: str, namespace: str, user: str | None = "alice") -> Wire:
    labels = {USER_LABEL: user} if user else {}
    return build_claim(name, {"gpu": 1}, namespace=namespace, classes=CLASSES, labels=labels)


@pytest.fixture
def counted(cluster: testenv.Cluster, api: client.ApiClient, namespace: str) -> Iterator[Counted]:
    """A user allowed to read and write the namespace's claims, whose LISTs and WATCHes of
    claims the API server counts apart."""
    with counted_user(cluster, api, namespace) as user:
        yield user


@contextlib.contextmanager
def watched(
    api: client.ApiClient, namespace: str, kind: str | Kind = CLAIMS, **options: Any
) -> Iterator[Reflector]:
    """A started reflector of the namespace's claims labelled as ours (or of ``kind``)."""
    selector = USER_LABEL if kind == CLAIMS else None
    view = Reflector(api, kind, namespace=namespace, label_selector=selector, **options)
    try:
        yield view.start()
    finally:
        view.stop()


def names(view: Reflector) -> list[str]:
    return [o["metadata"]["name"] for o in view.list()]


def test_changes_show_and_fire_handlers_with_one_list_in_all(
    cluster: testenv.Cluster, api: client.ApiClient, namespace: str, counted: Counted
) -> None:
    claims = ClaimClient(api, namespace)  # the admin's changes, not counted
    claims.create(claim("before", namespace))
    heard: list[tuple[str, str]] = []
    with watched(counted.api, namespace) as view:
        view.add_handler(lambda kind, obj: heard.append((kind, obj["metadata"]["name"])))
        assert view.wait_synced(30.0)
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
        assert open_watches(cluster, CLAIMS, scope="namespace") >= 1
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors, stats.objects) == (1, 0, 0, 3)
        assert (counted.count("list"), counted.count("watch")) == (1, 1)
    assert ("ADDED", "before") in heard
    for name in ("a", "b", "c"):
        assert ("ADDED", name) in heard
    assert ("MODIFIED", "a") in heard
    assert heard.index(("DELETED", "b")) > heard.index(("ADDED", "b"))
    assert not any(name == "not-ours" for _, name in heard)


def test_a_watch_the_server_ends_resumes_without_a_list(
    api: client.ApiClient, namespace: str, counted: Counted
) -> None:
    claims = ClaimClient(api, namespace)
    with watched(counted.api, namespace, watch_timeout=2) as view:
        assert view.wait_synced(30.0)
        wait_for("a second watch", lambda: view.stats().watches >= 2)
        claims.create(claim("after-a-restart", namespace))
        wait_for("the claim", lambda: view.get("after-a-restart"))
        wait_for("a third watch", lambda: view.stats().watches >= 3)
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors) == (1, 0, 0)
        assert stats.restarts >= 2
        assert names(view) == ["after-a-restart"]
    watches = view.stats().watches
    wait_for("the API server's count", lambda: counted.count("watch") == watches)
    assert (counted.count("list"), watches >= 3) == (1, True)


GROUP = "watch-test.dra-jupyter.io"  # of a CRD made for the 410 test


@pytest.fixture
def widgets(api: client.ApiClient) -> Iterator[Kind]:
    """A CRD of this test (its watch cache starts at its creation, so a resourceVersion
    from before is too old: a watch from there gets 410 Gone), deleted at the end."""
    extensions = client.ApiextensionsV1Api(api)
    schema = {"type": "object", "properties": {"size": {"type": "integer"}}}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
    extensions.create_custom_resource_definition(
        body=to_model(client.V1CustomResourceDefinition, crd)
    )

    def established() -> bool:
        status = extensions.read_custom_resource_definition(f"widgets.{GROUP}").status
        conditions = (status.conditions if status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    try:
        wait_for("the CRD established", established)
        yield Kind.custom_resource(GROUP, "v1", "widgets")
    finally:
        extensions.delete_custom_resource_definition(f"widgets.{GROUP}")


def test_a_too_old_resource_version_gets_410_and_lists_once_more(
    cluster: testenv.Cluster, api: client.ApiClient, namespace: str, widgets: Kind
) -> None:
    custom = client.CustomObjectsApi(api)

    def make(name: str) -> bool:
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}}
        try:
            custom.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", body=body)
        except ApiException as error:
            if error.status == 404:  # the API server serves the new CRD in a moment
                return False
            raise
        return True

    wait_for("kept", functools.partial(make, "kept"))
    make("gone-meanwhile")
    with (
        counted_user(cluster, api, namespace, resource="widgets", group=GROUP) as counted,
        watched(counted.api, namespace, widgets) as view,
    ):
        assert view.wait_synced(30.0)
        wait_for("the watch", lambda: counted.count("watch") == 1)
        view.restart(resource_version="1")  # before the CRD: the API server says 410 Gone
        custom.delete_namespaced_custom_object(GROUP, "v1", namespace, "widgets", "gone-meanwhile")
        make("new-meanwhile")
        wait_for("the relist", lambda: view.stats().relists == 1)
        wait_for("the true state", lambda: names(view) == ["kept", "new-meanwhile"])
        make("later")
        wait_for("a widget after the relist", lambda: view.get("later"))
        stats = view.stats()
        assert (stats.lists, stats.relists, stats.errors) == (2, 1, 0)
        # the first watch, the one from "1" (410), the one after the list
        assert (counted.count("list"), counted.count("watch")) == (2, 3)


def test_a_user_rbac_refuses_gets_one_error_line_and_bounded_retries(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="dra_jupyter"),
        counted_user(cluster, api, namespace, allowed=()) as nobody,
        watched(nobody.api, namespace) as view,
    ):
        wait_for("two tries", lambda: view.stats().errors >= 2)
        assert not view.wait_synced(0.1)
        time.sleep(4.0)  # how often it tries in 4 s is the point
        assert view.error is not None
        assert "answered 403" in view.error
        assert f'User "{nobody.user}"' in view.error
        assert view.list() == []
        view.stop()
        tries = view.stats().lists
        assert 2 <= tries <= 15  # backoff: 0.2 s doubling, with jitter
        assert view.stats().watches == 0
        assert (nobody.count("list"), nobody.count("watch")) == (tries, 0)
    ours = [r for r in caplog.records if "watching resourceclaims" in r.getMessage()]
    assert len([r for r in ours if r.levelno >= logging.WARNING]) == 1
    assert not any(r.exc_info for r in caplog.records)


def test_a_watching_backend_reads_its_claims_from_the_view_and_its_own_writes_at_once(
    api: client.ApiClient, namespace: str, counted: Counted
) -> None:
    settings = Settings(
        ledger=Path("/nonexistent/unused.sqlite"),
        backend="kubernetes",
        kubeconfig=str(counted.kubeconfig),
        namespace=namespace,
        watch=True,
    )
    alice = KubernetesBackend(settings, Owner(user="alice", host="nb", pid=1, kernel_id="k-1"))
    bob = alice.with_owner(Owner(user="bob", host="nb", pid=1))
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
        assert (counted.count("list"), counted.count("watch")) == (1, 1)
    finally:
        watching.stop_all()
        alice.api.close()  # type: ignore[no-untyped-call]

"""The spawn form served from the hub's shared view (issue #38: "The spawn form is served
from it: no API call per render"), with a real JupyterHub running the view as a hub-managed
service on the hub's service account of exactly deploy/hub-rbac.yaml, and the real control
plane counting what that account asks (:mod:`tests.k8s.apimetrics`).

dave's profiles are ``cluster_profiles``: the hub asks the view (one local call per render,
:mod:`dra_jupyter.hub.formview`), so that once the view has synced, his renders, the first
included, make no request of the DRA API at all: the hub's process lists and watches no
slice or claim of its own. frank's spawner names a service where nothing listens: his form
still renders, "no GPU" saying in one line that the device counts are unavailable and why.

A spawn that waits is explained by the view too (``POST api/explain``): alice's spawn that
nothing can serve says why with no cluster-wide LIST by the hub's account, and on one state
the view's explanation is the hub's own word for word, the view's made with no LIST or GET.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.hub.formview import FormView
from dra_jupyter.kube.connect import api_client, to_model
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.kube.spawn import ServerDevices, claim_template
from tests.helpers import free_port
from tests.hub.test_kubespawner import (
    RBAC,
    SUBCLASS,
    Hub,
    _texts,
    login,
    own_model_slice,
    running_hub,
)
from tests.k8s import testenv
from tests.k8s.apimetrics import counted_account
from tests.k8s.fixtures import wait_for
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_backend import session

RENDERS = 5
DRA_GROUP = "resource.k8s.io"  # slices, classes, taint rules, claims, templates
DEAD = "dra-dead"  # a service of the hub where nothing listens
VIEW_TOKEN = secrets.token_hex(16)  # the view's own api_token, which the hub presents
# what explaining a spawn lists (deviceclasses apart: the pod's template reads them)
EXPLAINED = ["resourceslices", "resourceclaims", "devicetaintrules"]

CONFIG = (
    SUBCLASS
    + """
from dra_jupyter.hub.sharedview import shared_view_service
c.JupyterHub.services = [
    *c.JupyterHub.services,
    shared_view_service("http://127.0.0.1:{port}", api_token="{view_token}"),
    {"name": "{dead}", "url": "http://127.0.0.1:{dead_port}", "api_token": "{dead_token}"},
]

def form_profiles(spawner):
    if spawner.user.name == "frank":  # a view that does not answer
        from dra_jupyter.hub.kubespawner import cluster_profiles
        spawner.dra_shared_view_service = "{dead}"
        return cluster_profiles(spawner)
    return profiles(spawner)

c.KubeSpawner.profile_list = form_profiles
"""
)


@pytest.fixture(scope="module")
def form_hub(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    published: SimulatedCluster,
    tmp_path_factory: pytest.TempPathFactory,
    pod_runner: PodRunner,
) -> Iterator[Hub]:
    config = (
        CONFIG.replace("{port}", str(free_port()))
        .replace("{dead_port}", str(free_port()))
        .replace("{dead_token}", uuid.uuid4().hex)
        .replace("{dead}", DEAD)
        .replace("{view_token}", VIEW_TOKEN)
    )
    with running_hub(cluster, api, tmp_path_factory, pod_runner, config, (RBAC,)) as running:
        yield running


def render(hub: Hub, user: str) -> str:
    """``user``'s spawn page, as a browser gets it (a 200: urllib raises on any other)."""
    page: str = login(hub.url, user).open(f"{hub.url}/hub/spawn", timeout=60).read().decode()
    assert "No GPU" in page, page[-2000:]
    assert "Traceback" not in page
    return page


def view_synced(hub: Hub, user: str) -> None:
    """Wait for the view's watches to sync: it answers ``api/choices`` (through the proxy,
    with a token of ``user``'s), without a render of the spawn form."""
    login(hub.url, user)  # the user exists
    status, token = hub.request("POST", f"/hub/api/users/{user}/tokens", {})
    assert status == 201, token

    def answers() -> bool:
        request = urllib.request.Request(
            f"{hub.url}/services/dra-devices/api/choices",
            headers={"Authorization": f"token {token['token']}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as error:
            error.close()
            return False

    wait_for("the shared view to sync", answers)


def test_renders_of_the_spawn_form_from_the_shared_view_make_no_api_call(
    form_hub: Hub, cluster: testenv.Cluster, kubeconfig: Path, published: SimulatedCluster
) -> None:
    """The hub's account (the view's too) is counted from before dave's first render: no
    LIST and no GET of the DRA API by any render, the first included (the hub's process
    keeps no view of its own, which it would list to start); a slice added meanwhile shows
    on his form all the same, by the view's watch."""
    hub = form_hub
    view_synced(hub, "dave")
    with counted_account(
        cluster, hub.api, hub.namespace, "hub", verbs=("list", "get"), groups=[DRA_GROUP]
    ) as counted:
        first = render(hub, "dave")
        assert "can start now" in first, first[-3000:]  # counted, by the view
        for _ in range(RENDERS):
            render(hub, "dave")
        assert counted.count("list") == 0, "a render listed the DRA API"
        assert counted.count("get") == 0, "a render read the DRA API"
        tag = uuid.uuid4().hex[:8]
        model, node = f"Viewed {tag}", f"viewed-{tag}"
        resource = client.ResourceV1Api(hub.api)
        resource.create_resource_slice(
            to_model(client.V1ResourceSlice, own_model_slice(model, node, tag))
        )
        try:
            wait_for(
                "the new model on the spawn form",
                lambda: f"1\u00d7 {model}" in render(hub, "dave"),
            )
            assert counted.count("list") == 0 and counted.count("get") == 0
        finally:
            resource.delete_resource_slice(f"{node}-gpus")


def test_with_the_view_down_the_form_renders_and_says_why_in_one_line(form_hub: Hub) -> None:
    page = render(form_hub, "frank")
    said = "device counts unavailable: the shared view at http://127.0.0.1:"
    assert said in page, page[-3000:]
    line = page[page.index(said) :].split("<", 1)[0]
    assert "cannot be reached" in line and "\n" not in line.strip()
    assert "can start now" not in page  # no count it cannot vouch for


def test_the_views_explanation_is_the_hubs_own_on_one_state(
    form_hub: Hub, cluster: testenv.Cluster, kubeconfig: Path, published: SimulatedCluster
) -> None:
    """Two GPUs of a model of their own held by bob and carol: the view explains a new
    server's claim with no LIST or GET by the hub's account, in the very text the hub's own
    listing gives (which the same count sees list). Before the spawn below: a stopped
    spawn's clean-up lists its namespace's claims a moment after it is gone."""
    hub = form_hub
    view_synced(hub, "alice")
    tag = uuid.uuid4().hex[:8]
    model, node = f"Explained {tag}", f"explained-{tag}"
    resource = client.ResourceV1Api(hub.api)
    resource.create_resource_slice(
        to_model(client.V1ResourceSlice, own_model_slice(model, node, tag))
    )
    held = []
    request = {"gpu": 1, "model": tag}
    template = claim_template(
        "jupyter-alice-dra", request, namespace=hub.namespace, user="alice", pod="jupyter-alice"
    )
    claim = {"metadata": template["metadata"], "spec": template["spec"]["spec"]}
    view = FormView(f"{hub.url}/services/dra-devices/", VIEW_TOKEN)
    try:
        for user in ("bob", "carol"):
            held.append(
                session(kubeconfig, hub.namespace, user).request(gpu=1, model=tag, reserve=True)
            )

        def both_seen() -> bool:
            said = view.explain(hub.namespace, claim, request)
            return "bob 1" in said and "carol 1" in said

        wait_for("the view to see bob's and carol's claims", both_seen)
        with (
            api_client(str(hub.dir / "hub.kubeconfig")) as hubs_api,
            counted_account(
                cluster, hub.api, hub.namespace, "hub", verbs=("list", "get"), groups=[DRA_GROUP]
            ) as counted,
        ):
            # the counts go on from an earlier test's FlowSchemas of the same names
            lists, gets = counted.count("list"), counted.count("get")
            views = view.explain(hub.namespace, claim, request)
            assert counted.count("list") == lists, "the view's explanation listed the DRA API"
            assert counted.count("get") == gets, "the view's explanation read the DRA API"
            hubs = ServerDevices(hubs_api, hub.namespace).explain(claim, request)
            assert counted.count("list") >= lists + 2  # the hub's own: slices and claims
        assert views == hubs
        lines = views.splitlines()
        assert lines[0] == "not now: the devices it needs are held by others"
        assert f"node {node}: request gpu:" in views
        assert "bob 1" in lines[-1] and "carol 1" in lines[-1]
    finally:
        for each in held:
            each.release()
        resource.delete_resource_slice(f"{node}-gpus")


def test_a_spawn_that_waits_is_explained_by_the_view_with_no_list_of_the_hub(
    form_hub: Hub, cluster: testenv.Cluster
) -> None:
    """alice's profile of 9 GPUs can never start: the spawn page says why within seconds, as
    without the view, and the hub's account lists no slice, claim or taint rule of the
    cluster meanwhile (the view answered from its watches)."""
    hub = form_hub
    view_synced(hub, "alice")
    with counted_account(
        cluster,
        hub.api,
        hub.namespace,
        "hub",
        verbs=("list",),
        groups=[DRA_GROUP],
        resources=EXPLAINED,
    ) as counted:
        lists = counted.count("list", "cluster")  # an earlier test's, of the same FlowSchemas
        status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "nine"})
        assert status in (201, 202), body
        events = hub.progress("alice", deadline_s=60)
        text = _texts(events)
        assert "Why: gpu=9: can never be met on this cluster" in text, text
        assert events[-1].get("failed"), text
        wait_for("the failed server to be gone", lambda: hub.server("alice") is None)
        assert counted.count("list", "cluster") == lists, "explaining the spawn listed the cluster"
    assert "explaining a spawn:" not in (hub.dir / "hub.log").read_text()  # no fallback
    wait_for("no template left", lambda: hub.templates() == [])

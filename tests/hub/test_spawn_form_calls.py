"""What a render of the spawn form costs the API server, counted by the API server itself
(:mod:`tests.k8s.apimetrics`): a real JupyterHub with DRAKubeSpawner on the hub's service
account under exactly deploy/hub-rbac.yaml (the ``hub`` fixture of
:mod:`tests.hub.test_kubespawner`), whose user dave's profiles are ``cluster_profiles``.

The hub keeps one watched view of the cluster's devices and claims for the life of its
process (:func:`dra_jupyter.kube.spawn.hub_devices`): the first render lists each kind once
and starts watching; the renders after it make no request of the DRA API at all, and still
count what changed since."""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client

from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.hub.test_kubespawner import Hub, hub, login, own_model_slice
from tests.k8s import testenv
from tests.k8s.apimetrics import counted_account
from tests.k8s.fixtures import wait_for

__all__ = ["hub"]  # the fixture, imported: this module's own hub

RENDERS = 5
DRA_GROUP = "resource.k8s.io"  # slices, classes, taint rules, claims, templates


def render(hub: Hub, user: str = "dave") -> str:
    """``user``'s spawn page, as a browser gets it."""
    page: str = login(hub.url, user).open(f"{hub.url}/hub/spawn", timeout=60).read().decode()
    assert "No GPU" in page, page[-2000:]
    return page


def test_renders_of_the_spawn_form_make_no_api_call_once_the_hubs_view_is_synced(
    hub: Hub, cluster: testenv.Cluster, kubeconfig: Path, published: SimulatedCluster
) -> None:
    """Every request of the hub's service account on the DRA API (list, get, watch) is
    counted from before the first render: the first lists (and starts watching); the next
    renders add nothing, and a slice added since is counted in them all the same."""
    with counted_account(
        cluster, hub.api, hub.namespace, "hub", verbs=("list", "get", "watch"), groups=[DRA_GROUP]
    ) as counted:
        render(hub)  # the view lists once and watches
        synced = {verb: counted.count(verb) for verb in ("list", "get", "watch")}
        for _ in range(RENDERS):
            render(hub)
        after = {verb: counted.count(verb) for verb in ("list", "get", "watch")}
        assert after == synced, f"{RENDERS} renders after the first asked the API server"
        tag = uuid.uuid4().hex[:8]
        model, node = f"Watched {tag}", f"watched-{tag}"
        resource = client.ResourceV1Api(hub.api)
        resource.create_resource_slice(
            to_model(client.V1ResourceSlice, own_model_slice(model, node, tag))
        )
        try:
            # the new slice reaches the hub's view by its watch, not by a list
            wait_for("the new model on the spawn form", lambda: f"1\u00d7 {model}" in render(hub))
            assert counted.count("list") == synced["list"]
            assert counted.count("get") == synced["get"]
        finally:
            resource.delete_resource_slice(f"{node}-gpus")

"""``dra-jupyter publish-slices`` against the real API server."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.cli import main as cli_main
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster, simulate
from tests.helpers import free_port
from tests.k8s import testenv


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["publish-slices", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_published_slices_and_classes_are_listed_back_equal(
    api: client.ApiClient, published: SimulatedCluster
) -> None:
    resource = client.ResourceV1Api(api)
    items = resource.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com").items
    listed = {w["metadata"]["name"]: w for w in (to_wire(api, s) for s in items)}
    for wanted in published.slices:
        got = listed[wanted["metadata"]["name"]]
        assert got["spec"] == wanted["spec"]
    wires = [to_wire(api, c) for c in resource.list_device_class().items]
    classes = {w["metadata"]["name"]: w for w in wires}
    for wanted in published.device_classes:
        assert classes[wanted["metadata"]["name"]]["spec"] == wanted["spec"]
    core = client.CoreV1Api(api)
    for name in published.node_names:
        node = to_wire(api, core.read_node(name))
        assert "taints" not in node["spec"]  # schedulable: the not-ready taint was lifted
        assert [(c["type"], c["status"]) for c in node["status"]["conditions"]] == [
            ("Ready", "True")
        ]
        assert node["status"]["allocatable"]["pods"] == "110"


def test_publishing_again_changes_nothing(kubeconfig: Path, published: SimulatedCluster) -> None:
    code, out, err = run("--inventory", "h200-8x", "--nodes", "2", "--kubeconfig", str(kubeconfig))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert (
        "ResourceSlice gpu-node-2-gpu.nvidia.com: unchanged (pool gpu-node-2 generation 1)" in lines
    )
    assert "Node gpu-node-1: refreshed (Ready heartbeat)" in lines
    assert lines[-1].endswith("(gpu-node-1, gpu-node-2): 2 refreshed, 4 unchanged")


def test_a_changed_pool_is_republished_at_the_next_generation(
    api: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> None:
    """As a driver does: changed slices get generation + 1, slices no longer published go."""
    inventory = simulated.load("workstation-4gpu")
    [one] = inventory.slices
    one = {**one, "spec": {**one["spec"], "nodeName": "file-node-1"}}
    one["spec"]["pool"] = {**one["spec"]["pool"], "name": "file-node-1"}
    one["metadata"] = {"name": "file-node-1-gpus"}
    extra = {**one, "metadata": {"name": "file-node-1-extra"}}
    extra["spec"] = {**one["spec"], "pool": {**one["spec"]["pool"], "name": "extra-pool"}}
    path = tmp_path / "slices.yaml"
    path.write_text(yaml.safe_dump_all([one, extra, *inventory.device_classes]))
    args = ("--inventory", str(path), "--kubeconfig", str(kubeconfig))
    try:
        republished(api, path, args, one, inventory)
    finally:  # the session's cluster is shared: its pools are the published fixture's
        resource = client.ResourceV1Api(api)
        for name in ("file-node-1-gpus", "file-node-1-extra"):
            with contextlib.suppress(ApiException):
                resource.delete_resource_slice(name)


def republished(
    api: client.ApiClient, path: Path, args: tuple[str, ...], one: Any, inventory: Any
) -> None:
    code, out, _ = run(*args)
    assert code == 0
    assert "ResourceSlice file-node-1-gpus: created (pool file-node-1 generation 1)" in out

    one["spec"]["devices"] = one["spec"]["devices"][:3]  # a GPU went away
    path.write_text(yaml.safe_dump_all([one, *inventory.device_classes]))
    code, out, _ = run(*args)
    assert code == 0
    assert "ResourceSlice file-node-1-gpus: updated (pool file-node-1 generation 2)" in out
    assert "ResourceSlice file-node-1-extra: deleted (no longer published)" in out
    resource = client.ResourceV1Api(api)
    got = to_wire(api, resource.read_resource_slice("file-node-1-gpus"))
    assert got["spec"]["pool"]["generation"] == 2
    assert [d["name"] for d in got["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
    names = [to_wire(api, s)["metadata"]["name"] for s in resource.list_resource_slice().items]
    assert "file-node-1-extra" not in names


def test_an_unreachable_api_server_is_one_line(cluster: testenv.Cluster, tmp_path: Path) -> None:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    port = free_port()  # nothing listens there
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run("--inventory", "h200-8x", "--kubeconfig", str(path))
    assert (code, out) == (3, "")
    assert err.startswith(
        "error: publish-slices: DeviceClass gpu.nvidia.com (nothing was changed): cannot reach "
        f"the API server at https://127.0.0.1:{port} ("
    )
    assert err.endswith("check that it runs and that --kubeconfig points at it\n")
    assert err.count("\n") == 1


def test_forbidden_names_what_rbac_refused(cluster: testenv.Cluster) -> None:
    path = cluster.kubeconfig_for("notebook-user", ["notebook-users"])
    code, out, err = run("--inventory", "h200-8x", "--kubeconfig", str(path))
    assert (code, out) == (3, "")
    assert err == (
        "error: publish-slices: DeviceClass gpu.nvidia.com (nothing was changed): "
        f"{cluster.server} answered 403: "
        'deviceclasses.resource.k8s.io is forbidden: User "notebook-user" cannot create '
        'resource "deviceclasses" in API group "resource.k8s.io" at the cluster scope; '
        "a cluster admin must allow it (RBAC)\n"
    )


@pytest.mark.pure
def test_missing_credentials_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    code, _, err = run("--inventory", "h200-8x", "--kubeconfig", str(missing))
    assert code == 3
    assert err.startswith(f"error: no usable Kubernetes credentials in {missing}: ")
    assert err.endswith(
        "; fix it, or set KUBECONFIG or DRA_JUPYTER_KUBECONFIG (the CLI: --kubeconfig PATH)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--inventory", "nvml"], "give a simulated inventory or a file"),
        (["--inventory", "h200-9x"], "inventory 'h200-9x' is not known"),
        (["--inventory", "h200-8x", "--nodes", "0"], "--nodes must be between 1 and 5000"),
    ],
)
@pytest.mark.pure
def test_bad_input_is_refused_before_any_request(argv: list[str], message: str) -> None:
    code, out, err = run(*argv, "--kubeconfig", "/nonexistent")
    assert (code, out) == (2, "")
    assert message in err


@pytest.mark.parametrize("name", simulated.names())
def test_every_bundled_inventory_is_accepted(
    api: client.ApiClient, kubeconfig: Path, published: SimulatedCluster, name: str
) -> None:
    try:
        code, out, err = run("--inventory", name, "--kubeconfig", str(kubeconfig))
        assert (code, err) == (0, "")
        assert out.splitlines()[-1].startswith(f"published inventory {name} on 1 simulated node(s)")
    finally:  # the session's cluster is shared: its nodes are the published fixture's only
        unpublish(
            api, set(simulate(simulated.load(name), 1).node_names) - set(published.node_names)
        )


def unpublish(api: client.ApiClient, nodes: set[str]) -> None:
    """Delete the slices and Node objects of ``nodes`` (other tests would place pods, and
    reserve devices, on them)."""
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    for item in resource.list_resource_slice().items:
        wire = to_wire(api, item)
        spec = wire["spec"]
        if spec.get("nodeName") in nodes or spec["pool"]["name"] in nodes:
            with contextlib.suppress(ApiException):
                resource.delete_resource_slice(str(wire["metadata"]["name"]))
    for node in nodes:
        with contextlib.suppress(ApiException):
            core.delete_node(node)


def test_a_refused_slice_leaves_the_cluster_as_it_was(
    api: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> None:
    """The API server validates everything (dry run) before publish-slices writes anything."""
    inventory = simulated.load("h200-shared")
    [one] = inventory.slices
    # a label the API server refuses: the loader reads no labels of a slice
    one["metadata"] = {"labels": {"bad key!": "x"}}
    one["spec"] = {**one["spec"], "nodeName": "refused-node-1"}
    one["spec"]["pool"] = {**one["spec"]["pool"], "name": "refused-node-1"}
    one["metadata"]["name"] = "refused-node-1-gpus"
    path = tmp_path / "slices.yaml"
    path.write_text(yaml.safe_dump_all([one, *inventory.device_classes]))
    code, out, err = run("--inventory", str(path), "--kubeconfig", str(kubeconfig))
    assert (code, out) == (3, "")
    assert err.startswith(
        "error: publish-slices: ResourceSlice refused-node-1-gpus (nothing was changed): "
    )
    assert 'metadata.labels: Invalid value: "bad key!"' in err
    assert err.count("\n") == 1
    nodes = [to_wire(api, n)["metadata"]["name"] for n in client.CoreV1Api(api).list_node().items]
    assert "refused-node-1" not in nodes

"""A real node (tests/k8s/node.py): containerd, runc, the CNI bridge, the kubelet and the
project's simulated GPU driver speaking the kubelet plugin protocol. A pod with a claim runs
the busybox image there; its environment comes from the driver's CDI spec, its log through the
API server, its address from the bridge; stopping the node leaves nothing behind.

The node has a control plane of its own (the session's serves simulated nodes whose tests
count their devices and pods); it and the node start once for the module.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import api_client
from tests.k8s import images, nodebuild, testenv
from tests.k8s import node as real_node
from tests.k8s.fixtures import fresh_namespace, wait_for

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a real node needs root (mounts, cgroups, iptables)"
)

STATE: dict[str, Any] = {}  # the module's node, once stopped by the last test


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testenv.Cluster]:
    with testenv.started(tmp_path_factory.mktemp("k8s-node")) as running:
        yield running


@pytest.fixture(scope="module")
def node(
    node_cluster: testenv.Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[real_node.Node]:
    nodebuild.build()
    running = real_node.start(node_cluster, tmp_path_factory.mktemp("node"))
    STATE["node"] = running
    yield running
    if not STATE.get("stopped"):
        real_node.stop(running)
        assert real_node.leftovers(running.before, running.state_dir) == []


@pytest.fixture(scope="module")
def node_api(node: real_node.Node) -> Iterator[client.ApiClient]:
    with api_client(str(node.cluster.kubeconfig)) as api:
        yield api


@pytest.fixture
def node_namespace(node_api: client.ApiClient) -> Iterator[str]:
    with fresh_namespace(node_api) as name:
        yield name


def _apis(api: client.ApiClient) -> tuple[Any, Any]:
    """The core and resource APIs, untyped: the tests send wire dicts and read optional
    fields they have just waited for."""
    return client.CoreV1Api(api), client.ResourceV1Api(api)


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": real_node.DRIVER}}]
            }
        },
    }


def busybox_pod(name: str, claim_name: str, script: str) -> dict[str, Any]:
    """A pod of the busybox image with one claim; it sets no environment of its own."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "main",
                    "image": images.BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def device_uuids(node: real_node.Node) -> dict[str, str]:
    """``pool/device`` → the ``uuid`` attribute the driver published."""
    resources, _ = real_node.plugin_resources(node.name)
    return {
        f"{pool}/{device['name']}": device["attributes"]["uuid"]["string"]
        for pool, spec in resources["pools"].items()
        for s in spec["slices"]
        for device in s["devices"]
    }


@pytest.mark.pure
def test_an_image_archive_is_an_oci_layout_naming_its_image(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF not really")
    first = images.write_archive(
        tmp_path / "a.tar", "example.test/x:1", [images.Entry("bin/x", program)], ["/bin/x"]
    )
    again = images.write_archive(
        tmp_path / "b.tar", "example.test/x:1", [images.Entry("bin/x", program)], ["/bin/x"]
    )
    assert first.read_bytes() == again.read_bytes()  # the same files, the same bytes
    with tarfile.open(first) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (manifest_ref,) = index["manifests"]
        assert manifest_ref["annotations"]["io.containerd.image.name"] == "example.test/x:1"
        blob = f"blobs/sha256/{manifest_ref['digest'].removeprefix('sha256:')}"
        manifest = json.load(tar.extractfile(blob))  # type: ignore[arg-type]
        (layer_ref,) = manifest["layers"]
        layer = tar.extractfile(f"blobs/sha256/{layer_ref['digest'].removeprefix('sha256:')}")
        with tarfile.open(fileobj=layer) as files:
            assert files.getnames() == ["bin", "bin/x"]
            assert files.extractfile("bin/x").read() == program.read_bytes()  # type: ignore[union-attr]


@pytest.mark.pure
def test_the_driver_publishes_the_simulated_inventory_for_the_real_node() -> None:
    resources, classes = real_node.plugin_resources("node-x")
    (pool,) = resources["pools"]
    assert pool == "node-x"  # the simulated node's pool, renamed after the real one
    (slice_,) = resources["pools"][pool]["slices"]
    uuids = [d["attributes"]["uuid"]["string"] for d in slice_["devices"]]
    assert len(uuids) == 8
    assert len(set(uuids)) == 8
    assert all(u.startswith("GPU-") for u in uuids)
    assert real_node.DRIVER in {c["metadata"]["name"] for c in classes}


@pytest.mark.pure
def test_the_pod_network_stays_on_this_machine() -> None:
    (bridge,) = real_node.cni_conflist(Path("/ipam"))["plugins"]
    assert bridge["ipMasq"] is False  # no masquerade: nothing leaves through the host
    assert ipaddress.ip_network(real_node.POD_SUBNET).is_private
    config = real_node.kubelet_config(Path("/pki"), "192.0.2.2", 1, 2, "/run/x.sock")
    assert config["resolvConf"] == ""  # no DNS server for the pods
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"


@needs_root
def test_a_pod_with_a_claim_runs_on_the_real_node_with_the_drivers_environment(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    core, resource = _apis(node_api)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    pod = busybox_pod("env", "gpu", "env | sort; echo READY; sleep 600")
    assert "env" not in pod["spec"]["containers"][0]
    core.create_namespaced_pod(node_namespace, pod)

    def running() -> Any:
        obj = core.read_namespaced_pod("env", node_namespace)
        if obj.status.phase in ("Failed", "Succeeded"):
            raise AssertionError(f"the pod ended: {obj.status}")
        return obj if obj.status.phase == "Running" and obj.status.pod_ip else None

    pod_obj = wait_for("the pod Running on the real node", running, timeout=120)
    assert pod_obj.spec.node_name == node.name

    # the device the scheduler allocated, and its UUID as the driver published it
    allocation = resource.read_namespaced_resource_claim("gpu", node_namespace).status.allocation
    (result,) = allocation.devices.results
    assert result.driver == real_node.DRIVER
    uuid = device_uuids(node)[f"{result.pool}/{result.device}"]

    # the log, served by the kubelet through the API server (pods/log)
    def logged() -> str | None:
        text = core.read_namespaced_pod_log("env", node_namespace)
        return text if "READY" in text else None

    env = dict(
        line.split("=", 1) for line in wait_for("the pod's log", logged).splitlines() if "=" in line
    )
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_VISIBLE_DEVICES"] == uuid
    # ... and it came from the driver's CDI spec for this claim
    specs = list(node.cdi_dir.glob(f"*{allocation_claim_uid(resource, node_namespace)}*.json"))
    assert len(specs) == 1
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in specs[0].read_text()

    # its address is on the bridge, reached from the host through it
    address = ipaddress.ip_address(pod_obj.status.pod_ip)
    assert address in ipaddress.ip_network(real_node.POD_SUBNET)
    route = subprocess.run(
        ["ip", "route", "get", str(address)], check=True, capture_output=True, text=True
    ).stdout
    assert f"dev {real_node.BRIDGE}" in route

    # deleting the pod unprepares the claim: the driver removes its CDI spec
    core.delete_namespaced_pod("env", node_namespace, grace_period_seconds=1)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("env", node_namespace)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    wait_for("the pod deleted by the kubelet", gone)
    wait_for("the claim's CDI spec removed", lambda: not specs[0].exists())


def allocation_claim_uid(resource: Any, namespace: str) -> str:
    return str(resource.read_namespaced_resource_claim("gpu", namespace).metadata.uid)


@needs_root
def test_a_pods_failure_and_exit_code_are_the_kubelets(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    core, resource = _apis(node_api)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    core.create_namespaced_pod(
        node_namespace, busybox_pod("fails", "gpu", "echo about to fail; exit 3")
    )

    def ended() -> Any:
        obj = core.read_namespaced_pod("fails", node_namespace)
        return obj if obj.status.phase in ("Failed", "Succeeded") else None

    pod_obj = wait_for("the pod to end", ended, timeout=120)
    assert pod_obj.status.phase == "Failed"
    (status,) = pod_obj.status.container_statuses
    assert status.state.terminated.exit_code == 3
    assert core.read_namespaced_pod_log("fails", node_namespace) == "about to fail\n"


@needs_root
def test_stopping_the_node_leaves_nothing_behind(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    """Runs last in the module: stops the module's node while a pod with a claim runs there,
    then looks for anything it changed on this machine."""
    core, resource = _apis(node_api)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    core.create_namespaced_pod(node_namespace, busybox_pod("sleeps", "gpu", "sleep 600"))

    def running() -> bool:
        phase: str = core.read_namespaced_pod("sleeps", node_namespace).status.phase
        return phase == "Running"

    wait_for("the pod Running", running, timeout=120)
    assert real_node.leftovers(node.before, node.state_dir) != []  # the node is there
    real_node.stop(node)
    STATE["stopped"] = True
    assert real_node.leftovers(node.before, node.state_dir) == []
    assert node.timings["stop_s"] < real_node.STOP_TIMEOUT_S

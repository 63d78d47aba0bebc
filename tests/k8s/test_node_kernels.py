"""GPU kernels on the real node (tests/k8s/node.py): the kernel image
(:mod:`tests.k8s.kernelimage`, written from this machine's interpreter and the venv's
ipykernel, no registry), and a real jupyter_server whose ``dra-kubernetes`` provisioner starts
a kernel in a pod there: run by the kubelet from that image, its devices prepared by the
simulated driver through CDI, its ZMQ ports reached at its address on the bridge. A kernel
that fails there says what the kubelet logged; a ``NoExecute`` DeviceTaintRule on its GPU
has the real kubelet stop its pod.

The node is the test run's (:mod:`tests.k8s.nodefixtures`), the kernel image imported there
at its start.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from packaging.utils import canonicalize_name

from dra_jupyter.hub.kernelspecs import cluster_kernel_specs
from dra_jupyter.kube import taints
from dra_jupyter.kube.connect import to_wire
from tests.k8s import images, kernelimage, nodeplugins
from tests.k8s import node as real_node
from tests.k8s.fixtures import wait_for
from tests.k8s.kernelserver import (
    RefusedError,
    Server,
    execute,
    gone,
    kernel_pods,
    running_pod,
    running_server,
)
from tests.k8s.nodefixtures import needs_root
from tests.k8s.test_kernels import FAILING, FAILING_ARGV
from tests.k8s.test_real_node import device_uuids
from tests.k8s.test_taken_out import KEY as TAINT_KEY
from tests.k8s.test_taken_out import REASON as TAINT_REASON
from tests.k8s.test_taken_out import held


@pytest.fixture
def node_server(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_namespace: str,
    tmp_path: Path,
) -> Iterator[Server]:
    """A jupyter_server as tests/k8s/kernelserver.py starts it, on the node's control plane,
    its kernel pods of the kernel image; no stand-in kubelet."""
    with running_server(
        node.cluster,
        node_api,
        node_namespace,
        tmp_path,
        None,
        idle_timeout=0,
        env={"DRA_JUPYTER_IMAGE": kernelimage.KERNEL},
    ) as up:
        yield up


def _layer(archive: Path, into: Path) -> Path:
    """The image's one layer, unpacked into ``into``."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
        with tarfile.open(fileobj=tar.extractfile(f"blobs/sha256/{layer}")) as files:
            files.extractall(into, filter="fully_trusted")
    return into


@pytest.mark.pure
def test_the_kernel_image_holds_ipykernels_closure_and_nothing_of_the_venv_else() -> None:
    names = {canonicalize_name(d.metadata["Name"]) for d in kernelimage.distributions()}
    assert {"ipykernel", "ipython", "jupyter-client", "pyzmq", "tornado", "traitlets"} <= names
    assert not names & {"jupyter-server", "pandas", "kubernetes", "pytest", "jupyterlab"}
    paths = {e.path for e in kernelimage.entries()}
    site = kernelimage.site_packages()
    assert f"{site}/ipykernel/kernelapp.py" in paths
    assert f"{site}/dra_jupyter/kube/kernels/boot.py" in paths
    assert not any(p.startswith(f"{site}/pandas/") for p in paths)
    assert not any("__pycache__" in p for p in paths)
    stdlib = kernelimage.image_path(kernelimage.stdlib())
    assert f"{stdlib}/asyncio/events.py" in paths
    assert not any(p.startswith(f"{stdlib}/{n}/") for p in paths for n in ("test", "tkinter"))
    assert "lib64/ld-linux-x86-64.so.2" in paths  # what ldd named


def test_the_kernel_image_is_written_once_from_the_same_files(tmp_path: Path) -> None:
    kernel_archive = kernelimage.archive()
    written = kernel_archive.stat().st_mtime_ns
    again = kernelimage.archive()
    assert again == kernel_archive
    assert again.stat().st_mtime_ns == written  # cached: not written again
    assert kernel_archive.parent == kernelimage.cache_dir()
    assert not kernel_archive.is_relative_to(kernelimage.ROOT)  # outside the repository
    elsewhere = kernelimage.archive(tmp_path)  # written anew, from the same files
    assert elsewhere.name == kernel_archive.name  # the same digest of its inputs
    assert _sha256(elsewhere) == _sha256(kernel_archive)  # the same bytes


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


@needs_root
def test_the_kernel_images_python_runs_ipykernel_with_nothing_of_this_machine(
    tmp_path: Path,
) -> None:
    """The layer alone, as the root of a process (chroot, an environment of the image's):
    the interpreter, its libraries and the kernel's packages are all there."""
    root = _layer(kernelimage.archive(), tmp_path / "root")
    code = "import ipykernel.kernelapp, dra_jupyter, sys; print(dra_jupyter.__file__)"
    done = subprocess.run(
        ["/usr/sbin/chroot", str(root), "python3", "-c", code],
        env=dict(e.split("=", 1) for e in kernelimage.env()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"/{kernelimage.site_packages()}/dra_jupyter/__init__.py"


def claim_uuids(api: client.ApiClient, node: real_node.Node, namespace: str, pod: Any) -> list[str]:
    """The UUIDs, as the driver published them, of the devices allocated to ``pod``'s claim."""
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = to_wire(
        api,
        client.ResourceV1Api(api).read_namespaced_resource_claim(
            status["resourceClaimName"], namespace
        ),
    )
    published = device_uuids(node)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert all(r["driver"] == nodeplugins.DRIVER for r in results)
    return [published[f"{r['pool']}/{r['device']}"] for r in results]


@needs_root
def test_a_gpu_kernel_runs_on_the_real_node_from_the_kernel_image(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_namespace: str,
    node_server: Server,
) -> None:
    server, api, namespace = node_server, node_api, node_namespace
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})["id"]
    [pod] = kernel_pods(api, namespace, kernel)
    name = pod["metadata"]["name"]
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == node.name  # the kubelet's, not a stand-in
    [container] = pod["spec"]["containers"]
    assert container["image"] == kernelimage.KERNEL
    [status] = pod["status"]["containerStatuses"]
    assert status["imageID"].startswith("sha256:")  # containerd ran it from the image
    address = ipaddress.ip_address(pod["status"]["podIP"])
    assert address in ipaddress.ip_network(real_node.POD_SUBNET)
    # the server reaches the kernel's ZMQ ports at that address, over the bridge
    connection = json.loads((server.runtime / f"kernel-{kernel}.json").read_text())
    assert connection["ip"] == str(address)
    code = (
        "import os, sys; e = os.environ\n"
        "print(e['CUDA_VISIBLE_DEVICES'], e['NVIDIA_VISIBLE_DEVICES'], e['HOSTNAME'], "
        "os.path.realpath(sys.executable), os.getcwd())"
    )
    printed = asyncio.run(execute(server, kernel, code)).split()
    uuids = ",".join(claim_uuids(api, node, namespace, pod))
    python = f"/{kernelimage.image_path(kernelimage.interpreter())}"
    assert printed == [uuids, uuids, name, python, str(server.root / "work")]
    # ... and the variables came from the driver's CDI spec of the claim
    claim_uid = to_wire(
        api,
        client.ResourceV1Api(api).read_namespaced_resource_claim(
            pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"], namespace
        ),
    )["metadata"]["uid"]
    [cdi] = node.cdi_dir.glob(f"*{claim_uid}*.json")
    assert f"NVIDIA_VISIBLE_DEVICES={uuids}" in cdi.read_text()
    # shut down: the pod, its claim, the Secret and the template are deleted (by the kubelet)
    server.call("DELETE", f"/api/kernels/{kernel}")
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    wait_for("the kernel pod's deletion", lambda: gone(core.read_namespaced_pod, name, namespace))
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    wait_for(
        "the claim's deletion",
        lambda: gone(resource.read_namespaced_resource_claim, claim_name, namespace),
    )
    assert gone(resource.read_namespaced_resource_claim_template, name, namespace)
    wait_for("the Secret's deletion", lambda: gone(core.read_namespaced_secret, name, namespace))
    wait_for("the claim's CDI spec removed", lambda: not cdi.exists())


def _nothing_left(server: Server, api: client.ApiClient, namespace: str) -> None:
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    kernel_objects = "dra-jupyter/component=kernel"
    wait_for(
        "no kernel pod left",
        lambda: core.list_namespaced_pod(namespace, label_selector=kernel_objects).items == [],
    )
    wait_for(
        "no claim template left",
        lambda: resource.list_namespaced_resource_claim_template(namespace).items == [],
    )
    wait_for(
        "no connection Secret left",
        lambda: core.list_namespaced_secret(namespace, label_selector=kernel_objects).items == [],
    )
    wait_for("no connection file left", lambda: not list(server.runtime.glob("kernel-*.json")))


@needs_root
def test_a_kernel_that_fails_on_the_real_node_says_the_kubelets_last_lines(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    """A kernel whose command fails at once, in the kernel image on the real node: what it
    printed, as the kubelet logged it and the API server serves it, is in the kernel's error
    and the server's log; once given up, nothing of the kernel is left."""
    with running_server(
        node.cluster,
        node_api,
        node_namespace,
        tmp_path,
        None,
        idle_timeout=0,
        env={"DRA_JUPYTER_IMAGE": kernelimage.KERNEL},
        argvs={"dra-failing": FAILING_ARGV},
        config="c.KernelRestarter.restart_limit = 1\n",
    ) as server:
        log = server.root.parent / "server.log"
        try:
            server.call("POST", "/api/kernels", {"name": "dra-failing", "path": "work"})
        except RefusedError as refused:  # its pod ended before it ran: the start says why
            assert f"its last lines:\n  starting\n  {FAILING}" in refused.message, refused.message
            assert "Error (exit code 1)" in refused.message, refused.message
        else:  # it ran for a moment: the restarter starts it again, then gives up
            wait_for("the restarter to give up", lambda: "restart failed" in log.read_text())
        text = log.read_text()
        assert re.search(r"pod kernel-\S+ ended.*: Error \(exit code 1\)", text), text[-3000:]
        assert FAILING in text, text[-3000:]
        _nothing_left(server, node_api, node_namespace)


@needs_root
def test_a_kernel_pod_of_an_image_without_python_says_so(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    """The busybox image has no python3: the container cannot start, and the start's error
    carries what the kubelet said (runc's), not a bare exit code."""
    specs = cluster_kernel_specs(str(node.cluster.kubeconfig), node_namespace, "root")
    config = dict(specs["dra-h200-x1"]["metadata"]["kernel_provisioner"]["config"])
    with running_server(
        node.cluster,
        node_api,
        node_namespace,
        tmp_path,
        None,
        idle_timeout=0,
        env={"DRA_JUPYTER_IMAGE": kernelimage.KERNEL},
        configs={"dra-no-python": {**config, "image": images.BUSYBOX}},
        config="c.KernelRestarter.restart_limit = 1\n",
    ) as server:
        with pytest.raises(RefusedError) as raised:
            server.call("POST", "/api/kernels", {"name": "dra-no-python", "path": "work"})
        message = raised.value.message
        assert "ended before the kernel started" in message, message
        assert "StartError: " in message, message  # the kubelet's reason, runc's message
        assert 'exec: "python3": executable file not found' in message, message
        assert message.endswith("(exit code 128)"), message
        _nothing_left(server, node_api, node_namespace)


@needs_root
def test_a_noexecute_taint_on_the_kernels_gpu_has_the_real_kubelet_stop_its_pod(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_namespace: str,
    node_server: Server,
) -> None:
    """An admin's ``NoExecute`` DeviceTaintRule on the kernel's GPU: kube-controller-manager's
    device taint eviction controller deletes its pod, the real kubelet stops its container
    and unprepares the claim (the driver removes its CDI spec), and jupyter_server's
    restarter starts the kernel again in a new pod on another GPU of the node, whose first
    cell says why."""
    server, api, namespace = node_server, node_api, node_namespace
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})["id"]
    first = wait_for("the kernel in a pod", lambda: running_pod(api, namespace, kernel, not_=""))
    device, held_on = held(api, namespace, first)
    assert held_on == node.name
    assert asyncio.run(execute(server, kernel, "x = 41; print(x + 1)")) == "42\n"
    [first_claim] = to_wire(api, client.CoreV1Api(api).read_namespaced_pod(first, namespace))[
        "status"
    ]["resourceClaimStatuses"]
    read_claim = client.ResourceV1Api(api).read_namespaced_resource_claim
    first_uid = to_wire(api, read_claim(first_claim["resourceClaimName"], namespace))["metadata"][
        "uid"
    ]
    [cdi] = node.cdi_dir.glob(f"*{first_uid}*.json")  # the first claim's, by the driver
    where = f"{device.driver}/{device.pool}/{device.device}"
    taints.create(api, where, TAINT_KEY, "NoExecute", TAINT_REASON, "admin")
    try:
        second = wait_for(
            "the kernel in a new pod", lambda: running_pod(api, namespace, kernel, not_=first)
        )
        again, node_again = held(api, namespace, second)
        assert (again != device, node_again) == (True, node.name)
        wait_for(  # the kubelet stopped the first pod's container and unprepared its claim
            "the first pod gone",
            lambda: gone(client.CoreV1Api(api).read_namespaced_pod, first, namespace),
        )
        wait_for("the first claim's CDI spec removed", lambda: not cdi.exists())
        printed = asyncio.run(execute(server, kernel, "import os; print(globals().get('x'))"))
        note, rest = printed.split("\n", 1)
        assert note == (
            f"dra: this kernel's pod was stopped because {device.device} on {held_on} was taken "
            f"out ({TAINT_KEY}: {TAINT_REASON}), so its variables are gone; it runs again in a "
            "new pod with devices of the same request"
        ), printed
        assert rest == "None\n"
        uuids = device_uuids(node)
        printed = asyncio.run(execute(server, kernel, "print(os.environ['CUDA_VISIBLE_DEVICES'])"))
        assert printed == uuids[f"{again.pool}/{again.device}"] + "\n"
    finally:
        taints.delete(api, where, TAINT_KEY)
        server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])

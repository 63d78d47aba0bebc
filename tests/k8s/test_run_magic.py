"""``%%dra run`` in a real kernel configured for the Kubernetes backend by its environment:
the cell's code becomes the pod's ``python -c``, the pod is placed and its devices shown. On
the session's simulated nodes no kubelet runs it; on the test run's real node
(:mod:`tests.k8s.nodefixtures`) a pod of the kernel image runs it and its output comes back.

The Job of ``nodes=2`` stays on the stand-in kubelet (``pod_runner``): its ranks find rank 0
by its cluster DNS name (``MASTER_ADDR=<run>-0.<run>``), and the test environment has one node
and no cluster DNS."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel
from kubernetes import client

from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s import kernelimage
from tests.k8s.conftest import wait_for
from tests.k8s.nodefixtures import needs_root
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_pods import IMAGE
from tests.k8s.test_run import pod_exists
from tests.magics.conftest import TIMEOUT, Kernel, plain


@contextlib.contextmanager
def _kube_kernel(kubeconfig: Path, namespace: str, image: str, tmp_path: Path) -> Iterator[Kernel]:
    """A local IPython kernel with the extension loaded, its backend Kubernetes."""
    env = {
        **os.environ,
        "DRA_JUPYTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(kubeconfig),
        "DRA_JUPYTER_NAMESPACE": namespace,
        "DRA_JUPYTER_IMAGE": image,
        "DRA_JUPYTER_KERNEL_ID": "kernel-1",
    }
    manager, kc = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT, env=env)
    kernel = Kernel(manager, kc, tmp_path / "unused.sqlite")
    try:
        kernel.ok("%load_ext dra_jupyter")
        yield kernel
    finally:
        kc.stop_channels()
        manager.shutdown_kernel(now=True)


@pytest.fixture
def kube_kernel(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Kernel]:
    """On the session's control plane (simulated nodes, where no kubelet runs pods)."""
    with _kube_kernel(kubeconfig, namespace, IMAGE, tmp_path) as kernel:
        yield kernel


@pytest.fixture
def node_kernel(node_kubeconfig: Path, node_namespace: str, tmp_path: Path) -> Iterator[Kernel]:
    """On the real node's control plane, its pods of the kernel image."""
    with _kube_kernel(node_kubeconfig, node_namespace, kernelimage.KERNEL, tmp_path) as kernel:
        yield kernel


def test_the_cell_runs_in_a_placed_pod(
    kube_kernel: Kernel, api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    out = kube_kernel.ok(
        "%%dra run gpu=1 name=cell-run start_timeout=0 timeout=90\nprint('hello from the pod')\n"
    )
    assert "dra.run: pod cell-run placed on gpu-node-" in out.stderr
    assert "is waiting for the node to start the pod" in out.stderr
    assert out.result.startswith("<Run cell-run on gpu-node-")
    assert out.result.endswith("(waiting for the node to start the pod)>")
    pod = to_wire(api, client.CoreV1Api(api).read_namespaced_pod("cell-run", namespace))
    assert pod["spec"]["containers"][0]["command"] == [
        "python",
        "-c",
        "print('hello from the pod')\n",
    ]
    [claim] = ClaimClient(api, namespace).list()
    assert claim["metadata"]["labels"]["dra-jupyter/kernel"] == "kernel-1"
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    assert f"/{device}" in out.result
    kube_kernel.ok("_.cancel()")
    wait_for("the claim's deletion", lambda: ClaimClient(api, namespace).list() == [])


@needs_root
def test_a_pod_run_cell_runs_on_the_real_node_and_the_line_magics_find_it(
    node_kernel: Kernel, node_api: client.ApiClient, node_namespace: str
) -> None:
    """``%%dra run`` of one pod on the real node: the kubelet runs the cell's code in a pod of
    the kernel image, with the driver's devices; ``%dra runs`` lists it, ``%dra logs`` shows
    what it printed, ``%dra cancel`` cleans it up once ended and says so (issue 42, item 9)."""
    api, namespace = node_api, node_namespace
    out = node_kernel.ok(
        "%%dra run gpu=1 name=cell-pod start_timeout=0\n"
        "import os\nprint('one pod on', os.environ['CUDA_VISIBLE_DEVICES'][:4])\n"
    )
    assert "dra.run: pod cell-pod placed on dra-node-1" in out.stderr, out.stderr
    core = client.CoreV1Api(api)

    def ended() -> str | None:
        phase = to_wire(api, core.read_namespaced_pod("cell-pod", namespace))["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    assert wait_for("the pod's run to end on the real node", ended, timeout=120) == "Succeeded"
    assert any(
        "cell-pod" in line for line in plain(node_kernel.ok("%dra runs").result).splitlines()
    )
    assert node_kernel.ok("%dra logs cell-pod").stdout == "one pod on GPU-\n"
    assert (
        node_kernel.ok("%dra cancel cell-pod").stdout
        == "dra: run cell-pod had succeeded; cleaned up\n"
    )
    wait_for("the run's pod to go", lambda: not pod_exists(api, namespace, "cell-pod"))
    wait_for("the claim to go", lambda: ClaimClient(api, namespace).list() == [])


def test_run_errors_are_one_line(kube_kernel: Kernel, published: SimulatedCluster) -> None:
    out = kube_kernel.run("%%dra run gpu=9\nprint(1)\n")
    assert out.status == "error"
    lines = out.error_lines()
    assert any(
        line.startswith("%%dra run gpu=9: the request can never be met on the cluster at")
        for line in lines
    ), lines


def test_a_plain_cell_magic_points_to_run_and_makes_nothing(
    api: client.ApiClient, namespace: str, kube_kernel: Kernel, published: SimulatedCluster
) -> None:
    """``%%dra gpu=1`` on Kubernetes would run the cell with no devices: it says so."""
    out = kube_kernel.run("%%dra gpu=1\nprint('ran')\n")
    assert out.status == "error"
    assert out.error_lines() == [
        "%%dra: on the Kubernetes backend the devices go to pods, not to this kernel; "
        "%%dra run KEY=VALUE runs the cell's code in a pod with them"
    ]
    assert "ran" not in out.stdout
    assert ClaimClient(api, namespace).list() == []


def test_status_shows_a_pending_claim_as_pending(
    kube_kernel: Kernel, published: SimulatedCluster
) -> None:
    kube_kernel.ok("c = %dra request gpu=1 name=waits-for-a-pod")
    try:
        table = kube_kernel.ok("%dra status").result
        (row,) = [line for line in table.splitlines() if "waits-for-a-pod" in line]
        assert "pending" in row and "allocated" not in row
    finally:
        kube_kernel.ok("c.release()")


def test_an_interrupted_run_leaves_neither_pod_nor_claim(
    kube_kernel: Kernel, api: client.ApiClient, namespace: str, published: SimulatedCluster
) -> None:
    running = kube_kernel.start(
        "import dra_jupyter as dra\n"
        "dra.run('true', gpu=1, name='stuck', timeout=600, "
        "node_selector={'dra-jupyter/inventory': 'nowhere'})",
        until=lambda msg: msg["msg_type"] == "stream" and "dra.run: pod stuck: 0/" in str(msg),
    )
    assert ClaimClient(api, namespace).list() != []
    outcome = running.interrupt()
    assert outcome.status == "error"
    assert "KeyboardInterrupt" in "".join(outcome.error_lines())
    assert ClaimClient(api, namespace).list() == []
    assert not pod_exists(api, namespace, "stuck")


def test_a_job_run_cell_is_listed_followed_and_cancelled_by_the_line_magics(
    kube_kernel: Kernel,
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
) -> None:
    """``%%dra run`` takes ``nodes``, ``retries`` and ``wait`` on Kubernetes (a Job), and
    ``%dra runs``, ``%dra logs NAME``, ``%dra cancel NAME`` find and drive its runs, Jobs
    and bare pods alike, as they do on one machine. On the stand-in kubelet: two pods (see
    the module)."""
    with pod_runner.serving(namespace):
        out = kube_kernel.ok(
            "%%dra run gpu=1 nodes=2 retries=0 wait=true name=cell-job\n"
            "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
        )
        assert sorted(out.stdout.splitlines()) == ["[rank 0] rank 0 of 2", "[rank 1] rank 1 of 2"]
        job = to_wire(api, client.BatchV1Api(api).read_namespaced_job("cell-job", namespace))
        assert job["spec"]["backoffLimit"] == 3  # retries=0: an exit code fails the Job
        kube_kernel.ok("%%dra run gpu=1 name=cell-pod start_timeout=0\nprint('one pod')\n")
        listed = plain(kube_kernel.ok("%dra runs").result)
        [job_line] = [line for line in listed.splitlines() if "cell-job" in line]
        assert "Succeeded" in job_line and "0, 0" in job_line
        assert any("cell-pod" in line for line in listed.splitlines())
        assert sorted(kube_kernel.ok("%dra logs cell-job").stdout.splitlines()) == [
            "[rank 0] rank 0 of 2",
            "[rank 1] rank 1 of 2",
        ]
        core = client.CoreV1Api(api)
        wait_for(
            "the pod's run to end",
            lambda: (
                to_wire(api, core.read_namespaced_pod("cell-pod", namespace))["status"].get("phase")
                == "Succeeded"
            ),
        )
        assert (  # it had ended: cancel cleans it up and says so (issue 42, item 9)
            kube_kernel.ok("%dra cancel cell-pod").stdout
            == "dra: run cell-pod had succeeded; cleaned up\n"
        )
        assert (
            kube_kernel.ok("%dra cancel cell-job").stdout
            == "dra: run cell-job had succeeded; cleaned up\n"
        )
        wait_for("the runs' pods to go", lambda: not pod_exists(api, namespace, "cell-pod"))
        wait_for("the claims to go", lambda: ClaimClient(api, namespace).list() == [])

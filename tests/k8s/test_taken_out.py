"""A GPU kernel's device taken out on the real control plane: an admin's ``NoExecute``
DeviceTaintRule (``dra-jupyter taint``), kube-controller-manager's device taint eviction
controller (on by default in Kubernetes 1.37) stops the kernel's pod, jupyter_server's
restarter starts the kernel again in a new pod, whose claim (from the same template) avoids
the tainted GPU, and the kernel's next cell says which device was taken out and why. A
run's pod taken out the same way says why in the run's status and logs.

A bare pod's run is taken out on the test run's real node (:mod:`tests.k8s.nodefixtures`),
its pod of the kernel image stopped by the kubelet. Why the rest stays on the stand-in
kubelet: the kernel's case takes out a device of the session's simulated nodes (its case on
the real node is tests/k8s/test_node_kernels.py's); the Job's case is a Job (see
tests/k8s/test_jobs.py)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from kubernetes import client

from dra_jupyter.kube import taints
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.model.takenout import HeldDevice, held_devices
from tests.k8s import kernelimage
from tests.k8s import node as real_node
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import IMAGE, Server, execute, kernel_pods, running_pod
from tests.k8s.nodefixtures import needs_root
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_backend import session
from tests.k8s.test_pods import ON_SIMULATED

KEY = "health.example.com/xid"
REASON = "XID 79: the GPU fell off the bus"


def held(api: client.ApiClient, namespace: str, pod: str) -> tuple[HeldDevice, str]:
    """The one device the kernel pod's claim holds, and its node."""
    found = to_wire(api, client.CoreV1Api(api).read_namespaced_pod(pod, namespace))
    name = found["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace)
    [device] = held_devices(to_wire(api, claim))
    return device, str(found["spec"]["nodeName"])


def test_a_kernel_whose_gpu_is_taken_out_starts_again_elsewhere_and_says_why(
    api: client.ApiClient, namespace: str, published: SimulatedCluster, server: Server
) -> None:
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})["id"]
    first = wait_for("the kernel in a pod", lambda: running_pod(api, namespace, kernel, not_=""))
    device, node = held(api, namespace, first)
    assert asyncio.run(execute(server, kernel, "x = 41; print(x + 1)")) == "42\n"
    where = f"{device.driver}/{device.pool}/{device.device}"
    taints.create(api, where, KEY, "NoExecute", REASON, "admin")
    try:
        second = wait_for(
            "the kernel in a new pod", lambda: running_pod(api, namespace, kernel, not_=first)
        )
        again, _ = held(api, namespace, second)
        assert again != device
        printed = asyncio.run(execute(server, kernel, "print(globals().get('x'))"))
        note, rest = printed.split("\n", 1)
        assert note == (
            f"dra: this kernel's pod was stopped because {device.device} on {node} was taken "
            f"out ({KEY}: {REASON}), so its variables are gone; it runs again in a new pod "
            "with devices of the same request"
        ), printed
        assert rest == "None\n"
        assert asyncio.run(execute(server, kernel, "print('once')")) == "once\n"
        log = (server.root.parent / "server.log").read_text()
        assert f"pod {first} ended: {device.device} on {node} was taken out" in log
    finally:
        taints.delete(api, where, KEY)
        server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


def test_a_runs_pod_whose_gpu_is_taken_out_says_why_after_the_job_retried_it(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    tmp_path: Path,
) -> None:
    """A Job run (retries=0): the eviction is a disruption, which the Job's podFailurePolicy
    ignores and retries on another GPU; the Job's status does not mention it, the run's
    status and logs say the first pod was taken out and why."""
    script = (
        "import pathlib, sys, time\n"
        f"mark = pathlib.Path({str(tmp_path)!r}) / 'started'\n"
        "if mark.exists():\n    print('done', flush=True)\n    sys.exit(0)\n"
        "mark.touch()\nprint('first attempt', flush=True)\ntime.sleep(600)\n"
    )
    with pod_runner.serving(namespace):
        alice = session(kubeconfig, namespace, image=IMAGE)
        run = alice.run(
            [sys.executable, "-c", script],
            gpu=1,
            nodes=1,
            retries=0,
            name="taken",
            node_selector=ON_SIMULATED,
        )
        first = wait_for(
            "the run's pod running with its device",
            lambda: next(
                (p for p in run.status.processes if p.phase == "Running" and p.devices), None
            ),
        )
        [where] = first.devices
        device = where.rsplit("/", 1)[-1]
        taints.create(api, where, KEY, "NoExecute", REASON, "admin")
        try:
            ended = run.wait(timeout=90)
            why = f"{device} on {first.node} was taken out ({KEY}: {REASON})"
            assert ended.phase == "Succeeded", ended
            stopped, retried = ended.processes
            assert (stopped.name, stopped.phase, stopped.reason) == (first.name, "Failed", why)
            assert (retried.phase, retried.exit_code) == ("Succeeded", 0)
            assert retried.name != first.name
            assert f"pod {first.name} (rank 0) was stopped: {why}" in ended.message
            logs = run.logs()
            assert f"[rank 0] dra.run: pod {first.name} was stopped: {why}\n" in logs
            assert "[rank 0] done\n" in logs
        finally:
            taints.delete(api, where, KEY)
            run.cancel()


@needs_root
def test_a_bare_pod_runs_gpu_taken_out_says_why_in_its_status(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_kubeconfig: Path,
    node_namespace: str,
) -> None:
    """``dra.run`` without nodes=: one pod with a claim of the session, followed by the call
    (in a thread here); the run found from another session (another kernel) watches it
    run, then says which device was taken out when the eviction stopped it. On the real
    node: a pod of the kernel image, stopped by the kubelet."""
    api, kubeconfig, namespace = node_api, node_kubeconfig, node_namespace
    script = "import time\nprint('training', flush=True)\ntime.sleep(600)\n"
    alice = session(kubeconfig, namespace, image=kernelimage.KERNEL)
    followed: list[object] = []
    thread = threading.Thread(
        target=lambda: followed.append(
            alice.run(["python3", "-c", script], gpu=1, name="bare", timeout=60)
        ),
        daemon=True,
    )
    thread.start()
    again = session(kubeconfig, namespace, image=kernelimage.KERNEL)
    found = wait_for(
        "the run's pod running with its device",
        lambda: next(
            (r for r in again.runs() if r.status.phase == "Running" and r.status.devices),
            None,
        ),
    )
    [row] = found.status.processes
    assert row.node == node.name
    [where] = row.devices
    taints.create(api, where, KEY, "NoExecute", REASON, "admin")
    try:
        thread.join(90)
        assert not thread.is_alive()  # the call ended with its pod
        status = found.wait(timeout=30)
        why = f"{where.rsplit('/', 1)[-1]} on {row.node} was taken out ({KEY}: {REASON})"
        assert (status.phase, status.message) == ("Failed", f"pod bare was stopped: {why}")
        assert [(p.name, p.phase, p.reason) for p in status.processes] == [("bare", "Failed", why)]
        assert found.logs().endswith(f"dra.run: pod bare was stopped: {why}\n")
    finally:
        taints.delete(api, where, KEY)
        found.cancel()

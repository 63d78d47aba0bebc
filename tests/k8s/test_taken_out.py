"""A GPU kernel's device taken out on the real control plane: an admin's ``NoExecute``
DeviceTaintRule (``dra-jupyter taint``), kube-controller-manager's device taint eviction
controller (on by default in Kubernetes 1.37) stops the kernel's pod, jupyter_server's
restarter starts the kernel again in a new pod, whose claim (from the same template) avoids
the tainted GPU, and the kernel's next cell says which device was taken out and why."""

from __future__ import annotations

import asyncio

from kubernetes import client

from dra_jupyter.kube import taints
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.model.takenout import HeldDevice, held_devices
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import Server, execute, kernel_pods, running_pod

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

"""GPU kernels on Kubernetes, from a running notebook: a kernel moves into a pod of its own
with devices (``dra.request(..., restart=True)``, the Devices panel's restart with its
claims), keeping its kernel id, and back onto the server when its devices are released for
idleness, its next cell saying so in one line. A real jupyter_server, real kernels, the
real kube-scheduler; the stand-in kubelet runs the pods (see test_kernels.py). Not on the
real node yet: its kernels are placed on the session's simulated nodes, and a moved kernel
keeps using ``dra`` in its pod, whose calls there reach neither the API server nor its server
(see test_kernel_requests.py); not tried in this slice."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import (
    IMAGE,
    RefusedError,
    Server,
    execute,
    gone,
    kernel_pods,
    running_pod,
)

UUID = re.compile(r"GPU-[0-9a-f-]+")


def running_kernel_pod(api: client.ApiClient, namespace: str, kernel: str) -> dict[str, Any]:
    name = wait_for("the kernel in a pod", lambda: running_pod(api, namespace, kernel, not_=""))
    [pod] = [p for p in kernel_pods(api, namespace, kernel) if p["metadata"]["name"] == name]
    return pod


def moved(server: Server, kernel: str, where: str) -> None:
    """Wait until the server says the kernel's move is done ("into pod", "back on the
    server"): it answers at its new address, and its old websockets are closed."""
    log = server.root.parent / "server.log"
    wait_for(f"kernel {kernel} {where}", lambda: f"kernel {kernel} {where}" in log.read_text())


def claims_of(server: Server, kernel: str) -> list[dict[str, Any]]:
    return [c for c in server.call("GET", "/dra/api/claims")["claims"] if c["kernel_id"] == kernel]


def start_cpu_kernel(server: Server) -> str:
    kernel = str(server.call("POST", "/api/kernels", {"name": "python3", "path": "work"})["id"])
    printed = asyncio.run(execute(server, kernel, "import dra_jupyter as dra; print('cpu')"))
    assert printed == "cpu\n"
    return kernel


def test_restart_true_moves_a_cpu_kernel_into_a_pod_with_its_devices(
    api: client.ApiClient, namespace: str, published: SimulatedCluster, server: Server
) -> None:
    """``dra.request(gpu=1, restart=True)`` in a kernel on the server: the kernel restarts
    in a pod of its own whose claim kube-scheduler allocated; the notebook's next cell runs
    there and sees the device; the claim is the kernel's in the REST API (dra.claims(), the
    Devices panel). A request that can never be met is refused in the cell, in one line,
    and the kernel stays where it is."""
    kernel = start_cpu_kernel(server)
    assert kernel_pods(api, namespace, kernel) == []
    with pytest.raises(AssertionError, match="no device") as refused:
        asyncio.run(execute(server, kernel, "dra.request(gpu=1, memory='500Gi', restart=True)"))
    assert "restart" not in str(refused.value).split("evalue")[0]
    assert asyncio.run(execute(server, kernel, "print('still here')")) == "still here\n"
    asyncio.run(
        execute(server, kernel, "dra.request(gpu=1, restart=True)\nprint('never')", answer=False)
    )
    moved(server, kernel, "moved into pod")
    pod = running_kernel_pod(api, namespace, kernel)
    assert pod["spec"]["containers"][0]["image"] == IMAGE
    printed = asyncio.run(
        execute(server, kernel, "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    )
    assert UUID.fullmatch(printed.strip()), printed
    [claim] = claims_of(server, kernel)
    assert claim["name"] == pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert len(claim["devices"]) == 1
    # the kernel is the same one: same id, listed once
    assert [k["id"] for k in server.call("GET", "/api/kernels")] == [kernel]
    server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


def test_a_claim_made_in_a_cpu_kernel_says_it_waits_and_restart_with_claims_moves_the_kernel(
    api: client.ApiClient, namespace: str, published: SimulatedCluster, server: Server
) -> None:
    """``dra.request(gpu=1)`` without restart=True on Kubernetes: the claim is made (a pod
    may use it) and the kernel is told plainly that its devices would be a pod's, with the
    command that moves it. The Devices panel's "Restart kernel with these devices"
    (``restart-with-claims``) then moves the kernel into a pod with that claim's devices,
    and the claim made in the kernel goes: the pod's own claim holds the devices now."""
    kernel = start_cpu_kernel(server)
    printed = asyncio.run(execute(server, kernel, "c = dra.request(gpu=1, name='mine')"))
    assert (
        "claim mine waits for a pod: on Kubernetes a kernel's devices are its pod's; "
        "dra.request(gpu=1, restart=True) restarts this kernel in a pod with them" in printed
    ), printed
    answer = server.call("POST", f"/dra/api/kernels/{kernel}/restart-with-claims")
    pod = running_kernel_pod(api, namespace, kernel)  # the answer comes once it is moved
    own = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert [c["name"] for c in answer["claims"]] == [own]
    assert answer["env"] == {}
    resource = client.ResourceV1Api(api)
    wait_for(
        "the claim made in the kernel to go",
        lambda: gone(resource.read_namespaced_resource_claim, "mine", namespace),
    )
    printed = asyncio.run(
        execute(server, kernel, "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    )
    assert UUID.fullmatch(printed.strip()), printed
    # the same again on a kernel in a pod: a new pod with the same devices' request
    server.call("POST", f"/dra/api/kernels/{kernel}/restart-with-claims")
    second = wait_for(
        "a new pod",
        lambda: running_pod(api, namespace, kernel, not_=pod["metadata"]["name"]),
    )
    assert second != pod["metadata"]["name"]
    server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


@contextlib.contextmanager
def other_users_pods(api: client.ApiClient, namespace: str) -> Iterator[tuple[str, str]]:
    """Two pods of another user, each asking for a node's eight GPUs through a template:
    with a kernel of eight on the other node, the second waits for devices."""
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "bob-eight", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8},
                        }
                    ]
                }
            }
        },
    }
    resource.create_namespaced_resource_claim_template(
        namespace, to_model(client.V1ResourceClaimTemplate, template)
    )
    names = ("bob-1", "bob-2")
    for name in names:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "bob-eight"}],
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "command": ["sleep", "600"],
                        "resources": {"claims": [{"name": "gpus"}]},
                    }
                ],
            },
        }
        core.create_namespaced_pod(namespace, to_model(client.V1Pod, pod))
    try:
        yield names
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            resource.delete_namespaced_resource_claim_template("bob-eight", namespace)


def phase(api: client.ApiClient, namespace: str, name: str) -> str:
    pod = to_wire(api, client.CoreV1Api(api).read_namespaced_pod(name, namespace))
    return str((pod.get("status") or {}).get("phase"))


def test_an_idle_gpu_kernel_leaves_its_pod_and_its_next_cell_says_so(
    api: client.ApiClient, namespace: str, published: SimulatedCluster, idle_server: Server
) -> None:
    """Idle release on Kubernetes: the idle kernel's claim is released and its pod stopped,
    so another user's pod that waited for the devices gets them; the kernel stays open on
    the server without devices, and its next cell says, in one line, that it was released
    after the idle timeout and how to start it again on the same devices. A cell running
    longer than the idle timeout keeps the pod."""
    server = idle_server
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x8", "path": "work"})["id"]
    pod = running_kernel_pod(api, namespace, kernel)
    name = pod["metadata"]["name"]
    claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    sleeper = "import time; time.sleep(12); print(6 * 7)"
    with contextlib.ExitStack() as stack:

        async def busy_while_bob_comes() -> list[str]:
            # the cell runs while bob's pods are made: the kernel is busy, never idle. The
            # kernel is idle from its start, so the cell must start (and the extension see
            # it running) well within the 8 s before anything slow happens here: making
            # bob's pods blocks this loop, and the cell's request goes only when it runs.
            cell = asyncio.create_task(execute(server, kernel, sleeper))
            await asyncio.to_thread(
                wait_for,
                "the extension to see the cell running",
                lambda: [c["busy"] for c in claims_of(server, kernel)] == [True],
            )
            bobs = stack.enter_context(other_users_pods(api, namespace))
            waiting = await asyncio.to_thread(
                wait_for,
                "one of bob's pods to run and the other to wait",
                lambda: (
                    [n for n in bobs if phase(api, namespace, n) == "Pending"]
                    if sorted(phase(api, namespace, n) for n in bobs) == ["Pending", "Running"]
                    else None
                ),
            )
            assert await cell == "42\n"
            return list(waiting)

        [waiting] = asyncio.run(busy_while_bob_comes())
        assert not gone(core.read_namespaced_pod, name, namespace)  # busy: never idle
        wait_for(
            "the idle kernel's pod to go", lambda: gone(core.read_namespaced_pod, name, namespace)
        )
        wait_for(
            "its claim's deletion",
            lambda: gone(resource.read_namespaced_resource_claim, claim, namespace),
        )
        wait_for(
            "bob's waiting pod to get the devices",
            lambda: phase(api, namespace, waiting) == "Running",
        )
    # the kernel is still there, on the server; its next cell says what happened
    moved(server, kernel, "is back on the server")
    assert [k["id"] for k in server.call("GET", "/api/kernels")] == [kernel]
    assert kernel_pods(api, namespace, kernel) == []
    printed = asyncio.run(execute(server, kernel, "print('next')"))
    note, rest = printed.split("\n", 1)
    assert note == (
        f"dra: this kernel's pod with gpu=8, model='NVIDIA H200' was stopped and its claim {claim} "
        "released (idle for 8 s), so its variables are gone; dra.request(gpu=8, "
        "model='NVIDIA H200', restart=True) starts it again on such devices (in JupyterLab: "
        "Restart kernel with its devices)"
    ), printed
    assert rest == "next\n"
    assert asyncio.run(execute(server, kernel, "print('once')")) == "once\n"  # said once
    # the one button: restart-with-claims starts it again in a pod with those devices
    server.call("POST", f"/dra/api/kernels/{kernel}/restart-with-claims")
    running_kernel_pod(api, namespace, kernel)
    server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


def test_restart_with_claims_of_a_kernel_without_devices_says_what_to_do(
    published: SimulatedCluster, server: Server
) -> None:
    kernel = start_cpu_kernel(server)
    with pytest.raises(RefusedError) as raised:
        server.call("POST", f"/dra/api/kernels/{kernel}/restart-with-claims")
    assert raised.value.code == 400
    message = raised.value.message
    assert message == (
        f"kernel {kernel}: it has no devices to restart with; request some first "
        "(dra.request(gpu=1, restart=True) in the notebook, or the Devices panel)"
    )
    server.call("DELETE", f"/api/kernels/{kernel}")

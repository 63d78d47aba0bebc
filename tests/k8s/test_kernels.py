"""GPU kernels on Kubernetes: a real jupyter_server starts a kernel from a kernel spec whose
provisioner is ``dra-kubernetes`` (dra_jupyter/kube/kernels/provisioner.py), through its REST
API. The kernel runs in a pod of its own with a claim made from a ResourceClaimTemplate,
allocated by the real kube-scheduler and run by the test environment's stand-in kubelet (the
``pod_runner`` fixture), which gives it the devices' environment as the DRA driver would; the
server reaches it at the pod's IP. Shutting the kernel down deletes the pod, and with it the
claim, the Secret of its connection and the template.

Why on the stand-in kubelet, not the real node: these kernels are placed on the session's two
simulated nodes (gpu-node-1/2 of h200-8x: their names, devices and counts), which no real
kubelet serves; the same kernel on the real node is tests/k8s/test_node_kernels.py's."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.errors import ClusterError
from dra_jupyter.hub.choices import TIMES
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.kernels import boot as kernelboot
from dra_jupyter.kube.kernels.pods import (
    TAIL_BYTES,
    Ending,
    KernelPods,
    KernelPodSpec,
    connection_secret,
    ending,
    kernel_pod,
    kernel_template,
    last_lines,
)
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.types import Owner, label_value
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import (
    IMAGE,
    RefusedError,
    Server,
    execute,
    gone,
    kernel_pods,
    running_pod,
    running_server,
    serving,
)
from tests.k8s.podrunner import PodRunner


def test_a_gpu_kernel_runs_in_its_own_pod_with_its_claim_and_goes_with_it(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    specs = server.call("GET", "/api/kernelspecs")["kernelspecs"]
    shown = specs["dra-h200-x1"]["spec"]["display_name"]
    assert shown == f"Python 3 \u00b7 1{TIMES} NVIDIA H200 (140.4 GiB)"  # from the choices
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})["id"]
    [pod] = kernel_pods(api, namespace, kernel)
    name = pod["metadata"]["name"]
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["resourceClaims"] == [{"name": "dra", "resourceClaimTemplateName": name}]
    assert pod["spec"]["containers"][0]["image"] == IMAGE
    assert pod["spec"]["containers"][0]["workingDir"] == str(server.root / "work")
    assert pod["metadata"]["labels"]["dra-jupyter/component"] == "kernel"
    # the claim: made from the template, allocated by kube-scheduler, one H200
    [status] = pod["status"]["resourceClaimStatuses"]
    resource = client.ResourceV1Api(api)
    claim = to_wire(
        api, resource.read_namespaced_resource_claim(status["resourceClaimName"], namespace)
    )
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert claim["metadata"]["labels"]["dra-jupyter/kernel"] == kernel
    slices = [to_wire(api, s) for s in resource.list_resource_slice().items]
    [device] = [
        d
        for s in slices
        if s["spec"]["pool"]["name"] == result["pool"]
        for d in s["spec"]["devices"]
        if d["name"] == result["device"]
    ]
    assert "H200" in device["attributes"]["productName"]["string"]
    # the server extension lists it as the kernel's claim (dra.claims(), the Devices panel)
    [listed] = server.call("GET", "/dra/api/claims")["claims"]
    assert (listed["name"], listed["kernel_id"]) == (status["resourceClaimName"], kernel)
    assert listed["devices"] == [f"{result['driver']}/{result['pool']}/{result['device']}"]
    # the kernel runs there and sees its device, as the DRA driver would give it
    code = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['HOSTNAME'], os.getcwd())"
    )
    printed = asyncio.run(execute(server, kernel, code))
    uuid_ = device["attributes"]["uuid"]["string"]
    assert printed == f"{uuid_} {name} {server.root / 'work'}\n"
    # the connection's key is in the Secret only: not in the pod, its annotations or logs
    connection = json.loads((server.runtime / f"kernel-{kernel}.json").read_text())
    assert connection["ip"] == "127.0.0.1"  # the pod's IP, in the test environment
    assert connection["key"] not in json.dumps(pod)
    core = client.CoreV1Api(api)
    assert connection["key"] not in core.read_namespaced_pod_log(name, namespace)
    # shut down: the pod, its claim, the Secret and the template are deleted
    server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("the kernel pod's deletion", lambda: gone(core.read_namespaced_pod, name, namespace))
    wait_for(
        "the claim's deletion",
        lambda: gone(
            resource.read_namespaced_resource_claim, status["resourceClaimName"], namespace
        ),
    )
    assert gone(resource.read_namespaced_resource_claim_template, name, namespace)
    wait_for(  # the garbage collector's: it was the pod's
        "the Secret's deletion", lambda: gone(core.read_namespaced_secret, name, namespace)
    )


@pytest.mark.pure
def test_the_kernel_pod_reads_its_connection_from_the_secret() -> None:
    spec = KernelPodSpec(
        name="kernel-1",
        namespace="team-a",
        image="img:1",
        argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        user="alice@example.org",
        kernel_id="0123-abcd",
        request={"gpu": 1},
        env={"LANG": "C.UTF-8"},
        working_dir="/home/jovyan/work",
        service_account="notebook",
    )
    pod = kernel_pod(spec)
    [container] = pod["spec"]["containers"]
    assert container["command"] == [
        "python3", "-m", "dra_jupyter.kube.kernels.boot",
        "python", "-m", "ipykernel_launcher", "-f", "{connection_file}",
    ]  # fmt: skip
    assert container["env"] == [
        {"name": "LANG", "value": "C.UTF-8"},
        {
            "name": "DRA_JUPYTER_CONNECTION",
            "valueFrom": {"secretKeyRef": {"name": "kernel-1", "key": "connection.json"}},
        },
        {"name": "DRA_JUPYTER_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    assert container["resources"] == {"claims": [{"name": "dra"}]}
    assert container["workingDir"] == "/home/jovyan/work"
    assert pod["spec"]["serviceAccountName"] == "notebook"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert "annotations" not in pod["metadata"]
    template = kernel_template(spec)
    assert template["spec"]["metadata"]["labels"] == {
        "dra-jupyter/user": label_value("alice@example.org"),
        "dra-jupyter/kernel": "0123-abcd",
        "dra-jupyter/component": "kernel",
    }
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    assert "dra-jupyter/holder" not in template["spec"]["metadata"]["annotations"]
    held = kernel_template(replace(spec, owner=Owner("alice", "host-1", 42, 7, "0123-abcd")))
    holder = json.loads(held["spec"]["metadata"]["annotations"]["dra-jupyter/holder"])
    assert holder == {"host": "host-1", "pid": 42, "start_time": 7}  # the server's process
    secret = connection_secret(spec, '{"key": "k"}')
    assert secret["stringData"] == {"connection.json": '{"key": "k"}'}
    cpu = kernel_pod(KernelPodSpec("k", "ns", "img", ["ipython"], "bob", "k2"))
    assert "resourceClaims" not in cpu["spec"]
    assert "resources" not in cpu["spec"]["containers"][0]


@pytest.mark.pure
def test_kernelboot_writes_the_connection_for_the_kernel_alone(tmp_path: Path) -> None:
    environ = {
        "DRA_JUPYTER_CONNECTION": json.dumps({"key": "secret", "shell_port": 1}),
        "DRA_JUPYTER_POD_IP": "10.1.2.3",
        "OTHER": "x",
    }
    path = kernelboot.write_connection(environ, tmp_path)
    assert json.loads(path.read_text()) == {"key": "secret", "shell_port": 1, "ip": "10.1.2.3"}
    assert path.stat().st_mode & 0o777 == 0o600
    assert "DRA_JUPYTER_CONNECTION" not in environ  # the kernel's children never see it
    assert kernelboot.kernel_argv(["k", "-f", "{connection_file}"], path) == ["k", "-f", str(path)]
    with pytest.raises(SystemExit, match="DRA_JUPYTER_CONNECTION is not set"):
        kernelboot.write_connection({}, tmp_path)


@pytest.mark.pure
def test_how_a_kernel_pod_ended() -> None:
    assert ending({"status": {"phase": "Running"}}) is None
    killed = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        }
    }
    assert ending(killed) == Ending(137, "OOMKilled (exit code 137)")
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "device taint"}}
    assert ending(evicted) == Ending(None, "Evicted: device taint")


def test_a_kernel_pod_that_ends_releases_its_claim_and_the_kernel_restarts_in_a_new_one(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    """Pod endings: a kernel that dies (exit code 3) and a kernel pod deleted from outside
    (killed): its claim is deleted, the reason is in the server's log, and jupyter_server's
    restarter starts the kernel again in a new pod with a new claim."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    kernel = server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})["id"]
    [first] = kernel_pods(api, namespace, kernel)
    name = first["metadata"]["name"]
    claim = first["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    asyncio.run(execute(server, kernel, "import os; os._exit(3)", answer=False))
    second = wait_for(
        "the kernel in a new pod", lambda: running_pod(api, namespace, kernel, not_=name)
    )
    wait_for("the first pod to go", lambda: gone(core.read_namespaced_pod, name, namespace))
    wait_for(
        "its claim to go",
        lambda: gone(resource.read_namespaced_resource_claim, claim, namespace),
    )
    serving(server, kernel, second)
    log = (server.root.parent / "server.log").read_text()
    assert f"kernel {kernel}: pod {name} ended: Error (exit code 3)" in log
    assert asyncio.run(execute(server, kernel, "print('back')")) == "back\n"
    core.delete_namespaced_pod(second, namespace, grace_period_seconds=0)  # killed
    third = wait_for(
        "the kernel in a third pod", lambda: running_pod(api, namespace, kernel, not_=second)
    )
    serving(server, kernel, third)
    assert asyncio.run(execute(server, kernel, "print('again')")) == "again\n"
    server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


def test_a_kernel_that_cannot_be_placed_says_why_and_leaves_nothing(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    """Both nodes' eight GPUs held by others: a kernel of eight is not placed within its
    start timeout; the start fails with the scheduler's reason and our explain, and its
    pod, claim, template and Secret are deleted."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    held = [
        server.call("POST", "/api/kernels", {"name": "dra-h200-x8", "path": "work"})["id"]
        for _ in range(2)
    ]
    with pytest.raises(RefusedError) as raised:
        server.call("POST", "/api/kernels", {"name": "dra-busy", "path": "work"})
    assert raised.value.code == 409  # AllocationError's status: busy
    message = raised.value.message
    assert re.match(
        r"kernel pod kernel-\S+ was not scheduled within 10 s: 0/\d+ nodes are available", message
    ), message
    allocator = "\ndra-jupyter's allocator on the cluster's slices:\nnot now: the devices it"
    assert allocator in message, message
    for kernel in held:
        server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: core.list_namespaced_pod(namespace).items == [])
    wait_for(
        "no claim left", lambda: resource.list_namespaced_resource_claim(namespace).items == []
    )
    assert resource.list_namespaced_resource_claim_template(namespace).items == []
    wait_for(
        "no connection Secret left",
        lambda: (
            core.list_namespaced_secret(
                namespace, label_selector="dra-jupyter/component=kernel"
            ).items
            == []
        ),
    )


FAILING = "dra-test: this kernel cannot start here"
FAILING_ARGV = [
    "python",
    "-c",
    f"import sys; print('starting', flush=True); sys.exit({FAILING!r})",
]


def test_a_kernel_pod_that_ended_before_it_ran_fails_the_start_with_its_last_lines(
    api: client.ApiClient, namespace: str, published: SimulatedCluster, pod_runner: PodRunner
) -> None:
    """The start's error (what jupyter_server answers the kernel's start with) when the pod
    ended before the provisioner saw it run: its ending, then its last lines."""
    pods = KernelPods(api, namespace)
    spec = KernelPodSpec(
        "kernel-fails", namespace, IMAGE, FAILING_ARGV, "alice@example.org", "k-fails"
    )
    with pod_runner.serving(namespace):
        pods.create(spec, json.dumps({"key": "k", "shell_port": 1}))
        wait_for(
            "the pod to fail",
            lambda: (pods.pod(spec.name) or {}).get("status", {}).get("phase") == "Failed",
        )
        with pytest.raises(ClusterError) as raised:
            pods.wait_running(spec.name, 10)
    pods.delete(spec.name)
    assert str(raised.value) == (
        "kernel pod kernel-fails ended before the kernel started: Error (exit code 1); its "
        f"last lines:\n  starting\n  {FAILING}"
    )


@pytest.mark.pure
def test_what_a_failed_pod_said_last() -> None:
    assert last_lines("a\nb\n\n") == "a\nb"
    assert last_lines("", "OOM\n") == "OOM"  # no log: its termination message
    cut = "x" * 10 + "\n" + "y" * TAIL_BYTES
    assert last_lines(cut) == "y" * TAIL_BYTES  # the first line, cut by the limit, left out
    assert last_lines("\n".join(str(n) for n in range(30))).splitlines()[0] == "10"
    said = Ending(1, "Error (exit code 1)", "boom\nbang")
    assert str(said) == "Error (exit code 1); its last lines:\n  boom\n  bang"
    assert str(Ending(None, "Evicted")) == "Evicted"


def test_a_kernel_pod_that_fails_says_its_last_lines_and_leaves_nothing_once_given_up(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    tmp_path: Path,
    pod_runner: PodRunner,
) -> None:
    """A kernel whose command fails at once with a line on stderr: that line is in the
    server's log and in the kernel's error (the start's, when its pod ends before it runs),
    and once jupyter_server's restarter gives up, nothing of the kernel is left: no pod, no
    claim template, no Secret, no connection file."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    with running_server(
        cluster,
        api,
        namespace,
        tmp_path,
        pod_runner,
        idle_timeout=0,
        argvs={"dra-failing": FAILING_ARGV},
        config="c.KernelRestarter.restart_limit = 1\n",
    ) as server:
        log = server.root.parent / "server.log"
        try:
            server.call("POST", "/api/kernels", {"name": "dra-failing", "path": "work"})
        except RefusedError as refused:  # its pod ended before it ran: the start says why
            assert FAILING in refused.message, refused.message
            assert "exit code 1" in refused.message, refused.message
        else:  # it ran for a moment: the restarter starts it again, then gives up
            wait_for("the restarter to give up", lambda: "restart failed" in log.read_text())
        text = log.read_text()
        assert re.search(r"pod kernel-\S+ ended.*: Error \(exit code 1\)", text), text[-3000:]
        assert FAILING in text, text[-3000:]
        assert "starting" in text  # the lines before it too
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
            lambda: (
                core.list_namespaced_secret(namespace, label_selector=kernel_objects).items == []
            ),
        )
        wait_for(
            "no connection file left",
            lambda: not list(server.runtime.glob("kernel-*.json")),
        )

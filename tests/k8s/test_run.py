"""dra.run against the real control plane: the claim is made, the pod is placed by
kube-scheduler and reports the devices of the claim's allocation; on the simulated nodes
no kubelet runs it, so the run stops at "waiting for the node to start the pod" (cancel
cleans up); on the test run's real node (:mod:`tests.k8s.nodefixtures`) it runs, of the
kernel image, and ends. An unschedulable pod reports the scheduler's reason and our explain,
and leaves nothing behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.api import Session
from dra_jupyter.errors import AllocationError, InvalidInputError
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.runs import jobs
from dra_jupyter.kube.runs.podrun import WAITING, PodRun
from dra_jupyter.kube.runs.run import pod_command
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.settings import Settings
from dra_jupyter.types.runs import Run
from tests.k8s import kernelimage
from tests.k8s import node as real_node
from tests.k8s.conftest import wait_for
from tests.k8s.nodefixtures import needs_root
from tests.k8s.test_backend import session
from tests.k8s.test_pods import IMAGE, ON_SIMULATED
from tests.k8s.test_real_node import device_uuids


def pod_exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def train() -> None:
    print("training")


@pytest.mark.pure
def test_commands_become_the_containers_argv() -> None:
    assert pod_command(None) == []
    assert pod_command("nvidia-smi -L") == ["sh", "-c", "nvidia-smi -L"]
    assert pod_command(["python", "train.py"]) == ["python", "train.py"]
    argv = pod_command(train)
    assert argv[:2] == ["python", "-c"]
    assert argv[2] == 'def train() -> None:\n    print("training")\n\ntrain()\n'
    with pytest.raises(InvalidInputError, match="pass a named function"):
        pod_command(lambda: None)


def test_run_needs_the_kubernetes_backend_and_an_image(
    api: client.ApiClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    local = Session(Settings(ledger=tmp_path / "ledger.sqlite", inventory="h200-8x"))
    # one machine runs in the background (tests/local/test_runs.py): a pod's image is refused
    with pytest.raises(InvalidInputError, match=r"^dra\.run: image= applies to pods on Kube"):
        local.run("true", gpu=1, image="python:3.12")
    with pytest.raises(InvalidInputError, match=r"^dra\.run: no image for the pod; pass image="):
        session(kubeconfig, namespace).run("true", gpu=1)
    assert ClaimClient(api, namespace).list() == []


def test_a_run_is_placed_and_reports_its_claims_devices(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    run = alice.run(
        "nvidia-smi -L",
        gpu=2,
        same="pcieRoot",
        name="run-a",
        timeout=90,
        start_timeout=0,
        node_selector=ON_SIMULATED,
    )
    assert isinstance(run, PodRun)  # dra.run on Kubernetes: a pod
    assert run.state == WAITING
    assert run.node in published.node_names
    stored = ClaimClient(api, namespace).get(run.claim_name)
    assert stored is not None
    results = stored["status"]["allocation"]["devices"]["results"]
    assert run.devices == [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]
    assert len(run.devices) == 2
    assert run.claim is not None and run.claim.state == "reserved"
    pod = to_wire(api, client.CoreV1Api(api).read_namespaced_pod("run-a", namespace))
    assert pod["spec"]["containers"][0]["command"] == ["sh", "-c", "nvidia-smi -L"]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "claim-0", "resourceClaimName": run.claim_name}
    ]
    assert pod["metadata"]["labels"] == {
        "dra-jupyter/user": "alice",
        "dra-jupyter/kernel": "k-1",
        "dra-jupyter/component": "pod-run",
    }
    # the shape of every backend's run: its status, with a row for its one pod
    assert isinstance(run, Run)
    status = run.status
    assert (status.name, status.phase, status.launcher, status.message) == (
        "run-a",
        "Pending",
        "Pod",
        WAITING,
    )
    assert [(p.rank, p.name, p.node, p.devices) for p in status.processes] == [
        (0, "run-a", run.node, tuple(run.devices))
    ]
    assert (status.devices, status.claims) == (tuple(run.devices), (run.claim_name,))
    assert status.command == ("sh", "-c", "nvidia-smi -L")
    assert run.wait(timeout=0).phase == "Pending"  # not started: still there
    assert run.logs() == ""
    with pytest.raises(InvalidInputError, match=r"^run run-a: rank=1: a pod's run has rank 0"):
        run.logs(rank=1)
    # found again by its labels, from a new session (a new kernel): dra.runs(), %dra runs
    again = session(kubeconfig, namespace, image=IMAGE)
    [found] = again.runs()
    assert (found.name, found.status.phase, found.status.devices) == (
        "run-a",
        "Pending",
        tuple(run.devices),
    )
    assert session(kubeconfig, namespace, user="bob", image=IMAGE).runs() == []
    run.cancel()
    assert run.state == "cancelled"
    assert run.status.phase == "Cancelled"
    assert not pod_exists(api, namespace, "run-a")
    wait_for(
        "the claim's deletion", lambda: ClaimClient(api, namespace).get(run.claim_name) is None
    )


def test_an_unschedulable_run_reports_the_schedulers_reason_and_leaves_nothing(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    with pytest.raises(AllocationError) as raised:
        alice.run(
            "true",
            gpu=1,
            name="run-nowhere",
            timeout=20,
            start_timeout=0,
            node_selector={"dra-jupyter/inventory": "no-such-inventory"},
        )
    message = str(raised.value)
    assert re.match(
        r"dra\.run: pod run-nowhere was not scheduled within 20 s: 0/(\d+) nodes are available: "
        r"\1 node\(s\) didn't match Pod's node affinity/selector",
        message,
    ), message
    assert "\ndra-jupyter's allocator on the cluster's slices:\n" in message
    assert not pod_exists(api, namespace, "run-nowhere")
    assert ClaimClient(api, namespace).list() == []


def report_devices() -> None:
    import os  # noqa: PLC0415 (the function's source is the pod's program)

    print("devices", os.environ["CUDA_VISIBLE_DEVICES"])


@needs_root
def test_an_ended_pod_run_is_kept_a_jobs_ttl_then_deleted_with_its_claim(
    node: real_node.Node,
    node_api: client.ApiClient,
    node_kubeconfig: Path,
    node_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Job's pods go after its ``ttlSecondsAfterFinished``; a bare pod has no such field,
    so the next listing of the runs deletes an ended pod run (and its claim, where still
    there) once it is as old: it is not left behind for ever (issue 42, item 16). The pod runs
    on the real node, of the kernel image: its output is what the kubelet logged, its devices
    the driver's through CDI."""
    api, kubeconfig, namespace = node_api, node_kubeconfig, node_namespace
    alice = session(kubeconfig, namespace, image=kernelimage.KERNEL)
    run = alice.run(report_devices, gpu=1, name="run-ttl", start_timeout=0)
    assert isinstance(run, PodRun)
    core = client.CoreV1Api(api)
    pod = to_wire(api, core.read_namespaced_pod("run-ttl", namespace))
    [container] = pod["spec"]["containers"]
    assert (container["image"], container["imagePullPolicy"]) == (
        kernelimage.KERNEL,
        "IfNotPresent",
    )

    def succeeded() -> bool:
        status = core.read_namespaced_pod("run-ttl", namespace).status
        if status is not None and status.phase == "Failed":
            raise AssertionError(f"the run failed: {status}")
        return status is not None and status.phase == "Succeeded"

    wait_for("the pod to succeed on the real node", lambda: succeeded() or None, timeout=120)
    assert run.node == node.name
    [device] = run.devices
    _, pool, name = device.split("/")
    assert run.logs() == f"devices {device_uuids(node)[f'{pool}/{name}']}\n"
    # within the TTL: listed, with its pod (so its logs)
    [kept] = session(kubeconfig, namespace, image=kernelimage.KERNEL).runs()
    assert (kept.name, kept.status.phase) == ("run-ttl", "Succeeded")
    assert pod_exists(api, namespace, "run-ttl")
    monkeypatch.setattr(jobs, "TTL_S", 0)
    assert session(kubeconfig, namespace, image=kernelimage.KERNEL).runs() == []
    assert not pod_exists(api, namespace, "run-ttl")
    wait_for(
        "the claim's deletion", lambda: ClaimClient(api, namespace).get(run.claim_name) is None
    )

"""The stand-in kubelet (tests/k8s/podrunner.py) against the real control plane: a pod with a
claim runs with the devices' environment, ends Succeeded or Failed with its exit code,
restarts per its restartPolicy, serves its logs through the API server's pods/log (what
``dra.run`` streams), and a pod being deleted is stopped and deleted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.runs.run import Run as PodRun
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.podrunner import PodRunner, claim_names, device_results, expand, field_value
from tests.k8s.test_backend import session
from tests.k8s.test_pods import ON_SIMULATED

IMAGE = "dra-jupyter-test/never-pulled:0"  # the stand-in runs the command, pulls nothing


@pytest.mark.pure
def test_variables_expand_as_kubernetes_does() -> None:
    env = {"A": "1", "B": "x y"}
    assert expand("$(A)-$(B)", env) == "1-x y"
    assert expand("$(C) $$(A) $A", env) == "$(C) $(A) $A"


@pytest.mark.pure
def test_the_downward_api_and_the_claims_of_a_pod() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
        "spec": {
            "nodeName": "n1",
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "own", "resourceClaimName": "mine"},
                {"name": "later", "resourceClaimTemplateName": "t2"},
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]},
    }
    assert field_value(pod, "status.podIP") == "127.0.0.1"
    assert field_value(pod, "metadata.labels['a']") == "b"
    assert field_value(pod, "spec.nodeName") == "n1"
    with pytest.raises(ValueError, match="not simulated"):
        field_value(pod, "status.phase")
    assert claim_names(pod) == {"gpu": "p-gpu-x", "own": "mine"}
    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "device": "gpu-0"},
                        {"request": "big/opt-1", "device": "gpu-1"},
                    ]
                }
            }
        }
    }
    every = {"resources": {"claims": [{"name": "gpu"}]}}
    one = {"resources": {"claims": [{"name": "gpu", "request": "big"}]}}
    assert [r["device"] for r in device_results(pod, every, {"gpu": claim})] == [
        "gpu-0",
        "gpu-1",
    ]
    assert [r["device"] for r in device_results(pod, one, {"gpu": claim})] == ["gpu-1"]


def pod_with_claim(
    name: str, claim: str | None, command: list[str], restart: str = "Never"
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "work", "image": IMAGE, "command": command}
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [container],
        "nodeSelector": ON_SIMULATED,
        "terminationGracePeriodSeconds": 2,
    }
    if claim:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    return dict(to_wire(api, pod).get("status") or {})


def ended(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    now = status(api, namespace, name)
    return now if now.get("phase") in ("Succeeded", "Failed") else None


def test_a_pod_with_a_claim_runs_with_its_devices_environment_and_serves_its_logs(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
) -> None:
    core = client.CoreV1Api(api)
    claims = ClaimClient(api, namespace)
    claims.create(build_claim("two", {"gpu": 2}, namespace=namespace))
    script = (
        "import os; print('devices', os.environ['CUDA_VISIBLE_DEVICES']); "
        "print('pod', os.environ['HOSTNAME'], os.environ['GREETING'])"
    )
    pod = pod_with_claim("reader", "two", [sys.executable, "-c", script])
    pod["spec"]["containers"][0]["env"] = [
        {"name": "WHO", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "hello $(WHO)"},
    ]
    with pod_runner.serving(namespace):
        core.create_namespaced_pod(namespace, to_model(client.V1Pod, pod))
        done = wait_for("the pod to end", lambda: ended(api, namespace, "reader"))
        assert done["phase"] == "Succeeded", done
        assert done["podIP"] == "127.0.0.1"
        [container] = done["containerStatuses"]
        assert container["state"]["terminated"]["exitCode"] == 0
        assert container["state"]["terminated"]["reason"] == "Completed"
        slices = [to_wire(api, s) for s in client.ResourceV1Api(api).list_resource_slice().items]
        uuids = {
            d["attributes"]["uuid"]["string"]
            for s in slices
            for d in s["spec"].get("devices") or ()  # other tests' counters-only slices too
            if "uuid" in (d.get("attributes") or {})
        }
        log = core.read_namespaced_pod_log("reader", namespace)
        first, _ = log.split("\n", 1)
        listed = first.removeprefix("devices ").split(",")
        assert len(set(listed)) == 2, log  # the claim's two GPUs, by UUID
        assert set(listed) <= uuids, log
        wanted = ",".join(listed)
        # the API server's pods/log, through the stand-in's kubelet endpoint
        assert log == f"devices {wanted}\npod reader hello reader\n"
        assert core.read_namespaced_pod_log("reader", namespace, tail_lines=1) == (
            "pod reader hello reader\n"
        )


def test_exit_codes_restarts_and_deletion(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
) -> None:
    core = client.CoreV1Api(api)
    flaky = "import pathlib, sys; p = pathlib.Path('tries'); n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); print('try', n); sys.exit(0 if n else 3)"  # noqa: E501
    with pod_runner.serving(namespace):
        core.create_namespaced_pod(
            namespace,
            to_model(client.V1Pod, pod_with_claim("fails", None, [sys.executable, "-c", "1/0"])),
        )
        core.create_namespaced_pod(
            namespace,
            to_model(
                client.V1Pod,
                pod_with_claim("flaky", None, [sys.executable, "-c", flaky], "OnFailure"),
            ),
        )
        core.create_namespaced_pod(
            namespace,
            to_model(client.V1Pod, pod_with_claim("nothing", None, ["/no/such/program"])),
        )
        core.create_namespaced_pod(
            namespace,
            to_model(client.V1Pod, pod_with_claim("sleeper", None, ["sleep", "600"])),
        )
        failed = wait_for("a failure", lambda: ended(api, namespace, "fails"))
        assert failed["phase"] == "Failed"
        assert failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
        assert failed["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"
        flaky_done = wait_for("a restart", lambda: ended(api, namespace, "flaky"))
        assert flaky_done["phase"] == "Succeeded"
        [container] = flaky_done["containerStatuses"]
        assert container["restartCount"] == 1
        assert container["lastState"]["terminated"]["exitCode"] == 3
        assert core.read_namespaced_pod_log("flaky", namespace) == "try 1\n"
        assert core.read_namespaced_pod_log("flaky", namespace, previous=True) == "try 0\n"
        missing = wait_for("a start error", lambda: ended(api, namespace, "nothing"))
        assert missing["phase"] == "Failed"
        terminated = missing["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
        assert "/no/such/program" in terminated["message"]
        running = wait_for(
            "the sleeper to run",
            lambda: (s := status(api, namespace, "sleeper")).get("phase") == "Running" and s,
        )
        assert running["containerStatuses"][0]["state"]["running"]["startedAt"]
        core.delete_namespaced_pod("sleeper", namespace)  # its grace period: 2 s

        def deleted() -> bool:
            try:
                core.read_namespaced_pod("sleeper", namespace)
            except ApiException as error:
                if error.status == 404:
                    return True
                raise
            return False

        wait_for("the deletion to finish", deleted)
        assert all(c.pod != "sleeper" for c in pod_runner.pods.values())


def test_dra_run_streams_the_logs_of_a_pod_that_runs_and_releases_its_claim(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    script = "import os; print('on', os.environ['CUDA_VISIBLE_DEVICES'].count(',') + 1, 'GPUs')"
    with pod_runner.serving(namespace):
        run = alice.run(
            [sys.executable, "-c", script],
            gpu=2,
            name="run-e2e",
            timeout=90,
            start_timeout=90,
            node_selector=ON_SIMULATED,
        )
    assert isinstance(run, PodRun)  # dra.run on Kubernetes: a pod
    assert run.state == "succeeded"
    assert capsys.readouterr().out == "on 2 GPUs\n"
    wait_for("the claim's deletion", lambda: ClaimClient(api, namespace).list() == [])

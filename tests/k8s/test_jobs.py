"""``dra.run(..., nodes=N)``: a Job of N pods on the real control plane (kube-apiserver,
kube-controller-manager's Job, resourceclaim and garbage-collector controllers,
kube-scheduler), whose pods the stand-in kubelet really runs: their ranks and rendezvous
environment, their logs by rank, a failing rank that fails the Job at once, cancel, and
the runs found again from a new session.

Why on the stand-in kubelet, not the real node: the ranks of a run of several pods find rank 0
by its cluster DNS name (``MASTER_ADDR=<run>-0.<run>``), and the test environment has one node
and no cluster DNS."""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.api import Session
from dra_jupyter.backends import open_runs
from dra_jupyter.errors import AllocationError, InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.connect import api_client, to_wire
from dra_jupyter.kube.publish import Publisher
from dra_jupyter.kube.runs import gangs
from dra_jupyter.kube.runs.jobrun import JobRun
from dra_jupyter.kube.runs.jobs import (
    INDEX_ANNOTATION,
    JobSpec,
    claim_template,
    devices_per_pod,
    failure_policy,
    job,
    placement,
    rendezvous_service,
)
from dra_jupyter.kube.runs.jobstatus import run_status
from dra_jupyter.kube.simulate import SimulatedCluster, node_object, slice_for_node
from dra_jupyter.model.objects import Wire
from dra_jupyter.types.runs import Run, RunStatus
from tests.hub.test_kubespawner import apply_rbac, service_account_kubeconfig
from tests.k8s import testenv
from tests.k8s.conftest import INVENTORY, wait_for
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_backend import session
from tests.k8s.test_pods import IMAGE, ON_SIMULATED
from tests.k8s.test_publish import unpublish

CLAIM = {
    "devices": {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
    }
}

# What each rank prints: its rank, the world, the rendezvous and its devices.
REPORT = (
    "import os\n"
    "print('rank', os.environ['RANK'], 'node_rank', os.environ['NODE_RANK'], 'of', "
    "os.environ['WORLD_SIZE'], 'local', os.environ['LOCAL_WORLD_SIZE'])\n"
    "print('master', os.environ['MASTER_ADDR'] + ':' + os.environ['MASTER_PORT'])\n"
    "print('devices', len(os.environ['CUDA_VISIBLE_DEVICES'].split(',')))\n"
)


def assert_reported(run: JobRun, master: str) -> str:
    """The logs of a two-node run of :data:`REPORT`, two devices a rank: each rank's lines,
    prefixed with its rank, and rank 1's alone; ``master``: the rendezvous host. Returns
    the logs."""
    logs = run.logs()
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank} node_rank {rank} of 2 local 2\n" in logs
        assert f"[rank {rank}] master {master}:29500\n" in logs
        assert f"[rank {rank}] devices 2\n" in logs
    assert run.logs(rank=1).splitlines() == [
        "[rank 1] rank 1 node_rank 1 of 2 local 2",
        f"[rank 1] master {master}:29500",
        "[rank 1] devices 2",
    ]
    return logs


def wait_running(run: JobRun) -> None:
    """Wait until both ranks of a two-node run run with their devices; the run says so."""

    def running() -> bool:
        pods = run.status.processes
        return len(pods) == 2 and all(p.phase == "Running" and p.devices for p in pods)

    wait_for("both ranks running with their devices", running)
    assert run.status.phase == "Running"


def spec(**kw: object) -> JobSpec:
    fields: dict[str, object] = {
        "name": "train",
        "namespace": "team",
        "user": "alice@example.com",
        "image": "img",
        "argv": ["python", "train.py"],
        "claim_spec": CLAIM,
        "nodes": 2,
    }
    return JobSpec(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.mark.pure
def test_a_two_node_run_is_an_indexed_job_with_the_rendezvous_environment() -> None:
    made = job(spec(lease=3600.5, queue="team-q"))
    assert made["spec"]["completionMode"] == "Indexed"
    assert made["spec"]["completions"] == made["spec"]["parallelism"] == 2
    assert made["spec"]["activeDeadlineSeconds"] == 3601
    assert made["spec"]["ttlSecondsAfterFinished"] == 24 * 3600
    assert made["spec"]["suspend"] is True  # Kueue admits it
    assert made["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-q"
    pod = made["spec"]["template"]["spec"]
    assert pod["subdomain"] == "train"
    assert pod["restartPolicy"] == "Never"
    assert pod["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "train"}]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    assert env == {
        "MASTER_ADDR": "train-0.train",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "2",
        "RANK": index,
        "NODE_RANK": index,
        "LOCAL_WORLD_SIZE": "2",
    }
    service = rendezvous_service(spec())
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    template = claim_template(spec())
    assert "dra-jupyter/kernel" not in template["spec"]["metadata"]["labels"]
    assert template["spec"]["metadata"]["annotations"] == {"dra-jupyter/user": "alice@example.com"}


@pytest.mark.pure
def test_disruptions_are_retried_and_exit_codes_fail_the_job_unless_retries() -> None:
    ignore = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    fail = {
        "action": "FailJob",
        "onExitCodes": {"containerName": "work", "operator": "NotIn", "values": [0]},
    }
    assert failure_policy(0) == {"rules": [ignore, fail]}
    assert failure_policy(2) == {"rules": [ignore]}
    assert job(spec(retries=2))["spec"]["backoffLimit"] == 2
    single = job(spec(nodes=1))
    assert single["spec"]["completionMode"] == "NonIndexed"
    assert "subdomain" not in single["spec"]["template"]["spec"]
    assert "suspend" not in single["spec"]


@pytest.mark.pure
def test_same_holds_per_pod_for_devices_and_among_the_pods_for_node_labels() -> None:
    """A device attribute is the template's matchAttribute (each pod's claim); a node label
    is a required pod affinity among the run's pods on that topology key; the status says
    which (its launcher annotation, then the placement)."""
    per_pod = {
        **CLAIM["devices"],
        "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    }
    both = spec(claim_spec={"devices": per_pod}, same_nodes=("topology.kubernetes.io/zone",))
    made = job(both)
    pod = made["spec"]["template"]["spec"]
    assert pod["affinity"] == {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {"dra-jupyter/component": "run", "dra-jupyter/run": "train"}
                    },
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
    }
    # the pods carry the labels the selector asks for
    labels = made["spec"]["template"]["metadata"]["labels"]
    selector = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert selector[0]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert claim_template(both)["spec"]["spec"]["devices"]["constraints"] == [
        {"matchAttribute": "resource.kubernetes.io/pcieRoot"}
    ]
    said = "same pcieRoot per pod, all pods in one topology.kubernetes.io/zone"
    assert placement(both) == said
    assert made["metadata"]["annotations"]["dra-jupyter/placement"] == said
    made["metadata"]["annotations"]["dra-jupyter/launcher"] = "Indexed Job"
    status = run_status(made, [], {})
    assert status.launcher == f"Indexed Job; {said}"
    assert str(status).startswith(f"run train: Pending (Indexed Job; {said})")
    # without same=: no affinity, nothing said
    plain = job(spec())
    assert "affinity" not in plain["spec"]["template"]["spec"]
    assert "dra-jupyter/placement" not in plain["metadata"]["annotations"]
    assert placement(spec()) == ""


@pytest.mark.pure
def test_devices_per_pod_counts_the_requests() -> None:
    assert devices_per_pod(CLAIM) == 2
    first = {
        "devices": {"requests": [{"name": "a", "firstAvailable": [{"count": 4}, {"count": 8}]}]}
    }
    assert devices_per_pod(first) == 4
    every = {"devices": {"requests": [{"name": "a", "exactly": {"allocationMode": "All"}}]}}
    assert devices_per_pod(every) is None


def _pod(name: str, rank: int, **status: object) -> Wire:
    return {
        "metadata": {"name": name, "annotations": {INDEX_ANNOTATION: str(rank)}},
        "spec": {"nodeName": status.pop("node", "")},
        "status": status,
    }


@pytest.mark.pure
def test_the_status_reads_phase_reason_and_pods_from_the_job() -> None:
    job_object: Wire = {
        "metadata": {"name": "train", "annotations": {"dra-jupyter/launcher": "Indexed Job"}},
        "spec": {},
        "status": {"startTime": "2026-12-02T10:00:00Z"},
    }
    waiting = _pod(
        "train-1-x",
        1,
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "message": "0/2 nodes are available: 2 cannot allocate all claims.",
            }
        ],
    )
    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
                }
            }
        }
    }
    running = _pod(
        "train-0-y",
        0,
        node="n1",
        phase="Running",
        resourceClaimStatuses=[{"name": "devices", "resourceClaimName": "c0"}],
    )
    status = run_status(job_object, [waiting, running], {"c0": claim})
    assert (status.phase, status.launcher, status.ended) == ("Running", "Indexed Job", None)
    assert [(p.rank, p.node, p.devices) for p in status.processes] == [
        (0, "n1", ("gpu.nvidia.com/n1/gpu-0",)),
        (1, "", ()),
    ]
    assert (status.devices, status.claims, status.exit_codes) == (
        ("gpu.nvidia.com/n1/gpu-0",),
        ("c0",),
        (None, None),
    )
    assert status.processes[1].reason == "0/2 nodes are available: 2 cannot allocate all claims."
    pending = run_status(job_object, [waiting], {})
    assert (pending.phase, pending.message) == ("Pending", status.processes[1].reason)
    assert str(pending).splitlines() == [
        "run train: Pending (Indexed Job): 0/2 nodes are available: 2 cannot allocate all claims.",
        "  rank 1 train-1-x: Pending, 0 restarts",  # the run's own reason, not said twice
    ]
    failed = {
        **job_object,
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Container work for pod train-1-x failed with exit code 1",
                    "lastTransitionTime": "2026-12-02T10:05:00Z",
                }
            ]
        },
    }
    ended = run_status(failed, [], {})
    assert (ended.phase, ended.done, ended.ended) == ("Failed", True, 1796205900.0)
    assert ended.message == (
        "PodFailurePolicy: Container work for pod train-1-x failed with exit code 1"
    )
    stamp = {"deletionTimestamp": "2026-12-02T10:06:00Z"}
    deleted = {**job_object, "metadata": {**job_object["metadata"], **stamp}}
    assert run_status(deleted, [], {}).phase == "Cancelled"


def _exists(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_bad_runs_are_one_line_and_make_nothing(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    for nodes in (0, -1):
        with pytest.raises(
            InvalidInputError, match=r"^dra\.run: nodes=-?\d is not a number of pods;"
        ):
            alice.run("true", gpu=1, nodes=nodes)
    with pytest.raises(
        InvalidInputError,
        match=r"^dra\.run: queue='team' needs Kueue, which is not installed on this cluster",
    ):
        alice.run("true", gpu=1, queue="team")
    with pytest.raises(
        InvalidInputError,
        match=r"^dra\.run: same='zone' keeps the pods of a multi-node run on nodes that share "
        r"topology\.kubernetes\.io/zone; without nodes= this run is one pod: give nodes=N "
        r"\(a Job\), or leave it out$",
    ):
        alice.run("true", gpu=1, same="zone")
    with pytest.raises(
        InvalidInputError,
        match=r"^dra\.run: same='node:pcieRoot': pcieRoot is a device attribute, which "
        r"Kubernetes makes equal only among the devices of one claim \(one pod\)",
    ):
        alice.run("true", gpu=1, nodes=2, same="node:pcieRoot")
    assert client.BatchV1Api(api).list_namespaced_job(namespace).items == []
    assert client.CoreV1Api(api).list_namespaced_pod(namespace).items == []
    assert client.ResourceV1Api(api).list_namespaced_resource_claim_template(namespace).items == []


def test_a_two_node_run_reports_ranks_logs_devices_and_is_found_again(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pod_runner.serving(namespace):
        alice = session(kubeconfig, namespace, image=IMAGE)
        run = alice.run(
            [sys.executable, "-c", REPORT],
            gpu=2,
            nodes=2,
            name="ranks",
            node_selector=ON_SIMULATED,
        )
        assert isinstance(run, JobRun)
        assert isinstance(run, Run)  # one shape on every backend (dra_jupyter.types.runs)
        ended = run.wait(timeout=90)
        assert (ended.phase, ended.name, ended.where) == (
            "Succeeded",
            "ranks",
            f"namespace {namespace}",
        )
        status = run.status
        assert status.launcher == "Indexed Job (JobSet not installed); gang of 2"
        assert [(p.rank, p.phase, p.exit_code) for p in status.processes] == [
            (0, "Succeeded", 0),
            (1, "Succeeded", 0),
        ]
        assert all(p.node in published.node_names for p in status.processes)
        assert status.started is not None and status.ended is not None
        logs = assert_reported(run, "ranks-0.ranks")
        # followed after the end: every line once, into the cell
        capsys.readouterr()
        assert run.logs(follow=True) is None  # on the screen already: not shown twice
        followed = capsys.readouterr().out
        assert sorted(followed.splitlines()) == sorted(logs.splitlines())
        # the devices go back as each pod ends (its claim deleted); the Job and logs stay
        wait_for(
            "the ended pods' claims to be deleted",
            lambda: not client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items,
        )
        assert "[rank 0] devices 2\n" in run.logs(rank=0)
        # the Service for the rendezvous, owned by the Job
        service = to_wire(api, client.CoreV1Api(api).read_namespaced_service("ranks", namespace))
        assert service["spec"]["clusterIP"] == "None"
        assert service["metadata"]["ownerReferences"][0]["kind"] == "Job"
        # a new session (a new kernel) finds the run by its labels
        again = session(kubeconfig, namespace, image=IMAGE)
        assert [r.name for r in open_runs(again.settings, again.backend).runs()] == ["ranks"]
        assert [r.name for r in again.runs()] == ["ranks"]  # dra.runs()
        bob = session(kubeconfig, namespace, user="bob", image=IMAGE)
        assert open_runs(bob.settings, bob.backend).runs() == []


def test_logs_are_streamed_with_ranks_while_the_run_runs(
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pod_runner.serving(namespace):
        alice = session(kubeconfig, namespace, image=IMAGE)
        script = (
            "import time\nfor i in range(3):\n    print('step', i, flush=True)\n"
            "    time.sleep(0.5)\n"
        )
        run = alice.run(
            [sys.executable, "-c", script],
            gpu=1,
            nodes=2,
            name="steps",
            wait=True,
            node_selector=ON_SIMULATED,
        )
        assert isinstance(run, JobRun)
        assert run.status.phase == "Succeeded"
        lines = capsys.readouterr().out.splitlines()
        for rank in (0, 1):
            assert [line for line in lines if line.startswith(f"[rank {rank}]")] == [
                f"[rank {rank}] step {i}" for i in range(3)
            ]


def test_a_rank_that_exits_1_fails_the_run_without_a_retry(
    kubeconfig: Path, namespace: str, published: SimulatedCluster, pod_runner: PodRunner
) -> None:
    script = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n    print('bad data', flush=True)\n    sys.exit(1)\n"
        "time.sleep(600)\n"
    )
    with pod_runner.serving(namespace):
        alice = session(kubeconfig, namespace, image=IMAGE)
        run = alice.run(
            [sys.executable, "-c", script], gpu=1, nodes=2, name="fails", node_selector=ON_SIMULATED
        )
        assert isinstance(run, JobRun)
        assert run.wait(timeout=90).phase == "Failed"
        status = run.status
        assert status.message.startswith("PodFailurePolicy: "), status.message
        assert "exit code 1" in status.message
        failed = [p for p in status.processes if p.rank == 1]
        assert [(p.phase, p.exit_code) for p in failed] == [("Failed", 1)]  # one pod: no retry
        assert "[rank 1] bad data\n" in run.logs(rank=1)
        run.cancel()
        assert run.status.phase == "Failed"  # cancel cleans up a finished run: its outcome stays
        # the pod the Job stopped (rank 0) leaves no claim holding its device
        resource = client.ResourceV1Api(api_client(str(kubeconfig)))
        wait_for(
            "the run's claims to go",
            lambda: not resource.list_namespaced_resource_claim(namespace).items,
        )


def test_cancel_deletes_the_job_its_pods_claims_service_and_template(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    tmp_path: Path,
) -> None:
    """As a single-user server's service account (deploy/hub-rbac.yaml): what it grants is
    what a run needs."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    resource = client.ResourceV1Api(api)
    cluster_wide = apply_rbac(api, namespace)
    try:
        kubeconfig = service_account_kubeconfig(
            api, cluster, namespace, "dra-singleuser", tmp_path / "singleuser.kubeconfig"
        )
        with pod_runner.serving(namespace):
            alice = wait_for(
                "the server's Role to take effect",
                lambda: _as(kubeconfig, namespace),
            )
            run = alice.run(
                [sys.executable, "-c", "import time; time.sleep(600)"],
                gpu=1,
                nodes=2,
                name="long",
                node_selector=ON_SIMULATED,
            )
            assert isinstance(run, JobRun)
            wait_running(run)
            claims = resource.list_namespaced_resource_claim(namespace).items
            assert len(claims) == 2  # a claim per pod, from the template
            run.cancel()
            cancelled = run.status
            assert cancelled.phase == "Cancelled"

            def gone() -> bool:
                return (
                    not core.list_namespaced_pod(namespace).items
                    and not batch.list_namespaced_job(namespace).items
                    and not resource.list_namespaced_resource_claim(namespace).items
                    and not resource.list_namespaced_resource_claim_template(namespace).items
                    and not _exists(lambda: core.read_namespaced_service("long", namespace))
                )

            wait_for("the run's objects to be deleted", gone)
            assert open_runs(alice.settings, alice.backend).runs() == []
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        for kind, name in cluster_wide:
            if kind == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(name)
            else:
                rbac.delete_cluster_role(name)


def _as(kubeconfig: Path, namespace: str) -> Session | None:
    """A session on ``kubeconfig``'s credentials once they may make Jobs (None before)."""
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb="create", group="batch", resource="jobs"
            )
        )
    )
    with api_client(str(kubeconfig)) as sa:
        answer = client.AuthorizationV1Api(sa).create_self_subject_access_review(review)
    if answer.status is None or not answer.status.allowed:
        return None
    return session(kubeconfig, namespace, image=IMAGE)


def test_a_disrupted_pod_is_retried_and_not_counted(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An eviction (the API server's DisruptionTarget condition, then the pod's deletion) is
    ignored by the failure policy: the Job makes the rank again, which then succeeds. Without
    a gang (as where the cluster does not serve the Workload API): in a gang of 2 the new
    rank 0 would wait for a second pod of its group, rank 1 having ended (docs/runs.md)."""
    monkeypatch.setattr(gangs, "served", lambda api: False)
    script = (
        "import os, pathlib, sys, time\n"
        f"mark = pathlib.Path({str(tmp_path)!r}) / ('rank-' + os.environ['RANK'])\n"
        "if os.environ['RANK'] == '1' or mark.exists():\n    print('done', flush=True)\n"
        "    sys.exit(0)\n"
        "mark.touch()\nprint('first attempt', flush=True)\ntime.sleep(600)\n"
    )
    core = client.CoreV1Api(api)
    with pod_runner.serving(namespace):
        alice = session(kubeconfig, namespace, image=IMAGE)
        run = alice.run(
            [sys.executable, "-c", script],
            gpu=1,
            nodes=2,
            name="evicted",
            node_selector=ON_SIMULATED,
        )
        assert isinstance(run, JobRun)
        first = wait_for(
            "rank 0's first attempt to run",
            lambda: next(
                (p.name for p in run.status.processes if p.rank == 0 and p.phase == "Running"), None
            ),
        )
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=first, namespace=namespace))
        core.create_namespaced_pod_eviction(first, namespace, eviction)
        assert run.wait(timeout=90).phase == "Succeeded"
        ranks0 = [p for p in run.status.processes if p.rank == 0]
        assert first not in [p.name for p in ranks0]  # the evicted pod is gone
        assert [(p.phase, p.exit_code) for p in ranks0] == [("Succeeded", 0)]
        job = to_wire(api, client.BatchV1Api(api).read_namespaced_job("evicted", namespace))
        assert job["status"].get("failed", 0) == 0  # ignored, not counted
        run.cancel()
        # cancel is the clean-up of a finished Job: it stays Succeeded (issue 42, item 9:
        # it read "Cancelled (Job)"), and the Job is gone
        assert run.status.phase == "Succeeded"
        assert run.status.ended is not None
        wait_for(
            "the Job to go", lambda: not client.BatchV1Api(api).list_namespaced_job(namespace).items
        )


def test_an_unplaced_run_says_the_schedulers_reason_and_ours_then_leaves_nothing(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    nowhere = {"dra-jupyter/inventory": "no-such-inventory"}
    run = alice.run("true", gpu=1, nodes=2, name="nowhere", node_selector=nowhere)
    assert isinstance(run, JobRun)

    def waiting() -> bool:  # a gang (the session's cluster serves the Workload API)
        status = run.status
        return len(status.processes) == 2 and "node affinity/selector" in status.message

    wait_for("the scheduler's reason on the pods", waiting)
    status = run.status
    assert status.phase == "Pending"
    assert status.message.startswith("waiting as a gang of 2: 0/"), status.message
    run.cancel()
    with pytest.raises(AllocationError) as raised:
        alice.run(
            "true", gpu=1, nodes=2, name="nowhere-2", node_selector=nowhere, wait=True, timeout=10
        )
    message = str(raised.value)
    assert re.match(
        r"dra\.run: run nowhere-2 was not placed within 10 s: waiting as a gang of 2: "
        r"0/(\d+) nodes are available: "
        r"\1 node\(s\) didn't match Pod's node affinity/selector",
        message,
    ), message
    assert "\ndra-jupyter's allocator on the cluster's slices:\n" in message
    wait_for(
        "the runs' objects to be deleted",
        lambda: (
            not client.BatchV1Api(api).list_namespaced_job(namespace).items
            and not client.CoreV1Api(api).list_namespaced_pod(namespace).items
            and not client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items
        ),
    )


# Four simulated nodes of h200-8x for the zone test: one alone in each of two zones, two
# together in a third (deleted after the test: the session's cluster is shared).
ZONES = {
    "zoned-node-a1": "zone-a",
    "zoned-node-b1": "zone-b",
    "zoned-node-c1": "zone-c",
    "zoned-node-c2": "zone-c",
}
ZONE = "topology.kubernetes.io/zone"


def _zoned_nodes() -> SimulatedCluster:
    inventory = simulated.load(INVENTORY)
    [old] = inventory.nodes
    now = dt.datetime.now(dt.UTC)
    nodes, slices = [], []
    for name, zone in ZONES.items():
        node = node_object(name, "h200-8x-zoned", now)
        node["metadata"]["labels"][ZONE] = zone
        nodes.append(node)
        slices += [slice_for_node(s, old, name) for s in inventory.slices]
    return SimulatedCluster(tuple(nodes), tuple(slices), inventory.device_classes)


def test_same_zone_keeps_the_ranks_in_one_zone_or_says_why_not(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only the zoned nodes carry the zone label, so the ranks go there (no node_selector):
    two ranks of 4 GPUs, each pod's on one NUMA node, share a zone; three ranks of 8 GPUs
    cannot (no zone has three nodes, though the four have room), and the run says the
    scheduler's reason."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    Publisher(api).publish(_zoned_nodes())
    try:
        with pod_runner.serving(namespace):
            alice = session(kubeconfig, namespace, image=IMAGE)
            run = alice.run(
                [sys.executable, "-c", "import time; time.sleep(600)"],
                gpu=4,
                nodes=2,
                same=["numaNode", "zone"],
                name="zoned",
            )
            assert isinstance(run, JobRun)
            said = "same numaNode per pod, all pods in one topology.kubernetes.io/zone"
            assert f"2 pods; {said}; gang of 2)" in capsys.readouterr().err

            def running() -> RunStatus | None:  # the devices read while the pods hold them
                status = run.status
                rows = status.processes
                placed = len(rows) == 2 and all(p.phase == "Running" and p.devices for p in rows)
                return status if placed else None

            status = wait_for("both ranks running with their devices", running)
            assert status.launcher == f"Indexed Job (JobSet not installed); {said}; gang of 2"
            nodes = [p.node for p in status.processes]
            assert len(nodes) == 2 and set(nodes) <= set(ZONES), nodes
            assert len({ZONES[n] for n in nodes}) == 1, nodes  # one zone
            for row in status.processes:  # each pod's 4 GPUs on one NUMA node (0-3 or 4-7)
                indices = {int(d.rsplit("-", 1)[1]) for d in row.devices}
                assert len(indices) == 4 and len({i // 4 for i in indices}) == 1, row.devices
            run.cancel()
            with pytest.raises(AllocationError) as raised:
                alice.run(
                    [sys.executable, "-c", "import time; time.sleep(600)"],
                    gpu=8,
                    nodes=3,
                    same="zone",
                    name="zoned-3",
                    wait=True,
                    timeout=15,
                )
            message = str(raised.value)
            assert re.match(
                r"dra\.run: run zoned-3 was not placed within 15 s: waiting as a gang of 3: "
                r"0/\d+ nodes are available: "
                r".*\d+ node\(s\) didn't match pod affinity rules",
                message,
            ), message
            assert (
                "(it weighs devices only: the scheduler also keeps the run's pods on nodes that "
                "share topology.kubernetes.io/zone, as same= asked)" in message
            ), message
            wait_for(
                "the runs' pods and claims to be deleted",
                lambda: (
                    not core.list_namespaced_pod(namespace).items
                    and not resource.list_namespaced_resource_claim(namespace).items
                ),
            )
    finally:  # the session's cluster is shared: its nodes are the published fixture's only
        unpublish(api, set(ZONES))
    left = {to_wire(api, n)["metadata"]["name"] for n in core.list_node().items}
    pools = {to_wire(api, s)["spec"]["pool"]["name"] for s in resource.list_resource_slice().items}
    assert not (left | pools) & set(ZONES), (left, pools)

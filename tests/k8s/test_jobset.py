"""``dra.run(..., nodes=N)`` through JobSet: where the cluster serves ``jobset.x-k8s.io`` a run
of more than one pod is a JobSet (:mod:`dra_jupyter.kube.runs.jobsets`) around the Indexed Job of
:mod:`dra_jupyter.kube.runs.jobs`. Pure tests of the object and of the status read from it, and
real JobSet (built from the Go module proxy, :mod:`.jobset`) on a control plane of this
module's own, whose pods the stand-in kubelet runs: the ranks' rendezvous environment under
JobSet's naming, logs by rank, a failing rank, ``dra.runs()`` and cancel.

A control plane of its own: JobSet's CRD changes what ``dra.run`` makes on the cluster
that serves it, and the other tests expect Indexed Jobs."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.runs.jobrun import JobRun, launcher
from dra_jupyter.kube.runs.jobs import INDEX_ANNOTATION, JobSpec
from dra_jupyter.kube.runs.jobsets import fits, jobset, status_view
from dra_jupyter.kube.runs.jobstatus import run_status
from dra_jupyter.model.objects import Wire
from tests.k8s import jobset as jobset_env
from tests.k8s.addon import OwnCluster, own_cluster
from tests.k8s.apimetrics import open_watches, sample
from tests.k8s.fixtures import fresh_namespace, wait_for
from tests.k8s.test_backend import session
from tests.k8s.test_jobs import REPORT, assert_reported, wait_running
from tests.k8s.test_jobs import spec as job_spec
from tests.k8s.test_pods import IMAGE

GROUPS = {"jobset.x-k8s.io": "v1alpha2"}


def _hook(kind: str, path: str, group: str, resource: str) -> str:
    return (
        f"- admissionReviewVersions: [v1]\n"
        f"  clientConfig:\n"
        f"    service: {{name: webhook-service, namespace: system, path: {path}}}\n"
        f"  failurePolicy: Fail\n  name: {kind}.kb.io\n  sideEffects: None\n"
        f"  rules:\n  - {{apiGroups: ['{group}'], apiVersions: [v1], operations: [CREATE], "
        f"resources: [{resource}]}}\n"
    )


# the shape of JobSet v0.11.1's config/components/webhook/manifests.yaml
MANIFESTS = (
    "---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n"
    "metadata: {name: mutating-webhook-configuration}\nwebhooks:\n"
    + _hook("mjobset", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets")
    + _hook("mpod", "/mutate--v1-pod", "", "pods")
    + "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
    "metadata: {name: validating-webhook-configuration}\nwebhooks:\n"
    + _hook("vjobset", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets")
    + _hook("vpod", "/validate--v1-pod", "", "pods")
)


def spec(**kw: object) -> JobSpec:
    """test_jobs's two-node run, launched as a JobSet."""
    return job_spec(**{"launcher": "JobSet", **kw})


# --- pure ------------------------------------------------------------------------------------


@pytest.mark.pure
def test_jobset_is_chosen_where_served_for_more_than_one_pod_and_the_launcher_says_why() -> None:
    assert launcher(GROUPS, 2, name="train") == "JobSet"
    assert launcher({}, 2, name="train") == "Indexed Job (JobSet not installed)"
    assert launcher(GROUPS, 1, name="train") == "Job"
    assert launcher(GROUPS, 2, queue="gpus", name="train") == (
        "Indexed Job (JobSet installed, not used with a Kueue queue)"
    )
    assert launcher({"jobset.x-k8s.io": "v1"}, 2, name="train") == (
        "Indexed Job (JobSet serves v1, not v1alpha2)"
    )
    # JobSet's webhook refuses pod names beyond a DNS label: <run>-node-0-<rank>-<5 random>
    assert fits("a" * 48, 10) and not fits("a" * 48, 11) and not fits("a" * 50, 2)
    assert launcher(GROUPS, 2, name="a" * 50).startswith("Indexed Job (JobSet installed, not")


@pytest.mark.pure
def test_the_jobset_wraps_the_indexed_job_with_jobsets_dns_names_and_restarts() -> None:
    made = jobset(spec(lease=3600.5, retries=2))
    assert (made["apiVersion"], made["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert made["metadata"]["labels"] == spec().labels()  # found by them, as a Job is
    assert made["metadata"]["annotations"]["dra-jupyter/launcher"] == "JobSet"
    assert made["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert made["spec"]["failurePolicy"] == {"maxRestarts": 2}  # every rank restarts together
    assert made["spec"]["ttlSecondsAfterFinished"] == 24 * 3600
    (replicated,) = made["spec"]["replicatedJobs"]
    assert (replicated["name"], replicated["replicas"]) == ("node", 1)
    assert "metadata" not in replicated["template"]  # the Job: JobSet's labels only
    job = replicated["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == 2
    assert job["activeDeadlineSeconds"] == 3601
    assert "ttlSecondsAfterFinished" not in job and "suspend" not in job
    # within an attempt a non-zero exit fails the Job at once (the JobSet restarts it)
    rules = job["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    pod = job["template"]["spec"]
    assert job["template"]["metadata"]["labels"]["dra-jupyter/run"] == "train"
    assert pod["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "train"}]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "train-node-0-0.train"  # JobSet's Job train-node-0, rank 0
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    assert env["RANK"] == env["NODE_RANK"] == index
    assert env["WORLD_SIZE"] == "2"


def _jobset_object(**status: object) -> Wire:
    made = jobset(spec())
    made["metadata"] = {
        **made["metadata"],
        "creationTimestamp": "2026-12-02T10:00:00Z",
        "uid": "u1",
    }
    return {**made, "status": status}


@pytest.mark.pure
def test_the_status_of_a_jobset_reads_its_conditions_and_its_jobs() -> None:
    child: Wire = {
        "metadata": {"name": "train-node-0"},
        "status": {
            "startTime": "2026-12-02T10:00:01Z",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Container work for pod train-node-0-1-x failed with exit code 1",
                }
            ],
        },
    }
    running = run_status(status_view(_jobset_object(), [child]), [], {})
    assert (running.phase, running.launcher, running.started) == ("Pending", "JobSet", 1796205601.0)
    failed = _jobset_object(
        restarts=1,
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "ReachedMaxRestarts",
                "message": "jobset failed due to reaching max number of restarts",
                "lastTransitionTime": "2026-12-02T10:05:00Z",
            }
        ],
    )
    ended = run_status(status_view(failed, [child]), [], {})
    assert (ended.phase, ended.ended) == ("Failed", 1796205900.0)
    assert ended.message == (
        "ReachedMaxRestarts: jobset failed due to reaching max number of restarts; "
        "Job train-node-0: PodFailurePolicy: Container work for pod train-node-0-1-x failed "
        "with exit code 1; after 1 restart"
    )
    completed = _jobset_object(
        conditions=[
            {
                "type": "Completed",
                "status": "True",
                "reason": "AllJobsCompleted",
                "lastTransitionTime": "2026-12-02T10:06:00Z",
            }
        ]
    )
    done = run_status(status_view(completed, [child]), [], {})
    assert (done.phase, done.ended) == ("Succeeded", 1796205960.0)
    assert status_view(completed, [])["spec"]["parallelism"] == 2


@pytest.mark.pure
def test_the_test_environments_pod_webhooks_see_only_pods_of_jobsets() -> None:
    configurations = jobset_env.webhook_configurations(MANIFESTS, "https://127.0.0.1:1", "Q0E=")
    names = [c["metadata"]["name"] for c in configurations]
    assert names == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]
    hooks = [h for c in configurations for h in c["webhooks"]]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:1/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:1/mutate--v1-pod",
        "https://127.0.0.1:1/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:1/validate--v1-pod",
    ]
    selector = {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    }
    assert [h.get("objectSelector") for h in hooks] == [None, selector, None, selector]
    assert yaml.safe_dump(configurations)  # plain data, as the API takes it


# --- on a control plane with JobSet ----------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnCluster]:
    with own_cluster(tmp_path_factory, jobset_env.ADDON, jobset_env.start) as own:
        yield own


@pytest.fixture
def namespace(served: OwnCluster) -> Iterator[str]:
    with fresh_namespace(served.api) as name:
        yield name


def _jobsets(api: client.ApiClient, namespace: str) -> list[Wire]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets"
    )
    assert isinstance(listed, dict)
    return list(listed["items"])


def _nothing_left(api: client.ApiClient, namespace: str) -> bool:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    resource = client.ResourceV1Api(api)
    return (
        not _jobsets(api, namespace)
        and not batch.list_namespaced_job(namespace).items
        and not core.list_namespaced_pod(namespace).items
        and not core.list_namespaced_service(namespace).items
        and not resource.list_namespaced_resource_claim(namespace).items
        and not resource.list_namespaced_resource_claim_template(namespace).items
    )


def test_a_two_node_run_is_a_jobset_with_ranks_logs_and_is_found_and_cancelled(
    served: OwnCluster, namespace: str
) -> None:
    api = served.api
    with served.runner.serving(namespace):
        alice = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        run = alice.run([sys.executable, "-c", REPORT], gpu=2, nodes=2, name="ranks")
        assert isinstance(run, JobRun)
        ended = run.wait(timeout=90)
        assert (ended.phase, ended.launcher) == ("Succeeded", "JobSet"), ended
        (made,) = _jobsets(api, namespace)
        assert made["metadata"]["name"] == "ranks"
        status = run.status
        assert [(p.rank, p.phase, p.exit_code) for p in status.processes] == [
            (0, "Succeeded", 0),
            (1, "Succeeded", 0),
        ]
        assert status.started is not None and status.ended is not None
        assert all(p.name.startswith("ranks-node-0-") for p in status.processes)
        # MASTER_ADDR is rank 0's DNS name: the hostname the Job controller gave its pod
        # (JobSet's Job ranks-node-0, index 0) under the subdomain JobSet set (its Service)
        rank0 = to_wire(
            api, client.CoreV1Api(api).read_namespaced_pod(status.processes[0].name, namespace)
        )
        assert (rank0["spec"]["hostname"], rank0["spec"]["subdomain"]) == (
            "ranks-node-0-0",
            "ranks",
        )
        assert_reported(run, "ranks-node-0-0.ranks")
        # JobSet's headless Service is the pods' subdomain; the Job is JobSet's
        service = to_wire(api, client.CoreV1Api(api).read_namespaced_service("ranks", namespace))
        assert service["spec"]["clusterIP"] == "None"
        assert service["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        assert [to_wire(api, j)["metadata"]["name"] for j in jobs] == ["ranks-node-0"]
        template = to_wire(
            api,
            client.ResourceV1Api(api).read_namespaced_resource_claim_template("ranks", namespace),
        )
        assert template["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
        # a new session finds the run once, as a JobSet
        again = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        found = again.runs()
        assert [r.name for r in found] == ["ranks"]
        assert isinstance(found[0], JobRun) and found[0].status.launcher == "JobSet"
        bob = session(served.cluster.kubeconfig, namespace, user="bob", image=IMAGE)
        assert bob.runs() == []
        found[0].cancel()
        assert found[0].status.phase == "Succeeded"  # cancel cleans up; the outcome stays
        wait_for("the run's objects to be deleted", lambda: _nothing_left(api, namespace))
        assert again.runs() == []


def test_a_watching_process_reads_its_jobsets_from_a_view_not_a_list_per_read(
    served: OwnCluster, namespace: str
) -> None:
    """A long-lived process (a Jupyter server: watch on) lists the namespace's JobSets once
    and then watches them: an open lab's GET /runs makes no LIST of JobSets, and a cancel
    shows at once (issue 38: watch, don't list)."""
    cluster = served.cluster

    def lists() -> float:
        return sample(cluster, "apiserver_request_total", verb="LIST", resource="jobsets")

    alice = session(cluster.kubeconfig, namespace, image=IMAGE, watch=True)
    # its views watch this module's control plane, which stops at the module's end
    with served.runner.serving(namespace), contextlib.closing(alice.backend):
        run = alice.run([sys.executable, "-c", "print('hi')"], gpu=1, nodes=2, name="seen")
        assert isinstance(run, JobRun) and run.status.launcher == "JobSet"
        try:
            wait_for("the run in the view", lambda: [r.name for r in alice.runs()] == ["seen"])
            before = lists()
            for _ in range(5):
                assert [r.name for r in alice.runs()] == ["seen"]
            assert lists() == before  # read from the view: no LIST per read
            assert open_watches(cluster, "jobsets") >= 1
        finally:
            run.cancel()
        assert alice.runs() == []  # the cancel shows at once (read-your-writes)
        wait_for("the run's objects to be deleted", lambda: _nothing_left(served.api, namespace))


def test_a_rank_that_exits_1_fails_the_jobset_and_cancel_leaves_nothing(
    served: OwnCluster, namespace: str
) -> None:
    script = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n    print('bad data', flush=True)\n    sys.exit(1)\n"
        "time.sleep(600)\n"
    )
    with served.runner.serving(namespace):
        alice = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        run = alice.run([sys.executable, "-c", script], gpu=1, nodes=2, name="fails")
        assert isinstance(run, JobRun)
        ended = run.wait(timeout=90)
        assert (ended.phase, ended.launcher) == ("Failed", "JobSet"), ended
        # JobSet's word (no restart left: retries=0), then its Job's: which rank, what exit
        assert ended.message.startswith("ReachedMaxRestarts: "), ended.message
        assert "Job fails-node-0: PodFailurePolicy: " in ended.message, ended.message
        assert "exit code 1" in ended.message, ended.message
        assert "[rank 1] bad data\n" in run.logs(rank=1)
        run.cancel()
        wait_for("the run's objects to be deleted", lambda: _nothing_left(served.api, namespace))


def test_a_running_jobset_is_cancelled_with_its_pods_and_claims(
    served: OwnCluster, namespace: str
) -> None:
    with served.runner.serving(namespace):
        alice = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        run = alice.run(
            [sys.executable, "-c", "import time; time.sleep(600)"], gpu=1, nodes=2, name="long"
        )
        assert isinstance(run, JobRun)
        wait_running(run)
        run.cancel()
        cancelled = run.status
        assert cancelled.phase == "Cancelled"
        wait_for("the run's objects to be deleted", lambda: _nothing_left(served.api, namespace))


def test_retries_restart_every_rank_together_and_the_run_then_succeeds(
    served: OwnCluster, namespace: str, tmp_path: Path
) -> None:
    """Rank 1 fails its first attempt only; with ``retries=1`` JobSet restarts the whole
    set (rank 0 too, which had been waiting) and the second attempt succeeds."""
    script = (
        "import os, pathlib, sys, time\n"
        f"mark = pathlib.Path({str(tmp_path)!r}) / ('rank-' + os.environ['RANK'])\n"
        "first = not mark.exists()\nmark.write_text(mark.read_text() + 'x' if not first else 'x')\n"
        "print('attempt', len(mark.read_text()), flush=True)\n"
        "if first and os.environ['RANK'] == '1':\n    sys.exit(1)\n"
        "if first:\n    time.sleep(600)\n"
    )
    with served.runner.serving(namespace):
        alice = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        run = alice.run([sys.executable, "-c", script], gpu=1, nodes=2, name="again", retries=1)
        assert isinstance(run, JobRun)
        ended = run.wait(timeout=120)
        assert (ended.phase, ended.launcher) == ("Succeeded", "JobSet"), ended
        # both ranks ran twice: the restart took rank 0 along
        assert sorted((tmp_path / f"rank-{r}").read_text() for r in (0, 1)) == ["xx", "xx"]
        assert run.logs().splitlines() == ["[rank 0] attempt 2", "[rank 1] attempt 2"]
        (made,) = _jobsets(served.api, namespace)
        assert made["status"]["restarts"] == 1
        run.cancel()
        wait_for("the run's objects to be deleted", lambda: _nothing_left(served.api, namespace))


def test_a_jobset_run_with_wait_is_placed_and_its_logs_streamed_with_ranks(
    served: OwnCluster, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    script = "for i in range(3):\n    print('step', i, flush=True)\n"
    with served.runner.serving(namespace):
        alice = session(served.cluster.kubeconfig, namespace, image=IMAGE)
        run = alice.run([sys.executable, "-c", script], gpu=1, nodes=2, name="steps", wait=True)
        assert isinstance(run, JobRun)
        assert (run.status.phase, run.status.launcher) == ("Succeeded", "JobSet")
        lines = capsys.readouterr().out.splitlines()
        for rank in (0, 1):
            assert [line for line in lines if line.startswith(f"[rank {rank}]")] == [
                f"[rank {rank}] step {i}" for i in range(3)
            ]
        run.cancel()
        wait_for("the run's objects to be deleted", lambda: _nothing_left(served.api, namespace))

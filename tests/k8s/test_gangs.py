"""``dra.run(..., nodes=N)`` as a gang (:mod:`dra_jupyter.kube.runs.gangs`): where the
cluster serves the Workload API (the session's control plane does: tests/k8s/testenv.py),
the run's pods join a PodGroup of ``minCount = N`` and the real kube-scheduler places all
of them or none, so that a run that cannot start holds no node and no device; where it
does not (our discovery answering no), the run is as before, pod by pod, and says so.

Why on the stand-in kubelet, not the real node: a gang's pods (nodes>=2) find rank 0 by its
cluster DNS name (``MASTER_ADDR=<run>-0.<run>``), and the test environment has one node and no
cluster DNS."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.api import Session
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.kube.connect import api_client, to_wire
from dra_jupyter.kube.runs import gangs, gangtimeout
from dra_jupyter.kube.runs.jobrun import JobRun
from dra_jupyter.kube.runs.jobs import JOBSET_LAUNCHER, job
from dra_jupyter.kube.runs.jobstatus import run_status
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.model.objects import Wire
from dra_jupyter.types.runs import RunStatus
from tests.hub.test_kubespawner import apply_rbac, service_account_kubeconfig
from tests.k8s import testenv
from tests.k8s.conftest import wait_for
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_backend import session
from tests.k8s.test_jobs import spec
from tests.k8s.test_pods import IMAGE, ON_SIMULATED

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
NO_ROOM = "minCount (3) cannot be satisfied"  # kube-scheduler's word on a gang of 3 on room for 2


def test_the_session_control_plane_serves_the_workload_api(
    cluster: testenv.Cluster, api: client.ApiClient
) -> None:
    status, body = cluster.get(f"/apis/{testenv.WORKLOAD_API}")
    assert status == 200, body
    assert gangs.served(api) is True  # what dra.run asks before it makes a gang


@pytest.mark.pure
def test_a_run_of_several_pods_is_a_gang_only_where_the_workload_api_is_served() -> None:
    assert gangs.decide(spec(nodes=3), workloads=True) == "gang of 3"
    assert gangs.decide(spec(nodes=1), workloads=True) == ""  # one pod: nothing to wait for
    assert gangs.decide(spec(nodes=3), workloads=False) == (
        "no gang: pods may start one by one (the cluster does not serve the Workload API, "
        "scheduling.k8s.io/v1beta1)"
    )
    assert gangs.decide(spec(nodes=3, queue="team-q"), workloads=True).startswith(
        "no gang: pods may start one by one once Kueue admits the run as a whole"
    )
    assert gangs.decide(spec(nodes=3, launcher=JOBSET_LAUNCHER), workloads=True) == ""


@pytest.mark.pure
def test_a_gangs_pods_join_its_pod_group_of_min_count_n() -> None:
    ganged = spec(nodes=3, gang="gang of 3")
    made = job(ganged)
    assert made["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert made["metadata"]["annotations"]["dra-jupyter/gang"] == "gang of 3"
    workload, group = gangs.workload(ganged), gangs.pod_group(ganged)
    assert (workload["apiVersion"], workload["kind"], group["kind"]) == (
        "scheduling.k8s.io/v1beta1",
        "Workload",
        "PodGroup",
    )
    assert workload["spec"]["podGroupTemplates"] == [
        {"name": "ranks", "schedulingPolicy": {"gang": {"minCount": 3}}}
    ]
    assert group["spec"] == {
        "workloadRef": {"workloadName": "train", "templateName": "ranks"},
        "schedulingPolicy": {"gang": {"minCount": 3}},
    }
    assert group["metadata"]["labels"] == made["metadata"]["labels"]  # found with the run
    alone = job(spec(nodes=3, gang=gangs.decide(spec(nodes=3), workloads=False)))
    assert "schedulingGroup" not in alone["spec"]["template"]["spec"]
    assert alone["metadata"]["annotations"]["dra-jupyter/gang"].startswith("no gang")


def _job(gang: str) -> Wire:
    return {
        "metadata": {
            "name": "train",
            "annotations": {"dra-jupyter/launcher": "Indexed Job", "dra-jupyter/gang": gang},
        },
        "spec": {"parallelism": 3},
        "status": {},
    }


def _waiting_pod(name: str, message: str) -> Wire:
    condition = {"type": "PodScheduled", "status": "False", "message": message}
    return {
        "metadata": {"name": name, "annotations": {}},
        "spec": {},
        "status": {"phase": "Pending", "conditions": [condition]},
    }


@pytest.mark.pure
def test_the_status_says_gang_or_not_and_a_waiting_gangs_reason() -> None:
    pods = [_waiting_pod("train-0-x", "0/2 nodes are available: 2 cannot allocate all claims.")]
    word = f"{NO_ROOM}: 2 scheduled, 0 remaining"
    group = {
        "status": {
            "conditions": [
                {"type": "PodGroupInitiallyScheduled", "status": "False", "message": word}
            ]
        }
    }
    claims = "0/2 nodes are available: 2 cannot allocate all claims."
    waiting = run_status(_job("gang of 3"), pods, {}, gang_reason=gangs.scheduler_word(group))
    assert waiting.launcher == "Indexed Job; gang of 3"
    # a pod's own reason first, the scheduler's word on the group after it
    assert waiting.message == f"waiting as a gang of 3: {claims} ({word})"
    # before the scheduler wrote its word on the PodGroup: the pods' own
    early = run_status(_job("gang of 3"), pods, {})
    assert early.message == f"waiting as a gang of 3: {claims}"
    # pods that only wait for their gang: the group's word
    gang_only = [_waiting_pod("train-1-y", f"pod group is unschedulable, {word}")]
    assert run_status(_job("gang of 3"), gang_only, {}, gang_reason=word).message == (
        f"waiting as a gang of 3: {word}"
    )
    assert run_status(_job("gang of 3"), [], {}).message == (
        "waiting as a gang of 3: no answer from kube-scheduler yet"
    )
    alone = run_status(_job(gangs.decide(spec(nodes=3), workloads=False)), pods, {})
    assert "; no gang: pods may start one by one (" in alone.launcher
    assert alone.message == "0/2 nodes are available: 2 cannot allocate all claims."
    assert str(alone).startswith("run train: Pending (Indexed Job; no gang: pods may start one")


@pytest.mark.pure
def test_a_gangs_timeout_is_a_duration_for_runs_of_several_pods() -> None:
    assert gangtimeout.parse(..., 3) == 3600.0  # GANG_TIMEOUT where not given
    assert gangtimeout.parse("30m", 3) == 1800.0
    assert gangtimeout.parse(None, 3) is None  # waits until it can start
    assert gangtimeout.parse(..., 1) == 3600.0  # not given: fine for one pod (no gang)
    for value, words in (
        ("5m", "dra.run: gang_timeout= is how long the pods of nodes=N may wait to start"),
        (None, "dra.run: gang_timeout= is how long the pods of nodes=N may wait to start"),
    ):
        with pytest.raises(InvalidInputError, match=f"^{words}"):
            gangtimeout.parse(value, 1)  # one pod: no gang to wait for
    with pytest.raises(InvalidInputError, match=r"^dra.run: gang_timeout: must be more than 0"):
        gangtimeout.parse(0, 3)
    with pytest.raises(InvalidInputError, match=r"^gang_timeout: 'soon' is not a duration"):
        gangtimeout.parse("soon", 3)
    said = [gangtimeout.said(s) for s in (3600, 5400, 90, 10, 2.5, 86400 + 60)]
    assert said == ["1h", "1h30m", "1m30s", "10s", "2.5s", "1d1m"]
    # the Job carries it, only where its pods are a gang
    made = job(spec(nodes=3, gang="gang of 3", gang_timeout=600.0))
    assert made["metadata"]["annotations"]["dra-jupyter/gang-timeout"] == "600"
    alone = job(spec(nodes=3, gang="no gang: pods may start one by one", gang_timeout=600.0))
    assert "dra-jupyter/gang-timeout" not in alone["metadata"]["annotations"]


@pytest.mark.pure
def test_group_devices_are_one_claim_entry_the_same_in_every_pod_and_the_pod_group() -> None:
    grouped = spec(nodes=3, gang="gang of 3", group_claim={"devices": {"requests": []}})
    entry = {"name": "group", "resourceClaimTemplateName": "train-group"}
    pod = job(grouped)["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "train"},
        entry,
    ]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "devices"}, {"name": "group"}]
    assert gangs.pod_group(grouped)["spec"]["resourceClaims"] == [entry]
    assert gangs.workload(grouped)["spec"]["podGroupTemplates"][0]["resourceClaims"] == [entry]
    assert "resourceClaims" not in gangs.pod_group(spec(nodes=3, gang="gang of 3"))["spec"]


def _timed(timeout: str = "600", **annotations: str) -> Wire:
    made = _job("gang of 3")
    made["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    made["metadata"]["annotations"].update({"dra-jupyter/gang-timeout": timeout, **annotations})
    return made


@pytest.mark.pure
def test_a_gang_past_its_timeout_with_no_pod_placed_is_overdue_and_then_failed() -> None:
    word = f"{NO_ROOM}: 2 scheduled, 0 remaining"
    pods = [_waiting_pod("train-0-x", f"pod group is unschedulable, {word}")]
    timed = _timed()
    made = gangtimeout.deadline(timed)
    assert made is not None
    waiting = run_status(timed, pods, {}, gang_reason=word)
    assert gangtimeout.overdue(timed, waiting, made - 1) == ""  # not yet
    overdue = gangtimeout.overdue(timed, waiting, made)
    assert overdue == f"the gang of 3 could not start within 10m: {word}"
    ended = gangtimeout.failed(waiting, overdue, timed)
    assert (ended.phase, ended.message, ended.ended) == ("Failed", overdue, made)
    # a pod placed: the gang started (all or none), whatever the time
    placed = {**pods[0], "spec": {"nodeName": "sim-node-0"}}
    assert gangtimeout.overdue(timed, run_status(timed, [placed], {}), made + 60) == ""
    # no timeout (gang_timeout=None), or a run that is no gang: nothing is ever overdue
    untimed = _job("gang of 3")
    untimed["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    assert gangtimeout.overdue(untimed, run_status(untimed, pods, {}), made + 3600) == ""
    # once ended, every reader sees the Job's words, before and after the Job controller
    # failed it (DeadlineExceeded)
    gone = _timed(**{"dra-jupyter/gang-expired": overdue})
    for job_status in ({}, {"conditions": [_deadline_exceeded()]}):
        read = run_status({**gone, "status": job_status}, [], {})
        assert (read.phase, read.message, read.done) == ("Failed", overdue, True)
        assert read.launcher == "Indexed Job; gang of 3"
        assert gangtimeout.overdue({**gone, "status": job_status}, read, made + 60) == ""
    assert run_status(gone, [], {}).ended == made


def _deadline_exceeded() -> Wire:
    return {
        "type": "Failed",
        "status": "True",
        "reason": "DeadlineExceeded",
        "message": "Job was active longer than specified deadline",
        "lastTransitionTime": "2026-12-01T10:10:02Z",
    }


def _singleuser(
    api: client.ApiClient, cluster: testenv.Cluster, namespace: str, tmp: Path
) -> Session:
    """A session as a single-user server's service account (deploy/hub-rbac.yaml, applied by
    the caller), once its Role lets it make Workloads."""
    kubeconfig = service_account_kubeconfig(
        api, cluster, namespace, "dra-singleuser", tmp / "singleuser.kubeconfig"
    )
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb="create", group=gangs.GROUP, resource="podgroups"
            )
        )
    )

    def granted() -> Session | None:
        with api_client(str(kubeconfig)) as sa:
            answer = client.AuthorizationV1Api(sa).create_self_subject_access_review(review)
        allowed = answer.status is not None and answer.status.allowed
        return session(kubeconfig, namespace, image=IMAGE) if allowed else None

    return wait_for("the server's Role to take effect", granted)


@pytest.fixture
def rbac(api: client.ApiClient, namespace: str) -> Iterator[None]:
    cluster_wide = apply_rbac(api, namespace)
    yield
    rbac_api = client.RbacAuthorizationV1Api(api)
    for kind, name in cluster_wide:
        if kind == "ClusterRoleBinding":
            rbac_api.delete_cluster_role_binding(name)
        else:
            rbac_api.delete_cluster_role(name)


def _counts(api: client.ApiClient, namespace: str) -> tuple[int, int, int]:
    """The namespace's claims, those allocated, and its pods bound to a node, from the API."""
    claims = client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items
    allocated = [c for c in claims if c.status is not None and c.status.allocation is not None]
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return len(claims), len(allocated), len([p for p in pods if p.spec and p.spec.node_name])


def _exists(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.mark.usefixtures("rbac")
def test_a_gang_that_does_not_fit_holds_no_node_and_no_device_and_cancel_removes_it(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    published: SimulatedCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three pods of 8 GPUs on two nodes of 8: kube-scheduler could place two, and places
    none; no claim is allocated while the gang waits."""
    alice = _singleuser(api, cluster, namespace, tmp_path)
    run = alice.run(SLEEP, gpu=8, nodes=3, name="three", node_selector=ON_SIMULATED)
    assert isinstance(run, JobRun)
    assert "(Indexed Job (JobSet not installed), 3 pods; gang of 3)" in capsys.readouterr().err

    def waiting() -> RunStatus | None:
        status = run.status
        return status if NO_ROOM in status.message else None

    status = wait_for("kube-scheduler's word on the gang", waiting)
    assert status.phase == "Pending"
    assert status.message.startswith("waiting as a gang of 3: "), status.message
    assert status.launcher == "Indexed Job (JobSet not installed); gang of 3"
    assert [p.node for p in status.processes] == ["", "", ""]

    # the claims are made (one per pod), none allocated, no pod bound: nothing held
    def made() -> tuple[int, int, int] | None:
        counts = _counts(api, namespace)
        return counts if counts[0] == 3 else None

    claims, allocated, bound = wait_for("the three pods' claims", made)
    assert (claims, allocated, bound) == (3, 0, 0)
    scheduling = client.SchedulingV1beta1Api(api)
    group = to_wire(api, scheduling.read_namespaced_pod_group("three", namespace))
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"  # deleted with it
    workload = to_wire(api, scheduling.read_namespaced_workload("three", namespace))
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "Job"
    run.cancel()
    assert run.status.phase == "Cancelled"
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)

    def gone() -> bool:
        return not (
            core.list_namespaced_pod(namespace).items
            or client.BatchV1Api(api).list_namespaced_job(namespace).items
            or resource.list_namespaced_resource_claim(namespace).items
            or resource.list_namespaced_resource_claim_template(namespace).items
            or scheduling.list_namespaced_pod_group(namespace).items
            or scheduling.list_namespaced_workload(namespace).items
            or _exists(lambda: core.read_namespaced_service("three", namespace))
        )

    wait_for("the run's objects to be deleted", gone)


@pytest.mark.usefixtures("rbac")
def test_a_gang_that_cannot_start_within_its_timeout_fails_with_the_reason_holding_nothing(
    api: client.ApiClient,
    cluster: testenv.Cluster,
    namespace: str,
    published: SimulatedCluster,
    tmp_path: Path,
) -> None:
    """Three pods of 8 GPUs on two nodes of 8 with ``gang_timeout="15s"``: nobody reads the
    run's status, and at 15 s the timer of the process that made it ends it; the Job says
    why to every reader, and no pod, claim, PodGroup or Workload is left."""
    alice = _singleuser(api, cluster, namespace, tmp_path)
    run = alice.run(
        SLEEP, gpu=8, nodes=3, name="late", node_selector=ON_SIMULATED, gang_timeout="15s"
    )
    assert isinstance(run, JobRun)
    batch = client.BatchV1Api(api)

    def failed() -> Wire | None:
        job = to_wire(api, batch.read_namespaced_job("late", namespace))
        conditions = (job.get("status") or {}).get("conditions") or ()
        ended = any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)
        return job if ended else None

    job = wait_for("the Job failed at its gang_timeout", failed, timeout=15 + 60)
    condition = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert condition["reason"] == "DeadlineExceeded"  # the Job controller ended it
    why = job["metadata"]["annotations"]["dra-jupyter/gang-expired"]
    assert why.startswith("the gang of 3 could not start within 15s: "), why
    assert NO_ROOM in why and "\n" not in why  # the scheduler's reason, in one line
    status = run.status
    assert (status.phase, status.message, status.done) == ("Failed", why, True)
    # the same for the run as another kernel finds it (dra.runs(): read from the Job)
    found = alice.find_run("late").status
    assert (found.phase, found.message) == ("Failed", why)
    # it holds nothing and waits for nothing: no pod, no claim, no PodGroup, no Workload
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    scheduling = client.SchedulingV1beta1Api(api)

    def left() -> list[object]:
        return [
            *core.list_namespaced_pod(namespace).items,
            *resource.list_namespaced_resource_claim(namespace).items,
            *scheduling.list_namespaced_pod_group(namespace).items,
            *scheduling.list_namespaced_workload(namespace).items,
        ]

    wait_for("the gang's pods, claims, PodGroup and Workload gone", lambda: left() == [])
    assert _counts(api, namespace) == (0, 0, 0)
    run.cancel()  # the Job (kept as the record, as every ended run) and the rest
    assert run.status.phase == "Failed"  # cancel keeps the outcome of an ended run
    assert not batch.list_namespaced_job(namespace).items


def test_where_the_role_may_not_patch_jobs_an_expired_gang_is_deleted_as_cancel_does(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Role of before (no ``patch`` on Jobs: :func:`gangtimeout.expire` says so): the run
    whose gang could not start is deleted with everything it made, and the process that
    ended it keeps its outcome."""
    monkeypatch.setattr(gangtimeout, "expire", lambda backend, job, message: False)
    alice = session(kubeconfig, namespace, image=IMAGE)
    run = alice.run(
        SLEEP, gpu=8, nodes=3, name="late", node_selector=ON_SIMULATED, gang_timeout="3s"
    )
    assert isinstance(run, JobRun)
    status = wait_for("the gang's timeout", lambda: run.status if run.status.done else None)
    assert status.phase == "Failed"
    assert status.message.startswith("the gang of 3 could not start within 3s: ")
    scheduling = client.SchedulingV1beta1Api(api)

    def gone() -> bool:
        return not (
            client.BatchV1Api(api).list_namespaced_job(namespace).items
            or client.CoreV1Api(api).list_namespaced_pod(namespace).items
            or client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items
            or scheduling.list_namespaced_pod_group(namespace).items
            or scheduling.list_namespaced_workload(namespace).items
        )

    wait_for("the run's objects deleted", gone)
    assert run.status == status  # kept here


def test_a_group_claim_is_made_once_and_reserved_for_the_pod_group(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
) -> None:
    """Two pods of one GPU each and ``group={"gpu": 1}``: one claim more, made from the
    group's template for the PodGroup and reserved by kube-scheduler for the PodGroup, not
    for a pod; cancel removes it with the rest (the stand-in kubelet runs the pods, so that
    cancel really ends them)."""
    with pod_runner.serving(namespace):
        _group_claim(api, kubeconfig, namespace)


def _group_claim(api: client.ApiClient, kubeconfig: Path, namespace: str) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    run = alice.run(
        SLEEP, gpu=1, nodes=2, name="pair", node_selector=ON_SIMULATED, group={"gpu": 1}
    )
    assert isinstance(run, JobRun)
    resource = client.ResourceV1Api(api)
    scheduling = client.SchedulingV1beta1Api(api)

    def reserved() -> Wire | None:
        for found in resource.list_namespaced_resource_claim(namespace).items:
            claim = to_wire(api, found)
            holders = (claim.get("status") or {}).get("reservedFor") or ()
            if any(h.get("resource") == "podgroups" for h in holders):
                return claim
        return None

    claim = wait_for("the group's claim reserved for the PodGroup", reserved)
    group = to_wire(api, scheduling.read_namespaced_pod_group("pair", namespace))
    assert claim["status"]["reservedFor"] == [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "pair",
            "uid": group["metadata"]["uid"],
        }
    ]
    assert claim["status"]["allocation"]["devices"]["results"]  # one GPU, for the group
    assert [o["kind"] for o in claim["metadata"]["ownerReferences"]] == ["PodGroup"]
    assert claim["metadata"]["labels"]["dra-jupyter/run"] == "pair"  # the run's claims
    assert group["status"]["resourceClaimStatuses"] == [
        {"name": "group", "resourceClaimName": claim["metadata"]["name"]}
    ]

    def placed() -> RunStatus | None:
        status = run.status
        rows = status.processes
        return status if len(rows) == 2 and all(r.node for r in rows) else None

    status = wait_for("both pods placed", placed)
    # the group's GPU is on one node, so both pods are there; a claim each, and the group's
    assert len({r.node for r in status.processes}) == 1
    assert claim["metadata"]["name"] in status.claims and len(status.claims) == 3
    run.cancel()

    def gone() -> bool:
        return not (
            resource.list_namespaced_resource_claim(namespace).items
            or resource.list_namespaced_resource_claim_template(namespace).items
            or scheduling.list_namespaced_pod_group(namespace).items
            or client.CoreV1Api(api).list_namespaced_pod(namespace).items
        )

    wait_for("the run's claims, templates, PodGroup and pods deleted", gone)


def test_group_is_refused_in_one_line_where_the_run_cannot_have_a_group_claim(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No PodGroup (the Workload API not served), or a cluster whose API server drops a
    PodGroup's claims (no DRAWorkloadResourceClaims): refused before anything is made."""
    alice = session(kubeconfig, namespace, image=IMAGE)

    def refused() -> str:
        with pytest.raises(InvalidInputError) as caught:
            alice.run(SLEEP, gpu=1, nodes=2, name="pair", group={"gpu": 1})
        return str(caught.value)

    assert gangs.group_claims_served(api, namespace) is True  # the session's control plane
    monkeypatch.setattr(gangs, "group_claims_served", lambda api, namespace: False)
    assert refused() == f"dra.run: {gangs.NO_GROUP_CLAIMS}"
    monkeypatch.setattr(gangs, "served", lambda api: False)
    assert refused() == (
        "dra.run: group= asks for devices once for the run's PodGroup, and this run has "
        "none: no gang: pods may start one by one (the cluster does not serve the Workload "
        "API, scheduling.k8s.io/v1beta1); leave group= out"
    )
    with pytest.raises(InvalidInputError, match=r"^dra.run: group= asks for devices that the"):
        alice.run(SLEEP, gpu=1, name="alone", group={"gpu": 1})
    assert not client.BatchV1Api(api).list_namespaced_job(namespace).items
    resource = client.ResourceV1Api(api)
    assert not resource.list_namespaced_resource_claim_template(namespace).items
    assert not resource.list_namespaced_resource_claim(namespace).items


def test_without_the_workload_api_the_pods_start_one_by_one_and_the_run_says_so(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pod_runner: PodRunner,
) -> None:
    """The same run where discovery says the Workload API is not served: as before the
    gangs, two pods of three are placed and hold their 16 GPUs while the third waits (the
    stand-in kubelet runs them, so that cancel really ends them and frees the nodes)."""
    monkeypatch.setattr(gangs, "served", lambda api: False)
    with pod_runner.serving(namespace):
        _one_by_one(api, kubeconfig, namespace, capsys)


def _one_by_one(
    api: client.ApiClient, kubeconfig: Path, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    run = alice.run(SLEEP, gpu=8, nodes=3, name="three", node_selector=ON_SIMULATED)
    assert isinstance(run, JobRun)
    assert "3 pods; no gang: pods may start one by one (" in capsys.readouterr().err

    def placed() -> tuple[int, int, int] | None:
        counts = _counts(api, namespace)
        return counts if counts[1:] == (2, 2) else None

    held = wait_for("two pods placed with their claims", placed)
    assert held == (3, 2, 2)  # 16 GPUs held by a run that cannot start
    status = run.status
    assert status.launcher == (
        "Indexed Job (JobSet not installed); no gang: pods may start one by one (the cluster "
        "does not serve the Workload API, scheduling.k8s.io/v1beta1)"
    )
    assert not client.SchedulingV1beta1Api(api).list_namespaced_pod_group(namespace).items
    run.cancel()
    wait_for("the nodes freed", lambda: _counts(api, namespace) == (0, 0, 0))


def test_a_waiting_gang_starts_whole_once_room_is_made(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    pod_runner: PodRunner,
) -> None:
    """A run of one pod holds a node's 8 GPUs; a gang of two such pods waits holding
    nothing, and once the first run is cancelled both of its pods are placed (the stand-in
    kubelet runs the pods, so that cancel really ends them and frees the nodes)."""
    with pod_runner.serving(namespace):
        _room_made(api, kubeconfig, namespace)


def _room_made(api: client.ApiClient, kubeconfig: Path, namespace: str) -> None:
    alice = session(kubeconfig, namespace, image=IMAGE)
    blocker = alice.run(SLEEP, gpu=8, nodes=1, name="blocker", node_selector=ON_SIMULATED)
    assert isinstance(blocker, JobRun)
    wait_for("the first run placed", lambda: _counts(api, namespace) == (1, 1, 1))
    pair = alice.run(SLEEP, gpu=8, nodes=2, name="pair", node_selector=ON_SIMULATED)
    assert isinstance(pair, JobRun)
    wait_for(
        "kube-scheduler's word on the gang",
        lambda: "minCount (2) cannot be satisfied" in pair.status.message,
    )
    assert _counts(api, namespace) == (3, 1, 1)  # the gang's two claims made, none allocated
    blocker.cancel()

    def placed() -> RunStatus | None:
        status = pair.status
        rows = status.processes
        return status if len(rows) == 2 and all(r.node for r in rows) else None

    status = wait_for("both pods of the gang placed", placed)
    assert len({r.node for r in status.processes}) == 2  # a node each: 8 GPUs a pod
    wait_for("their claims allocated", lambda: _counts(api, namespace) == (2, 2, 2))
    pair.cancel()
    wait_for("the nodes freed", lambda: _counts(api, namespace) == (0, 0, 0))

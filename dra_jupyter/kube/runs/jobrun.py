"""A run on the cluster (the objects of :mod:`.jobs`, or the JobSet of :mod:`.jobsets`) and
its life: made, read back as a status (:mod:`.jobstatus`), its pods' logs prefixed by rank
(read, or followed until the run ends), waited for, cancelled, and found again by its
labels from any process (:func:`list_runs`: a new kernel finds the runs of the one before).

Before anything is made, :func:`prepare` checks what the cluster offers: a ``queue``
needs Kueue (its API group served) and its LocalQueue in the namespace; a run of more than
one pod is a JobSet where the cluster serves JobSet's API (``jobset.x-k8s.io``), else an
Indexed Job, and the run's launcher says which and why (:func:`launcher`); the pods of an
Indexed Job are a gang where the cluster serves the Workload API (:mod:`.gangs`), and the
status says whether they are; a gang that could not start within its ``gang_timeout``
fails when the run is read (:mod:`.gangtimeout`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Literal, overload

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import RUN
from dra_jupyter.errors import AllocationError, ClusterError, InvalidInputError
from dra_jupyter.kube import kueue
from dra_jupyter.kube.claims import USER_LABEL, forbidden
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.kube.runs import gangs, gangtimeout, jobs, jobsets
from dra_jupyter.kube.runs.jobs import COMPONENT, COMPONENT_LABEL, RUN_LABEL, JobSpec
from dra_jupyter.kube.runs.jobstatus import generated_claim, pod_row, run_status
from dra_jupyter.kube.runs.stopped import StoppedPods
from dra_jupyter.kube.views import CLAIMS, JOBS, JOBSETS, PODS
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import USER_ANNOTATION, label_value
from dra_jupyter.types.runs import RunStatus, wait_for_end

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

POLL_S = 0.5
KUEUE = "kueue.x-k8s.io"
JOBSET = "jobset.x-k8s.io"


def _groups(api: client.ApiClient) -> dict[str, str]:
    """The API groups the cluster serves: name -> preferred version (discovery, which every
    authenticated user may read)."""
    try:
        listed = client.ApisApi(api).get_api_versions()
    except (ApiException, urllib3.exceptions.HTTPError) as error:
        raise cluster_error(error, "dra.run: reading the cluster's APIs", api) from error
    return {
        g.name: (g.preferred_version.version if g.preferred_version else g.versions[0].version)
        for g in listed.groups or ()
    }


def launcher(
    groups: dict[str, str], nodes: int, queue: str = "", name: str = "", group: bool = False
) -> str:
    """What runs the pods, as the status reports it: a Job of one pod; for more, JobSet
    where its API is served, else an Indexed Job, saying why not JobSet."""
    if nodes == 1:
        return "Job"
    if JOBSET not in groups:
        return "Indexed Job (JobSet not installed)"
    if groups[JOBSET] != jobsets.VERSION:
        return f"Indexed Job (JobSet serves {groups[JOBSET]}, not {jobsets.VERSION})"
    if queue:
        return "Indexed Job (JobSet installed, not used with a Kueue queue)"
    if group:
        return "Indexed Job (JobSet installed, not used: group= needs the run's PodGroup)"
    if not jobsets.fits(name, nodes):
        return "Indexed Job (JobSet installed, not used: the name is too long for its pod names)"
    return jobs.JOBSET_LAUNCHER


def check_queue(api: client.ApiClient, namespace: str, queue: str, groups: dict[str, str]) -> None:
    """InvalidInputError in one line when ``queue`` is not a LocalQueue of ``namespace``
    (or Kueue is not installed); a LocalQueue RBAC hides is left to Kueue to judge."""
    if KUEUE not in groups:
        raise InvalidInputError(
            f"queue={queue!r} needs Kueue, which is not installed on this cluster "
            f"(it serves no {KUEUE} API); leave queue out"
        ).said_by(RUN)
    objects = client.CustomObjectsApi(api)
    try:
        objects.get_namespaced_custom_object(KUEUE, groups[KUEUE], namespace, "localqueues", queue)
    except ApiException as error:
        if error.status == 404:
            raise InvalidInputError(
                f"no Kueue LocalQueue {queue!r} in namespace {namespace}; "
                f"`kubectl get localqueues -n {namespace}` lists those you may use"
            ).said_by(RUN) from None
        if error.status != 403:
            raise cluster_error(error, f"dra.run: LocalQueue {queue}", api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, f"dra.run: LocalQueue {queue}", api) from error


def prepare(backend: ClusterAccess, spec: JobSpec) -> JobSpec:
    """``spec`` with its launcher, once the cluster is found to offer what it asks
    (InvalidInputError in one line otherwise: nothing is made)."""
    groups = _groups(backend.api)
    if spec.queue:
        check_queue(backend.api, backend.namespace, spec.queue, groups)
        refused = kueue.refusal(f"dra.run {spec.name}", spec.queue, dict(spec.claim_spec))
        if refused:
            raise InvalidInputError(refused)
    grouped = spec.group_claim is not None
    picked = launcher(groups, spec.nodes, spec.queue, spec.name, grouped)
    chosen = JobSpec(**{**spec.__dict__, "launcher": picked})
    asks = chosen.nodes > 1 and not chosen.jobset and not chosen.queue
    gang = gangs.decide(chosen, asks and gangs.served(backend.api))
    if grouped:  # group=: refused where the run has no PodGroup to hold the claim
        gangs.refuse_group(gang, lambda: gangs.group_claims_served(backend.api, spec.namespace))
    return JobSpec(**{**chosen.__dict__, "gang": gang})


class JobRun:
    """A run on the cluster, by its name (see the module): a
    :class:`dra_jupyter.types.runs.Run`, and :meth:`wait_placed` and :meth:`explain` besides."""

    def __init__(
        self,
        backend: ClusterAccess,
        name: str,
        out: IO[str] | None = None,
        made: str = "",
        *,
        jobset: bool = False,
    ) -> None:
        self._name = name
        self.made = made  # when the Job was made, as the API says it ("": not read)
        self.jobset = jobset  # a JobSet (:mod:`.jobsets`), not a Job of its own
        self._backend = backend
        self._out = out
        self._cancelled = False
        self._final: RunStatus | None = None  # its outcome, kept when cancel cleans up
        self._stopped = StoppedPods(backend.api)  # pods stopped for a device taken out
        self._gang = False  # its pods join a PodGroup of its name (known once made or read)
        self._deadline: gangtimeout.Deadline | None = None  # the maker's timer on its gang

    @property
    def name(self) -> str:
        """The run's name: its Job's, template's and Service's."""
        return self._name

    # --- reading -------------------------------------------------------------------------

    def _call(self, action: str, verb: str, resource: str, call: Callable[..., Any]) -> Any:
        backend = self._backend
        try:
            return backend.retrying(call)
        except ApiException as error:
            if error.status == 403:
                raise forbidden(error, verb, resource, backend.namespace, action) from error
            raise cluster_error(error, action, backend.api) from error
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, action, backend.api) from error

    def _job(self) -> Wire | None:
        """The run's Job as read (None: gone); a JobSet's as the Job its status reads
        (:func:`.jobsets.status_view`)."""
        if self.jobset:
            return self._jobset()
        view = None if self._cancelled else self._backend.watched(JOBS)
        if view is not None:
            return view.get(self.name)
        batch = client.BatchV1Api(self._backend.api)
        namespace = self._backend.namespace

        def read() -> Wire | None:
            try:
                return to_wire(self._backend.api, batch.read_namespaced_job(self.name, namespace))
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

        found: Wire | None = self._call(f"dra.run: run {self.name}", "get", "jobs.batch", read)
        return found

    def _jobset(self) -> Wire | None:
        objects = client.CustomObjectsApi(self._backend.api)
        namespace = self._backend.namespace

        def read() -> Wire | None:
            try:
                found = objects.get_namespaced_custom_object(
                    jobsets.GROUP, jobsets.VERSION, namespace, jobsets.PLURAL, self.name
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return found if isinstance(found, dict) else None

        action = f"dra.run: run {self.name}"
        found = self._call(action, "get", "jobsets.jobset.x-k8s.io", read)
        if found is None:
            return None
        return jobsets.status_view(found, self._child_jobs())

    def _child_jobs(self) -> list[Wire]:
        """The Jobs JobSet made for the run (by JobSet's label)."""
        batch = client.BatchV1Api(self._backend.api)
        listed = self._call(
            f"dra.run: Jobs of run {self.name}",
            "list",
            "jobs.batch",
            lambda: batch.list_namespaced_job(
                self._backend.namespace, label_selector=f"{jobsets.NAME_LABEL}={self.name}"
            ),
        )
        return [to_wire(self._backend.api, j) for j in listed.items]

    def _selector(self) -> str:
        return f"{COMPONENT_LABEL}={COMPONENT},{RUN_LABEL}={self.name}"

    def _pods(self) -> list[Wire]:
        view = self._backend.watched(PODS)
        if view is not None:
            return view.list({COMPONENT_LABEL: COMPONENT, RUN_LABEL: self.name})
        core = client.CoreV1Api(self._backend.api)
        listed = self._call(
            f"dra.run: pods of run {self.name}",
            "list",
            "pods",
            lambda: core.list_namespaced_pod(
                self._backend.namespace, label_selector=self._selector()
            ),
        )
        return [to_wire(self._backend.api, p) for p in listed.items]

    def _pod_names(self) -> list[str]:
        """The run's pods now (the garbage collector would delete them after the Job; the
        run deletes them at once, one by one: ``delete`` is the right a Role grants)."""
        return [p["metadata"]["name"] for p in self._pods()]

    def _claims(self) -> dict[str, Wire]:
        view = self._backend.watched(CLAIMS)
        if view is not None:
            found = view.list({COMPONENT_LABEL: COMPONENT, RUN_LABEL: self.name})
            return {c["metadata"]["name"]: c for c in found}
        resource = client.ResourceV1Api(self._backend.api)
        try:
            listed = self._backend.retrying(
                lambda: resource.list_namespaced_resource_claim(
                    self._backend.namespace, label_selector=self._selector()
                )
            )
        except (ApiException, urllib3.exceptions.HTTPError):
            return {}  # the devices column stays empty; the rest of the status holds
        wire = [to_wire(self._backend.api, c) for c in listed.items]
        return {c["metadata"]["name"]: c for c in wire}

    def _queue_reason(self, job: Wire) -> str:
        """Kueue's word on the suspended Job: its reason and place (:mod:`.kueue`)."""
        uid = str(job["metadata"].get("uid") or "")
        return kueue.word_for(self._backend.api, self._backend.namespace, uid) if uid else ""

    @property
    def status(self) -> RunStatus:
        """The run as it is now (see :mod:`.jobstatus`); a pod stopped because a device of
        it was taken out says so (:mod:`.stopped`), also once the Job retried it."""
        if self._final is not None:
            return self._final  # ended, then cleaned up by cancel: its outcome stays
        job = self._job()
        if job is None:
            if self._cancelled:
                gone = tuple(self._stopped.gone(()))
                kind = jobs.JOBSET_LAUNCHER if self.jobset else "Job"
                return RunStatus(self.name, "Cancelled", 0.0, processes=gone, launcher=kind)
            raise ClusterError(
                f"dra.run: run {self.name} no longer exists in namespace "
                f"{self._backend.namespace} (cancelled, or deleted {jobs.TTL_S // 3600} h "
                "after it ended); dra.runs() lists yours"
            )
        queue = job["spec"].get("suspend") and self._queue_reason(job)
        pods, claims = self._pods(), self._claims()
        self._gang = self._gang or gangs.of_job(job)
        gang_reason = gangs.reason_while_waiting(self._backend, job, pods) if self._gang else ""
        rows = {p["metadata"]["name"]: pod_row(p, claims) for p in pods}
        self._stopped.note(pods, rows)
        status = run_status(
            job,
            pods,
            claims,
            queue_reason=queue or "",
            gone=self._stopped.gone(list(rows)),
            stopped_for=self._stopped.stopped_for(),
            gang_reason=gang_reason,
        )
        overdue = gangtimeout.overdue(job, status, time.time()) if self._gang else ""
        return self._expire(job, status, overdue) if overdue else status

    def _expire(self, job: Wire, status: RunStatus, why: str) -> RunStatus:
        """End the run, whose gang could not start within its timeout (:mod:`.gangtimeout`):
        failed on the cluster, or, where the Role may not patch Jobs, deleted as cancel does
        (its outcome kept here)."""
        ended = gangtimeout.failed(status, why, job)
        if not gangtimeout.expire(self._backend, job, why):
            self._final = ended
            self.cancel()
        return ended

    # --- logs ----------------------------------------------------------------------------

    def _log(self, pod: str, *, follow: bool) -> Any:
        core = client.CoreV1Api(self._backend.api)
        return core.read_namespaced_pod_log(
            pod, self._backend.namespace, follow=follow, _preload_content=False
        )

    @overload
    def logs(self, follow: Literal[False] = False, rank: int | None = None) -> str: ...

    @overload
    def logs(self, follow: Literal[True], rank: int | None = None) -> None: ...

    def logs(self, follow: bool = False, rank: int | None = None) -> str | None:
        """Every pod's output (those of ``rank`` only, when given), each line prefixed
        ``[rank N]``. ``follow``: written to the cell (stdout) as it comes, every pod's,
        retried ones too, until the run ends, returning None (as a cell's last line it is
        not shown twice)."""
        if follow:
            self._follow(rank)
            return None
        lines: list[str] = []
        stopped = self._stopped.stopped_for()
        for row in self.status.processes:
            if rank is not None and row.rank != rank:
                continue
            if row.phase == "Pending":
                continue  # no container yet
            try:
                text = self._log(row.name, follow=False).data.decode(errors="replace")
            except ApiException as error:
                if error.status not in (400, 404):  # not started, or gone meanwhile
                    action = f"dra.run: logs of {row.name}"
                    raise cluster_error(error, action, self._backend.api) from error
                text = ""
            lines += [f"[rank {row.rank}] {line}" for line in text.splitlines()]
            if row.name in stopped:
                lines.append(f"[rank {row.rank}] {_stopped_line(row.name, stopped[row.name])}")
        return "".join(f"{line}\n" for line in lines)

    def _follow(self, rank: int | None) -> str:
        out = self._out or sys.stdout
        lock = threading.Lock()
        written: list[str] = []
        followed: dict[str, threading.Thread] = {}
        problems: list[Exception] = []

        def emit(line: str) -> None:
            with lock:
                out.write(line)
                out.flush()
                written.append(line)

        def stream(pod: str, prefix: str) -> None:
            partial = b""
            try:
                for chunk in self._log(pod, follow=True).stream():
                    partial += chunk
                    *complete, partial = partial.split(b"\n")
                    for line in complete:
                        emit(f"{prefix}{line.decode(errors='replace')}\n")
            except ApiException as error:
                if error.status not in (400, 404):
                    problems.append(
                        cluster_error(error, f"dra.run: logs of {pod}", self._backend.api)
                    )
            except urllib3.exceptions.HTTPError as error:
                problems.append(cluster_error(error, f"dra.run: logs of {pod}", self._backend.api))
            if partial:
                emit(f"{prefix}{partial.decode(errors='replace')}\n")

        said: set[str] = set()
        while True:
            try:
                status = self.status
            except ClusterError:
                if not self._cancelled:
                    raise
                break
            stopped = self._stopped.stopped_for()
            for row in status.processes:
                if rank is not None and row.rank != rank:
                    continue
                if row.name in stopped and row.name not in said:
                    said.add(row.name)
                    emit(f"[rank {row.rank}] {_stopped_line(row.name, stopped[row.name])}\n")
                if row.name in followed or row.phase == "Pending" or row.name in stopped:
                    continue
                thread = threading.Thread(target=stream, args=(row.name, f"[rank {row.rank}] "))
                thread.name, thread.daemon = f"logs of {row.name}", True
                followed[row.name] = thread
                thread.start()
            if status.done and all(not t.is_alive() for t in followed.values()):
                break
            time.sleep(POLL_S)
        if problems:
            raise problems[0]
        return "".join(written)

    # --- waiting and ending --------------------------------------------------------------

    def wait(self, timeout: str | float | None = None) -> RunStatus:
        """Wait until the run ends (up to ``timeout``, a duration: None waits for good); its
        status then (phase ``Succeeded``, ``Failed``, ``Cancelled``; ``Pending`` or
        ``Running`` at the timeout: the run goes on)."""
        return wait_for_end(lambda: self.status, timeout, POLL_S)

    def wait_placed(self, timeout: float) -> RunStatus:
        """Wait until every pod of the run is placed on a node; at the deadline
        AllocationError with the scheduler's reason and our explain of a waiting pod's
        claim (the run is left as it is: the caller cancels it)."""
        deadline = time.monotonic() + timeout
        reported = ""
        while True:
            status = self.status
            job_done = status.done
            waiting = [r for r in status.processes if not r.node]
            expected = len(status.processes) >= self._expected()
            if job_done or (expected and not waiting):
                return status
            reason = _waiting_reason(status)
            if reason and reason != reported:
                reported = reason
                print(f"dra.run: run {self.name}: {reason}", file=sys.stderr)
            if time.monotonic() >= deadline:
                raise self._not_placed(status, timeout)
            time.sleep(POLL_S)

    def _expected(self) -> int:
        job = self._job()
        return int(((job or {}).get("spec") or {}).get("parallelism") or 1)

    def _not_placed(self, status: RunStatus, timeout: float) -> AllocationError:
        reason = _waiting_reason(status)
        why = f": {reason}" if reason else " (no answer from the scheduler yet)"
        message = f"dra.run: run {self.name} was not placed within {timeout:g} s{why}"
        explained = self.explain()
        if explained:
            message += "\ndra-jupyter's allocator on the cluster's slices:\n" + explained
        return AllocationError(message)

    def explain(self) -> str:
        """Our allocator's explanation for the claim of a pod not placed yet ("" when every
        pod is placed, or no claim is made yet)."""
        resource = client.ResourceV1Api(self._backend.api)
        for pod in self._pods():
            if pod["spec"].get("nodeName"):
                continue
            name = generated_claim(pod)
            if not name:
                continue
            try:
                claim = to_wire(
                    self._backend.api,
                    resource.read_namespaced_resource_claim(name, self._backend.namespace),
                )
                explained = explain_claim(self._backend, claim)
            except (ApiException, urllib3.exceptions.HTTPError, ClusterError):
                return ""
            keys = together_on(pod)
            if keys:
                explained += (
                    f"\n(it weighs devices only: the scheduler also keeps the run's pods on "
                    f"nodes that share {', '.join(keys)}, as same= asked)"
                )
            return explained
        return ""

    def cancel(self) -> None:
        """Delete the Job (a JobSet: it and its Jobs), its pods and their claims, its
        Service and its template; what is gone already is fine. A run that had ended keeps
        its outcome (cancel is the documented clean-up of a finished Job); only one still
        going reads ``Cancelled``."""
        self._final = self._ended()
        if self._deadline is not None:
            self._deadline.stop()
        api, namespace = self._backend.api, self._backend.namespace
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        resource = client.ResourceV1Api(api)
        action = f"dra.run: cancelling run {self.name}"
        if self.jobset:
            # the JobSet first, so that it makes no Job again; then the Jobs it made
            objects = client.CustomObjectsApi(api)
            self._call(
                action,
                "delete",
                "jobsets.jobset.x-k8s.io",
                _gone_is_fine(
                    lambda: objects.delete_namespaced_custom_object(
                        jobsets.GROUP,
                        jobsets.VERSION,
                        namespace,
                        jobsets.PLURAL,
                        self.name,
                        propagation_policy="Background",
                    )
                ),
            )
        made = [j["metadata"]["name"] for j in self._child_jobs()] if self.jobset else [self.name]
        pods, claims = self._pod_names(), list(self._claims())
        calls: list[tuple[str, Callable[[], object]]] = [
            *[
                (
                    "jobs.batch",
                    lambda job=job: batch.delete_namespaced_job(
                        job, namespace, propagation_policy="Background"
                    ),
                )
                for job in made
            ],
            *[
                (
                    "pods",
                    lambda pod=pod: core.delete_namespaced_pod(pod, namespace),
                )
                for pod in pods
            ],
            # their claims too: a claim whose pod is gone goes with it only once the
            # garbage collector gets to it (a pod the Job stopped can leave it allocated)
            *[
                (
                    "resourceclaims.resource.k8s.io",
                    lambda claim=claim: resource.delete_namespaced_resource_claim(claim, namespace),
                )
                for claim in claims
            ],
            ("services", lambda: core.delete_namespaced_service(self.name, namespace)),
            *gangs.deletions(api, namespace, self.name, self._gang),
            (
                "resourceclaimtemplates.resource.k8s.io",
                lambda: resource.delete_namespaced_resource_claim_template(self.name, namespace),
            ),
        ]
        for kind, call in calls:
            self._call(action, "delete", kind, _gone_is_fine(call))
        self._cancelled = True
        jobset = [self.name] if self.jobset else []
        for watched, names in ((JOBSETS, jobset), (JOBS, made), (PODS, pods), (CLAIMS, claims)):
            view = self._backend.running(watched)  # read-your-writes: gone from the views now
            if view is not None:
                for name in names:
                    view.deleted(name, namespace)

    def _ended(self) -> RunStatus | None:
        """Its status if the run has ended (succeeded or failed), else None."""
        try:
            status = self.status
        except ClusterError:
            return None  # unreadable or gone: cancel it all the same
        return status if status.phase in ("Succeeded", "Failed") else None

    def __repr__(self) -> str:
        try:
            status = self.status
        except ClusterError:
            return f"<Run {self.name} (not readable)>"
        pods = len(status.processes)
        return f"<Run {self.name}: {status.phase}, {pods} pod{'s' * (pods != 1)}>"


def _gone_is_fine(call: Callable[[], object]) -> Callable[[], None]:
    """``call`` (a delete) with 404 (gone already) as success."""

    def deleted() -> None:
        try:
            call()
        except ApiException as error:
            if error.status != 404:
                raise

    return deleted


def explain_claim(backend: ClusterAccess, claim: Wire) -> str:
    """Our allocator on the cluster's slices and the claims held now: why ``claim`` (a
    pod's, not allocated) waits, in a few lines."""
    inventory = backend.inventory(refresh=True)
    if not inventory.slices:
        if not backend.slices_readable:
            return "RBAC hides the cluster's ResourceSlices, so it cannot say more"
        return "the cluster publishes no devices (no ResourceSlices)"
    name = claim["metadata"]["name"]
    probe: Wire = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": backend.namespace},
        "spec": claim.get("spec") or {},
    }
    held = [r.to_object() for r in backend.holders() if r.name != name]
    slices, classes = inventory.patched_slices, inventory.device_classes
    strategy = backend.settings.strategy
    if Allocator(slices, classes, [], strategy).allocate([probe]) is None:
        idle = Allocator(slices, classes, [], strategy).explain([probe])
        head = "can never be met on this cluster, even with every device free"
        return "\n".join([head, *idle.summary(named=False).splitlines()])
    explanation = Allocator(slices, classes, held, strategy).explain([probe])
    if explanation.satisfiable:
        return f"devices are free now on node {explanation.node}; kube-scheduler will retry"
    lines = ["not now: the devices it needs are held by others"]
    return "\n".join(lines + explanation.summary(named=False).splitlines())


def _waiting_reason(status: RunStatus) -> str:
    """Why the run is not placed: a gang's word (:func:`.gangs.waiting`), else the
    scheduler's reason on a pod it has not placed (the run's message says it only while no
    pod runs), else the run's message."""
    if gangs.is_waiting(status.message):
        return status.message
    waiting = [r.reason for r in status.processes if not r.node and r.reason]
    return waiting[0] if waiting else status.message


def together_on(pod: Wire) -> list[str]:
    """The topology keys of the pod's required pod affinity (``same=`` of a run's nodes)."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    terms = (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    return [str(t["topologyKey"]) for t in terms if t.get("topologyKey")]


def _stopped_line(pod: str, why: str) -> str:
    return f"dra.run: pod {pod} was stopped: {why}"


def submit(backend: ClusterAccess, spec: JobSpec, out: IO[str] | None = None) -> JobRun:
    """Make the run's template, then its Job (or JobSet), which then owns the template, then
    (more than one pod, a Job) its Service, owned by the Job (JobSet), then (a gang) its
    Workload and PodGroup, owned by the Job (its pods wait for the PodGroup to appear before
    kube-scheduler looks at them), and a timer ends the gang at its ``gang_timeout``
    (:mod:`.gangtimeout`); what was made is deleted if a step fails. The template
    before the Job: Kueue reads it as soon as the Job exists, and a Job whose template is
    not there yet leaves its Workload marked inadmissible for good (Kueue 0.17 never admits
    it, even once quota is free)."""
    api, namespace = backend.api, backend.namespace
    run = JobRun(backend, spec.name, out, jobset=spec.jobset)
    run._gang = bool(spec.pod_group)
    action = f"dra.run: creating run {spec.name}"
    templates = "resourceclaimtemplates.resource.k8s.io"
    resource = client.ResourceV1Api(api)
    run._call(
        action,
        "create",
        templates,
        lambda: resource.create_namespaced_resource_claim_template(
            namespace, to_model(client.V1ResourceClaimTemplate, jobs.claim_template(spec))
        ),
    )
    try:
        if spec.jobset:
            job: Wire = run._call(
                action,
                "create",
                "jobsets.jobset.x-k8s.io",
                lambda: client.CustomObjectsApi(api).create_namespaced_custom_object(
                    jobsets.GROUP, jobsets.VERSION, namespace, jobsets.PLURAL, jobsets.jobset(spec)
                ),
            )
        else:
            created = run._call(
                action,
                "create",
                "jobs.batch",
                lambda: client.BatchV1Api(api).create_namespaced_job(
                    namespace, to_model(client.V1Job, jobs.job(spec))
                ),
            )
            job = to_wire(api, created)
    except BaseException:  # only the template was made: a Job of that name may be another's
        run._call(
            action,
            "delete",
            templates,
            _gone_is_fine(
                lambda: resource.delete_namespaced_resource_claim_template(spec.name, namespace)
            ),
        )
        raise
    try:
        owner = jobs.owned_by({"metadata": {}}, job)["metadata"]
        run._call(
            action,
            "patch",
            templates,
            lambda: resource.patch_namespaced_resource_claim_template(
                spec.name, namespace, {"metadata": owner}
            ),
        )
        if spec.indexed and not spec.jobset:  # JobSet makes its own
            service = jobs.owned_by(jobs.rendezvous_service(spec), job)
            run._call(
                action,
                "create",
                "services",
                lambda: client.CoreV1Api(api).create_namespaced_service(
                    namespace, to_model(client.V1Service, service)
                ),
            )
        for resource_name, create in gangs.creations(api, spec, job):
            run._call(action, "create", resource_name, create)
    except BaseException:
        run.cancel()
        raise
    if spec.pod_group and spec.gang_timeout is not None:
        run._deadline = gangtimeout.Deadline(lambda: run.status, spec.gang_timeout, spec.name)
    return run


def list_runs(backend: ClusterAccess, out: IO[str] | None = None) -> list[JobRun]:
    """The user's runs in the namespace (by their labels: Jobs and JobSets), oldest first."""
    batch = client.BatchV1Api(backend.api)
    selector = f"{COMPONENT_LABEL}={COMPONENT},{USER_LABEL}={label_value(backend.owner.user)}"
    labels = {COMPONENT_LABEL: COMPONENT, USER_LABEL: label_value(backend.owner.user)}
    view = backend.watched(JOBS)
    if view is not None:
        found = [(j, False) for j in view.list(labels)]
    else:
        listed = JobRun(backend, "", out)._call(
            "dra.runs",
            "list",
            "jobs.batch",
            lambda: batch.list_namespaced_job(backend.namespace, label_selector=selector),
        )
        found = [(to_wire(backend.api, j), False) for j in listed.items]
    found += [(j, True) for j in jobsets.listed(backend, selector, labels)]
    found = [
        (j, jobset)
        for j, jobset in found
        if (j["metadata"].get("annotations") or {}).get(USER_ANNOTATION, backend.owner.user)
        == backend.owner.user
    ]
    found.sort(
        key=lambda f: (f[0]["metadata"].get("creationTimestamp") or "", f[0]["metadata"]["name"])
    )
    return [
        JobRun(
            backend,
            j["metadata"]["name"],
            out,
            j["metadata"].get("creationTimestamp") or "",
            jobset=jobset,
        )
        for j, jobset in found
    ]

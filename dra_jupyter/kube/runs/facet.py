"""The Kubernetes backend's runs (:class:`dra_jupyter.types.runs.Runs`): ``dra.run`` is
planned, then started, and the user's runs found by their labels.

The plan decides what runs it: a bare pod with a claim of the session (:mod:`.run`), or,
with ``nodes=N`` or a Kueue queue (given, or the admin's default), a Job of N pods, each
with the devices asked for (:mod:`.jobs`, :mod:`.jobrun`; a JobSet where the cluster serves
one). It refuses in one line, with nothing made, what could not start: a command that
cannot be run, no image, bad durations, a claim that could never be met, a bad number of
pods or retries, a ``gang_timeout`` for one pod, a name a Job cannot have, a queue the
cluster does not have. The start then makes the pod's claim and the pod, or the Job's
objects.
"""

from __future__ import annotations

import math
import re
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from dra_jupyter.claimspec import RUN
from dra_jupyter.durations import parse_duration, parse_lease
from dra_jupyter.errors import InvalidInputError, NotFoundError, shown
from dra_jupyter.kube.runs import gangtimeout, jobrun, podrun, run
from dra_jupyter.kube.runs.jobs import JobSpec, check_name, check_nodes, check_retries, placement
from dra_jupyter.types import claim_prefix
from dra_jupyter.types.runs import START_TIMEOUT, Run, RunClaims, RunRequest

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess


@dataclass(frozen=True)
class PodPlan:
    """A run in one pod (:func:`.run.launch`): the pod, the claim's keywords (made by the
    session at the start), how long it may wait to be placed, then to start."""

    workload: run.Workload
    claims: RunClaims
    claim: Mapping[str, Any]
    timeout: float
    start_timeout: float | None


@dataclass(frozen=True)
class JobPlan:
    """A run as a Job of pods (:mod:`.jobrun`), the cluster found to offer what it asks;
    ``follow``: seconds to wait for every pod to be placed before its logs are followed
    until it ends (None: returned at once)."""

    spec: JobSpec
    follow: float | None = None


KubePlan = PodPlan | JobPlan


class KubeRuns:
    """The runs of one user in one namespace: plan, start, find, list."""

    def __init__(
        self,
        backend: ClusterAccess,
        *,
        image: str = "",
        queue: str = "",
        out: IO[str] | None = None,
    ) -> None:
        self.backend = backend
        self.image = image  # the settings' image of a run's pods ("": the notebook pod's)
        self.queue = queue  # the admin's Kueue LocalQueue for runs ("": none)
        self.out = out  # where a run's logs go (None: sys.stdout when it runs)

    def plan(self, request: RunRequest, claims: RunClaims) -> KubePlan:
        """A pod, or a Job where ``nodes`` or a queue asks for one; refused in one line,
        with nothing made, where it could not start (see the module)."""
        if request.same_nodes and request.nodes is None and not request.queue:
            raise request.same_nodes_refused(
                "without nodes= this run is one pod: give nodes=N (a Job), or leave it out"
            )
        place_s = _or_forever(parse_duration(request.timeout, what="timeout"))
        start_timeout = START_TIMEOUT if request.start_timeout is ... else request.start_timeout
        start_wait = parse_duration(start_timeout, what="start_timeout")
        workload = run.plan(
            self.backend,
            request.command,
            image=request.image or self.image or None,
            name=request.name,
            node_selector=request.node_selector,
        )
        queue = self.queue if request.queue is None else request.queue
        if request.nodes is None and not queue:
            gangtimeout.parse(request.gang_timeout, 1)  # refused where given: one pod
            _group(request, claims, 1)
            return PodPlan(workload, claims, request.claim, place_s, start_wait)
        # same=: device attributes in each pod's claim, node labels among the pods
        per_pod = {k: v for k, v in request.claim.items() if k != "same"}
        if request.same_devices:
            per_pod["same"] = list(request.same_devices)
        claim_spec = claims.build(per_pod)
        lease = parse_lease(request.lease)
        backend = self.backend
        nodes = check_nodes(request.nodes if request.nodes is not None else 1)
        retries = check_retries(request.retries)
        gang_timeout = gangtimeout.parse(request.gang_timeout, nodes)
        group_claim = _group(request, claims, nodes)
        name = (
            workload.name or f"{claim_prefix(backend.owner.user)[:30]}-run-{secrets.token_hex(3)}"
        )
        spec = JobSpec(
            name=check_name(name),
            namespace=backend.namespace,
            user=backend.owner.user,
            image=workload.image,
            argv=workload.argv,
            claim_spec=claim_spec,
            nodes=nodes,
            queue=queue,
            lease=lease,
            retries=retries,
            node_selector=workload.node_selector,
            same_nodes=request.same_nodes,
            gang_timeout=gang_timeout,
            group_claim=group_claim,
        )
        return JobPlan(jobrun.prepare(backend, spec), place_s if request.wait else None)

    def start(self, plan: KubePlan) -> jobrun.JobRun | podrun.PodRun:
        """A pod: its claim made, then the pod started with it and followed until it
        starts (see :func:`.run.launch`). A Job: made, then returned at once, or with
        ``follow`` once it ended, its logs followed on the way (AllocationError with the
        scheduler's reason when it was not placed in time; cancelled then, and on an
        interrupt)."""
        if isinstance(plan, PodPlan):
            claim = plan.claims.request(plan.claim)
            return run.launch(
                self.backend,
                plan.workload,
                claim,
                timeout=plan.timeout,
                start_timeout=plan.start_timeout,
                out=self.out or sys.stdout,
            )
        spec = plan.spec
        made = jobrun.submit(self.backend, spec, self.out)
        said = "".join(f"; {part}" for part in (placement(spec), spec.gang) if part)
        print(
            f"dra.run: run {spec.name} created ({spec.launcher}, {spec.nodes} "
            f"pod{'s' * (spec.nodes > 1)}{said})",
            file=sys.stderr,
        )
        if plan.follow is not None:
            try:
                made.wait_placed(plan.follow)
                made.logs(follow=True)
            except BaseException:  # an interrupt too: nothing is left running
                made.cancel()
                raise
        return made

    def runs(self) -> list[jobrun.JobRun | podrun.PodRun]:
        """The user's runs in the namespace, Jobs and bare pods, found by their labels
        (see :func:`.jobrun.list_runs`, :func:`.podrun.list_pod_runs`), oldest first."""
        jobs = jobrun.list_runs(self.backend, self.out)
        pods = podrun.list_pod_runs(self.backend, self.out)
        return sorted([*jobs, *pods], key=lambda r: (r.made, r.name))

    def run(self, name: str) -> Run:
        """The user's run ``name`` (NotFoundError when there is none)."""
        for found in self.runs():
            if found.name == name:
                return found
        plain = name if re.fullmatch(r"[\w.-]{1,253}", name) else shown(name)
        raise NotFoundError(f"no run {plain}; dra.runs() lists yours")

    def every_users(self) -> list[tuple[str, Run]]:
        """The user's own runs, each with the user: a cluster's runs are read as its user
        may read them."""
        return [(self.backend.owner.user, r) for r in self.runs()]


def _group(request: RunRequest, claims: RunClaims, nodes: int) -> Mapping[str, Any] | None:
    """The spec of the claim of ``group=`` (devices the run's pods share; None: not
    given), refused in one line where it is no claim's keywords or the run is one pod."""
    if request.group is None:
        return None
    if nodes == 1:
        raise InvalidInputError(
            "group= asks for devices that the pods of nodes=N share; this run is one pod: "
            "ask for them with its own keywords, or give nodes=N"
        ).said_by(RUN)
    if not isinstance(request.group, Mapping):
        raise InvalidInputError(
            f"group={shown(request.group)} is not a request's keywords; give a dict, "
            "e.g. group={'device_class': 'channel.example.com'}"
        ).said_by(RUN)
    return claims.build(dict(request.group))


def _or_forever(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds

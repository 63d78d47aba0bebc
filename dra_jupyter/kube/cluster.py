"""What only a cluster does, the Kubernetes backend's ``cluster`` facet
(:class:`dra_jupyter.types.ClusterOps`): a made claim allocated now by our allocator
(:mod:`.reserve`), work in a pod that uses a claim (:mod:`.run`), and runs of one or more
pods as a Job, each pod with devices of its own (:mod:`.jobs`, :mod:`.jobrun`)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from dra_jupyter.kube import reserve
from dra_jupyter.kube.access import ClusterAccess
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.runs import jobrun, podrun, run
from dra_jupyter.kube.runs.jobs import JobSpec, check_name, check_nodes, check_retries, placement
from dra_jupyter.types import ClaimRecord, Command, HeldClaim, RunPlan, claim_prefix


class KubeCluster:
    """The cluster operations of one backend (``backend.cluster``)."""

    def __init__(self, backend: ClusterAccess, out: IO[str] | None = None) -> None:
        self.backend = backend
        self.out = out  # where a run's logs go (None: sys.stdout when it runs)

    def reserve(self, record: ClaimRecord) -> ClaimRecord:
        """Allocate a new claim with our allocator and write it (see :mod:`.reserve`); the
        claim is deleted if that fails."""
        backend = self.backend
        try:
            return reserve.reserve(backend, record.to_object())
        except BaseException:
            claims = ClaimClient(backend.api, backend.namespace)
            backend.retrying(lambda: claims.delete(record.name))
            raise

    def plan_run(
        self,
        command: Command,
        *,
        image: str | None,
        name: str | None = None,
        node_selector: Mapping[str, str] | None = None,
    ) -> RunPlan:
        """``dra.run``'s pod, checked before its claim is made (see :func:`.run.plan`)."""
        return run.plan(self.backend, command, image=image, name=name, node_selector=node_selector)

    def launch(
        self, plan: RunPlan, claim: HeldClaim, *, timeout: float, start_timeout: float | None
    ) -> podrun.PodRun:
        """Start the pod with ``claim`` and follow it (see :func:`.run.launch`)."""
        return run.launch(
            self.backend,
            plan,
            claim,
            timeout=timeout,
            start_timeout=start_timeout,
            out=self.out or sys.stdout,
        )

    def submit(
        self,
        plan: RunPlan,
        claim_spec: Mapping[str, Any],
        *,
        nodes: int = 1,
        queue: str = "",
        lease: float | None = None,
        retries: int = 0,
        same_nodes: Sequence[str] = (),
        follow: float | None = None,
    ) -> jobrun.JobRun:
        """Start ``plan`` as a Job of ``nodes`` pods, each with a claim of ``claim_spec``
        (see :mod:`.jobs`); refused in one line, with nothing made, for ``nodes`` below 1,
        a bad name, or a ``queue`` the cluster does not have; ``same_nodes``: node label
        keys whose value all its pods' nodes share (:func:`.jobs.pod_affinity`). Returns
        at once, or with ``follow`` (seconds to be placed) once it ended, its logs followed
        (cancelled when it is not placed in time, and on an interrupt)."""
        backend = self.backend
        nodes = check_nodes(nodes)
        retries = check_retries(retries)
        name = plan.name or f"{claim_prefix(backend.owner.user)[:30]}-run-{secrets.token_hex(3)}"
        spec = JobSpec(
            name=check_name(name),
            namespace=backend.namespace,
            user=backend.owner.user,
            image=plan.image,
            argv=plan.argv,
            claim_spec=claim_spec,
            nodes=nodes,
            queue=queue,
            lease=lease,
            retries=retries,
            node_selector=plan.node_selector,
            same_nodes=tuple(same_nodes),
        )
        spec = jobrun.prepare(backend, spec)
        made = jobrun.submit(backend, spec, self.out)
        placed = placement(spec)
        print(
            f"dra.run: run {name} created ({spec.launcher}, {nodes} pod{'s' * (nodes > 1)}"
            f"{'; ' * bool(placed)}{placed})",
            file=sys.stderr,
        )
        if follow is not None:
            try:
                made.wait_placed(follow)
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

"""What only a cluster does, the Kubernetes backend's ``cluster`` facet
(:class:`dra_jupyter.types.ClusterOps`): a made claim allocated now by our allocator
(:mod:`.reserve`), and work in a pod that uses a claim (:mod:`.run`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import IO

from dra_jupyter.kube import reserve, run
from dra_jupyter.kube.access import ClusterAccess
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.types import ClaimRecord, Command, HeldClaim, RunPlan


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
    ) -> run.Run:
        """Start the pod with ``claim`` and follow it (see :func:`.run.launch`)."""
        return run.launch(
            self.backend,
            plan,
            claim,
            timeout=timeout,
            start_timeout=start_timeout,
            out=self.out or sys.stdout,
        )

"""``dra.run`` and a user's runs, for a :class:`~dra_jupyter.api.session.Session`: checked
before anything is made, then started on the backend (a cluster's pods or Job, or this
machine's launcher, :mod:`dra_jupyter.runner`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from dra_jupyter.api.runcommand import local_argv
from dra_jupyter.backends import open_runs
from dra_jupyter.claimspec import (
    CLAIM_KEYS,
    REQUEST_KEYS,
    RUN,
    RUN_KEYS,
    Same,
    parse_same,
    unknown_keyword,
)
from dra_jupyter.durations import parse_duration, parse_lease, parse_timeout
from dra_jupyter.errors import (
    InvalidInputError,
    NotFoundError,
    said_by,
    shown,
)
from dra_jupyter.types import (
    Command,
)
from dra_jupyter.types import runs as runstatus

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from dra_jupyter.api.session import Session

START_TIMEOUT = "5m"  # dra.run's start_timeout where not given: a pod's time to start


class Launcher:
    """``dra.run`` and the runs of one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def run(
        self,
        command: Command = None,
        *,
        image: str | None = None,
        name: str | None = None,
        timeout: str | float | None = "5m",
        start_timeout: str | float | EllipsisType | None = ...,  # ...: not given ('5m')
        node_selector: Mapping[str, str] | None = None,
        nodes: int | None = None,
        queue: str | None = None,
        lease: str | float | None = None,
        retries: int = 0,
        wait: bool = False,
        **spec: Any,
    ) -> runstatus.Run:
        """Run ``command`` with devices. Kubernetes: in a pod (see
        :mod:`dra_jupyter.kube.runs.run`): the pod is checked first, then its claim is made (as
        :meth:`request` makes one), then the pod started with it; ``nodes=N`` (or a Kueue
        ``queue``, given or the admin's default) runs it as a Job of N pods, each with the
        devices asked for (see :mod:`dra_jupyter.kube.runs.jobs`). One machine (local,
        service): in the background, as a process of this user that holds its own claim
        (:mod:`dra_jupyter.runner`), its claim ended by ``lease``. Returned at once (once
        a run here has its devices or waits in line for them: ``timeout``), or followed
        until it ends with ``wait=True``. Every backend's run is a
        :class:`dra_jupyter.types.runs.Run` (``status``, ``logs``, ``cancel``, ``wait``)."""
        unknown = sorted(set(spec) - set(CLAIM_KEYS))
        if unknown:
            raise unknown_keyword(unknown[0], RUN_KEYS).said_by(RUN)
        cluster = self._session.backend.cluster
        same = self._same(spec)
        if same.nodes and (cluster is None or (nodes is None and not queue)):
            where = (
                f"{self._session.backend.capabilities.where} runs one process: leave it out"
                if cluster is None
                else "without nodes= this run is one pod: give nodes=N (a Job), or leave it out"
            )
            raise InvalidInputError(
                f"same={shown(spec['same'])} keeps the pods of a multi-node run on nodes that "
                f"share {', '.join(same.nodes)}; {where}"
            ).said_by(RUN)
        if cluster is None:
            nodes = 1 if nodes is None else _nodes(nodes)  # a cluster's Job checks its own
            pod = {
                "image": image,
                "start_timeout": start_timeout is not ...,  # any value given: refused
                "node_selector": node_selector,
                "queue": queue,
            }
            if retries:
                raise InvalidInputError(
                    "retries= applies to Jobs on Kubernetes; on "
                    f"{self._session.backend.capabilities.where} a run is one process: leave it out"
                ).said_by(RUN)
            run = self._run_here(command, spec, name, timeout, lease, nodes, pod)
            if wait:
                run.logs(follow=True)
            return run
        place_s = _or_forever(parse_duration(timeout, what="timeout"))
        start_wait = parse_duration(
            START_TIMEOUT if start_timeout is ... else start_timeout, what="start_timeout"
        )
        plan = cluster.plan_run(
            command,
            image=image or self._session.settings.image or None,
            name=name,
            node_selector=node_selector,
        )
        queue = self._session.settings.kueue_queue if queue is None else queue
        if nodes is not None or queue:
            # same=: device attributes in each pod's claim, node labels among the pods
            per_pod = {k: v for k, v in spec.items() if k != "same"}
            if same.devices:
                per_pod["same"] = list(same.devices)
            claim_spec = self._session.build(per_pod, "", RUN_KEYS)
            self._session.check_possible(per_pod, claim_spec, RUN)
            return cluster.submit(
                plan,
                claim_spec["spec"],
                nodes=nodes if nodes is not None else 1,
                queue=queue,
                lease=parse_lease(lease),
                retries=retries,
                same_nodes=same.nodes,
                follow=place_s if wait else None,
            )
        claim = self._session.request(apply_env=False, **spec)
        return cluster.launch(plan, claim, timeout=place_s, start_timeout=start_wait)

    def _same(self, spec: Mapping[str, Any]) -> Same:
        """``same=`` of a run split into device attributes and node labels
        (:func:`dra_jupyter.claimspec.parse_same`; the cluster's drivers name attributes)."""
        if spec.get("same") is None:
            return Same()
        drivers = {str(s["spec"]["driver"]) for s in self._session.inventory.slices}
        return parse_same(spec["same"], where=RUN, drivers=drivers)

    def _run_here(  # dra.run's keywords, passed on
        self,
        command: Command,
        spec: dict[str, Any],
        name: str | None,
        timeout: str | float | None,
        lease: str | float | None,
        nodes: int,
        pod: Mapping[str, Any],
    ) -> runstatus.Run:
        """``dra.run`` on one machine: everything is checked (the command, the keywords,
        that the claim could ever be met) before the run is recorded and started."""
        where = self._session.backend.capabilities.where
        if nodes > 1:
            raise InvalidInputError(
                f"nodes={nodes} spreads a run over several machines, which needs the "
                f"Kubernetes backend; {where} runs one process: use nodes=1"
            ).said_by(RUN)
        for key, value in pod.items():
            if value:
                raise InvalidInputError(
                    f"{key}= applies to pods on Kubernetes; on {where} the command runs as "
                    "your own process: leave it out"
                ).said_by(RUN)
        with said_by(RUN):
            argv = local_argv(command)
        parse_timeout(timeout)
        if parse_lease(lease) is not None and not self._session.backend.capabilities.leases:
            raise InvalidInputError(f"lease= does not apply on {where}").said_by(RUN)
        claim = self._session.build(spec, "", REQUEST_KEYS, RUN)  # its keywords, as dra.run's
        self._session.check_possible(spec, claim, RUN)
        wanted = {"argv": argv, "claim": spec, "timeout": timeout, "lease": lease}
        return self._runs.start({**wanted, "cwd": str(Path.cwd())}, name or "")

    @cached_property
    def _runs(self) -> runstatus.Runs:
        return open_runs(self._session.settings, self._session.backend)

    def runs(self) -> list[runstatus.Run]:
        """This user's runs, oldest first: a cluster's (``cluster.runs()``), else those of
        the user's ledger on this machine (also those started from another kernel)."""
        cluster = self._session.backend.cluster
        if cluster is not None:
            return list(cluster.runs())
        return list(self._runs.runs())

    def every_users_runs(self) -> list[tuple[str, runstatus.Run]]:
        """Every user's runs with their users, oldest first: those of this machine's book
        (an admin's view in the lab panel); on a cluster this user's own."""
        if self._session.backend.cluster is not None:
            return [(self._session.owner.user, r) for r in self.runs()]
        return list(self._runs.every_users())

    def find_run(self, name: str) -> runstatus.Run:
        """This user's run ``name`` (NotFoundError when there is none)."""
        if self._session.backend.cluster is None:
            return self._runs.run(name)
        for found in self.runs():
            if found.name == name:
                return found
        plain = name if re.fullmatch(r"[\w.-]{1,253}", name) else shown(name)
        raise NotFoundError(f"no run {plain}; dra.runs() lists yours")


def _or_forever(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def _nodes(nodes: object) -> int:
    """``nodes=``: a whole number of at least 1 (machines, or pods on a cluster)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InvalidInputError(
            f"nodes={shown(nodes)} is not a number of machines; use a whole number of at "
            "least 1 (nodes=1: one machine)"
        ).said_by(RUN)
    return nodes

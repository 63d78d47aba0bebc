"""``dra.run`` and a user's runs, for a :class:`~dra_jupyter.api.session.Session`: its
keywords read once (:class:`~dra_jupyter.types.runs.RunRequest`), then planned by the
backend's runs (:func:`dra_jupyter.backends.open_runs`), which refuse what they cannot do
before anything is made, then started there (a cluster's pods or Job, or this machine's
launcher, :mod:`dra_jupyter.runner`)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from dra_jupyter.backends import open_runs
from dra_jupyter.claimspec import (
    CLAIM_KEYS,
    REQUEST,
    REQUEST_KEYS,
    RUN,
    RUN_KEYS,
    Same,
    parse_same,
    unknown_keyword,
)
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.types import Command
from dra_jupyter.types import runs as runstatus
from dra_jupyter.types.runs import RunRequest

if TYPE_CHECKING:
    from dra_jupyter.api.claim import Claim
    from dra_jupyter.api.session import Session


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
        gang_timeout: str | float | EllipsisType | None = ...,  # ...: not given ('1h')
        group: Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> runstatus.Run:
        """Run ``command`` with devices. Kubernetes: in a pod (see
        :mod:`dra_jupyter.kube.runs.run`): the pod is checked first, then its claim is made (as
        :meth:`request` makes one), then the pod started with it; ``nodes=N`` (or a Kueue
        ``queue``, given or the admin's default) runs it as a Job of N pods, each with the
        devices asked for (see :mod:`dra_jupyter.kube.runs.jobs`), a gang where the cluster
        places them all together or none, failed when it cannot start within
        ``gang_timeout`` (:mod:`dra_jupyter.kube.runs.gangtimeout`). One machine (local,
        service): in the background, as a process of this user that holds its own claim
        (:mod:`dra_jupyter.runner`), its claim ended by ``lease``. Returned at once (once
        a run here has its devices or waits in line for them: ``timeout``), or followed
        until it ends with ``wait=True``. Every backend's run is a
        :class:`dra_jupyter.types.runs.Run` (``status``, ``logs``, ``cancel``, ``wait``)."""
        unknown = sorted(set(spec) - set(CLAIM_KEYS))
        if unknown:
            raise unknown_keyword(unknown[0], RUN_KEYS).said_by(RUN)
        runs = self._runs  # the backend is opened before the keywords are read further
        same = self._same(spec)
        request = RunRequest(
            command,
            claim=spec,
            same_devices=same.devices,
            same_nodes=same.nodes,
            image=image,
            name=name,
            timeout=timeout,
            start_timeout=start_timeout,
            node_selector=node_selector,
            nodes=nodes,
            queue=queue,
            lease=lease,
            retries=retries,
            wait=wait,
            gang_timeout=gang_timeout,
            group=group,
        )
        try:
            return runs.start(runs.plan(request, _SessionClaims(self._session)))
        except DraJupyterError as err:
            if err.caller == REQUEST:  # its claim's refusal: the user called dra.run
                err.said_by(RUN)
            raise

    def _same(self, spec: Mapping[str, Any]) -> Same:
        """``same=`` of a run split into device attributes and node labels
        (:func:`dra_jupyter.claimspec.parse_same`; the cluster's drivers name attributes)."""
        if spec.get("same") is None:
            return Same()
        drivers = {str(s["spec"]["driver"]) for s in self._session.inventory.slices}
        return parse_same(spec["same"], where=RUN, drivers=drivers)

    @cached_property
    def _runs(self) -> runstatus.Runs[Any]:
        return open_runs(self._session.settings, self._session.backend)

    def runs(self) -> list[runstatus.Run]:
        """This user's runs, oldest first: a cluster's, else those of the user's ledger on
        this machine (also those started from another kernel)."""
        return list(self._runs.runs())

    def every_users_runs(self) -> list[tuple[str, runstatus.Run]]:
        """Every user's runs with their users, oldest first: those of this machine's book
        (an admin's view in the lab panel); on a cluster this user's own."""
        return list(self._runs.every_users())

    def find_run(self, name: str) -> runstatus.Run:
        """This user's run ``name`` (NotFoundError when there is none)."""
        return self._runs.run(name)


class _SessionClaims:
    """A run's claim as its session checks, builds or makes it
    (:class:`~dra_jupyter.types.runs.RunClaims`)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def check(self, spec: Mapping[str, Any]) -> None:
        """The claim of a run on one machine, whose launcher makes it: checked now, its
        errors said by ``dra.run``."""
        claim = self._session.build(spec, "", REQUEST_KEYS, RUN)  # its keywords, as dra.run's
        self._session.check_possible(spec, claim, RUN)

    def build(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        """The spec of each pod's claim of a Job."""
        claim = self._session.build(spec, "", RUN_KEYS)
        self._session.check_possible(spec, claim, RUN)
        spec_of: Mapping[str, Any] = claim["spec"]
        return spec_of

    def request(self, spec: Mapping[str, Any]) -> Claim:
        """A bare pod's claim, made now as ``dra.request`` makes one (its environment is
        the pod's, not this process's)."""
        return self._session.request(apply_env=False, **spec)

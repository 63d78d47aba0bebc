"""A gang's deadline: ``dra.run(..., nodes=N, gang_timeout="1h")`` fails the run when its N
pods could not start together within that time (:data:`~dra_jupyter.types.runs.GANG_TIMEOUT`
where not given; None waits until they can).

kube-scheduler 1.37 gives a gang no deadline: the Workload API has none (a gang's policy is
``minCount`` alone), and the one timeout of its GangScheduling plugin, five minutes
(``permitTimeoutDuration``), is how long pods placed in one cycle wait at its Permit stage
for the rest of their gang; past it they go back to the scheduling queue and are tried
again, for good. What the scheduler writes is the PodGroup's ``PodGroupInitiallyScheduled``
condition, ``False``, reason ``Unschedulable``, with its message
(``minCount (3) cannot be satisfied: 2 scheduled, 0 remaining``), and the pods'
``PodScheduled`` condition; nothing ends the pods or the Job. So the deadline is ours:

* the Job carries it (the annotation ``dra-jupyter/gang-timeout``: seconds after the Job was
  made), so that whoever reads the run's status ends it: the process that made the run (a
  timer, :class:`Deadline`) and any other (``dra.runs()`` in another kernel, the lab panel's
  server), from its watched views where it has them;
* a gang past its deadline whose pods are not placed is ended (:func:`expire`): the Job is
  annotated with why (``dra-jupyter/gang-expired``: ``the gang of N could not start within
  T: <the scheduler's reason>``) and its ``activeDeadlineSeconds`` shortened, so that the Job
  controller fails it (``DeadlineExceeded``) and deletes its pods, whose claims go with them
  (none of them was allocated: the gang held nothing); its PodGroup and Workload are
  deleted. The Job stays, Failed with that reason, as every ended run does (until its TTL or
  ``cancel``): every process reads the same outcome.

A gang that no process reads past its deadline (its kernel gone, no panel open) waits on,
holding nothing, until the next read ends it. Where the Role may not patch Jobs (a
``deploy/hub-rbac.yaml`` of before), the run is deleted as ``cancel`` deletes it, and only
the process that ended it keeps its outcome.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable
from types import EllipsisType
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import RUN
from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.kube.connect import cluster_error, to_wire
from dra_jupyter.kube.runs import gangs
from dra_jupyter.kube.runs.jobs import GANG_EXPIRED_ANNOTATION, GANG_TIMEOUT_ANNOTATION
from dra_jupyter.kube.views import JOBS
from dra_jupyter.model.objects import Wire
from dra_jupyter.types.runs import GANG_TIMEOUT, RunStatus

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

log = logging.getLogger("dra_jupyter")

RECHECK_S = 2.0  # past the deadline, how often the timer reads a gang that still waits
ENDS_AT_ONCE = 1  # activeDeadlineSeconds that fails the Job at the controller's next look


def parse(value: str | float | EllipsisType | None, nodes: int) -> float | None:
    """``gang_timeout`` in seconds (None: no limit; :data:`GANG_TIMEOUT` where not given,
    ``...``), or InvalidInputError in one line: not a duration, 0, or given to a run of one
    pod (``nodes``: the run's pods), which has no gang."""
    if value is ...:
        value = GANG_TIMEOUT
    elif nodes == 1:
        raise InvalidInputError(
            "gang_timeout= is how long the pods of nodes=N may wait to start together; this "
            "run is one pod: give nodes=N, or leave it out"
        ).said_by(RUN)
    seconds = parse_duration(value, what="gang_timeout")
    if seconds == 0:
        raise InvalidInputError(
            "gang_timeout: must be more than 0 (the gang would fail before kube-scheduler "
            "tried it); give e.g. '30m', or None to wait until it can start"
        ).said_by(RUN)
    return seconds


def said(seconds: float) -> str:
    """A duration as the user writes one: ``1h``, ``1h30m``, ``90s`` is ``1m30s``, ``2.5s``."""
    if seconds != int(seconds) or seconds < 60:
        return f"{seconds:g}s"
    whole = int(seconds)
    counts = (whole // 86400, whole % 86400 // 3600, whole % 3600 // 60, whole % 60)
    return "".join(f"{n}{unit}" for n, unit in zip(counts, "dhms", strict=True) if n)


def timeout_of(job: Wire) -> float | None:
    """The gang's timeout in seconds as its Job carries it (None: none, or unreadable)."""
    text = (job["metadata"].get("annotations") or {}).get(GANG_TIMEOUT_ANNOTATION)
    try:
        seconds = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def deadline(job: Wire) -> float | None:
    """When the gang of ``job`` gives up (seconds since the epoch; None: no deadline)."""
    seconds = timeout_of(job)
    made = job["metadata"].get("creationTimestamp")
    if seconds is None or not isinstance(made, str) or not made:
        return None
    return dt.datetime.fromisoformat(made.replace("Z", "+00:00")).timestamp() + seconds


def expired(job: Wire) -> str:
    """Why the run of ``job`` failed, once its gang's deadline ended it ("" until then)."""
    return str((job["metadata"].get("annotations") or {}).get(GANG_EXPIRED_ANNOTATION) or "")


def overdue(job: Wire, status: RunStatus, now: float) -> str:
    """The words that end the run (``status``: its status now, from ``job`` as read) when
    its gang is past its deadline and still waits to start, no pod placed and none ever
    ended; "" otherwise."""
    ends = deadline(job)
    counts = job.get("status") or {}
    if (
        ends is None
        or now < ends
        or expired(job)
        or status.phase != "Pending"
        or not gangs.is_waiting(status.message)
        or any(row.node for row in status.processes)
        or int(counts.get("succeeded") or 0) + int(counts.get("failed") or 0)
    ):
        return ""
    seconds = timeout_of(job) or 0.0
    head, _, why = status.message.partition(": ")
    nodes = head.removeprefix(gangs.WAITING).strip()
    return " ".join(f"the gang of {nodes} could not start within {said(seconds)}: {why}".split())


def failed(status: RunStatus, message: str, job: Wire) -> RunStatus:
    """``status`` once the gang's deadline ended the run with ``message``."""
    ended = deadline(job) or time.time()
    return dataclasses.replace(status, phase="Failed", message=message, ended=ended)


def expire(backend: ClusterAccess, job: Wire, message: str) -> bool:
    """End the run of ``job`` (see the module): True once the cluster says so, False where
    the Role may not patch Jobs (the caller then deletes the run as ``cancel`` does);
    ClusterError in one line where the API server refuses otherwise."""
    api, namespace = backend.api, backend.namespace
    name = job["metadata"]["name"]
    patch: Wire = {
        "metadata": {"annotations": {GANG_EXPIRED_ANNOTATION: message}},
        "spec": {"activeDeadlineSeconds": ENDS_AT_ONCE},
    }
    action = f"dra.run: ending run {name} at its gang_timeout"
    batch = client.BatchV1Api(api)
    try:
        patched = backend.retrying(lambda: batch.patch_namespaced_job(name, namespace, patch))
        for _, delete in gangs.deletions(api, namespace, name, True):
            _gone_is_fine(backend, delete)
    except ApiException as error:
        if error.status == 403:
            return False
        raise cluster_error(error, action, api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, action, api) from error
    view = backend.watched(JOBS)
    if view is not None:  # read-your-writes: the next read sees it ended
        view.applied(to_wire(api, patched))
    log.info("%s", f"dra.run: run {name} failed: {message}")
    return True


def _gone_is_fine(backend: ClusterAccess, delete: Callable[[], object]) -> None:
    try:
        backend.retrying(delete)
    except ApiException as error:
        if error.status != 404:
            raise


class Deadline:
    """The process that made a gang run reads its status at the gang's deadline (which
    ends it, :func:`overdue`), then every :data:`RECHECK_S` while the gang still waits
    (the API server's clock may be behind ours), until it ends, a pod is placed, or
    :meth:`stop`; an error reading it ends the timer (another read ends the run)."""

    def __init__(self, read: Callable[[], RunStatus], seconds: float, name: str) -> None:
        self._read = read
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(seconds,), name=f"gang-timeout-{name}", daemon=True
        )
        self._thread.start()

    def _run(self, seconds: float) -> None:
        wait = seconds
        while not self._stopped.wait(wait):
            try:
                status = self._read()
            except Exception:  # the run's next read says what is wrong
                log.debug("gang timeout: reading the run failed", exc_info=True)
                return
            if status.done or any(row.node for row in status.processes):
                return
            wait = RECHECK_S

    def stop(self) -> None:
        self._stopped.set()

"""A run in one bare Pod (``dra.run`` without ``nodes=`` or a queue, :mod:`.run`), in the
shape every backend's run has (:class:`dra_jupyter.types.runs.Run`): its status read from
the pod and its claim, its logs, its end waited for, its cancel, and found again by its
labels (:func:`list_pod_runs`: a new kernel finds the pods of the one before).

Unlike a Job's pods, a bare pod uses a claim of the session (made by ``dra.request``, not
from a template): the claim outlives the pod, so whoever sees the run end releases it
(:meth:`PodRun.wait`, :meth:`PodRun.cancel`, or the claim's lease).

A Job has ``ttlSecondsAfterFinished``; a pod has no such field, so an ended pod run is kept
as long (:data:`.jobs.TTL_S`, for its logs) and then deleted, with its claim, by whoever
lists the runs next (:func:`list_pod_runs`: the server's runs list, ``dra.runs()``).
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any, Literal, overload

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import ClusterError, InvalidInputError
from dra_jupyter.kube.claims import USER_LABEL, ClaimClient
from dra_jupyter.kube.connect import cluster_error, to_wire
from dra_jupyter.kube.pods import POLL_S
from dra_jupyter.kube.runs import jobs
from dra_jupyter.kube.runs.jobs import COMPONENT_LABEL, POD_CLAIM, POD_COMPONENT
from dra_jupyter.kube.runs.jobstatus import epoch, pod_row
from dra_jupyter.kube.runs.stopped import StoppedPods
from dra_jupyter.kube.views import CLAIMS, PODS
from dra_jupyter.types import HeldClaim, label_value
from dra_jupyter.types.runs import Phase, RunProcess, RunStatus

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess
    from dra_jupyter.model.objects import Wire

WAITING = "waiting for the node to start the pod"
ENDED = {"Succeeded": "succeeded", "Failed": "failed"}


def delete_pod(backend: ClusterAccess, name: str) -> None:
    core = client.CoreV1Api(backend.api)
    try:
        core.delete_namespaced_pod(name, backend.namespace, grace_period_seconds=0)
    except ApiException as error:
        if error.status != 404:
            raise cluster_error(error, f"dra.run: deleting pod {name}", backend.api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, f"dra.run: deleting pod {name}", backend.api) from error


def read_pod(backend: ClusterAccess, name: str) -> Wire | None:
    """The pod in wire form (None when it is gone); from the watched view where one
    answers."""
    view = backend.watched(PODS)
    if view is not None:
        return view.get(name)
    core = client.CoreV1Api(backend.api)
    try:
        return to_wire(backend.api, core.read_namespaced_pod(name, backend.namespace))
    except ApiException as error:
        if error.status == 404:
            return None
        raise cluster_error(error, f"dra.run: pod {name}", backend.api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, f"dra.run: pod {name}", backend.api) from error


def phase(backend: ClusterAccess, name: str) -> str:
    pod = read_pod(backend, name)
    if pod is None:
        return "Failed"  # deleted meanwhile (cancelled elsewhere, evicted): it will not run
    return str(pod.get("status", {}).get("phase") or "Pending")


def follow(backend: ClusterAccess, name: str, start_timeout: float | None, out: IO[str]) -> str:
    """Wait up to ``start_timeout`` for the container to start, then stream its logs to
    ``out`` until the pod ends; its state."""
    deadline = None if start_timeout is None else time.monotonic() + start_timeout
    while (now := phase(backend, name)) == "Pending":
        if deadline is not None and time.monotonic() >= deadline:
            return WAITING
        time.sleep(POLL_S)
    core = client.CoreV1Api(backend.api)
    try:
        stream: Any = core.read_namespaced_pod_log(
            name, backend.namespace, follow=True, _preload_content=False
        )
        for chunk in stream.stream():
            out.write(chunk.decode(errors="replace"))
    except ApiException as error:
        if error.status != 404:  # gone meanwhile: its end is read below
            raise cluster_error(error, f"dra.run: logs of pod {name}", backend.api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, f"dra.run: logs of pod {name}", backend.api) from error
    while (now := phase(backend, name)) not in ENDED:
        time.sleep(POLL_S)
    return ENDED[now]


class PodRun:
    """A launched pod and its claim (see the module). ``claim``: the session's claim when
    this process made the run, None when the run was found again (then ``claim_name``);
    ``state``: :data:`WAITING`, ``running``, ``succeeded``, ``failed``, ``cancelled`` as
    this process last saw it."""

    def __init__(
        self,
        backend: ClusterAccess,
        pod: str,
        claim: HeldClaim | None,
        *,
        claim_name: str = "",
        node: str = "",
        devices: Sequence[str] = (),
        state: str = WAITING,
        out: IO[str] | None = None,
        made: str = "",
    ) -> None:
        self.pod = pod
        self.made = made  # when the pod was made, as the API says it ("": not read)
        self.claim = claim
        self.claim_name = claim.name if claim is not None else claim_name
        self.node = node
        self.devices = list(devices)
        self.state = state
        self._backend = backend
        self._out = out
        self._stopped = StoppedPods(backend.api)
        self._final: RunStatus | None = None  # its outcome, kept when cancel cleans up

    @property
    def name(self) -> str:
        """The run's name: its pod's."""
        return self.pod

    # --- reading -------------------------------------------------------------------------

    def _claims(self) -> dict[str, Wire]:
        if not self.claim_name:
            return {}
        try:
            view = self._backend.watched(CLAIMS)
            if view is not None:
                claim = view.get(self.claim_name)
            else:
                claim = ClaimClient(self._backend.api, self._backend.namespace).get(self.claim_name)
        except ClusterError:  # best effort: the devices column stays empty
            return {}
        return {self.claim_name: claim} if claim is not None else {}

    @property
    def status(self) -> RunStatus:
        """The run now: its pod's phase, node, devices, exit code and reason; a pod stopped
        because a device of it was taken out says so (:mod:`.stopped`)."""
        if self._final is not None and self.state != "cancelled":
            return self._final  # ended, then cleaned up by cancel: its outcome stays
        pod = read_pod(self._backend, self.pod)
        claims = self._claims()
        rows: dict[str, RunProcess] = {}
        if pod is not None:
            row = pod_row(_as_template_pod(pod, self.claim_name), claims)
            if not row.devices and self.devices and row.node:
                row = replace(row, devices=tuple(self.devices))
            rows[self.pod] = row
        self._stopped.note([pod] if pod is not None else [], rows)
        stopped = self._stopped.stopped_for()
        gone = self._stopped.gone(list(rows))
        processes = [*rows.values(), *gone]
        message = ""
        run_phase: Phase
        if self.state == "cancelled":
            run_phase, message = "Cancelled", "cancelled"
        elif self.pod in stopped:
            run_phase = "Failed"
            message = f"pod {self.pod} was stopped: {stopped[self.pod]}"
            processes = [replace(p, phase="Failed", reason=stopped[self.pod]) for p in processes]
        elif pod is None:
            run_phase, message = "Cancelled", f"pod {self.pod} was deleted"
        else:
            run_phase = processes[0].phase
            if run_phase == "Pending":
                message = processes[0].reason or (WAITING if processes[0].node else "")
        meta = (pod or {}).get("metadata") or {}
        status = (pod or {}).get("status") or {}
        finished = _finished(status)
        devices = processes[0].devices if processes else tuple(self.devices)
        spec = (pod or {}).get("spec") or {}
        command = ((spec.get("containers") or [{}])[0]).get("command") or ()
        return RunStatus(
            name=self.pod,
            phase=run_phase,
            created=epoch(meta.get("creationTimestamp")) or 0.0,
            started=epoch(status.get("startTime")),
            ended=finished if run_phase in ("Succeeded", "Failed", "Cancelled") else None,
            exit_codes=tuple(p.exit_code for p in processes),
            devices=tuple(devices),
            processes=tuple(processes),
            claims=(self.claim_name,) if self.claim_name else (),
            message=message,
            where=f"namespace {self._backend.namespace}",
            launcher="Pod",
            command=tuple(str(c) for c in command),
        )

    @overload
    def logs(self, follow: Literal[False] = False, rank: int | None = None) -> str: ...

    @overload
    def logs(self, follow: Literal[True], rank: int | None = None) -> None: ...

    def logs(self, follow: bool = False, rank: int | None = None) -> str | None:
        """The pod's output (one process: no rank prefix; ``rank`` may only be 0).
        ``follow``: written to the cell (stdout) as it comes until the pod ends, returning
        None; the claim is released then."""
        if rank not in (None, 0):
            raise InvalidInputError(f"run {self.pod}: rank={rank!r}: a pod's run has rank 0 only")
        if follow:
            self.follow_start(None, self._out or sys.stdout)
            return None
        text = "" if phase(self._backend, self.pod) == "Pending" else self._read_log()
        stopped = self._stopped.stopped_for().get(self.pod)
        if stopped:
            text += f"dra.run: pod {self.pod} was stopped: {stopped}\n"
        return text

    def _read_log(self) -> str:
        core = client.CoreV1Api(self._backend.api)
        action = f"dra.run: logs of pod {self.pod}"
        try:
            read: Any = core.read_namespaced_pod_log(
                self.pod, self._backend.namespace, _preload_content=False
            )
        except ApiException as error:
            if error.status in (400, 404):  # not started, or gone
                return ""
            raise cluster_error(error, action, self._backend.api) from error
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, action, self._backend.api) from error
        return str(read.data.decode(errors="replace"))

    # --- waiting and ending --------------------------------------------------------------

    def follow_start(self, start_timeout: float | None, out: IO[str] | None = None) -> str:
        """Wait for the node to start the pod, stream its logs until it ends, release the
        claim; returns the state (still :data:`WAITING` if it did not start in time)."""
        try:
            self.state = follow(
                self._backend, self.pod, start_timeout, out or self._out or sys.stdout
            )
        except BaseException:
            self.cancel()
            raise
        if self.state in ENDED.values():
            self._release()
        return self.state

    def wait(self, timeout: str | float | None = None) -> RunStatus:
        """Wait until the pod ends (up to ``timeout``, a duration: None waits for good); its
        status then. The claim is released once it ended."""
        seconds = parse_duration(timeout, what="run.wait: timeout")
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            status = self.status
            if status.done:
                if self.state != "cancelled":
                    self.state = status.phase.lower()
                    self._release()
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status
            time.sleep(POLL_S)

    def _release(self) -> None:
        if self.claim is not None:
            self.claim.release()
        elif self.claim_name:
            view = self._backend.running(CLAIMS)  # read-your-writes, where watched
            ClaimClient(self._backend.api, self._backend.namespace, view).delete(self.claim_name)

    def cancel(self) -> None:
        """Delete the pod and release the claim (released even when the pod's deletion
        fails: the error then says why the pod may still be there). A run that had ended
        keeps its outcome (cancel is the clean-up of a finished run): only one still going
        reads ``cancelled``."""
        ended = self._final = self._ended()
        try:
            delete_pod(self._backend, self.pod)
        finally:
            self._release()
        self.state = ended.phase.lower() if ended is not None else "cancelled"
        view = self._backend.running(PODS)  # read-your-writes: gone from the view now
        if view is not None:
            view.deleted(self.pod, self._backend.namespace)

    def _ended(self) -> RunStatus | None:
        """Its status if the run has ended (succeeded or failed), else None."""
        try:
            status = self.status
        except ClusterError:
            return None  # unreadable: cancel it all the same
        return status if status.phase in ("Succeeded", "Failed") else None

    def __repr__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"<Run {self.pod}{where}: {', '.join(self.devices)} ({self.state})>"


class _Tee(io.StringIO):
    """Kept, and written on to ``out`` as it comes."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__()
        self._to = out

    def write(self, text: str) -> int:
        self._to.write(text)
        self._to.flush()
        return super().write(text)


def _as_template_pod(pod: Wire, claim: str) -> Wire:
    """``pod`` as :func:`.jobstatus.pod_row` reads a Job's pod: its claim under the name a
    template's claim has, so that the row gets its devices."""
    status = dict(pod.get("status") or {})
    status["resourceClaimStatuses"] = [{"name": POD_CLAIM, "resourceClaimName": claim}]
    return {**pod, "status": status}


def list_pod_runs(backend: ClusterAccess, out: IO[str] | None = None) -> list[PodRun]:
    """The user's bare-pod runs in the namespace (by their labels), oldest first."""
    core = client.CoreV1Api(backend.api)
    selector = f"{COMPONENT_LABEL}={POD_COMPONENT},{USER_LABEL}={label_value(backend.owner.user)}"
    view = backend.watched(PODS)
    if view is not None:
        pods = view.list(
            {COMPONENT_LABEL: POD_COMPONENT, USER_LABEL: label_value(backend.owner.user)}
        )
    else:
        try:
            listed = backend.retrying(
                lambda: core.list_namespaced_pod(backend.namespace, label_selector=selector)
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise cluster_error(error, "dra.runs: listing pods", backend.api) from error
        pods = [to_wire(backend.api, p) for p in listed.items]
    pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
    runs = []
    for pod in pods:
        claims = (pod.get("spec") or {}).get("resourceClaims") or [{}]
        phase_now = str((pod.get("status") or {}).get("phase") or "Pending")
        if _expired(pod):
            _forget(backend, pod["metadata"]["name"], str(claims[0].get("resourceClaimName") or ""))
            continue
        runs.append(
            PodRun(
                backend,
                pod["metadata"]["name"],
                None,
                claim_name=str(claims[0].get("resourceClaimName") or ""),
                node=str(pod["spec"].get("nodeName") or ""),
                state=ENDED.get(phase_now, "running" if phase_now == "Running" else WAITING),
                out=out,
                made=str(pod["metadata"].get("creationTimestamp") or ""),
            )
        )
    return runs


def ended_at(pod: Wire) -> float | None:
    """When the pod's run ended (its containers' last ``finishedAt``); None while it has not."""
    status = pod.get("status") or {}
    return _finished(status) if status.get("phase") in ENDED else None


def _finished(status: Wire) -> float | None:
    """The last ``finishedAt`` of a pod's terminated containers (None: none ended)."""
    finished = [
        epoch(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in status.get("containerStatuses") or ()
    ]
    return max((f for f in finished if f is not None), default=None)


def _expired(pod: Wire) -> bool:
    """An ended pod run kept for :data:`.jobs.TTL_S` already (a Job's TTL, which a pod lacks)."""
    end = ended_at(pod)
    return end is not None and time.time() - end >= jobs.TTL_S


def _forget(backend: ClusterAccess, pod: str, claim: str) -> None:
    """Delete an expired pod run: its pod, then its claim where it is still there."""
    delete_pod(backend, pod)
    view = backend.running(PODS)
    if view is not None:
        view.deleted(pod, backend.namespace)
    if claim:
        ClaimClient(backend.api, backend.namespace, backend.running(CLAIMS)).delete(claim)

"""A run's status from its Job, pods and claims as read (pure): the run's phase
(``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Cancelled``), when it started and
ended, why it failed or waits, and a row per pod (rank, node, devices, phase, restarts,
exit code, and the scheduler's reason while it is not placed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_jupyter.kube.jobs import INDEX_ANNOTATION, KUEUE_LABEL, LAUNCHER_ANNOTATION, POD_CLAIM
from dra_jupyter.kube.pods import scheduler_reason
from dra_jupyter.model.objects import Wire

ENDED = ("Succeeded", "Failed", "Cancelled")


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class PodRow:
    """One pod of a run."""

    pod: str
    rank: int | None
    node: str  # "" until placed
    devices: list[str]  # driver/pool/device of its claim's allocation
    phase: str  # the pod's: Pending, Running, Succeeded, Failed
    restarts: int
    exit_code: int | None
    reason: str  # the scheduler's while not placed; how it ended (Error, Evicted ...)


@dataclass(frozen=True)
class RunStatus:
    """A run as read now (see the module)."""

    name: str
    phase: str
    launcher: str  # "Indexed Job (JobSet not installed)", ...
    start: float | None  # seconds since the epoch
    end: float | None
    reason: str  # why it failed, or why it waits (Kueue, the scheduler); "" otherwise
    pods: list[PodRow]

    @property
    def ended(self) -> bool:
        return self.phase in ENDED

    def __str__(self) -> str:
        head = f"run {self.name}: {self.phase} ({self.launcher})"
        if self.reason:
            head += f": {self.reason}"
        lines = [head]
        for row in self.pods:
            rank = "-" if row.rank is None else str(row.rank)
            code = "" if row.exit_code is None else f", exit code {row.exit_code}"
            where = f" on {row.node}" if row.node else ""
            devices = f" with {', '.join(row.devices)}" if row.devices else ""
            why = f": {row.reason}" if row.reason else ""
            lines.append(
                f"  rank {rank} pod {row.pod}{where}{devices}: {row.phase}"
                f"{code}, {row.restarts} restarts{why}"
            )
        return "\n".join(lines)


def generated_claim(pod: Wire) -> str | None:
    """The claim the resourceclaim controller made for the pod's devices (None until then)."""
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if entry.get("name") == POD_CLAIM and entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    return None


def _rank(pod: Wire) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None and str(value).isdigit() else None


def pod_row(pod: Wire, claims: Mapping[str, Wire]) -> PodRow:
    """The row of ``pod``; ``claims``: the run's claims by name."""
    status = pod.get("status") or {}
    claim = claims.get(generated_claim(pod) or "") or {}
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or ()
    devices = [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]
    restarts, code, reason = 0, None, ""
    for container in status.get("containerStatuses") or ():
        restarts = int(container.get("restartCount") or 0)
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            code = terminated.get("exitCode")
            reason = str(terminated.get("reason") or "")
    node = str(pod["spec"].get("nodeName") or "")
    if not node:
        reason = scheduler_reason(pod)
    return PodRow(
        pod=pod["metadata"]["name"],
        rank=_rank(pod),
        node=node,
        devices=devices,
        phase=str(status.get("phase") or "Pending"),
        restarts=restarts,
        exit_code=None if code is None else int(code),
        reason=reason,
    )


def _condition(job: Wire, kind: str) -> Wire | None:
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def run_status(
    job: Wire,
    pods: Sequence[Wire],
    claims: Mapping[str, Wire],
    *,
    queue_reason: str = "",
) -> RunStatus:
    """The status of the run of ``job`` (see the module); ``queue_reason``: Kueue's word on
    a suspended Job, when it was read."""
    meta, status = job["metadata"], job.get("status") or {}
    rows = sorted(
        (pod_row(p, claims) for p in pods),
        key=lambda r: (r.rank if r.rank is not None else -1, r.pod),
    )
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    done = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    end = _epoch(status.get("completionTime"))
    reason = ""
    if meta.get("deletionTimestamp"):
        phase, end = "Cancelled", end or _epoch(meta["deletionTimestamp"])
    elif failed is not None:
        phase = "Failed"
        end = end or _epoch(failed.get("lastTransitionTime"))
        reason = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
    elif done is not None:
        phase = "Succeeded"
    elif (job.get("spec") or {}).get("suspend"):
        phase = "Pending"
        queue = (meta.get("labels") or {}).get(KUEUE_LABEL)
        reason = f"suspended, waiting in Kueue's queue {queue}" if queue else "suspended"
        if queue_reason:
            reason += f": {queue_reason}"
    elif any(r.phase == "Running" for r in rows):
        phase = "Running"
    else:
        phase = "Pending"
        waiting = [r.reason for r in rows if not r.node and r.reason]
        reason = waiting[0] if waiting else ""
    return RunStatus(
        name=meta["name"],
        phase=phase,
        launcher=str((meta.get("annotations") or {}).get(LAUNCHER_ANNOTATION) or "Job"),
        start=_epoch(status.get("startTime")),
        end=end if phase in ENDED else None,
        reason=reason,
        pods=rows,
    )

"""A run's status from its Job, pods and claims as read (pure), in the shape every backend's
run has (:class:`dra_jupyter.types.runs.RunStatus`): the run's phase (``Pending``,
``Running``, ``Succeeded``, ``Failed``, ``Cancelled``), when it was made, started and
ended, why it failed or waits (``message``), and a row per pod
(:class:`~dra_jupyter.types.runs.RunProcess`: rank, node, devices, phase, restarts, exit
code, and the scheduler's reason while it is not placed). Pods that are gone but were
stopped for a reason the user should read (a device taken out) come as rows of their own
(``gone``), since the Job's own status does not say it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import cast

from dra_jupyter.kube.pods import scheduler_reason
from dra_jupyter.kube.runs import gangs, gangtimeout
from dra_jupyter.kube.runs.jobs import (
    GANG_ANNOTATION,
    INDEX_ANNOTATION,
    KUEUE_LABEL,
    LAUNCHER_ANNOTATION,
    PLACEMENT_ANNOTATION,
    POD_CLAIM,
)
from dra_jupyter.model.objects import Wire
from dra_jupyter.types.runs import ENDED, Phase, RunProcess, RunStatus

POD_PHASES: frozenset[str] = frozenset({"Pending", "Running", "Succeeded", "Failed"})


def epoch(stamp: object) -> float | None:
    """An RFC 3339 time stamp of the API as seconds since the epoch (None: none)."""
    if not isinstance(stamp, str) or not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def pod_phase(pod: Wire) -> Phase:
    """The pod's phase as a run's row says it (``Unknown``, a node out of touch: Pending)."""
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    return cast("Phase", phase) if phase in POD_PHASES else "Pending"


def generated_claim(pod: Wire) -> str | None:
    """The claim the resourceclaim controller made for the pod's devices (None until then)."""
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if entry.get("name") == POD_CLAIM and entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    return None


def _rank(pod: Wire) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None and str(value).isdigit() else None


def pod_devices(pod: Wire, claims: Mapping[str, Wire]) -> tuple[str, ...]:
    """``driver/pool/device`` of what the pod's claim was allocated (``claims``: by name)."""
    claim = claims.get(generated_claim(pod) or "") or {}
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return tuple(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results)


def pod_row(pod: Wire, claims: Mapping[str, Wire], *, rank: int | None = None) -> RunProcess:
    """The row of ``pod``; ``claims``: the run's claims by name; ``rank``: the pod's rank
    where it has no index (a bare pod, a Job of one: 0)."""
    status = pod.get("status") or {}
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
    indexed = _rank(pod)
    return RunProcess(
        rank=indexed if indexed is not None else (rank or 0),
        name=pod["metadata"]["name"],
        node=node,
        phase=pod_phase(pod),
        devices=pod_devices(pod, claims),
        exit_code=None if code is None else int(code),
        restarts=restarts,
        reason=reason,
    )


def stopped(rows: Sequence[RunProcess]) -> str:
    """What the run's status says of pods stopped for a reason of their own (``gone``)."""
    return "; ".join(f"pod {r.name} (rank {r.rank}) was stopped: {r.reason}" for r in rows)


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
    gone: Sequence[RunProcess] = (),
    stopped_for: Mapping[str, str] | None = None,
    gang_reason: str = "",
) -> RunStatus:
    """The status of the run of ``job`` (see the module); ``queue_reason``: Kueue's word on
    a suspended Job, when it was read; ``gone``: rows of its pods that are gone, stopped
    for a reason the user should read (a device taken out); ``stopped_for``: that reason
    for pods still there (being deleted), by name. Both are said in the message too.
    ``gang_reason``: kube-scheduler's word on the PodGroup of a gang run while it waits
    (:mod:`.gangs`), said as ``waiting as a gang of N: <reason>``; a gang that could not
    start within its ``gang_timeout`` has failed with the words its Job carries
    (:mod:`.gangtimeout`)."""
    meta, status = job["metadata"], job.get("status") or {}
    annotations = meta.get("annotations") or {}
    gang = str(annotations.get(GANG_ANNOTATION) or "")
    stopped_for = stopped_for or {}
    live = [pod_row(p, claims) for p in pods]
    live = [
        replace(r, reason=stopped_for[r.name], phase="Failed") if r.name in stopped_for else r
        for r in live
    ]
    seen = {r.name for r in live}
    # by rank; within a rank the pods stopped before (gone) first, as they came
    earlier = [g for g in gone if g.name not in seen]
    rows = sorted([*earlier, *live], key=lambda r: (r.rank, r.name in seen, r.name))
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    done = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    end = epoch(status.get("completionTime"))
    reason = ""
    phase: Phase
    expired = gangtimeout.expired(job)  # its gang could not start in time (:mod:`.gangtimeout`)
    if expired and done is None:
        phase, reason = "Failed", expired
        end = end or epoch((failed or {}).get("lastTransitionTime")) or gangtimeout.deadline(job)
    elif meta.get("deletionTimestamp") and failed is None and done is None:
        phase, end = "Cancelled", end or epoch(meta["deletionTimestamp"])  # stopped going
    elif failed is not None:
        phase = "Failed"
        end = end or epoch(failed.get("lastTransitionTime"))
        reason = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
    elif done is not None:
        phase = "Succeeded"
    elif (job.get("spec") or {}).get("suspend"):
        phase = "Pending"
        queue = (meta.get("labels") or {}).get(KUEUE_LABEL)
        reason = queue_reason or (  # Kueue's own word, with the place in its line
            f"suspended, waiting in Kueue's queue {queue}" if queue else "suspended"
        )
    elif any(r.phase == "Running" for r in live if r.name not in stopped_for):
        phase = "Running"
    else:
        phase = "Pending"
        waiting = [r.reason for r in live if not r.node and r.reason]
        reason = waiting[0] if waiting else ""
        if gangs.is_gang(gang):
            nodes = int((job.get("spec") or {}).get("parallelism") or len(live) or 1)
            reason = gangs.waiting(nodes, waiting, gang_reason)
    said = stopped([r for r in rows if r.name not in seen or r.name in stopped_for])
    message = "; ".join(part for part in (reason, said) if part)
    launcher = str(annotations.get(LAUNCHER_ANNOTATION) or "Job")
    if annotations.get(PLACEMENT_ANNOTATION):
        launcher += f"; {annotations[PLACEMENT_ANNOTATION]}"
    if gang:
        launcher += f"; {gang}"
    devices: list[str] = []
    for row in rows:
        devices += [d for d in row.devices if d not in devices]
    return RunStatus(
        name=meta["name"],
        phase=phase,
        created=epoch(meta.get("creationTimestamp")) or 0.0,
        started=epoch(status.get("startTime")),
        ended=end if phase in ENDED else None,
        exit_codes=tuple(r.exit_code for r in rows),
        devices=tuple(devices),
        processes=tuple(rows),
        claims=tuple(sorted(claims)),
        message=message,
        where=f"namespace {meta.get('namespace', '')}",
        launcher=launcher,
    )

"""``dra.run(..., nodes=N)`` through JobSet (``jobset.x-k8s.io``), when the cluster serves
its API: the run's JobSet, and the view of it that :mod:`.jobstatus` reads (pure); whether
the cluster serves it (:func:`served`) and the namespace's JobSets of a user (:func:`listed`).

The JobSet has one replicated Job (``replicas: 1``) named :data:`REPLICATED_JOB`, whose
template is the Indexed Job of :func:`.jobs.job`: the same pods, ranks, per-pod
ResourceClaimTemplate and rendezvous environment, except that

* JobSet makes the headless Service itself (``network.enableDNSHostnames``; named after
  the JobSet, which is the pods' subdomain), so ``MASTER_ADDR`` is rank 0's name under
  JobSet's naming, ``<run>-node-0-0.<run>`` (:func:`.jobs.master_addr`);
* ``retries`` restarts the whole JobSet, every rank together (``failurePolicy.maxRestarts``),
  which a rendezvous needs; within one attempt a non-zero exit fails the Job at once and
  disruptions are retried, as for a plain Job;
* the JobSet carries the run's labels and launcher, and the TTL (``ttlSecondsAfterFinished``);
  the Job JobSet makes from the template carries JobSet's labels only, so that the run is
  found once, by its JobSet.

A run with a Kueue ``queue`` stays a plain Indexed Job (Kueue's JobSet integration may be
off where its Job integration is on); so does a run whose name would make pod names longer
than a DNS label under JobSet's naming (:func:`fits`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import cluster_error
from dra_jupyter.kube.runs import jobs
from dra_jupyter.kube.runs.jobs import LAUNCHER_ANNOTATION, REPLICATED_JOB, TTL_S, JobSpec
from dra_jupyter.kube.views import JOBSETS
from dra_jupyter.model.objects import Wire

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet's, on its Jobs and their pods
DNS_LABEL_MAX = 63
POD_SUFFIX = len("-abcde")  # the Job controller's random suffix of a pod's name


def fits(name: str, nodes: int) -> bool:
    """True when the pods JobSet makes for ``name`` have names that are DNS labels (JobSet's
    webhook checks ``<run>-<replicated job>-<job index>-<pod index>-<5 random>``)."""
    longest = f"{name}-{REPLICATED_JOB}-0-{nodes - 1}"
    return len(longest) + POD_SUFFIX <= DNS_LABEL_MAX


def jobset(spec: JobSpec) -> Wire:
    """The JobSet of the run (see the module)."""
    job = jobs.job(dataclasses.replace(spec, retries=0, queue=""))
    job_spec = {k: v for k, v in job["spec"].items() if k != "ttlSecondsAfterFinished"}
    metadata = job["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {
            **metadata,
            "annotations": {**metadata["annotations"], LAUNCHER_ANNOTATION: spec.launcher},
        },
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": spec.retries},
            "ttlSecondsAfterFinished": TTL_S,
            "replicatedJobs": [
                {"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}
            ],
        },
    }


def parallelism(jobset_object: Wire) -> int:
    """The number of pods the JobSet runs at once (its ranks)."""
    total = 0
    for replicated in (jobset_object.get("spec") or {}).get("replicatedJobs") or ():
        job_spec = (replicated.get("template") or {}).get("spec") or {}
        total += int(replicated.get("replicas") or 1) * int(job_spec.get("parallelism") or 1)
    return total or 1


def _condition(obj: Wire, kind: str) -> Wire | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def status_view(jobset_object: Wire, child_jobs: Sequence[Wire]) -> Wire:
    """The JobSet as the Job :func:`.jobstatus.run_status` reads: its metadata, ``suspend``,
    ``Complete`` / ``Failed`` conditions from JobSet's ``Completed`` / ``Failed`` (the
    failure said with the failed Job's own reason: which pod exited with what), the start
    of its earliest Job and its end."""
    status = jobset_object.get("status") or {}
    conditions: list[Wire] = []
    completion = None
    done = _condition(jobset_object, "Completed")
    if done is not None:
        conditions.append({**done, "type": "Complete"})
        completion = done.get("lastTransitionTime")
    failed = _condition(jobset_object, "Failed")
    if failed is not None:
        why = [f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")]
        for child in child_jobs:
            job_failed = _condition(child, "Failed")
            if job_failed is not None:
                said = f"{job_failed.get('reason', '')}: {job_failed.get('message', '')}"
                why.append(f"Job {child['metadata']['name']}: {said.strip(': ')}")
        restarts = int(status.get("restarts") or 0)
        if restarts:
            why.append(f"after {restarts} restart{'s' * (restarts != 1)}")
        conditions.append({**failed, "type": "Failed", "reason": "; ".join(why), "message": ""})
        completion = failed.get("lastTransitionTime")
    starts = sorted(
        str(s) for s in ((c.get("status") or {}).get("startTime") for c in child_jobs) if s
    )
    view_status: Wire = {"conditions": conditions}
    if starts:
        view_status["startTime"] = starts[0]
    if completion:
        view_status["completionTime"] = completion
    spec = jobset_object.get("spec") or {}
    return {
        "metadata": jobset_object["metadata"],
        "spec": {"suspend": bool(spec.get("suspend")), "parallelism": parallelism(jobset_object)},
        "status": view_status,
    }


SERVED_FOR_S = 300.0  # how long a watching process trusts discovery's word on JobSet
DISCOVERY_TIMEOUT_S = 10.0
_served: weakref.WeakKeyDictionary[client.ApiClient, tuple[float, bool]] = (
    weakref.WeakKeyDictionary()
)
_served_lock = threading.Lock()


def served(api: client.ApiClient) -> bool:
    """Whether the cluster serves JobSet's API: discovery (a GET of ``/apis``, no LIST),
    asked again after :data:`SERVED_FOR_S` (a JobSet installed later is seen then);
    False when it cannot be read."""
    now = time.monotonic()
    with _served_lock:
        known = _served.get(api)
    if known is not None and now - known[0] < SERVED_FOR_S:
        return known[1]
    try:
        groups = client.ApisApi(api).get_api_versions(_request_timeout=DISCOVERY_TIMEOUT_S).groups
    except (ApiException, urllib3.exceptions.HTTPError):
        return False
    found = any(g.name == GROUP for g in groups or ())
    with _served_lock:
        _served[api] = (now, found)
    return found


def listed(backend: ClusterAccess, selector: str, labels: dict[str, str]) -> list[Wire]:
    """The namespace's JobSets of ``selector``; none where JobSet is not installed or RBAC
    hides them (then no run of this user is one: making it needs the same rights). A
    watching process asks discovery first (:func:`served`): no LIST where JobSet
    is not installed, and where it is, its view of the namespace's JobSets answers (listed
    once, then watched)."""
    if backend.settings.watch:
        if not served(backend.api):
            return []
        view = backend.watched(JOBSETS)  # a long-lived process: watched, not listed
        if view is not None:
            return view.list(labels)
    objects = client.CustomObjectsApi(backend.api)
    try:
        listed = backend.retrying(
            lambda: objects.list_namespaced_custom_object(
                GROUP,
                VERSION,
                backend.namespace,
                PLURAL,
                label_selector=selector,
            )
        )
    except ApiException as error:
        if error.status in (403, 404):
            return []
        raise cluster_error(error, "dra.runs", backend.api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, "dra.runs", backend.api) from error
    return list(listed.get("items") or ()) if isinstance(listed, dict) else []

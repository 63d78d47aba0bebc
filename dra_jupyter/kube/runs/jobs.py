"""``dra.run(..., nodes=N)`` on a cluster: the objects of a run (pure).

A run is three objects of one name in the user's namespace:

* a **Job** (batch/v1) of ``nodes`` pods, all at once (``completions = parallelism =
  nodes``), ``Indexed`` when there is more than one, so that each pod knows its rank: the Job
  controller writes it in the annotation ``batch.kubernetes.io/job-completion-index``, which
  the container reads through the downward API as ``RANK`` and ``NODE_RANK``. With it the
  environment torchrun, DeepSpeed and JAX read: ``MASTER_ADDR`` (rank 0's name,
  ``<run>-0.<run>``), ``MASTER_PORT``, ``WORLD_SIZE`` (the number of pods) and
  ``LOCAL_WORLD_SIZE`` (the devices of one pod). Failures: a disruption (the pod's
  ``DisruptionTarget`` condition: preemption, eviction, a drained node) is retried and not
  counted; a container that exits non-zero fails the whole Job at once (``FailJob``), unless
  ``retries`` asks for exit codes to be retried up to that many times (``backoffLimit``).
  ``activeDeadlineSeconds`` is the lease; ``ttlSecondsAfterFinished`` keeps an ended run
  (its logs) for :data:`TTL_S`. With a Kueue queue the Job is made suspended and labelled
  ``kueue.x-k8s.io/queue-name``: Kueue admits (unsuspends) it when the queue's quota allows;
* a **ResourceClaimTemplate**: each pod's devices (one claim per pod, made by the
  resourceclaim controller, owned by the pod, deleted when it ends);
* a headless **Service** (more than one pod): the pods' ``subdomain``, so that
  ``<run>-<rank>.<run>`` resolves to each pod in the cluster's DNS, before the pods are
  ready (``publishNotReadyAddresses``), which a rendezvous needs.

``same=`` places them (:func:`placement`, said in the run's status): a device attribute
(``same="pcieRoot"``) is a ``matchAttribute`` constraint of the template's claim, so it
holds **per pod**, among the devices of each pod; a node label (``same="zone"``,
``same="node:<label key>"``) puts **all the pods** on nodes that share its value, as a
required pod affinity among the run's pods on that topology key. Where the cluster serves
the Workload API the pods are a gang (:mod:`.gangs`): kube-scheduler places them all at
once, with the affinity, or none, and the run fails once they could not start within
``gang_timeout`` (:mod:`.gangtimeout`); elsewhere the first pod placed chooses the zone,
and the others wait when it has no room for them (Kueue's topology-aware scheduling places
a Job as a whole).

The template and the Service are owned by the Job, so that deleting it (or its TTL) deletes
them too. Where the cluster serves JobSet (``jobset.x-k8s.io``), a run of more than one pod
is a JobSet around this Job instead (:mod:`.jobsets`): JobSet makes the Service, and
``MASTER_ADDR`` follows its naming (:func:`master_addr`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dra_jupyter.claimspec import RUN, SHORT_ATTRIBUTES
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import USER_ANNOTATION, USER_LABEL, label_value

COMPONENT_LABEL = "dra-jupyter/component"
COMPONENT = "run"  # the value of COMPONENT_LABEL on a run's objects
POD_COMPONENT = "pod-run"  # ... on the pod of a run without a Job (dra.run without nodes=)
RUN_LABEL = "dra-jupyter/run"  # the run's name, on its Job, pods, template, claims, Service
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
LAUNCHER_ANNOTATION = "dra-jupyter/launcher"  # what ran it, as the status shows it
PLACEMENT_ANNOTATION = "dra-jupyter/placement"  # what same= asked, as the status shows it
GANG_ANNOTATION = "dra-jupyter/gang"  # the run's word on gangs, as the status shows it
GANG = "gang of"  # that word for a run whose pods are placed together (:mod:`.gangs`)
# a gang's gang_timeout in seconds, and once it passed, why the run failed (:mod:`.gangtimeout`)
GANG_TIMEOUT_ANNOTATION = "dra-jupyter/gang-timeout"
GANG_EXPIRED_ANNOTATION = "dra-jupyter/gang-expired"
JOBSET_LAUNCHER = "JobSet"  # the launcher of a run made a JobSet (:mod:`.jobsets`)
REPLICATED_JOB = "node"  # the JobSet's one replicated Job: its pods are <run>-node-0-<rank>
POD_CLAIM = "devices"  # spec.resourceClaims[].name of a pod's devices
GROUP_CLAIM = "group"  # ... of the devices the pods share, one claim for the PodGroup (group=)
CONTAINER = "work"
MASTER_PORT = 29500  # torchrun's default
TTL_S = 24 * 3600  # an ended run (its pods, so its logs) is kept this long
BACKOFF_LIMIT = 3  # pod failures that are neither disruptions nor exit codes (FailJob)
MAX_NAME = 52  # <name>-<rank>-<5 random> stays a DNS label; the Service's a DNS-1035 label
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def check_name(name: str) -> str:
    """``name`` as a run's name, or InvalidInputError in one line."""
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"name={name!r} cannot name a Job and its Service; use at most "
            f"{MAX_NAME} lowercase letters, digits and '-', beginning with a letter"
        ).said_by(RUN)
    return name


def check_nodes(nodes: object) -> int:
    """``nodes`` as a number of pods (at least 1), or InvalidInputError in one line."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InvalidInputError(
            f"nodes={nodes!r} is not a number of pods; use a whole number of at "
            "least 1 (nodes=2: two pods, each with the devices asked for)"
        ).said_by(RUN)
    return nodes


def check_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInputError(
            f"retries={retries!r} is not a number of retries; use 0 (a failed "
            "container fails the run) or more"
        ).said_by(RUN)
    return retries


def devices_per_pod(claim_spec: Mapping[str, Any]) -> int | None:
    """How many devices one pod's claim asks for (None: ``all`` of some kind, known only
    once allocated)."""
    total = 0
    for request in (claim_spec.get("devices") or {}).get("requests") or ():
        alternatives = request.get("firstAvailable")
        one = alternatives[0] if alternatives else request.get("exactly") or {}
        if one.get("allocationMode") == "All":
            return None
        total += int(one.get("count", 1))
    return total


@dataclass(frozen=True)
class JobSpec:
    """What a run is made of; Job, template and Service are all named ``name``."""

    name: str
    namespace: str
    user: str
    image: str
    argv: Sequence[str]
    claim_spec: Mapping[str, Any]  # a ResourceClaim's spec: one pod's devices
    nodes: int = 1
    queue: str = ""  # a Kueue LocalQueue ("": none)
    lease: float | None = None  # seconds: activeDeadlineSeconds
    retries: int = 0  # 0: a non-zero exit fails the Job; else exit codes retried so often
    node_selector: Mapping[str, str] | None = None
    same_nodes: Sequence[str] = ()  # node label keys whose value all the pods' nodes share
    launcher: str = "Job"
    gang: str = ""  # "gang of N" (:mod:`.gangs`), why not ("no gang: ..."), "" for one pod
    gang_timeout: float | None = None  # seconds a gang may wait to start (None: no limit)
    group_claim: Mapping[str, Any] | None = None  # a claim's spec: devices the pods share

    @property
    def group_template(self) -> str:
        """The ResourceClaimTemplate of the devices the pods share ("": none, no group=)."""
        return f"{self.name}-{GROUP_CLAIM}" if self.group_claim is not None else ""

    @property
    def pod_group(self) -> str:
        """The PodGroup the pods join ("": none), named as the run (:mod:`.gangs`)."""
        return self.name if self.gang.startswith(GANG) else ""

    @property
    def indexed(self) -> bool:
        return self.nodes > 1

    @property
    def jobset(self) -> bool:
        """True when the run is a JobSet (:mod:`.jobsets`), not a Job of its own."""
        return self.launcher == JOBSET_LAUNCHER

    def labels(self) -> dict[str, str]:
        return {
            USER_LABEL: label_value(self.user),
            COMPONENT_LABEL: COMPONENT,
            RUN_LABEL: self.name,
        }


def meta(spec: JobSpec, **extra: Any) -> Wire:
    """The metadata of a run's object: its name, namespace, labels and user."""
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": spec.labels(),
        "annotations": {USER_ANNOTATION: spec.user},
        **extra,
    }


def claim_template(spec: JobSpec) -> Wire:
    """The ResourceClaimTemplate of one pod's devices; its claims carry the run's labels
    (``dra.claims()`` lists them) and no kernel: they belong to the run, not to a kernel."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta(spec),
        "spec": {
            "metadata": {
                "labels": spec.labels(),
                "annotations": {USER_ANNOTATION: spec.user},
            },
            "spec": dict(spec.claim_spec),
        },
    }


def group_template(spec: JobSpec) -> Wire:
    """The ResourceClaimTemplate of the devices every pod shares (``group=``): its one claim
    is made for the PodGroup (:mod:`.gangs`), with the run's labels as a pod's claims."""
    made = claim_template(replace(spec, claim_spec=spec.group_claim or {}))
    return {**made, "metadata": {**made["metadata"], "name": spec.group_template}}


def rendezvous_service(spec: JobSpec) -> Wire:
    """The headless Service whose name is the pods' subdomain (see the module)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(spec),
        "spec": {
            "clusterIP": "None",
            "selector": {COMPONENT_LABEL: COMPONENT, RUN_LABEL: spec.name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def master_addr(spec: JobSpec) -> str:
    """Rank 0's name in the cluster's DNS: ``<hostname>.<subdomain>``, the subdomain being the
    headless Service's name (the run's); the Job controller names an Indexed Job's pod
    ``<job>-<index>``, and JobSet's Job is ``<run>-<replicated job>-<job index>``."""
    if not spec.indexed:
        return "localhost"
    if spec.jobset:
        return f"{spec.name}-{REPLICATED_JOB}-0-0.{spec.name}"
    return f"{spec.name}-0.{spec.name}"


def rank_env(spec: JobSpec) -> list[Wire]:
    """The environment of torchrun, DeepSpeed and JAX (see the module)."""
    if spec.indexed:
        index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
        ranks: list[Wire] = [
            {"name": "RANK", "valueFrom": index},
            {"name": "NODE_RANK", "valueFrom": index},
        ]
    else:
        ranks = [{"name": "RANK", "value": "0"}, {"name": "NODE_RANK", "value": "0"}]
    env: list[Wire] = [
        {"name": "MASTER_ADDR", "value": master_addr(spec)},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "WORLD_SIZE", "value": str(spec.nodes)},
        *ranks,
    ]
    local = devices_per_pod(spec.claim_spec)
    if local is not None:
        env.append({"name": "LOCAL_WORLD_SIZE", "value": str(local)})
    return env


def placement(spec: JobSpec) -> str:
    """What ``same=`` asked, in the user's words: ``same pcieRoot per pod, all pods in one
    topology.kubernetes.io/zone`` ("" when nothing)."""
    short = {full: name for name, full in SHORT_ATTRIBUTES.items()}
    constraints = (spec.claim_spec.get("devices") or {}).get("constraints") or ()
    parts = [
        f"same {short.get(c['matchAttribute'], c['matchAttribute'])} per pod"
        for c in constraints
        if c.get("matchAttribute")
    ]
    parts += [f"all pods in one {key}" for key in spec.same_nodes]
    return ", ".join(parts)


def pod_affinity(spec: JobSpec) -> Wire | None:
    """The run's pods together on each of ``same_nodes``' topology keys (None: no key)."""
    if not spec.same_nodes:
        return None
    together = {"matchLabels": {COMPONENT_LABEL: COMPONENT, RUN_LABEL: spec.name}}
    terms = [{"labelSelector": together, "topologyKey": key} for key in spec.same_nodes]
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}


def failure_policy(retries: int) -> Wire:
    """Disruptions retried and not counted; a non-zero exit fails the Job unless
    ``retries``."""
    rules: list[Wire] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    if retries == 0:
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
            }
        )
    return {"rules": rules}


def job(spec: JobSpec) -> Wire:
    """The Job of the run (see the module)."""
    claims = [{"name": POD_CLAIM, "resourceClaimTemplateName": spec.name}]
    if spec.group_template:  # the same entry as the PodGroup's (:func:`.gangs.group_claims`)
        claims.append({"name": GROUP_CLAIM, "resourceClaimTemplateName": spec.group_template})
    container: Wire = {
        "name": CONTAINER,
        "image": spec.image,
        "env": rank_env(spec),
        "resources": {"claims": [{"name": c["name"]} for c in claims]},
    }
    if spec.argv:
        container["command"] = list(spec.argv)
    if spec.indexed:
        container["ports"] = [{"name": "rendezvous", "containerPort": MASTER_PORT}]
    pod: Wire = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "containers": [container],
        "resourceClaims": claims,
    }
    if spec.indexed:
        pod["subdomain"] = spec.name
    if spec.pod_group:
        pod["schedulingGroup"] = {"podGroupName": spec.pod_group}
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    affinity = pod_affinity(spec)
    if affinity is not None:
        pod["affinity"] = affinity
    job_spec: Wire = {
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "completionMode": "Indexed" if spec.indexed else "NonIndexed",
        "backoffLimit": spec.retries or BACKOFF_LIMIT,
        "podFailurePolicy": failure_policy(spec.retries),
        "ttlSecondsAfterFinished": TTL_S,
        "template": {"metadata": {"labels": spec.labels()}, "spec": pod},
    }
    if spec.lease is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.lease))
    metadata = meta(spec)
    metadata["annotations"][LAUNCHER_ANNOTATION] = spec.launcher
    placed = placement(spec)
    if placed:
        metadata["annotations"][PLACEMENT_ANNOTATION] = placed
    if spec.gang:
        metadata["annotations"][GANG_ANNOTATION] = spec.gang
    if spec.pod_group and spec.gang_timeout is not None:
        metadata["annotations"][GANG_TIMEOUT_ANNOTATION] = f"{spec.gang_timeout:.15g}"
    if spec.queue:
        metadata["labels"][KUEUE_LABEL] = spec.queue
        job_spec["suspend"] = True  # Kueue admits it (as its webhook would make it)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def owned_by(obj: Wire, job_object: Wire) -> Wire:
    """``obj`` owned by the Job (or JobSet) as created (its uid): deleted with it."""
    meta = job_object["metadata"]
    owner = {
        "apiVersion": job_object.get("apiVersion") or "batch/v1",
        "kind": job_object.get("kind") or "Job",
        "name": meta["name"],
        "uid": meta["uid"],
    }
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}

"""Gangs: the pods of ``dra.run(..., nodes=N)`` placed all together or not at all, where
the cluster serves the Workload API (KEP-4671, ``scheduling.k8s.io/v1beta1``, beta in
Kubernetes 1.37 and off by default: the API server's ``--runtime-config`` and the
``GenericWorkload`` feature gate of the API server, kube-scheduler and
kube-controller-manager).

A gang run has two objects more, of the run's name, owned by its Job (deleted with it):

* a **Workload** with one pod group template, :data:`TEMPLATE`, whose gang policy's
  ``minCount`` is the number of pods;
* a **PodGroup**, the runtime instance of that template (``spec.workloadRef``), with the
  same policy; the Job's pod template joins it (``spec.schedulingGroup.podGroupName``).

kube-scheduler's gang scheduling then places no pod of the group until ``minCount`` of them
fit at once, so that a run that cannot start holds no node and no device: the pods'
claims are allocated when their pods are bound, which is all of them or none. While the
group waits the scheduler says why on the PodGroup (its ``PodGroupInitiallyScheduled``
condition), which the run's status reads (:func:`waiting`); the scheduler never gives up
on a gang, so the run fails at its ``gang_timeout`` on our side (:mod:`.gangtimeout`).

There is no gang (the run is as before: each pod placed when it fits, see
:func:`decide`) for one pod, where the cluster does not serve the API and with a Kueue
queue (Kueue admits the Job as a whole, its own all-or-nothing, and the run is left to
it): the status says so. Nor for a JobSet (JobSet v0.11 makes its pods without a
PodGroup), whose status is as before.

In a gang, a pod the Job makes again (a disruption, ``retries``) is placed only while
``minCount`` pods of the group are there: kube-scheduler 1.37 counts the pods that have
not ended, so once other ranks have ended it waits until the run's lease or a cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import RUN
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.runs.jobs import (
    GANG,
    GANG_ANNOTATION,
    GROUP_CLAIM,
    JOBSET_LAUNCHER,
    JobSpec,
    group_template,
    meta,
    owned_by,
)
from dra_jupyter.model.objects import Wire

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

GROUP = "scheduling.k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
RESOURCES = frozenset({"workloads", "podgroups"})
TEMPLATE = "ranks"  # the Workload's one pod group template: every rank of the run
SCHEDULED = "PodGroupInitiallyScheduled"  # the PodGroup's condition kube-scheduler writes
NO_GANG = "no gang: pods may start one by one"
DISCOVERY_TIMEOUT_S = 10.0


def served(api: client.ApiClient) -> bool:
    """Whether the cluster serves Workloads and PodGroups (discovery of
    ``scheduling.k8s.io/v1beta1``, which every authenticated user may read; False when it
    cannot be read)."""
    try:
        listed = client.CustomObjectsApi(api).get_api_resources(
            GROUP, VERSION, _request_timeout=DISCOVERY_TIMEOUT_S
        )
    except (ApiException, urllib3.exceptions.HTTPError):
        return False
    return {r.name for r in listed.resources or ()} >= RESOURCES


def decide(spec: JobSpec, workloads: bool) -> str:
    """The run's word on gangs, as its status says it: ``""`` for one pod (nothing to wait
    for) and for a JobSet (not a gang: its status is as before), ``"gang of N"``, or why not
    (``"no gang: pods may start one by one (...)"``);
    ``workloads``: whether the cluster serves the Workload API (:func:`served`)."""
    if spec.nodes == 1 or spec.launcher == JOBSET_LAUNCHER:
        return ""  # a JobSet's status is as before: JobSet v0.11 makes no PodGroup
    if spec.queue:
        return f"{NO_GANG} once Kueue admits the run as a whole (queue {spec.queue})"
    if not workloads:
        return f"{NO_GANG} (the cluster does not serve the Workload API, {API_VERSION})"
    return f"{GANG} {spec.nodes}"


def is_gang(word: str) -> bool:
    """True for the word of a gang run (:func:`decide`)."""
    return word.startswith(GANG)


def workload(spec: JobSpec) -> Wire:
    """The run's Workload: one pod group template, a gang of every pod (see the module)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": meta(spec),
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": spec.name},
            "podGroupTemplates": [
                {"name": TEMPLATE, "schedulingPolicy": _policy(spec), **group_claims(spec)}
            ],
        },
    }


def pod_group(spec: JobSpec) -> Wire:
    """The run's PodGroup, the instance of the Workload's template its pods join."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": meta(spec),
        "spec": {
            "workloadRef": {"workloadName": spec.name, "templateName": TEMPLATE},
            "schedulingPolicy": _policy(spec),
            **group_claims(spec),
        },
    }


def _policy(spec: JobSpec) -> Wire:
    return {"gang": {"minCount": spec.nodes}}


def group_claims(spec: JobSpec) -> Wire:
    """The PodGroup's claim of the devices every pod shares (``group=``), the same entry as
    each pod's (KEP-5729): the resourceclaim controller makes one claim from the template
    for the PodGroup, and kube-scheduler reserves it for the group; {} without group=."""
    if not spec.group_template:
        return {}
    return {
        "resourceClaims": [{"name": GROUP_CLAIM, "resourceClaimTemplateName": spec.group_template}]
    }


def group_claims_served(api: client.ApiClient, namespace: str) -> bool:
    """Whether the API server keeps a PodGroup's ``spec.resourceClaims`` (the feature gate
    DRAWorkloadResourceClaims, beta and off by default in Kubernetes 1.37, drops them
    otherwise): a PodGroup made as a dry run, nothing stored; False when it cannot be made
    (the Workload API not served, RBAC)."""
    probe = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"generateName": "dra-jupyter-probe-", "namespace": namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 1}},
            "resourceClaims": [{"name": GROUP_CLAIM, "resourceClaimTemplateName": "probe"}],
        },
    }
    scheduling = client.SchedulingV1beta1Api(api)
    try:
        made = scheduling.create_namespaced_pod_group(
            namespace,
            to_model(client.V1beta1PodGroup, probe),
            dry_run="All",
            _request_timeout=DISCOVERY_TIMEOUT_S,
        )
    except (ApiException, urllib3.exceptions.HTTPError):
        return False
    return bool(made.spec.resource_claims)


NO_GROUP_CLAIMS = (
    "group= needs claims for pod groups (KEP-5729), which this cluster does not keep: ask "
    "the admin for the feature gate DRAWorkloadResourceClaims=true (beta, off by default in "
    "Kubernetes 1.37) on kube-apiserver, kube-scheduler and kube-controller-manager, or "
    "leave group= out"
)


def refuse_group(gang: str, served: Callable[[], bool]) -> None:
    """InvalidInputError in one line when a run with ``group=`` cannot have its claim for
    the PodGroup: it is no gang (``gang``: :func:`decide`'s word), or the cluster does not
    keep such claims (``served``: asked only for a gang)."""
    if not is_gang(gang):
        why = gang or "a run of one pod has no pod group"
        raise InvalidInputError(
            f"group= asks for devices once for the run's PodGroup, and this run has none: "
            f"{why}; leave group= out"
        ).said_by(RUN)
    if not served():
        raise InvalidInputError(NO_GROUP_CLAIMS).said_by(RUN)


def of_job(job: Wire) -> bool:
    """True when ``job`` (a run's Job as read) is a gang's."""
    return is_gang(str((job["metadata"].get("annotations") or {}).get(GANG_ANNOTATION, "")))


def reason_while_waiting(backend: ClusterAccess, job: Wire, pods: Sequence[Wire]) -> str:
    """kube-scheduler's word on the PodGroup of a gang run (``job``, ``pods``: as read) that
    has not ended and whose pods are not all placed; "" otherwise, without a read, and when
    the PodGroup cannot be read (the pods' own reasons stand)."""
    placed = bool(pods) and all(p["spec"].get("nodeName") for p in pods)
    ended = any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )
    if placed or ended:
        return ""
    api = client.SchedulingV1beta1Api(backend.api)
    name, namespace = job["metadata"]["name"], backend.namespace
    try:
        group = backend.retrying(lambda: api.read_namespaced_pod_group(name, namespace))
    except (ApiException, urllib3.exceptions.HTTPError):
        return ""
    return scheduler_word(to_wire(backend.api, group))


def scheduler_word(group: Mapping[str, object] | None) -> str:
    """kube-scheduler's reason on a PodGroup it could not place yet ("" when none)."""
    status = (group or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if condition.get("type") == SCHEDULED and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


WAITING = f"waiting as a {GANG}"
# kube-scheduler's words on a pod that waits for its gang, not for a reason of its own
# (pkg/scheduler/framework/plugins/gangscheduling, schedule_one_podgroup.go)
GANG_WORDS = ("pod group is unschedulable", "minCount (", "waiting for minCount pods")


def about_gang(reason: str) -> bool:
    """True when a pod's scheduling reason is its gang's, not its own."""
    return any(word in reason for word in GANG_WORDS)


def waiting(nodes: int, reasons: Sequence[str], group_word: str = "") -> str:
    """What a gang run says while it waits: ``waiting as a gang of N: <why>``, why being
    the first reason of a pod of its own (``reasons``: the waiting pods') with the
    scheduler's word on the group after it in brackets, or whichever of them there is."""
    own = [r for r in reasons if r and not about_gang(r)]
    group = group_word or next((r for r in reasons if r), "")
    if own and group and group not in own[0]:
        why = f"{own[0]} ({group})"
    else:
        why = (own[0] if own else group) or "no answer from kube-scheduler yet"
    return f"{WAITING} {nodes}: {why}"


def is_waiting(message: str) -> bool:
    """True for a run's message that is a waiting gang's (:func:`waiting`)."""
    return message.startswith(WAITING)


Call = Callable[[], object]


def creations(api: client.ApiClient, spec: JobSpec, job: Wire) -> list[tuple[str, Call]]:
    """The calls that make a gang run's Workload and PodGroup, owned by its Job as made
    (``job``: with its uid), each with the resource RBAC names; none for a run without a
    gang."""
    if not spec.pod_group:
        return []
    scheduling = client.SchedulingV1beta1Api(api)
    made_workload = to_model(client.V1beta1Workload, owned_by(workload(spec), job))
    made_group = to_model(client.V1beta1PodGroup, owned_by(pod_group(spec), job))
    calls: list[tuple[str, Call]] = []
    if spec.group_template:  # before the PodGroup: its claim is made from it
        template = to_model(client.V1ResourceClaimTemplate, owned_by(group_template(spec), job))
        resource = client.ResourceV1Api(api)
        calls.append(
            (
                "resourceclaimtemplates.resource.k8s.io",
                lambda: resource.create_namespaced_resource_claim_template(
                    spec.namespace, template
                ),
            )
        )
    return [
        *calls,
        (
            f"workloads.{GROUP}",
            lambda: scheduling.create_namespaced_workload(spec.namespace, made_workload),
        ),
        (
            f"podgroups.{GROUP}",
            lambda: scheduling.create_namespaced_pod_group(spec.namespace, made_group),
        ),
    ]


def deletions(
    api: client.ApiClient, namespace: str, name: str, gang: bool
) -> list[tuple[str, Call]]:
    """The calls that delete a gang run's PodGroup and Workload (the garbage collector
    would, after the Job: cancel is at once); none for a run without a gang."""
    if not gang:
        return []
    scheduling = client.SchedulingV1beta1Api(api)
    resource = client.ResourceV1Api(api)
    return [
        (
            f"podgroups.{GROUP}",
            lambda: scheduling.delete_namespaced_pod_group(name, namespace),
        ),
        (
            f"workloads.{GROUP}",
            lambda: scheduling.delete_namespaced_workload(name, namespace),
        ),
        (  # group='s template, where the run has one (gone already is fine)
            "resourceclaimtemplates.resource.k8s.io",
            lambda: resource.delete_namespaced_resource_claim_template(
                f"{name}-{GROUP_CLAIM}", namespace
            ),
        ),
    ]

"""A JupyterHub user's server on Kubernetes, as :mod:`dra_jupyter.hub.kubespawner` starts it:
the ResourceClaimTemplate of its devices (which the pod references: the resourceclaim
controller makes the pod's claim from it, owned by the pod), the pod's generated claim as
it is now, and why kube-scheduler has not allocated it.

A template rather than a claim of our own: the claim made from it is owned by the pod (it
goes when the pod goes, whoever deletes the pod), and Kueue counts the devices of templates
that pods reference (not of standalone claims). The template itself is deleted when the
server stops, and owned by the pod once the pod exists, so that it goes with the pod too
when the hub is not there to delete it.

The server's GPU kernels (:mod:`dra_jupyter.kube.kernels.pods`) are pods the server made, not
owned by its pod: the server deletes them as it shuts its kernels down, and the hub deletes
what is left of them when it stops the server (:meth:`ServerDevices.delete_kernel_pods`),
since a server killed before its kernels ended would leave their GPUs held by nobody's
kernel.

Synchronous (the official client); the spawner runs these calls in a thread.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import ClusterError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kube import kueue
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import SERVER_LABEL, forbidden
from dra_jupyter.kube.connect import api_client, cluster_error, to_model, to_wire
from dra_jupyter.kube.records import claim_state
from dra_jupyter.model.objects import Wire
from dra_jupyter.settings import Settings
from dra_jupyter.types import USER_ANNOTATION, ClaimRecord, Owner, label_value
from dra_jupyter.verdicts import impossible_hint

TEMPLATES = "resourceclaimtemplates.resource.k8s.io"
HUB_USER_LABEL = "dra-jupyter/hub-user"  # the hub user whose server the template is for
HUB_SERVER_LABEL = "dra-jupyter/hub-server"  # the server's pod
LEASE_ANNOTATION = "dra-jupyter/lease"  # seconds the server may hold its devices
POD_CLAIM = "dra"  # the name of the pod's claim (spec.resourceClaims[].name)
EXPLAIN_PROBE = "server-devices"  # the name the request is explained under
# seconds to connect and to read each answer: a spawn never waits on a stale connection
TIMEOUT = (5, 15)
# a kernel pod's label (kernelpods.COMPONENT_LABEL = COMPONENT; kernelpods imports this module)
KERNEL_POD = "dra-jupyter/component=kernel"
KERNEL_GRACE_S = 5  # seconds a kernel pod left by a stopped server has to end


def claim_template(
    name: str,
    request: Mapping[str, Any],
    *,
    namespace: str,
    user: str,
    pod: str,
    classes: Sequence[str] = (),
    lease: float | None = None,
) -> Wire:
    """The ResourceClaimTemplate for ``request`` (``dra.request`` keywords) of ``user``'s
    server in pod ``pod``; the claim made from it carries the same labels and the user in
    full (:data:`~dra_jupyter.types.USER_ANNOTATION`)."""
    labels = {HUB_USER_LABEL: label_value(user), HUB_SERVER_LABEL: label_value(pod)}
    claim = build_claim(name, request, namespace=namespace, classes=classes)
    annotations = {USER_ANNOTATION: user}
    if lease is not None:
        annotations[LEASE_ANNOTATION] = f"{lease:g}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "metadata": {"labels": labels, "annotations": {USER_ANNOTATION: user}},
            "spec": claim["spec"],
        },
    }


def generated_claim(pod: Mapping[str, Any], pod_claim: str = POD_CLAIM) -> str | None:
    """The name of the claim the resourceclaim controller made for the pod's ``pod_claim``
    (``status.resourceClaimStatuses``), or None while there is none yet."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if status.get("name") == pod_claim and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return None


class ServerDevices:
    """The templates and claims of hub users' servers in one namespace.

    With ``watch`` (the hub's: one per API client for the life of the process), the
    cluster's devices and claims (:meth:`devices`, :meth:`explain`) are read from the
    process's watched views of that client (:mod:`.views`: listed once, then watched,
    shared by every namespace's ``ServerDevices`` of the client), so that a render of the
    spawn form makes no API call once they are synced; without it, listed on each call."""

    def __init__(self, api: client.ApiClient, namespace: str, *, watch: bool = False) -> None:
        self.api = api
        self.namespace = namespace
        self.resource = client.ResourceV1Api(api)
        self.core = client.CoreV1Api(api)
        self.watch = watch
        self._reader: KubernetesBackend | None = None

    @property
    def reader(self) -> KubernetesBackend:
        """The Kubernetes backend that reads the cluster's devices and claims for this
        namespace (made on first use; kept, so that its views are kept)."""
        if self._reader is None:
            self._reader = _cluster(self.api, self.namespace, watch=self.watch)
        return self._reader

    def error(self, error: Exception, verb: str, resource: str, action: str) -> ClusterError:
        """``error`` of the request to ``verb`` ``resource`` in the namespace, for ``action``,
        in one line: a 403 says which permission is missing."""
        if isinstance(error, ApiException) and error.status == 403:
            return forbidden(error, verb, resource, self.namespace, action)
        return cluster_error(error, action, self.api)

    def device_classes(self) -> list[str]:
        """The names of the cluster's DeviceClasses ([] when RBAC hides them: the request's
        default class is used)."""
        try:
            listed = self.resource.list_device_class(_request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 403:
                return []
            raise self.error(error, "list", "deviceclasses", "spawn") from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "list", "deviceclasses", "spawn") from error
        return [c.metadata.name for c in listed.items if c.metadata and c.metadata.name]

    def create_template(self, template: Wire) -> Wire:
        """Create ``template``; one of that name left from an earlier start is replaced (a
        template's spec cannot change)."""
        name = template["metadata"]["name"]
        action = f"spawn: creating ResourceClaimTemplate {name}"
        body = to_model(client.V1ResourceClaimTemplate, template)
        for attempt in range(2):
            try:
                created = self.resource.create_namespaced_resource_claim_template(
                    self.namespace, body=body, _request_timeout=TIMEOUT
                )
            except ApiException as error:
                if error.status == 409 and attempt == 0:
                    self.delete_template(name)
                    continue
                raise self.error(error, "create", TEMPLATES, action) from error
            except urllib3.exceptions.HTTPError as error:
                raise self.error(error, "create", TEMPLATES, action) from error
            return to_wire(self.api, created)
        raise AssertionError("unreachable")  # pragma: no cover

    def own_template(self, name: str, pod: str, uid: str) -> bool:
        """Make pod ``pod`` (of ``uid``) the template's owner, so that it is deleted with the
        pod; False if the template is gone."""
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}
        body = {"metadata": {"ownerReferences": [owner]}}
        try:
            self.resource.patch_namespaced_resource_claim_template(
                name, self.namespace, body, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise self.error(error, "patch", TEMPLATES, f"spawn: template {name}") from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "patch", TEMPLATES, f"spawn: template {name}") from error
        return True

    def template(self, name: str) -> Wire | None:
        try:
            got = self.resource.read_namespaced_resource_claim_template(
                name, self.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise self.error(error, "get", TEMPLATES, f"template {name}") from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "get", TEMPLATES, f"template {name}") from error
        return to_wire(self.api, got)

    def delete_template(self, name: str) -> bool:
        """Delete the template; False if it was gone."""
        try:
            self.resource.delete_namespaced_resource_claim_template(
                name, self.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise self.error(error, "delete", TEMPLATES, f"stop: template {name}") from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "delete", TEMPLATES, f"stop: template {name}") from error
        return True

    def pod(self, name: str) -> Wire | None:
        try:
            got = self.core.read_namespaced_pod(name, self.namespace, _request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise self.error(error, "get", "pods", f"spawn: pod {name}") from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "get", "pods", f"spawn: pod {name}") from error
        return to_wire(self.api, got)

    def kueue_word(self, uid: str) -> str:
        """Kueue's word on the pod ``uid`` while it waits in Kueue's line (its reason and
        place, :func:`.kueue.word`); "" when it has no Workload or Kueue cannot be read."""
        return kueue.word_for(self.api, self.namespace, uid)

    def claim(self, name: str, action: str = "") -> Wire | None:
        """The claim ``name``, or None where there is none; an error says ``action``
        (default: ``spawn: claim NAME``)."""
        action = action or f"spawn: claim {name}"
        try:
            got = self.resource.read_namespaced_resource_claim(
                name, self.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise self.error(error, "get", "resourceclaims", action) from error
        except urllib3.exceptions.HTTPError as error:
            raise self.error(error, "get", "resourceclaims", action) from error
        return to_wire(self.api, got)

    def pods(self, selector: str, action: str) -> list[Wire]:
        """The namespace's pods of the label ``selector`` (one LIST); an error says
        ``action``."""
        try:
            listed = self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _request_timeout=TIMEOUT
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self.error(error, "list", "pods", action) from error
        return [to_wire(self.api, pod) for pod in listed.items]

    def claims_of(self, pod: str) -> list[Wire]:
        """The claims of hub server ``pod`` (made from its template), deleted or not."""
        selector = f"{HUB_SERVER_LABEL}={label_value(pod)}"
        try:
            listed = self.resource.list_namespaced_resource_claim(
                self.namespace, label_selector=selector, _request_timeout=TIMEOUT
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self.error(error, "list", "resourceclaims", f"stop: pod {pod}") from error
        return [to_wire(self.api, c) for c in listed.items]

    def delete_claims_of(self, pod: str) -> list[str]:
        """Delete what is left of the claims of hub server ``pod`` (the resourceclaim
        controller deletes them with the pod; this is for a pod that was never made, or a
        controller that is behind); the names deleted."""
        deleted = []
        for claim in self.claims_of(pod):
            name = claim["metadata"]["name"]
            try:
                self.resource.delete_namespaced_resource_claim(
                    name, self.namespace, _request_timeout=TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    continue
                raise self.error(error, "delete", "resourceclaims", f"stop: {name}") from error
            except urllib3.exceptions.HTTPError as error:
                raise self.error(error, "delete", "resourceclaims", f"stop: {name}") from error
            deleted.append(name)
        return deleted

    def delete_kernel_pods(self, server_id: str) -> list[str]:
        """Delete the kernel pods that the Jupyter server ``server_id`` (its
        ``DRA_JUPYTER_SERVER_ID``) made and left (their claims, templates and Secrets go
        with them); the names deleted."""
        selector = f"{KERNEL_POD},{SERVER_LABEL}={server_id}"  # a label value (check_server_id)
        action = f"stop: the kernel pods of {server_id}"
        deleted = []
        for pod in self.pods(selector, action):
            name = str(pod["metadata"]["name"])
            try:
                self.core.delete_namespaced_pod(
                    name,
                    self.namespace,
                    grace_period_seconds=KERNEL_GRACE_S,
                    _request_timeout=TIMEOUT,
                )
            except ApiException as error:
                if error.status == 404:
                    continue
                raise self.error(error, "delete", "pods", action) from error
            except urllib3.exceptions.HTTPError as error:
                raise self.error(error, "delete", "pods", action) from error
            deleted.append(name)
        return deleted

    def devices(self) -> tuple[Inventory, list[ClaimRecord]]:
        """The cluster's devices (DeviceClasses, ResourceSlices, Nodes) and every claim that
        holds some now, as the Kubernetes backend reads them (every namespace where RBAC
        allows, else this one): what the spawn form's choices are counted on."""
        backend = self.reader
        return backend.inventory(), backend.holders()

    def readable_devices(self) -> Inventory | None:
        """The cluster's devices (slices and classes) as :meth:`devices` reads them; None
        when RBAC hides the slices (then nothing can be said of a node's devices)."""
        backend = self.reader
        inventory = backend.inventory()
        return inventory if backend.slices_readable else None

    def explain(self, claim: Wire, request: Mapping[str, Any] | None = None) -> str:
        """Why ``claim`` (a template's or a generated claim) is not allocated, in lines:
        never on this cluster (and why), or not now (per node, what is missing) and who
        holds the devices now."""
        return explain_pending(self.api, self.namespace, claim, request, reader=self.reader)


@functools.cache
def _hub_api(kubeconfig: str) -> client.ApiClient:
    return api_client(kubeconfig or None)


def hub_devices(kubeconfig: str, namespace: str, *, watch: bool = True) -> ServerDevices:
    """The hub's :class:`ServerDevices` of ``namespace``, one for the life of the process,
    through one API client per kubeconfig ("": in-cluster, else ``$KUBECONFIG``): the
    cluster's watched views are per client (:func:`dra_jupyter.kube.watching.shared`), so
    every namespace's spawns and every render of the spawn form share one view of each
    kind, and a render makes no API call once they are synced. Without ``watch`` (the hub
    whose shared view serves the form and explains its waiting spawns): no view kept,
    the cluster read for an explanation only where the view does not answer."""
    return _hub_devices(kubeconfig, namespace, watch)


@functools.cache
def _hub_devices(kubeconfig: str, namespace: str, watch: bool) -> ServerDevices:
    return ServerDevices(_hub_api(kubeconfig), namespace, watch=watch)


def explain_pending(
    api: client.ApiClient,
    namespace: str,
    claim: Wire,
    request: Mapping[str, Any] | None = None,
    *,
    reader: KubernetesBackend | None = None,
) -> str:
    """See :meth:`ServerDevices.explain`; the cluster's slices and claims as the Kubernetes
    backend ``reader`` reads them (every namespace where RBAC allows, else this one; by
    default one made for this call, which lists them)."""
    return explain_on(reader or _cluster(api, namespace), namespace, claim, request)


def explain_on(
    backend: KubernetesBackend,
    namespace: str,
    claim: Wire,
    request: Mapping[str, Any] | None = None,
) -> str:
    """Why ``claim`` of ``namespace`` waits (:meth:`ServerDevices.explain`'s text), on the
    cluster as ``backend`` reads it: the hub's own reader, or the shared view's watched one
    (:mod:`dra_jupyter.hub.sharedview`, ``POST api/explain``), which then lists nothing."""
    inventory = backend.inventory()
    meta = claim.get("metadata") or {}
    probe: Wire = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": EXPLAIN_PROBE, "namespace": namespace},
        "spec": claim.get("spec") or {},
    }
    if not inventory.slices:
        if not backend.slices_readable:
            return "RBAC hides the cluster's ResourceSlices from the hub, so it cannot say more"
        return "the cluster publishes no devices (no ResourceSlices)"
    idle = Allocator(inventory.patched_slices, inventory.device_classes, [], "first-fit")
    if idle.allocate([probe]) is None:
        hint = impossible_hint(request, inventory) if request is not None else None
        head = "can never be met on this cluster, even with every device free"
        lines = [f"{head}: {hint}" if hint else head]
        lines += idle.explain([probe]).summary(named=False).splitlines()
        return "\n".join(lines)
    me = (meta.get("namespace"), meta.get("name"))
    held = [r for r in backend.holders() if (r.namespace, r.name) != me]
    explanation = backend.allocator(held).explain([probe])
    if explanation.satisfiable:
        return f"devices are free now on node {explanation.node}; kube-scheduler will retry"
    lines = ["not now: the devices it needs are held by others"]
    lines += explanation.summary(named=False).splitlines()
    devices: Counter[str] = Counter()
    for record in held:
        devices[record.owner.user] += len(record.device_keys)
    if devices:
        total = sum(devices.values())
        users = ", ".join(f"{user} {n}" for user, n in devices.most_common(5))
        more = f" and {len(devices) - 5} more" if len(devices) > 5 else ""
        lines.append(
            f"held now on the cluster: {total} devices by {len(devices)} users ({users}{more})"
        )
    return "\n".join(lines)


def _cluster(api: client.ApiClient, namespace: str, *, watch: bool = False) -> KubernetesBackend:
    """The Kubernetes backend as a reader of the cluster's devices and claims (no ledger, no
    owner of its own, one try a call; its cluster views kept by watching with ``watch``)."""
    settings = Settings(
        ledger=Path("/nonexistent"), namespace=namespace, kube_retries=1, watch=watch
    )
    return KubernetesBackend(settings, Owner(user="", host="", pid=0), api=api)


__all__ = [
    "HUB_SERVER_LABEL",
    "HUB_USER_LABEL",
    "LEASE_ANNOTATION",
    "POD_CLAIM",
    "ServerDevices",
    "claim_state",
    "claim_template",
    "explain_on",
    "explain_pending",
    "generated_claim",
    "hub_devices",
]

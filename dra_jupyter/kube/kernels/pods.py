"""A Jupyter kernel in a pod of its own that holds its devices (what the kernel provisioner
of :mod:`dra_jupyter.kube.kernels.provisioner` starts): the objects (pure) and their life
on the cluster.

Per kernel start, three objects of one name in the user's namespace (two for a kernel that
joins a claim that exists, ``dra.request(join=...)``: its pod names that claim in
``spec.resourceClaims`` by ``resourceClaimName``, beside the other pods that use it, and has
no template; deleting the pod leaves the claim):

* a **ResourceClaimTemplate** made from the request (``dra.request`` keywords,
  :func:`~dra_jupyter.claimspec.build_claim`), or from a claim's spec (a claim made in a
  kernel that then moved into a pod with it), which the pod references in
  ``spec.resourceClaims``: the resourceclaim controller makes the pod's claim from it, owned
  by the pod, so the claim goes when the pod goes, and Kueue counts its devices. The claim
  is labelled as the server extension labels its kernels' claims (user, kernel, server) and
  held by the server's process (annotation), so ``dra.claims()``, the Devices panel and
  idle release see it, and the extension does not take it for a gone kernel's while the
  kernel starts;
* a **Secret** with the kernel's connection (ports and HMAC key), which the pod reads through
  ``secretKeyRef`` (:mod:`dra_jupyter.kube.kernels.boot`): the key is in no pod spec, annotation or
  log;
* the **Pod**: the kernel's argv under ``python3 -m dra_jupyter.kube.kernels.boot``, the server's
  image by default, the notebook's working directory, restartPolicy Never.

The template is made first, then the pod, which then owns it (one patch), then the Secret,
owned by the pod from the start: the garbage collector deletes them with the pod, whoever
deletes it, and the server needs no right to change or delete a Secret;
:meth:`KernelPods.delete` deletes the pod and the template. The template before the pod:
Kueue reads it as soon as the pod exists, and a pod whose template is not there yet leaves
its Workload marked inadmissible for good (Kueue 0.17 never admits it, even once quota is
free).
Waiting for the pod reports kube-scheduler's reason while it cannot place it, and at the
deadline that reason plus our own explain (as ``dra.run`` does); a pod that ends says why
(:func:`ending`) and, when its container failed, what it said last
(:meth:`KernelPods.with_last_lines`). Synchronous (the official client): the provisioner
calls these in a thread.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import AllocationError, ClusterError
from dra_jupyter.kube import kueue
from dra_jupyter.kube.claims import (
    HOLDER_ANNOTATION,
    KERNEL_LABEL,
    SERVER_LABEL,
    USER_LABEL,
    ClaimClient,
    forbidden,
)
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.kube.kernels.boot import CONNECTION_ENV, POD_IP_ENV
from dra_jupyter.kube.kernels.volumes import (
    Files,
    Unshared,
    claim_name,
    kernel_files,
    node_has_devices,
    node_refusal,
)
from dra_jupyter.kube.pods import scheduler_reason
from dra_jupyter.kube.records import holder_annotation
from dra_jupyter.kube.sharedclaims import SHARED_LABEL
from dra_jupyter.kube.spawn import ServerDevices, explain_pending, generated_claim
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import USER_ANNOTATION, Owner, label_value
from dra_jupyter.verdicts import describe

COMPONENT_LABEL = "dra-jupyter/component"
COMPONENT = "kernel"  # the value of COMPONENT_LABEL on a kernel pod and its objects
POD_CLAIM = "dra"  # spec.resourceClaims[].name of the kernel's devices
CONTAINER = "kernel"
SECRET_KEY = "connection.json"
BOOT = ("python3", "-m", "dra_jupyter.kube.kernels.boot")
TIMEOUT = (5, 15)  # seconds to connect and to read each answer
# how often a starting kernel's pod is read: a kernel start waits on it (make bench-kernels:
# at 0.5 s the wait was most of our part of the start)
START_POLL_S = 0.1
QUEUE_POLL_S = 1.0  # how often Kueue's Workloads are read while the pod waits for admission
TAIL_LINES = 20  # of a failed pod's log, in the server's log and the kernel's error
TAIL_BYTES = 4096  # and at most this much of them


@dataclass(frozen=True)
class KernelPodSpec:
    """What a kernel pod is made of; pod, template and Secret are all named ``name``."""

    name: str
    namespace: str
    image: str
    argv: Sequence[str]  # the kernel's, with {connection_file} left for kernelboot
    user: str
    kernel_id: str
    request: Mapping[str, Any] = field(default_factory=dict)  # {}: a pod without devices
    # or the devices as a ResourceClaim's spec (a claim the kernel made before it moved into
    # a pod with it): used instead of ``request`` when given
    claim: Mapping[str, Any] | None = None
    # or a claim that exists, which the pod uses by name beside other pods (no template):
    # ``dra.request(join=...)``, :mod:`dra_jupyter.sharing.joins`
    join: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    service_account: str | None = None
    node_selector: Mapping[str, str] | None = None
    classes: Sequence[str] = ()  # the cluster's DeviceClasses (for the request's default)
    server_id: str = ""  # the Jupyter server's id (its extension's claims are so labelled)
    owner: Owner | None = None  # the server's process: the claim's holder while it lives
    files: Files | None = None  # the volume with the notebook's folder (volumes.kernel_files)
    queue: str = ""  # a Kueue LocalQueue: the pod waits for its admission ("": none)

    @property
    def has_devices(self) -> bool:
        return bool(self.request) or bool(self.claim) or bool(self.join)

    @property
    def has_template(self) -> bool:
        """Its devices come from a template of its own (not a claim it joins)."""
        return self.has_devices and not self.join

    def labels(self) -> dict[str, str]:
        labels = {
            USER_LABEL: label_value(self.user),
            KERNEL_LABEL: label_value(self.kernel_id),
            COMPONENT_LABEL: COMPONENT,
        }
        if self.server_id:
            labels[SERVER_LABEL] = self.server_id
        return labels

    def pod_labels(self) -> dict[str, str]:
        """The pod's: its objects' and, with a queue, Kueue's (its webhook then gates the
        pod until the queue's quota admits it; only a pod with devices waits in a queue);
        with ``join``, the claim it uses (:data:`~dra_jupyter.kube.sharedclaims.SHARED_LABEL`)."""
        labels = self.labels()
        if self.queue and self.has_template:  # a claim it joins is counted where made
            labels[kueue.QUEUE_LABEL] = self.queue
        if self.join:  # a user of that claim, as a hub profile's shared claim counts them
            labels[SHARED_LABEL] = label_value(self.join)
        return labels


def kernel_claim(spec: KernelPodSpec) -> Wire:
    """The ResourceClaim of the kernel's devices: from its claim spec or its request."""
    if spec.claim is not None:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": spec.name, "namespace": spec.namespace},
            "spec": dict(spec.claim),
        }
    return build_claim(spec.name, spec.request, namespace=spec.namespace, classes=spec.classes)


def kernel_template(spec: KernelPodSpec) -> Wire:
    """The ResourceClaimTemplate of the kernel's devices; its claims carry the labels (so
    ``dra.claims()`` lists them) and the user in full."""
    claim = kernel_claim(spec)
    annotations = {USER_ANNOTATION: spec.user}
    if spec.owner is not None:  # held by the server: not reclaimed while the kernel starts
        annotations[HOLDER_ANNOTATION] = holder_annotation(spec.owner)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": spec.labels(),
            "annotations": annotations,
        },
        "spec": {
            "metadata": {"labels": spec.labels(), "annotations": annotations},
            "spec": claim["spec"],
        },
    }


def connection_secret(spec: KernelPodSpec, connection: str) -> Wire:
    """The Secret that holds the kernel's connection (JSON, without ``ip``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": spec.labels()},
        "stringData": {SECRET_KEY: connection},
    }


def kernel_pod(spec: KernelPodSpec) -> Wire:
    """The kernel's Pod (see the module)."""
    env: list[Wire] = [{"name": k, "value": v} for k, v in spec.env.items()]
    env += [
        {
            "name": CONNECTION_ENV,
            "valueFrom": {"secretKeyRef": {"name": spec.name, "key": SECRET_KEY}},
        },
        {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container: Wire = {
        "name": CONTAINER,
        "image": spec.image,
        "command": [*BOOT, *spec.argv],
        "env": env,
    }
    if spec.working_dir:
        container["workingDir"] = spec.working_dir
    pod_spec: Wire = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "containers": [container],
    }
    if spec.has_devices:
        container["resources"] = {"claims": [{"name": POD_CLAIM}]}
        source = (
            {"resourceClaimName": spec.join}
            if spec.join
            else {"resourceClaimTemplateName": spec.name}
        )
        pod_spec["resourceClaims"] = [{"name": POD_CLAIM, **source}]
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.files is not None:
        _add_files(pod_spec, container, spec.files)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": spec.pod_labels(),
        },
        "spec": pod_spec,
    }


def _add_files(pod_spec: Wire, container: Wire, files: Files) -> None:
    """The volume of the notebook's folder, the server's user, and the server's node when
    the volume is that node's: a required node affinity on the node's name, which
    kube-scheduler honours while it allocates the claim (``nodeName`` would bypass it)."""
    pod_spec["volumes"] = [dict(v) for v in files.volumes]
    container["volumeMounts"] = [dict(m) for m in files.mounts]
    if files.pod_security:
        pod_spec["securityContext"] = dict(files.pod_security)
    if files.container_security:
        container["securityContext"] = dict(files.container_security)
    if files.node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [files.node]}]}
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }


@dataclass(frozen=True)
class Ending:
    """How a kernel pod ended: its exit code (None: not known) and why, in one line, and
    then its container's last lines when it failed (``said``, "" when not known)."""

    exit_code: int | None
    reason: str
    said: str = ""

    @property
    def failed(self) -> bool:
        """Its container ended with an error (not a kernel that exited 0)."""
        return self.exit_code not in (None, 0)

    def __str__(self) -> str:
        if not self.said:
            return self.reason
        lines = "\n".join(f"  {line}" for line in self.said.splitlines())
        return f"{self.reason}; its last lines:\n{lines}"


def last_lines(text: str, message: str = "") -> str:
    """What a failed container said last: its log's last lines (``text``, read with
    :data:`TAIL_LINES` and :data:`TAIL_BYTES`), else its termination message; a line cut by
    the byte limit is left out."""
    if len(text.encode()) >= TAIL_BYTES and "\n" in text:
        text = text.split("\n", 1)[1]  # the first line is cut
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    said = "\n".join(lines[-TAIL_LINES:])
    return said or message.strip()


def ending(pod: Wire) -> Ending | None:
    """None while the pod runs (or waits to); else its container's exit code and the
    reason (Evicted, OOMKilled, Error ...) with the message, when given."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            why = str(terminated.get("reason") or "ended")
            if terminated.get("message"):
                why += f": {str(terminated['message']).strip()}"
            code = terminated.get("exitCode")
            return Ending(None if code is None else int(code), f"{why} (exit code {code})")
    why = str(status.get("reason") or status.get("phase"))
    if status.get("message"):
        why += f": {status['message']}"
    return Ending(None, why)


class KernelPods:
    """Kernel pods and their objects in one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def _call(
        self, action: str, verb: str, resource: str, call: Callable[..., Any], *args: Any
    ) -> Any:
        try:
            return call(*args, _request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 403:
                raise forbidden(error, verb, resource, self.namespace, action) from error
            raise cluster_error(error, action, self.api) from error
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, action, self.api) from error

    def device_classes(self) -> list[str]:
        """The cluster's DeviceClasses ([] when RBAC hides them)."""
        try:
            listed = self.resource.list_device_class(_request_timeout=TIMEOUT)
        except (ApiException, urllib3.exceptions.HTTPError):
            return []
        return [c.metadata.name for c in listed.items if c.metadata and c.metadata.name]

    def claim(self, name: str) -> Wire | None:
        """The claim ``name`` of the namespace as it is now (None: there is none)."""
        claims = ClaimClient(self.api, self.namespace)
        return claims.get(name, f"kernel pod joining claim {name}")

    def own_pod(self, name: str) -> Wire | None:
        """The pod ``name`` (this server's own), or None when it cannot be read."""
        try:
            pod = self.core.read_namespaced_pod(name, self.namespace, _request_timeout=TIMEOUT)
        except (ApiException, urllib3.exceptions.HTTPError):
            return None
        return to_wire(self.api, pod)

    def volume_claim(self, name: str) -> Wire | None:
        """The PersistentVolumeClaim ``name``, or None when it cannot be read."""
        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(
                name, self.namespace, _request_timeout=TIMEOUT
            )
        except (ApiException, urllib3.exceptions.HTTPError):
            return None
        return to_wire(self.api, pvc)

    def files(self, spec: KernelPodSpec, server_pod: Wire) -> Files | Unshared:
        """What ``spec``'s pod mounts to see its working directory as ``server_pod`` (the
        server's own) does, or why it cannot
        (:func:`~dra_jupyter.kube.kernels.volumes.kernel_files`, on the claim of the folder's
        volume as read). When that puts the kernel on the server's node, the cluster's slices
        say whether the node has its devices at all: if not, it cannot run there ever, and that
        is said now, before anything is made (slices hidden by RBAC: not checked; the scheduler
        will say)."""
        cwd = spec.working_dir or "/"
        name = claim_name(server_pod, cwd)
        files = kernel_files(server_pod, cwd, self.volume_claim(name) if name else None)
        if isinstance(files, Unshared) or files.node is None or not spec.has_template:
            return files  # a claim it joins: where it is allocated decides
        try:
            inventory = ServerDevices(self.api, self.namespace).readable_devices()
        except ClusterError:  # not known now: the scheduler will say
            inventory = None
        if inventory is None:
            return files
        probe = kernel_claim(spec)
        if node_has_devices(files.node, probe, inventory.slices, inventory.device_classes):
            return files
        return node_refusal(cwd, files, describe(spec.request) if spec.request else "its claim")

    def create(self, spec: KernelPodSpec, connection: str) -> str:
        """Create the template (when the kernel asks for devices), the Pod, which then owns
        the template, and the Secret, owned by the pod from the start (the resourceclaim
        controller and the kubelet wait for them); the pod's uid. What was made is deleted if
        a step fails (the pod, and with it what it owns, and the template); the server needs
        no right to change or delete Secrets."""
        action = f"kernel pod {spec.name}"
        templates = "resourceclaimtemplates.resource.k8s.io"
        if spec.has_template:
            self._call(
                action,
                "create",
                templates,
                self.resource.create_namespaced_resource_claim_template,
                self.namespace,
                to_model(client.V1ResourceClaimTemplate, kernel_template(spec)),
            )
        try:
            pod = self._call(
                action,
                "create",
                "pods",
                self.core.create_namespaced_pod,
                self.namespace,
                to_model(client.V1Pod, kernel_pod(spec)),
            )
            uid = str(pod.metadata.uid)
            owner = {"apiVersion": "v1", "kind": "Pod", "name": spec.name, "uid": uid}
            if spec.has_template:
                self._call(
                    action,
                    "patch",
                    templates,
                    self.resource.patch_namespaced_resource_claim_template,
                    spec.name,
                    self.namespace,
                    {"metadata": {"ownerReferences": [owner]}},
                )
            secret = connection_secret(spec, connection)
            secret["metadata"]["ownerReferences"] = [owner]
            self._call(
                action,
                "create",
                "secrets",
                self.core.create_namespaced_secret,
                self.namespace,
                to_model(client.V1Secret, secret),
            )
        except BaseException:
            self.delete(spec.name)
            raise
        return uid

    def pod(self, name: str) -> Wire | None:
        """The pod as it is now; None once it is gone."""
        try:
            pod = self.core.read_namespaced_pod(name, self.namespace, _request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise cluster_error(error, f"kernel pod {name}", self.api) from error
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, f"kernel pod {name}", self.api) from error
        return to_wire(self.api, pod)

    def wait_running(
        self,
        name: str,
        timeout: float,
        request: Mapping[str, Any] | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> str:
        """Wait until the pod runs; its IP. Raises AllocationError when it is not placed
        in time (the scheduler's reason, then our explain) and ClusterError when it ends
        or is deleted first (its reason)."""
        deadline = time.monotonic() + timeout
        reason = ""
        queue_read = 0.0  # when Kueue's Workloads were last read
        while True:
            pod = self.pod(name)
            if pod is None:
                raise ClusterError(f"kernel pod {name} was deleted before the kernel started")
            ended = ending(pod)
            if ended is not None:
                ended = self.with_last_lines(pod, ended)
                raise ClusterError(f"kernel pod {name} ended before the kernel started: {ended}")
            status = pod.get("status") or {}
            if status.get("phase") == "Running" and status.get("podIP"):
                return str(status["podIP"])
            now = scheduler_reason(pod)
            if kueue.gated(pod):  # in Kueue's line: its word, read once a second
                if time.monotonic() - queue_read < QUEUE_POLL_S:
                    now = reason
                else:
                    queue_read = time.monotonic()
                    uid = str(pod["metadata"].get("uid") or "")
                    now = kueue.word_for(self.api, self.namespace, uid) or reason or now
            if now and now != reason:
                reason = now
                if on_wait is not None:
                    on_wait(reason)
            if time.monotonic() >= deadline:
                raise self._not_started(pod, timeout, reason, request)
            time.sleep(START_POLL_S)

    def _not_started(
        self, pod: Wire, timeout: float, reason: str, request: Mapping[str, Any] | None
    ) -> Exception:
        name = pod["metadata"]["name"]
        if pod["spec"].get("nodeName"):
            return ClusterError(
                f"kernel pod {name} was placed on {pod['spec']['nodeName']} but did not start "
                f"within {timeout:g} s (its image? `kubectl describe pod {name}` says)"
            )
        if kueue.gated(pod):  # Kueue's line, not the scheduler: its word, and no explain
            queue = (pod["metadata"].get("labels") or {}).get(kueue.QUEUE_LABEL, "")
            why = reason or f"waiting in Kueue's queue {queue}"
            return AllocationError(
                f"kernel pod {name} was not admitted by Kueue within {timeout:g} s: {why}; "
                "Kueue admits it once the queue's quota allows: start it again later, or ask "
                "the admin about the queue's quota"
            )
        why = f": {reason}" if reason else " (no answer from the scheduler yet)"
        message = f"kernel pod {name} was not scheduled within {timeout:g} s{why}"
        claim_name = generated_claim(pod, POD_CLAIM)
        claim: Wire | None = None
        if claim_name:
            try:
                read = self.resource.read_namespaced_resource_claim(
                    claim_name, self.namespace, _request_timeout=TIMEOUT
                )
            except (ApiException, urllib3.exceptions.HTTPError):
                read = None
            claim = None if read is None else to_wire(self.api, read)
        if claim is not None:
            try:
                explained = explain_pending(self.api, self.namespace, claim, request)
            except ClusterError:
                explained = ""
            if explained:
                message += "\ndra-jupyter's allocator on the cluster's slices:\n" + explained
        return AllocationError(message)

    def with_last_lines(self, pod: Wire, ended: Ending) -> Ending:
        """``ended`` with what the pod's container said last, when it failed (read through
        ``pods/log``; its termination message when the log cannot be read)."""
        if not ended.failed:
            return ended
        message = ""
        for container in (pod.get("status") or {}).get("containerStatuses") or ():
            terminated = (container.get("state") or {}).get("terminated") or {}
            message = str(terminated.get("message") or "")
        try:
            text = self.core.read_namespaced_pod_log(
                pod["metadata"]["name"],
                self.namespace,
                container=CONTAINER,
                tail_lines=TAIL_LINES,
                limit_bytes=TAIL_BYTES,
                _request_timeout=TIMEOUT,
            )
        except (ApiException, urllib3.exceptions.HTTPError):
            text = ""  # no right to pods/log, or gone: the termination message says
        said = last_lines(str(text or ""), message)
        if said and said.strip() in ended.reason:  # the message is in the reason already
            said = ""
        return dataclasses.replace(ended, said=said)

    def delete(self, name: str, grace: int | None = 0) -> None:
        """Delete the pod (``grace`` seconds for the kernel to stop) and its template; the
        garbage collector deletes its Secret (and the template, had this failed); gone
        already is fine."""
        calls: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
            ("pods", self.core.delete_namespaced_pod, {"grace_period_seconds": grace}),
            (
                "resourceclaimtemplates.resource.k8s.io",
                self.resource.delete_namespaced_resource_claim_template,
                {},
            ),
        ]
        for resource, call, args in calls:
            try:
                call(name, self.namespace, _request_timeout=TIMEOUT, **args)
            except ApiException as error:
                if error.status == 404:
                    continue
                if error.status == 403:
                    raise forbidden(error, "delete", resource, self.namespace, "stop") from error
                raise cluster_error(error, f"deleting kernel pod {name}", self.api) from error
            except urllib3.exceptions.HTTPError as error:
                raise cluster_error(error, f"deleting kernel pod {name}", self.api) from error

    def close(self) -> None:
        """Close the API client's connections."""
        self.api.close()  # type: ignore[no-untyped-call]

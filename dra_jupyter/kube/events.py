"""Why a Jupyter server deleted a claim, as a core/v1 Event on the ResourceClaim
(``kubectl describe``/``kubectl get events`` show it; the Event outlives the claim for the
API server's event TTL, an hour by default).

An Event is the record, not the decision: when RBAC forbids creating Events (or the API
server refuses one) the claim is deleted all the same and the problem is logged once.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.claims import HOLDER_ANNOTATION, KERNEL_LABEL, USER_LABEL
from dra_jupyter.kube.connect import cluster_error, to_model
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import USER_ANNOTATION

COMPONENT = "dra-jupyter"
MAX_MESSAGE = 1024  # characters; the API server keeps at most 1 KiB of a message

# reason given to ``Backend.release`` -> (the Event's reason, why, in words)
REASONS = {
    "idle": ("DraJupyterIdle", "its kernel {kernel} executed nothing for the idle timeout"),
    "kernel-shutdown": ("DraJupyterKernelGone", "its kernel {kernel} shut down or died"),
    "server-stop": ("DraJupyterServerStop", "the Jupyter server stopped"),
    "reclaimed": ("DraJupyterHolderGone", "the process that held it ({holder}) is gone"),
    "limit": ("DraJupyterLimit", "it would take user {user} over the per-user device limit"),
    "admin": ("DraJupyterAdmin", "released by admin {by}"),
}
FALLBACK = ("DraJupyterReleased", "released for {reason}")

log = logging.getLogger("dra_jupyter")


def event_for(
    claim: Wire, reason: str, instance: str, now: dt.datetime, by: str | None = None
) -> Wire:
    """The Event that says why ``claim`` (as read before its deletion) was deleted (``by``:
    the user who released it, where not the server's: an admin)."""
    meta = claim["metadata"]
    labels = meta.get("labels") or {}
    kind, why = REASONS.get(reason, FALLBACK)
    annotations = meta.get("annotations") or {}
    text = why.format(
        kernel=labels.get(KERNEL_LABEL, "(none)"),
        user=annotations.get(USER_ANNOTATION) or labels.get(USER_LABEL, "(unknown)"),
        holder=annotations.get(HOLDER_ANNOTATION, "unknown"),
        reason=reason,
        by=by or "(unknown)",
    )
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": kind,
        "message": f"dra-jupyter server {instance} deleted claim {meta['name']}: {text}"[
            :MAX_MESSAGE
        ],
        "type": "Normal",
        "action": "Delete",
        "source": {"component": COMPONENT, "host": socket.gethostname()},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class ClaimEvents:
    """Records deletions in one namespace; each kind of failure is logged once."""

    def __init__(self, api: client.ApiClient, instance: str) -> None:
        self.api = api
        self.instance = instance or COMPONENT
        self.problems: set[str] = set()  # what was logged already

    def deleted(self, claim: Wire, reason: str, by: str | None = None) -> None:
        """Record that ``claim`` was deleted for ``reason`` (``by``: see :func:`event_for`);
        never raises for the API."""
        body = event_for(claim, reason, self.instance, dt.datetime.now(dt.UTC), by)
        namespace = claim["metadata"]["namespace"]
        try:
            client.CoreV1Api(self.api).create_namespaced_event(
                namespace, body=to_model(client.CoreV1Event, body)
            )
        except ApiException as error:
            if error.status == 403:
                self._once(
                    "forbidden",
                    f"dra_jupyter: RBAC forbids create on events in namespace {namespace}, so "
                    "claims are deleted without an Event saying why; allow 'create' on "
                    "'events' to have them",
                )
            else:
                self._once(f"refused {error.status}", self._text(error, namespace))
        except urllib3.exceptions.HTTPError as error:
            self._once("unreachable", self._text(error, namespace))

    def _text(self, error: Exception, namespace: str) -> str:
        action = f"recording why a claim was deleted (Event in namespace {namespace})"
        return f"dra_jupyter: {cluster_error(error, action, self.api)}"

    def _once(self, key: str, message: str) -> None:
        if key not in self.problems:
            self.problems.add(key)
            log.warning("%s", message)

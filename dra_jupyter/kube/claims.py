"""ResourceClaims on a cluster, as the Kubernetes backend keeps them: created in the user's
namespace and labelled with their owner, kernel and Jupyter server, read back, listed per
owner or server, deleted.

Errors are :class:`~dra_jupyter.errors.ClusterError` in one line; a refusal by RBAC names the
verb, the resource and the namespace, and who was refused::

    dra.request: RBAC forbids create on resourceclaims.resource.k8s.io in namespace team-a for
    User "system:serviceaccount:team-a:notebook"; ask a cluster admin for a Role that allows it
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import REQUEST
from dra_jupyter.errors import ClusterError
from dra_jupyter.kube.connect import cluster_error, doing, server_message, to_model, to_wire
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import KERNEL_LABEL, SERVER_LABEL, USER_LABEL

if TYPE_CHECKING:
    from dra_jupyter.kube.watching import View

__all__ = [
    "ACTIVITY_ANNOTATION",
    "HOLDER_ANNOTATION",
    "KERNEL_LABEL",
    "RESOURCE",
    "SERVER_LABEL",
    "USER_LABEL",
    "ClaimClient",
    "forbidden",
]

RESOURCE = "resourceclaims.resource.k8s.io"
# seconds since the epoch of the last "keep" (the idle countdown starts again from it)
ACTIVITY_ANNOTATION = "dra-jupyter/last-activity"
# the process that holds the claim, as JSON {"host", "pid", "start_time"}: a Jupyter
# server releases its kernels' claims once that process is gone, as the ledger does
HOLDER_ANNOTATION = "dra-jupyter/holder"


class ClaimClient:
    """The claims of one namespace, through one API client; what it writes shows at once in
    ``view`` (the namespace's claims kept by watching, :mod:`.watching`), if given."""

    def __init__(self, api: client.ApiClient, namespace: str, view: View | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.resource = client.ResourceV1Api(api)
        self.view = view

    def _error(self, error: Exception, verb: str, action: str) -> ClusterError:
        if isinstance(error, ApiException) and error.status == 403:
            message = server_message(error.body)
            if "exceeded quota" in message:
                return ClusterError(
                    doing(
                        action,
                        f"a ResourceQuota of namespace {self.namespace} refuses it "
                        f"({message.split('forbidden: ', 1)[-1]}); release claims you no "
                        "longer need or ask for a larger quota",
                    ),
                    403,
                )
            return forbidden(error, verb, RESOURCE, self.namespace, action)
        return cluster_error(error, action, self.api)

    def create(self, claim: Wire, caller: str = REQUEST) -> Wire:
        """The claim made; a refusal is ``caller``'s (:meth:`ClusterError.said_by`)."""
        body = to_model(client.ResourceV1ResourceClaim, claim)
        try:
            created = self.resource.create_namespaced_resource_claim(self.namespace, body=body)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self._error(error, "create", "").said_by(caller) from error
        wire = to_wire(self.api, created)
        if self.view is not None:
            self.view.applied(wire)
        return wire

    def get(self, name: str, action: str = "dra") -> Wire | None:
        """The claim, or None when it is gone (deleted by someone else, or released)."""
        try:
            got = self.resource.read_namespaced_resource_claim(name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise self._error(error, "get", action) from error
        except urllib3.exceptions.HTTPError as error:
            raise self._error(error, "get", action) from error
        return to_wire(self.api, got)

    def list(
        self, *, user: str | None = None, kernel: str | None = None, server: str | None = None
    ) -> list[Wire]:
        """Claims made by dra-jupyter in this namespace, of ``user``, ``kernel`` and
        ``server`` if given."""
        selector = [USER_LABEL if user is None else f"{USER_LABEL}={user}"]
        if kernel is not None:
            selector.append(f"{KERNEL_LABEL}={kernel}")
        if server is not None:
            selector.append(f"{SERVER_LABEL}={server}")
        try:
            listed = self.resource.list_namespaced_resource_claim(
                self.namespace, label_selector=",".join(selector)
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self._error(error, "list", "dra.claims") from error
        if not listed.items:
            self._namespace_exists()
        return [to_wire(self.api, c) for c in listed.items]

    def _namespace_exists(self) -> None:
        """Raise if the namespace does not exist: a list there is empty, not refused, and
        "(none)" would hide a wrong DRA_JUPYTER_NAMESPACE. One read, where allowed (a user's
        server may not read namespaces: then nothing is said)."""
        try:
            client.CoreV1Api(self.api).read_namespace(self.namespace)
        except ApiException as error:
            if error.status == 404:
                raise self._error(error, "list", "dra.claims") from error
        except urllib3.exceptions.HTTPError:
            pass  # the list just answered: a failure here is not the namespace's

    def annotate(self, name: str, annotations: dict[str, str], action: str = "keep") -> bool:
        """Merge ``annotations`` into the claim's; False if it is gone."""
        body = {"metadata": {"annotations": annotations}}
        try:
            patched = self.resource.patch_namespaced_resource_claim(name, self.namespace, body=body)
        except ApiException as error:
            if error.status == 404:
                return False
            raise self._error(error, "patch", action) from error
        except urllib3.exceptions.HTTPError as error:
            raise self._error(error, "patch", action) from error
        if self.view is not None:
            self.view.applied(to_wire(self.api, patched))
        return True

    def delete(self, name: str, action: str = "release") -> bool:
        """Delete the claim; False if it was already gone."""
        try:
            answer = self.resource.delete_namespaced_resource_claim(name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                if self.view is not None:
                    self.view.deleted(name, self.namespace)
                return False
            raise self._error(error, "delete", action) from error
        except urllib3.exceptions.HTTPError as error:
            raise self._error(error, "delete", action) from error
        if self.view is not None:
            last = to_wire(self.api, answer)
            meta = last.get("metadata") or {}
            if meta.get("deletionTimestamp") and meta.get("finalizers"):
                self.view.applied(last)  # a finalizer keeps it a while (a pod uses it)
            else:
                self.view.deleted(name, self.namespace)
        return True


def forbidden(
    error: ApiException, verb: str, resource: str, namespace: str, action: str
) -> ClusterError:
    """A 403 as one line: what was refused, where, to whom, and what to ask for."""
    match = re.search(r'User "([^"]*)"', server_message(error.body))
    who = f' for User "{match.group(1)}"' if match else ""
    return ClusterError(
        doing(
            action,
            f"RBAC forbids {verb} on {resource} in namespace {namespace}{who}; ask a "
            "cluster admin for a Role that allows it",
        ),
        403,
    )

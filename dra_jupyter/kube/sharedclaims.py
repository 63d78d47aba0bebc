"""A hub profile's shared claim: one ResourceClaim that the servers (or the GPU kernels) of
everyone who chooses the profile use by name, so that they share its devices
(``dra_shared`` of :class:`dra_jupyter.hub.kubespawner.DRAKubeSpawner`; the sharing itself is
the claim's opaque config, ``share="mps", threads=25``: :mod:`dra_jupyter.sharing.gpushare`).

The hub makes the claim (named for the profile,
:func:`~dra_jupyter.sharing.joins.shared_claim_name`) when the first
such server starts, and deletes it when the last one stops: no pod uses it then, and the
devices are free. What makes that safe while spawns and stops run at once:

* each pod that uses the claim carries :data:`SHARED_LABEL` (its value the claim's name), so
  a stop finds the others with one LIST of the namespace's pods by that label;
* a spawn marks the claim joined (:data:`JOINED_ANNOTATION`, a write that changes its
  resourceVersion) before it makes its pod, and again once the pod exists, making the claim
  anew if it is gone by then;
* a stop deletes the claim only when no other pod carries the label, with the
  resourceVersion it read as a precondition: a join between the read and the delete
  changes it, and the delete is refused (409); a change of the claim's status alone (the
  resourceclaim controller dropping a stopped pod from ``reservedFor``) is read again.

Synchronous (the official client); the spawner runs these calls in a thread.
"""

from __future__ import annotations

import datetime as dt

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ClusterError
from dra_jupyter.kube.connect import to_model, to_wire
from dra_jupyter.kube.spawn import TIMEOUT, ServerDevices
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import label_value

SHARED_LABEL = "dra-jupyter/shared-claim"  # on each pod that uses a profile's shared claim
PROFILE_LABEL = "dra-jupyter/shared-profile"  # on the claim: the profile it is shared for
JOINED_ANNOTATION = "dra-jupyter/joined"  # when a spawn last joined it (see the module)
ATTEMPTS = 4  # reads again of a claim changed while a stop looked (by its status only)


def joined_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


class SharedClaims:
    """The shared claims of the namespace of ``devices`` (see the module), through its API
    client: its reads of a claim and of labelled pods, and its errors, are those of the
    hub's servers' devices."""

    def __init__(self, devices: ServerDevices) -> None:
        self.devices = devices
        self.api = devices.api
        self.namespace = devices.namespace
        self.resource = devices.resource

    def join(self, claim: Wire, profile: str) -> Wire:
        """The shared claim ``claim`` (made of the profile's request) marked joined now,
        made first where there is none. One being deleted (its last server just stopped)
        is a ClusterError that says to start again in a moment."""
        name = claim["metadata"]["name"]
        action = f"spawn: joining the shared claim {name}"
        mark = {"metadata": {"annotations": {JOINED_ANNOTATION: joined_now()}}}
        for _ in range(ATTEMPTS):
            try:
                got = self.resource.patch_namespaced_resource_claim(
                    name, self.namespace, mark, _request_timeout=TIMEOUT
                )
            except ApiException as error:
                if error.status != 404:
                    raise self.devices.error(error, "patch", "resourceclaims", action) from error
            except urllib3.exceptions.HTTPError as error:
                raise self.devices.error(error, "patch", "resourceclaims", action) from error
            else:
                found = to_wire(self.api, got)
                if found["metadata"].get("deletionTimestamp"):
                    raise ClusterError(
                        f"{action}: it is being deleted (its last server stopped just now); "
                        "start the server again in a few seconds"
                    )
                return found
            made = self._made(claim, profile, mark, action)
            if made is not None:
                return made
        raise ClusterError(f"{action}: it was made and deleted again {ATTEMPTS} times; retry")

    def _made(self, claim: Wire, profile: str, mark: Wire, action: str) -> Wire | None:
        """``claim`` made (None: another spawn made it first)."""
        body = {
            **claim,
            "metadata": {
                **claim["metadata"],
                "labels": {
                    **(claim["metadata"].get("labels") or {}),
                    PROFILE_LABEL: label_value(profile),
                },
                "annotations": {
                    **(claim["metadata"].get("annotations") or {}),
                    **mark["metadata"]["annotations"],
                },
            },
        }
        try:
            made = self.resource.create_namespaced_resource_claim(
                self.namespace,
                to_model(client.ResourceV1ResourceClaim, body),
                _request_timeout=TIMEOUT,
            )
        except ApiException as error:
            if error.status == 409:
                return None
            raise self.devices.error(error, "create", "resourceclaims", action) from error
        except urllib3.exceptions.HTTPError as error:
            raise self.devices.error(error, "create", "resourceclaims", action) from error
        return to_wire(self.api, made)

    def users(self, name: str, *, leaving: str = "") -> list[str]:
        """The pods that use the shared claim ``name`` now (by :data:`SHARED_LABEL`), those
        being deleted and ``leaving`` left out."""
        selector = f"{SHARED_LABEL}={label_value(name)}"
        pods = self.devices.pods(selector, f"the pods of the shared claim {name}")
        return [
            str(meta["name"])
            for meta in (p["metadata"] for p in pods)
            if meta["name"] != leaving and not meta.get("deletionTimestamp")
        ]

    def leave(self, name: str, pod: str) -> bool:
        """Pod ``pod`` (stopped) leaves the shared claim ``name``: the claim is deleted when
        no other pod uses it (see the module). True when it was deleted here."""
        action = f"stop: leaving the shared claim {name}"
        for _ in range(ATTEMPTS):
            claim = self.devices.claim(name, action)
            if claim is None or claim["metadata"].get("deletionTimestamp"):
                return False
            joined = (claim["metadata"].get("annotations") or {}).get(JOINED_ANNOTATION)
            if self.users(name, leaving=pod):
                return False
            version = claim["metadata"]["resourceVersion"]
            options = client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version=version)
            )
            try:
                self.resource.delete_namespaced_resource_claim(
                    name, self.namespace, body=options, _request_timeout=TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    return False
                if error.status != 409:
                    raise self.devices.error(error, "delete", "resourceclaims", action) from error
                again = self.devices.claim(name, action)
                now = (again or {}).get("metadata", {}).get("annotations") or {}
                if again is None or now.get(JOINED_ANNOTATION) != joined:
                    return False  # joined meanwhile (or gone): it stays
                continue  # its status changed: look again
            except urllib3.exceptions.HTTPError as error:
                raise self.devices.error(error, "delete", "resourceclaims", action) from error
            return True
        return False

"""Pods that use claims, as ``dra.run`` will launch them: the Pod object (pure), and waiting
until kube-scheduler has allocated the claims and bound the pod, reporting its reason while
it cannot (the ``PodScheduled`` condition), with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import AllocationError, ClusterError, InvalidInputError
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.model.objects import Wire

POLL_S = 0.5


def workload_pod(
    name: str,
    claims: Sequence[str],
    *,
    image: str,
    command: Sequence[str] = (),
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> Wire:
    """A Pod whose one container uses every device of ``claims`` (existing ResourceClaims)."""
    if not claims:
        raise InvalidInputError(f"pod {name}: give at least one claim for its devices")
    refs = [f"claim-{i}" for i in range(len(claims))]
    container: Wire = {
        "name": "work",
        "image": image,
        "resources": {"claims": [{"name": r} for r in refs]},
    }
    if command:
        container["command"] = list(command)
    spec: Wire = {
        "restartPolicy": "Never",
        "containers": [container],
        "resourceClaims": [
            {"name": r, "resourceClaimName": c} for r, c in zip(refs, claims, strict=True)
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    metadata: Wire = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@dataclass(frozen=True)
class Placement:
    """Where the pod went and what its claims got."""

    node: str
    # claim name -> status.allocation; missing for a claim deallocated when its pod ended
    # before it was read
    allocations: dict[str, Wire]


class PodLauncher:
    """Creates pods in one namespace and waits for their placement."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.claims = ClaimClient(api, namespace)

    def _call(self, action: str, method: Callable[..., object], *args: object) -> object:
        try:
            return method(*args)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise cluster_error(error, action, self.api) from error

    def create(self, pod: Wire) -> None:
        name = pod["metadata"]["name"]
        self._call(
            f"dra.run: creating pod {name}",
            self.core.create_namespaced_pod,
            self.namespace,
            to_model(client.V1Pod, pod),
        )

    def wait_placed(
        self,
        name: str,
        claims: Sequence[str],
        timeout: float,
        on_wait: Callable[[str], None] | None = None,
    ) -> Placement:
        """Wait until pod ``name`` is bound and ``claims`` are allocated; ``on_wait`` gets the
        scheduler's reason each time it changes. Raises AllocationError at the deadline."""
        deadline = time.monotonic() + timeout
        reason = ""
        while True:
            pod = to_wire(
                self.api,
                self._call(
                    f"dra.run: pod {name}", self.core.read_namespaced_pod, name, self.namespace
                ),
            )
            node = pod["spec"].get("nodeName")
            if node:
                allocations = {}
                for claim in claims:
                    got = self.claims.get(claim, action=f"dra.run: pod {name}")
                    if got is None:
                        raise ClusterError(
                            f"dra.run: claim {claim} of pod {name} was deleted while the pod "
                            "was scheduled; request the devices again"
                        )
                    allocation = got.get("status", {}).get("allocation")
                    if allocation:
                        allocations[claim] = allocation
                # A pod that ended already (a node that ran it at once) may have had its
                # claims deallocated meanwhile: it was placed all the same.
                ended = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
                if len(allocations) == len(claims) or ended:
                    return Placement(node, allocations)
            now = scheduler_reason(pod)
            if now and now != reason:
                reason = now
                if on_wait is not None:
                    on_wait(reason)
            if time.monotonic() >= deadline:
                why = f": {reason}" if reason else " (no answer from the scheduler yet)"
                raise AllocationError(f"pod {name} was not scheduled within {timeout:g} s{why}")
            time.sleep(POLL_S)


def scheduler_reason(pod: Wire) -> str:
    """The scheduler's message while the pod is not scheduled, else ``""``."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""

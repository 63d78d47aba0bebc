"""``dra-jupyter publish-slices``: act as the DRA driver of simulated nodes.

Creates or updates, idempotently, the Node objects, the DeviceClasses and each node's
ResourceSlices of a :class:`~dra_jupyter.kube.simulate.SimulatedCluster`. As a driver
does, a pool whose slices change is republished at the next ``pool.generation`` (all its
slices together), and slices of the same drivers on the same nodes that are no longer
published are deleted; other drivers' slices are left alone. A second run changes nothing
but the nodes' Ready heartbeat.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.model.objects import Wire

T = TypeVar("T")
PoolKey = tuple[str, str]  # (driver, pool name)
CONFLICT_RETRIES = 3
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass(frozen=True)
class Change:
    """What happened to one object: created, updated, unchanged, refreshed or deleted."""

    kind: str
    name: str
    action: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.action}" + (
            f" ({self.detail})" if self.detail else ""
        )


class Publisher:
    """Publishes simulated clusters through one API client."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def wire(self, obj: object) -> Wire:
        return to_wire(self.api, obj)

    def call(self, action: str, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(...)``, its errors as :class:`~dra_jupyter.errors.ClusterError`."""
        try:
            return method(*args, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise cluster_error(error, action, self.api) from error

    def publish(self, cluster: SimulatedCluster, now: dt.datetime | None = None) -> list[Change]:
        self.check(cluster)
        changes = [self.device_class(c) for c in cluster.device_classes]
        for node in cluster.nodes:
            changes += self.node(node)
        changes += self.slices(cluster)
        return changes

    def check(self, cluster: SimulatedCluster) -> None:
        """Have the API server validate every class and slice (a dry run, under a generated
        name) before anything is written: a refused object leaves the cluster as it was."""
        for kind, objects, create, model in (
            (
                "DeviceClass",
                cluster.device_classes,
                self.resource.create_device_class,
                client.V1DeviceClass,
            ),
            (
                "ResourceSlice",
                cluster.slices,
                self.resource.create_resource_slice,
                client.V1ResourceSlice,
            ),
        ):
            for wanted in objects:
                # its own metadata (labels, annotations) but a generated name: checked too
                meta = {k: v for k, v in wanted["metadata"].items() if k != "name"}
                body = {**wanted, "metadata": {**meta, "generateName": "dra-jupyter-check-"}}
                self.call(
                    f"publish-slices: {kind} {wanted['metadata']['name']} (nothing was changed)",
                    create,
                    body=to_model(model, body),
                    dry_run="All",
                )

    # --- DeviceClasses and Nodes ---------------------------------------------------------

    def device_class(self, wanted: Wire) -> Change:
        name = wanted["metadata"]["name"]
        action = f"publish-slices: DeviceClass {name}"
        for _ in range(CONFLICT_RETRIES):
            try:
                self.resource.create_device_class(body=to_model(client.V1DeviceClass, wanted))
                return Change("DeviceClass", name, "created")
            except ApiException as error:
                if error.status != 409:
                    raise cluster_error(error, action, self.api) from error
            except urllib3.exceptions.HTTPError as error:
                raise cluster_error(error, action, self.api) from error
            current = self.wire(self.call(action, self.resource.read_device_class, name))
            if current.get("spec") == wanted["spec"]:
                return Change("DeviceClass", name, "unchanged")
            body = {**wanted, "metadata": {**wanted["metadata"], **_version(current)}}
            try:
                self.resource.replace_device_class(name, body=to_model(client.V1DeviceClass, body))
                return Change("DeviceClass", name, "updated")
            except ApiException as error:
                if error.status != 409:
                    raise cluster_error(error, action, self.api) from error
        raise cluster_error(ApiException(409, "Conflict"), action, self.api)

    def node(self, wanted: Wire) -> list[Change]:
        name = wanted["metadata"]["name"]
        action = f"publish-slices: Node {name}"
        changes: list[Change] = []
        try:
            self.core.create_node(body=to_model(client.V1Node, wanted))
            changes.append(Change("Node", name, "created"))
        except ApiException as error:
            if error.status != 409:
                raise cluster_error(error, action, self.api) from error
            current = self.wire(self.call(action, self.core.read_node, name))
            labels = current["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in wanted["metadata"]["labels"].items()):
                patch = {"metadata": {"labels": wanted["metadata"]["labels"]}}
                self.call(action, self.core.patch_node, name, body=patch)
                changes.append(Change("Node", name, "updated", "labels"))
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, action, self.api) from error
        # Ready, with a fresh heartbeat: what a kubelet reports (create may drop the status).
        node = self.wire(
            self.call(action, self.core.patch_node_status, name, body={"status": wanted["status"]})
        )
        # The API server taints new nodes not-ready; the node lifecycle controller lifts that
        # once the kubelet reports Ready. Nothing else will for a node without a kubelet.
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in NOT_READY_TAINTS]
        if len(kept) != len(taints):
            self.call(action, self.core.patch_node, name, body={"spec": {"taints": kept}})
            if not changes:
                changes.append(Change("Node", name, "updated", "not-ready taint removed"))
        if not changes:
            changes.append(Change("Node", name, "refreshed", "Ready heartbeat"))
        return changes

    # --- ResourceSlices -------------------------------------------------------------------

    def slices(self, cluster: SimulatedCluster) -> list[Change]:
        wanted: dict[PoolKey, list[Wire]] = defaultdict(list)
        for s in cluster.slices:
            wanted[(s["spec"]["driver"], s["spec"]["pool"]["name"])].append(s)
        nodes = set(cluster.node_names)
        existing: dict[PoolKey, list[Wire]] = defaultdict(list)
        for driver in sorted({driver for driver, _ in wanted}):
            listed = self.call(
                f"publish-slices: listing the ResourceSlices of driver {driver}",
                self.resource.list_resource_slice,
                field_selector=f"spec.driver={driver}",
            )
            for item in listed.items:
                s = self.wire(item)
                key = (driver, s["spec"]["pool"]["name"])
                if key in wanted or s["spec"].get("nodeName") in nodes:
                    existing[key].append(s)
        changes: list[Change] = []
        for key, slices in wanted.items():
            changes += self.pool(key, slices, existing.pop(key, []))
        for stale in existing.values():  # pools of our drivers on our nodes, no longer published
            for s in stale:
                changes.append(self.delete_slice(s["metadata"]["name"], "no longer published"))
        return changes

    def pool(self, key: PoolKey, wanted: list[Wire], current: list[Wire]) -> list[Change]:
        generation = max((s["spec"]["pool"]["generation"] for s in current), default=0)
        by_name = {s["metadata"]["name"]: s for s in current}

        def at(s: Wire, gen: int) -> Wire:
            return {**s["spec"], "pool": {**s["spec"]["pool"], "generation": gen}}

        if set(by_name) == {s["metadata"]["name"] for s in wanted} and all(
            by_name[s["metadata"]["name"]]["spec"] == at(s, generation) for s in wanted
        ):
            detail = f"pool {key[1]} generation {generation}"
            return [
                Change("ResourceSlice", s["metadata"]["name"], "unchanged", detail) for s in wanted
            ]
        new_generation = max(generation + 1, *(s["spec"]["pool"]["generation"] for s in wanted))
        detail = f"pool {key[1]} generation {new_generation}"
        changes = []
        for s in wanted:
            name = s["metadata"]["name"]
            body = {**s, "spec": at(s, new_generation)}
            old = by_name.pop(name, None)
            if old is not None and (
                old["spec"]["driver"] != s["spec"]["driver"]
                or old["spec"].get("nodeName") != s["spec"].get("nodeName")
            ):  # immutable fields: replace the object
                self.delete_slice(name, "")
                old = None
            action = f"publish-slices: ResourceSlice {name}"
            if old is None:
                self.call(
                    action,
                    self.resource.create_resource_slice,
                    body=to_model(client.V1ResourceSlice, body),
                )
                changes.append(Change("ResourceSlice", name, "created", detail))
            else:
                body["metadata"] = {**s["metadata"], **_version(old)}
                self.call(
                    action,
                    self.resource.replace_resource_slice,
                    name,
                    body=to_model(client.V1ResourceSlice, body),
                )
                changes.append(Change("ResourceSlice", name, "updated", detail))
        changes += [self.delete_slice(name, "no longer in its pool") for name in by_name]
        return changes

    def delete_slice(self, name: str, why: str) -> Change:
        try:
            self.resource.delete_resource_slice(name)
        except ApiException as error:
            if error.status != 404:
                raise cluster_error(error, f"publish-slices: deleting {name}", self.api) from error
        except urllib3.exceptions.HTTPError as error:
            raise cluster_error(error, f"publish-slices: deleting {name}", self.api) from error
        return Change("ResourceSlice", name, "deleted", why)


def _version(current: Wire) -> Wire:
    return {"resourceVersion": current["metadata"]["resourceVersion"]}

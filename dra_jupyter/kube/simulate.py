"""An inventory spread over simulated Kubernetes nodes: Node objects without a kubelet, the
node's ResourceSlices (one pool per node, named after it) and the DeviceClasses. Pure: the
objects are ``resource.k8s.io/v1`` and core ``v1`` wire dicts; :mod:`.publish` sends them.

>>> from dra_jupyter.inventory import simulated
>>> cluster = simulate(simulated.load("h200-8x"), nodes=2)           # doctest: +SKIP
>>> [n["metadata"]["name"] for n in cluster.nodes]                   # doctest: +SKIP
['gpu-node-1', 'gpu-node-2']
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import re
from dataclasses import dataclass

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.objects import Wire

SIMULATED_LABEL = "dra-jupyter/simulated"
INVENTORY_LABEL = "dra-jupyter/inventory"
# What a simulated node offers pods besides its devices (an HGX host's order of magnitude).
NODE_CAPACITY = {"cpu": "96", "memory": "2Ti", "pods": "110", "ephemeral-storage": "1Ti"}
MAX_NODES = 5000  # the node count Kubernetes is tested at (its scalability envelope)


@dataclass(frozen=True)
class SimulatedCluster:
    nodes: tuple[Wire, ...]
    slices: tuple[Wire, ...]
    device_classes: tuple[Wire, ...]

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def node_names(base: str, count: int) -> list[str]:
    """``gpu-node-1`` → ``gpu-node-1 … gpu-node-N``; a name without a trailing number gets
    ``-1 … -N`` appended (unchanged when there is one node)."""
    match = re.fullmatch(r"(.*?)(\d+)", base)
    if match:
        prefix, first = match.group(1), int(match.group(2))
        return [f"{prefix}{first + i}" for i in range(count)]
    return [base] if count == 1 else [f"{base}-{i + 1}" for i in range(count)]


def label_value(text: str) -> str:
    """``text`` as a valid label value (≤63 characters of ``[A-Za-z0-9_.-]``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")


def node_object(name: str, inventory: str, now: dt.datetime) -> Wire:
    """A Ready Node with no kubelet behind it, labelled as simulated."""
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                SIMULATED_LABEL: "true",
                INVENTORY_LABEL: label_value(inventory),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(NODE_CAPACITY),
            "allocatable": dict(NODE_CAPACITY),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "SimulatedNodeReady",
                    "message": "simulated by dra-jupyter publish-slices: no kubelet, pods "
                    "are bound here but never run",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
        },
    }


def _rename(text: str, old: str, new: str) -> str:
    return text.replace(old, new) if old in text else f"{new}-{text}"


UUID_ATTRIBUTES = ("uuid", "parentUUID")  # a device's own, and a MIG device's GPU's


def node_uuid(uuid: str, node: str) -> str:
    """``uuid`` of a device copied onto ``node``: stable, unique per node, with the same
    prefix (``GPU-``, ``MIG-``, ``tpu-``), so that two nodes never show the same GPU."""
    prefix = uuid.split("-", 1)[0]
    h = hashlib.sha256(f"{node}/{uuid}".encode()).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def slice_for_node(slice_: Wire, old: str, new: str) -> Wire:
    """A copy of a node-local slice of node ``old``, published for node ``new``: its
    devices' UUIDs made anew for that node (:func:`node_uuid`)."""
    out = copy.deepcopy(slice_)
    if old == new:
        return out
    out["metadata"]["name"] = _rename(out["metadata"]["name"], old, new)
    out["spec"]["nodeName"] = new
    for device in out["spec"].get("devices") or ():
        attributes = device.get("attributes") or {}
        for name in UUID_ATTRIBUTES:
            value = attributes.get(name)
            if isinstance(value, dict) and isinstance(value.get("string"), str):
                value["string"] = node_uuid(value["string"], new)
    pool = out["spec"]["pool"]
    pool["name"] = _rename(pool["name"], old, new)
    return out


def simulate(
    inventory: Inventory, nodes: int = 1, *, now: dt.datetime | None = None
) -> SimulatedCluster:
    """``inventory`` on ``nodes`` simulated nodes (its node repeated), ready to publish."""
    where = f"publish-slices --inventory {inventory.name}"
    if not 1 <= nodes <= MAX_NODES:
        raise InvalidInputError(f"{where}: --nodes must be between 1 and {MAX_NODES}, not {nodes}")
    originals = inventory.nodes
    if not originals:
        raise InvalidInputError(
            f"{where}: the inventory has no node-local ResourceSlice (spec.nodeName), so there "
            "is no node to simulate; use an inventory of node-local pools"
        )
    if len(originals) > 1 and nodes > 1:
        raise InvalidInputError(
            f"{where}: the inventory already spans {len(originals)} nodes "
            f"({', '.join(originals)}); --nodes repeats a one-node inventory, so leave it out"
        )
    now = now or dt.datetime.now(dt.UTC)
    node_objects: list[Wire] = []
    slices: list[Wire] = []
    shared = [s for s in inventory.slices if not s.get("spec", {}).get("nodeName")]
    for old in originals:
        own = [s for s in inventory.slices if s.get("spec", {}).get("nodeName") == old]
        for new in node_names(old, nodes):
            node_objects.append(node_object(new, inventory.name, now))
            slices += [slice_for_node(s, old, new) for s in own]
    return SimulatedCluster(
        nodes=tuple(node_objects),
        slices=tuple(slices + [copy.deepcopy(s) for s in shared]),
        device_classes=tuple(copy.deepcopy(c) for c in inventory.device_classes),
    )

"""Simulated nodes and their objects, without a cluster; the client keeps every field we send;
only dra_jupyter.kube imports the Kubernetes client."""

from __future__ import annotations

import copy
import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kube.connect import server_message, to_model, to_wire
from dra_jupyter.kube.simulate import node_names, simulate

PACKAGE = Path(__file__).resolve().parents[2] / "dra_jupyter"


def test_node_names_count_on_from_the_inventory_node() -> None:
    assert node_names("gpu-node-1", 3) == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert node_names("workstation", 1) == ["workstation"]
    assert node_names("workstation", 2) == ["workstation-1", "workstation-2"]


def test_each_node_gets_its_own_pool_and_slice_names() -> None:
    now = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    cluster = simulate(simulated.load("h200-mig"), 2, now=now)
    assert cluster.node_names == ["h200-mig-1", "h200-mig-2"]
    second = [s for s in cluster.slices if s["spec"]["nodeName"] == "h200-mig-2"]
    assert {s["spec"]["pool"]["name"] for s in second} == {"h200-mig-2"}
    assert all(s["metadata"]["name"].startswith("h200-mig-2-") for s in second)
    # the counters-only slice and the devices slice stay one pool of two slices
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in second] == [2, 2]
    node = cluster.nodes[1]
    assert node["metadata"]["labels"]["dra-jupyter/simulated"] == "true"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "h200-mig-2"
    ready = node["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["lastHeartbeatTime"]) == (
        "Ready",
        "True",
        "2026-11-30T12:00:00Z",
    )


def test_a_single_node_keeps_the_inventory_as_it_is() -> None:
    inventory = simulated.load("h200-8x")
    cluster = simulate(inventory, 1)
    assert list(cluster.slices) == list(inventory.slices)
    assert list(cluster.device_classes) == list(inventory.device_classes)


def test_a_hub_sized_cluster_is_simulated() -> None:
    """A thousand nodes of 8 H200s (issue 38 measures at that size; the cap was 500)."""
    cluster = simulate(simulated.load("h200-8x"), 1000)
    names = cluster.node_names
    assert len(names) == len(set(names)) == 1000
    assert names[0] == "gpu-node-1" and names[-1] == "gpu-node-1000"
    assert len({s["metadata"]["name"] for s in cluster.slices}) == len(cluster.slices) >= 1000
    assert {s["spec"]["nodeName"] for s in cluster.slices} == set(names)


@pytest.mark.parametrize("inventory", ["h200-8x", "h200-mig", "tpu-v5e-8"])
def test_no_two_nodes_show_the_same_device(inventory: str) -> None:
    """Each node's devices have UUIDs of their own (issue 42, item 14: gpu-node-1/gpu-0 and
    gpu-node-2/gpu-0 were both GPU-184c0883-…, so two ranks printed the same
    CUDA_VISIBLE_DEVICES); the first node keeps the inventory's, and a MIG slice's
    parentUUID is its GPU's on the same node."""
    original = simulated.load(inventory)
    cluster = simulate(original, 3)

    def uuids(slices: Any, attribute: str) -> list[str]:
        return [
            d["attributes"][attribute]["string"]
            for s in slices
            for d in s["spec"].get("devices") or ()
            if attribute in d.get("attributes", {})
        ]

    own = uuids(cluster.slices, "uuid")
    assert own and len(own) == len(set(own))
    assert set(uuids(original.slices, "uuid")) <= set(own)
    by_node: dict[str, set[str]] = {}
    for s in cluster.slices:
        by_node.setdefault(s["spec"]["nodeName"], set()).update(uuids([s], "uuid"))
    for s in cluster.slices:
        assert set(uuids([s], "parentUUID")) <= by_node[s["spec"]["nodeName"]]


@pytest.mark.parametrize(
    ("nodes", "slices", "message"),
    [
        (0, None, "--nodes must be between 1 and 5000, not 0"),
        (5001, None, "--nodes must be between 1 and 5000, not 5001"),
        (2, "two-nodes", "already spans 2 nodes (a, b); --nodes repeats a one-node inventory"),
        (1, "no-node", "has no node-local ResourceSlice"),
    ],
)
def test_impossible_simulations_say_why(nodes: int, slices: str | None, message: str) -> None:
    inventory = simulated.load("h200-8x")
    if slices is not None:
        one = inventory.slices[0]
        shaped = []
        for node in ["a", "b"] if slices == "two-nodes" else [None]:
            spec = {k: v for k, v in one["spec"].items() if k != "nodeName"}
            spec = {**spec, "nodeName": node} if node else {**spec, "allNodes": True}
            shaped.append({**one, "spec": spec})
        inventory = Inventory("x", "", tuple(shaped), inventory.device_classes, True, "test")
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        simulate(inventory, nodes)


@pytest.mark.parametrize("name", simulated.names())
def test_the_client_keeps_every_field_of_our_objects(name: str) -> None:
    """publish-slices sends our wire dicts through the client's models: none may lose a field."""
    cluster = simulate(simulated.load(name), 1)
    with client.ApiClient() as api:
        for model, objects in (
            (client.V1ResourceSlice, cluster.slices),
            (client.V1DeviceClass, cluster.device_classes),
            (client.V1Node, cluster.nodes),
        ):
            for wire in objects:
                assert _times(to_wire(api, to_model(model, wire))) == _times(wire)


def _times(node: dict[str, Any]) -> dict[str, Any]:
    """Condition times as datetimes: the client writes ``+00:00`` where we write ``Z``."""
    out = copy.deepcopy(node)
    for condition in out.get("status", {}).get("conditions", []):
        for key in ("lastHeartbeatTime", "lastTransitionTime"):
            condition[key] = dt.datetime.fromisoformat(condition[key])
    return out


def test_server_messages_are_taken_from_status_bodies() -> None:
    body = '{"kind":"Status","message":"resourceslices is forbidden: User \\"x\\" cannot"}'
    assert server_message(body) == 'resourceslices is forbidden: User "x" cannot'
    assert server_message(b"plain text\n") == "plain text"
    assert len(server_message("x" * 1000)) == 300


def test_only_the_kube_package_imports_the_kubernetes_client() -> None:
    # in a fresh interpreter: CPython 3.11's ast.parse can fail with "AST constructor
    # recursion depth mismatch" in a process where a deep recursion happened before (the
    # whole suite's, once in CI); what is checked does not depend on this process
    code = f"""
import ast, pathlib
package = pathlib.Path({str(PACKAGE)!r})
for path in sorted(package.rglob("*.py")):
    if package / "kube" in path.parents:  # the package and its sub-packages
        continue
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(n == "kubernetes" or n.startswith("kubernetes.") for n in names):
            print(path.relative_to(package.parent))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_the_cli_does_not_import_the_client_until_a_cluster_command_runs() -> None:
    code = (
        "import sys, dra_jupyter, dra_jupyter.cli, dra_jupyter.cli.kube;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

"""The real node of a test run (:mod:`tests.k8s.node`), once per session: started on first use
on a control plane of its own, with upstream's DRA test driver beside the project's and the
kernel image (:mod:`tests.k8s.kernelimage`) imported; stopped at the end of the session, when
nothing it did may be left on this machine (:func:`tests.k8s.node.leftovers`).

A plugin of the whole suite (``pytest_plugins`` in tests/conftest.py), as
:mod:`tests.k8s.fixtures` is. The node's control plane is not the session's ``cluster``: the
node's driver publishes slices of its own, which the tests of the simulated nodes would count.
One node runs on a machine at a time (a lock, :func:`tests.k8s.node.start`), so no test starts
one of its own while this one runs: the stop is checked at the end of the session instead
(``test_a_pod_running_at_the_nodes_stop_leaves_nothing`` leaves a pod running for it).

    node            the running :class:`tests.k8s.node.Node` (it skips, saying so, without root)
    node_api        its control plane's admin client
    node_kubeconfig its control plane's admin kubeconfig
    node_namespace  a fresh namespace there, deleted after the test
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.kube.connect import api_client
from tests.k8s import kernelimage, nodebuild, testenv
from tests.k8s import node as real_node
from tests.k8s.fixtures import fresh_namespace

NEEDS_ROOT = "a real node needs root (mounts, cgroups, iptables)"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)
# Tests that start a node of their own (through scripts/k8s-testenv): run first, before the
# session's node takes the machine's lock until the session's end
OWN_NODE_TESTS = ("tests/k8s/test_recipe.py::",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`OWN_NODE_TESTS` first (see there), the others in their order."""
    first = [i for i in items if i.nodeid.startswith(OWN_NODE_TESTS)]
    if first:
        items[:] = first + [i for i in items if not i.nodeid.startswith(OWN_NODE_TESTS)]


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_node.Node]:
    """The session's real node (see the module); its timings in ``node.timings``."""
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    nodebuild.build()  # a no-op once built
    archive = kernelimage.archive()
    with testenv.started(tmp_path_factory.mktemp("k8s-node")) as cluster:
        running = real_node.start(cluster, tmp_path_factory.mktemp("node"), test_driver=True)
        try:
            real_node.import_image(running, archive)
            yield running
        finally:
            running.timings["pods_at_stop"] = _pods_on(running)
            real_node.stop(running)
            print(f"\nreal node: {_timings(running)}", file=sys.stderr)
        assert real_node.leftovers(running.before, running.state_dir) == []
        with api_client(str(cluster.kubeconfig)) as api:
            selector = f"spec.nodeName={running.name}"
            assert (
                client.ResourceV1Api(api).list_resource_slice(field_selector=selector).items == []
            )


def _pods_on(node: real_node.Node) -> float:
    with api_client(str(node.cluster.kubeconfig)) as api:
        selector = f"spec.nodeName={node.name},status.phase=Running"
        return float(
            len(client.CoreV1Api(api).list_pod_for_all_namespaces(field_selector=selector).items)
        )


def _timings(node: real_node.Node) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in node.timings.items())


@pytest.fixture(scope="session")
def node_kubeconfig(node: real_node.Node) -> Path:
    return node.cluster.kubeconfig


@pytest.fixture(scope="session")
def node_api(node_kubeconfig: Path) -> Iterator[client.ApiClient]:
    with api_client(str(node_kubeconfig)) as api:
        yield api


@pytest.fixture
def node_namespace(node_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace on the node's control plane, deleted after the test."""
    with fresh_namespace(node_api) as name:
        yield name

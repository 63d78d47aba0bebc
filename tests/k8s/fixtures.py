"""A real control plane, once per test run: built (cached) and started on first use, stopped at
the end of the session. ``make test`` builds it beforehand (``scripts/k8s-testenv build``).

A plugin of the whole suite (``pytest_plugins`` in tests/conftest.py), not tests/k8s's
conftest: tests/hub's JupyterHub uses the same control plane, and a fixture defined twice
would start two."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.cli import main as cli_main
from dra_jupyter.inventory import simulated
from dra_jupyter.kube import watching
from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.simulate import SimulatedCluster, simulate
from tests.k8s import testenv
from tests.k8s.podrunner import PodRunner

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
WAIT_S = 90.0  # bounded polling for what the controllers and the scheduler do
INVENTORY, NODES = "h200-8x", 2  # what the session's cluster publishes


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.2)


LEFT_JOIN_S = 10.0  # how long a reflector that is ending (stopped, not yet gone) may take


@pytest.fixture(scope="module", autouse=True)
def no_watcher_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each module of tests/k8s and tests/hub (its module fixtures torn down: their
    control planes stopped), no watched view's thread (:mod:`dra_jupyter.kube.watching`'s
    reflectors) that started during the module is still alive. One left behind watches a
    control plane that stopped, or the session's, until the run ends: its retries then fill
    the logs of the modules after it (a backend, a session with ``watch=True``, a server's
    extension or a shared view not closed). Other threads of dra_jupyter.kube end by
    themselves (a run's log followers, a gang run's deadline: on an error, at the latest)."""
    path = Path(str(request.path))
    if not any(path.is_relative_to(TESTS / tier) for tier in ("k8s", "hub")):
        yield
        return
    before = set(threading.enumerate())
    yield
    ours = [
        t
        for t in threading.enumerate()
        if t not in before and t.name.startswith(watching.THREAD_PREFIX) and t.is_alive()
    ]
    deadline = time.monotonic() + LEFT_JOIN_S
    for thread in ours:  # a stopped one ends within its stop's bound; a leaked one never
        thread.join(max(0.0, deadline - time.monotonic()))
    left = sorted(t.name for t in ours if t.is_alive())
    assert not left, f"{request.path}: watched views left running: {left}"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testenv.Cluster]:
    with testenv.started(tmp_path_factory.mktemp("k8s")) as running:
        yield running


@pytest.fixture(scope="session")
def kubeconfig(cluster: testenv.Cluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    with api_client(str(kubeconfig)) as api:
        yield api


@pytest.fixture(scope="session")
def pod_runner(
    cluster: testenv.Cluster, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PodRunner]:
    """The stand-in kubelet (:mod:`tests.k8s.podrunner`), one a run, for the namespaces that
    ask (``with pod_runner.serving(namespace):``); the pods' processes find this venv's
    programs first on PATH and this checkout on PYTHONPATH. Its loop has no problem at the end.
    """
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    runner = PodRunner(
        api,
        tmp_path_factory.mktemp("pods"),
        pki=cluster.state_dir / "pki",
        namespaces=(),
        base_env=env,
        backoff_s=1.0,
    )
    with runner:
        yield runner
    assert not runner.problems, runner.problems


@pytest.fixture(scope="session")
def published(kubeconfig: Path) -> SimulatedCluster:
    """The session's simulated cluster: ``h200-8x`` on gpu-node-1 and gpu-node-2."""
    argv = ["publish-slices", "--inventory", INVENTORY, "--nodes", str(NODES)]
    assert cli_main([*argv, "--kubeconfig", str(kubeconfig)]) == 0
    return simulate(simulated.load(INVENTORY), NODES)


@contextlib.contextmanager
def fresh_namespace(api: client.ApiClient) -> Iterator[str]:
    """A new namespace whose ``default`` service account exists (pods can be created),
    deleted at the end; on any control plane (``api``: its admin's client)."""
    core = client.CoreV1Api(api)
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def service_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    wait_for(f"the default service account of {name}", service_account)
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose ``default`` service account exists (pods can be created)."""
    with fresh_namespace(api) as name:
        yield name

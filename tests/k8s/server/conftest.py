"""A real jupyter_server with the extension on the Kubernetes backend, against the test
control plane (a fresh namespace per test, the session's simulated ``h200-8x`` nodes);
:mod:`tests.k8s.objects` reads what it leaves in the cluster.

pytest-jupyter's fixtures are imported here, for this folder only (as in tests/server).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  # the jp_* fixtures, for this folder only

from dra_jupyter.kube import watching
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.server.conftest import events  # noqa: F401  # the fixture

WAIT_TRIES = 600  # pauses of 0.1 s: what a loaded 2-core machine needs, bounded


@pytest.fixture
def server_id() -> str:
    return f"nb-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def dra_config() -> dict[str, Any]:
    """Traits of DRAExtensionApp; a test module may override this fixture."""
    return {"idle_timeout": 3600.0, "idle_warning": 300.0, "check_interval": 0.2}


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's fixture
def jp_server_config(
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    server_id: str,
    dra_config: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """The server's configuration. A server's watched views (:mod:`dra_jupyter.kube.watching`)
    last as long as its process; here, as long as its test: stopped after the server, whose
    fixture asks for this one."""
    yield {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {
            "backend": "kubernetes",
            "namespace": namespace,
            "kubeconfig": str(kubeconfig),
            "server_id": server_id,
            "metrics_interval": 0,
            **dra_config,
        },
    }
    watching.stop_all()

"""A server on the Kubernetes backend that stops without releasing (release_on_stop False)
and starts again with the same server id: at start it deletes the claims labelled for it
whose kernel no longer exists (reconcile), and leaves other servers' claims alone."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.serverapp import ServerApp
from kubernetes import client

from dra_jupyter.claimspec import build_claim
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.k8s.objects import claims_in, deleted_because, events_of, names
from tests.server.conftest import start_extensions
from tests.server.test_kernels import REQUEST, Kernel

GPU = {"gpu": 1}
CLASSES = ["gpu.nvidia.com"]


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"check_interval": 0.2, "release_on_stop": False}


def gone_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def other_servers_claim(kubeconfig: Path, namespace: str) -> str:
    """A claim of another server's kernel whose process is gone: not this server's to end."""
    settings = Settings(
        ledger=Path("/nonexistent/unused.sqlite"),
        backend="kubernetes",
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        server_id="another-server",
    )
    owner = Owner("me", socket.gethostname(), gone_pid(), kernel_id="another-kernel")
    claim = build_claim(
        "",
        GPU,
        namespace=namespace,
        classes=CLASSES,
        labels={
            "dra-jupyter/user": "me",
            "dra-jupyter/kernel": "another-kernel",
            "dra-jupyter/server": "another-server",
        },
    )
    return KubernetesBackend(settings, owner).allocate(claim, checked=True).name


async def test_a_restarted_server_deletes_the_claims_of_its_gone_kernels(
    jp_serverapp: Any,
    jp_configurable_serverapp: Any,
    jp_server_config: dict[str, Any],
    jp_argv: list[str],
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    server_id: str,
) -> None:
    await start_extensions(jp_serverapp)
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3")
    kernel = Kernel(kernel_id, km.get_kernel(kernel_id).client())
    kernel.client.start_channels()
    await kernel.client.wait_for_ready(timeout=120)
    await kernel.run(REQUEST)
    kernel.client.stop_channels()
    (left,) = claims_in(api, namespace)
    theirs = other_servers_claim(kubeconfig, namespace)

    await jp_serverapp._cleanup()  # the extension stops keeping its claims, then the kernel
    assert km.list_kernel_ids() == []
    # one of this server's claims without a holder (made by hand, or by an older version)
    made = ClaimClient(api, namespace).create(
        build_claim(
            "by-hand",
            GPU,
            namespace=namespace,
            classes=CLASSES,
            labels={
                "dra-jupyter/user": "me",
                "dra-jupyter/kernel": "gone-kernel",
                "dra-jupyter/server": server_id,
            },
        )
    )
    assert names(api, namespace) == sorted([left["metadata"]["name"], theirs, "by-hand"])

    ServerApp.clear_instance()
    restarted = jp_configurable_serverapp(config=jp_server_config, argv=jp_argv)
    await start_extensions(restarted)  # the first check runs before it returns
    assert names(api, namespace) == [theirs]
    assert deleted_because(api, namespace, left, "DraJupyterKernelGone")
    assert deleted_because(api, namespace, made, "DraJupyterKernelGone")
    assert events_of(api, namespace, theirs) == []

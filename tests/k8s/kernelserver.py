"""A real jupyter_server for GPU kernels on the test control plane: the kernel specs of the
cluster's choices, the dra_jupyter extension on the Kubernetes backend with the
``dra-singleuser`` service account of deploy/hub-rbac.yaml, the stand-in kubelet serving its
namespace; a websocket client that runs a cell; the kernel pods. The fixtures ``server``
and ``idle_server`` (registered by tests/k8s/conftest.py) are used
by test_kernels.py, test_kernel_moves.py and test_kernel_files.py; benchmarks/ start it too.
``running_server(..., None, env={"DRA_JUPYTER_IMAGE": kernelimage.KERNEL})`` on the real
node's control plane runs its kernels there instead (tests/k8s/test_node_kernels.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib.metadata
import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.hub.kernelspecs import cluster_kernel_specs, write_kernel_specs
from dra_jupyter.kube.connect import api_client, to_wire
from tests import kernelws
from tests.helpers import free_port
from tests.hub.test_kubespawner import (
    FALLBACK_RBAC,
    apply_rbac,
    delete_rbac,
    service_account_kubeconfig,
)
from tests.k8s import testenv
from tests.k8s.fixtures import wait_for
from tests.k8s.podrunner import PodRunner

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DEADLINE = 120.0
IMAGE = "dra-jupyter-test/never-pulled:0"  # the stand-in runs the command, pulls nothing
EVENTS = "events.jsonl"  # beside server.log: the server's events (jupyter_events' JSON)


def entry_point_registered() -> bool:
    found = importlib.metadata.entry_points(group="jupyter_client.kernel_provisioners")
    return any(e.name == "dra-kubernetes" for e in found)


class RefusedError(Exception):
    """The server answered an error: its status and body, read and its connection closed (an
    ``HTTPError`` kept in a traceback or a thread's result holds its socket open until the
    garbage collector finds it, and the ResourceWarning fails whichever test runs then)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"HTTP {code}: {text}")
        self.code = code
        self.text = text

    @property
    def message(self) -> str:
        """The JSON body's ``message`` (jupyter_server's and the extension's errors)."""
        return str(json.loads(self.text)["message"])


@dataclass
class Server:
    url: str
    token: str
    root: Path
    runtime: Path
    pid: int = 0  # the jupyter-server process's

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = DEADLINE) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as error:
            with error:
                said = error.read().decode(errors="replace")
            raise RefusedError(error.code, said) from None
        return json.loads(text) if text else None


def _allowed(kubeconfig: Path, namespace: str) -> bool:
    with api_client(str(kubeconfig)) as api:
        try:
            client.CoreV1Api(api).list_namespaced_pod(namespace)
        except ApiException as error:
            if error.status == 403:
                return False
            raise
    return True


@pytest.fixture
def server(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
) -> Iterator[Server]:
    """A jupyter_server with the kernel specs of the cluster's choices
    (:mod:`dra_jupyter.hub.kernelspecs`; ``dra-h200-x1``: one H200 per kernel ...), on a
    token of the ``dra-singleuser`` service account bound by exactly deploy/hub-rbac.yaml;
    its dra_jupyter extension on the Kubernetes backend, without idle release."""
    with running_server(cluster, api, namespace, tmp_path, pod_runner, idle_timeout=0) as up:
        yield up


@pytest.fixture
def idle_server(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
) -> Iterator[Server]:
    """The same with idle release after 8 s (a kernel is idle from its start: a test's first
    cell must come before that on a busy machine), checked every second."""
    with running_server(cluster, api, namespace, tmp_path, pod_runner, idle_timeout=8) as up:
        yield up


def _write_specs(
    cluster: testenv.Cluster,
    namespace: str,
    share: Path,
    configs: dict[str, dict[str, Any]],
    argvs: dict[str, list[str]],
) -> None:
    """The kernel specs of the cluster's choices, ``dra-busy`` and those of ``configs`` and
    ``argvs``."""
    specs = cluster_kernel_specs(str(cluster.kubeconfig), namespace, "root")
    # and one that no node can meet now (both nodes' GPUs taken by then), 10 s to start
    nine = copy.deepcopy(specs["dra-h200-x8"])
    nine["metadata"]["kernel_provisioner"]["config"]["start_timeout"] = 10
    more = {}
    for name, config in configs.items():
        more[name] = copy.deepcopy(specs["dra-h200-x1"])
        more[name]["metadata"]["kernel_provisioner"]["config"] = config
    for name, argv in argvs.items():
        more[name] = copy.deepcopy(specs["dra-h200-x1"])
        more[name]["argv"] = argv
    write_kernel_specs(share, {**specs, "dra-busy": nine, **more})


@contextlib.contextmanager
def running_server(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner | None,
    *,
    idle_timeout: float,
    check_interval: float = 1.0,
    env: dict[str, str] | None = None,
    configs: dict[str, dict[str, Any]] | None = None,
    argvs: dict[str, list[str]] | None = None,
    config: str = "",
    rbac: Sequence[Path] = FALLBACK_RBAC,
) -> Iterator[Server]:
    """The server (see :func:`server`); ``configs``: more kernel specs, by name, each the
    one-H200 spec with this provisioner config instead; ``argvs``: more, each the one-H200
    spec with this argv instead; ``config``: more lines of its jupyter_server_config.py;
    ``rbac``: the files that bind its account (by default those of a server that watches the
    cluster itself)."""
    cluster_wide = apply_rbac(api, namespace, rbac)
    kubeconfig = service_account_kubeconfig(
        api, cluster, namespace, "dra-singleuser", tmp_path / "singleuser.kubeconfig"
    )
    wait_for("the server's Role to take effect", lambda: _allowed(kubeconfig, namespace))
    share = tmp_path / "share" / "jupyter"  # the kernel specs of the cluster's choices
    _write_specs(cluster, namespace, share, configs or {}, argvs or {})
    paths = [str(ROOT)]
    if not entry_point_registered():  # an install older than the entry point: as installed
        dist = tmp_path / "entry" / "dra_jupyter_provisioner-0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dra-jupyter-provisioner\n")
        (dist / "entry_points.txt").write_text(
            "[jupyter_client.kernel_provisioners]\n"
            "dra-kubernetes = dra_jupyter.kube.kernels.provisioner:DRAKernelProvisioner\n"
        )
        paths.append(str(dist.parent))
    root = tmp_path / "notebooks"
    (root / "work").mkdir(parents=True)
    port, token = free_port(), secrets.token_hex(16)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.py").write_text(
        "import logging\n"
        "c = get_config()  # noqa\n"
        # the server's events, one JSON line each (read by events_of_server)
        f"c.EventLogger.handlers = [logging.FileHandler({str(tmp_path / EVENTS)!r})]\n"
        'c.DRAExtensionApp.backend = "kubernetes"\n'
        f"c.DRAExtensionApp.namespace = {namespace!r}\n"
        f"c.DRAExtensionApp.kubeconfig = {str(kubeconfig)!r}\n"
        f"c.DRAExtensionApp.idle_timeout = {idle_timeout}\n"
        f"c.DRAExtensionApp.check_interval = {check_interval}\n" + config
    )
    env = {
        **os.environ,
        "JUPYTER_PATH": str(share),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "DRA_JUPYTER_KUBECONFIG": str(kubeconfig),
        "DRA_JUPYTER_NAMESPACE": namespace,
        "DRA_JUPYTER_IMAGE": IMAGE,  # the kernel pods' (the server runs in no pod here)
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
        **(env or {}),
    }
    log = (tmp_path / "server.log").open("wb")
    argv = [
        str(VENV_BIN / "jupyter-server"),
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    if os.getuid() == 0:
        argv.append("--allow-root")
    process = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    running = Server(f"http://127.0.0.1:{port}", token, root, tmp_path / "runtime", process.pid)

    def up() -> bool:
        assert process.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        with contextlib.suppress(OSError):
            return running.call("GET", "/api/status") is not None
        return False

    try:
        serving = pod_runner.serving(namespace) if pod_runner else contextlib.nullcontext()
        with serving:  # None: no pod runs (a benchmark of reads)
            wait_for("the server to answer", up)
            yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        delete_rbac(api, cluster_wide)


def server_events(server: Server, kind: str) -> list[dict[str, Any]]:
    """The events of ``kind`` (``idle_warning``, ``kernel_moved``, ...) the server emitted
    so far, in order."""
    path = server.root.parent / EVENTS
    lines = path.read_text().splitlines() if path.exists() else []
    found = [json.loads(line) for line in lines if line.strip()]
    return [e for e in found if e.get("__schema__", "").endswith(f"/{kind}/v1")]


async def execute(server: Server, kernel: str, code: str, *, answer: bool = True) -> str:
    """What ``code`` prints in the kernel (nothing, without waiting, unless ``answer``)."""
    url = server.url.replace("http://", "ws://") + f"/api/kernels/{kernel}/channels"
    return await kernelws.execute(url, server.token, code, deadline=DEADLINE, answer=answer)


def kernel_pods(api: client.ApiClient, namespace: str, kernel: str) -> list[dict[str, Any]]:
    listed = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"dra-jupyter/kernel={kernel}"
    )
    return [to_wire(api, p) for p in listed.items]


def gone(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def serving(server: Server, kernel: str, pod: str) -> None:
    """Wait until the server has the kernel's restart in ``pod`` done (its provisioner saw
    the pod run): a websocket opened before that gets the channels of the restart under way,
    which may answer nothing."""
    log = server.root.parent / "server.log"
    line = f"kernel {kernel}: pod {pod} runs at "
    wait_for(f"the server to connect to pod {pod}", lambda: line in log.read_text())
    # the provisioner logs that line before jupyter_server takes the new connection: on a
    # loaded machine a websocket opened just after still gets the old ports. Answered
    # kernel_info on a fresh websocket: the channels reach the kernel in its new pod.
    wait_for(
        f"the kernel in pod {pod} to answer",
        lambda: asyncio.run(_answers(server, kernel)) or None,
        timeout=DEADLINE,
    )


async def _answers(server: Server, kernel: str) -> bool:
    """Whether the kernel answers a kernel_info_request on a new websocket within 5 s."""
    url = server.url.replace("http://", "ws://") + f"/api/kernels/{kernel}/channels"
    return await kernelws.answers(url, server.token)


def running_pod(api: client.ApiClient, namespace: str, kernel: str, not_: str) -> str | None:
    pods = [p for p in kernel_pods(api, namespace, kernel) if p["metadata"]["name"] != not_]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return str(running[0]["metadata"]["name"]) if running else None

"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, built from the Go module proxy at pinned versions (:mod:`.k8sbuild`) and
run on loopback. Its command line, ``scripts/k8s-testenv``, is :mod:`.testenvcli`'s.

:func:`start` runs them on 127.0.0.1 with free ports: a CA and certificates made here
(:mod:`.pki`), a service-account key pair, admin/scheduler/controller-manager kubeconfigs, and
etcd with a data directory in the state directory. There is no kubelet: the node lifecycle
controller is off, so simulated Node objects (``dra-jupyter publish-slices``) stay Ready and
untainted and the scheduler binds pods to them. There the pods stay Pending, unless the
stand-in kubelet of :mod:`.podrunner` runs them (``start(..., run_pods=True)`` starts it with
the control plane, as one more component that ``stop`` stops; the tests' ``pod_runner``
fixture runs one for the namespaces that ask). A real node (:mod:`.node`: containerd, the
kubelet, a CNI bridge and the simulated GPU driver; as root) is started beside it by
``node.start``, which ``scripts/k8s-testenv start`` calls where the machine allows it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import free_port
from tests.k8s.k8sbuild import (
    TestenvError,
    bin_dir,
    build,
    cache_dir,
    is_built,
)

__all__ = [
    "Cluster",
    "TestenvError",
    "build",
    "cache_dir",
    "is_built",
    "kill_apiserver",
    "restart_apiserver",
    "start",
    "started",
    "stop",
]

SERVICE_CIDR = "10.96.0.0/16"
# The Workload API (KEP-4671: Workload, PodGroup; beta in 1.37, so off by default): the API
# server serves scheduling.k8s.io/v1beta1 (its runtime config) with the pods' field
# spec.schedulingGroup and the PodGroupProtection admission plugin (the feature gate
# GenericWorkload, pkg/features/kube_features.go), kube-scheduler places a PodGroup's pods all
# or none (its gangscheduling plugin, behind the same gate), and kube-controller-manager runs
# the podgroup-protection-controller that lifts the finalizer admission puts on each PodGroup
# (same gate), so that a PodGroup can be deleted once its pods are gone. With them, claims for
# pod groups (KEP-5729, the gate DRAWorkloadResourceClaims, beta and off by default in 1.37):
# a PodGroup's spec.resourceClaims, one claim made by the resourceclaim controller and
# reserved by kube-scheduler for the whole group (dra.run's group=).
WORKLOAD_API = "scheduling.k8s.io/v1beta1"
WORKLOAD_GATES = "GenericWorkload=true,DRAWorkloadResourceClaims=true"
PORT_ATTEMPTS = 3  # starts on fresh ports after a port was taken between choice and bind
START_TIMEOUT_S = 180.0  # a loaded 2-core machine needs ~30 s; bounded, polled
STOP_TIMEOUT_S = 30.0


# --- running ----------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22), to tell a reused
    pid from ours; None when no such process is running (or it has exited, unreaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass
class Component:
    name: str
    pid: int
    start_time: str
    log: str


@dataclass
class Cluster:
    """A running control plane; ``kubeconfig`` is the admin's (group system:masters)."""

    state_dir: Path
    server: str
    kubeconfig: Path
    components: list[Component] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    die_with_parent: bool = False  # components get SIGKILL when the process that started them dies
    workloads: bool = True  # the Workload API served and gangs scheduled (WORKLOAD_API)
    _children: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def save(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports,
            "workloads": self.workloads,
            "components": [c.__dict__ for c in self.components],
        }
        (self.state_dir / "cluster.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> Cluster | None:
        try:
            state = json.loads((state_dir / "cluster.json").read_text())
        except FileNotFoundError:
            return None
        return cls(
            state_dir=state_dir,
            server=state["server"],
            kubeconfig=Path(state["kubeconfig"]),
            components=[Component(**c) for c in state["components"]],
            ports=state["ports"],
            workloads=state.get("workloads", False),
        )

    def ssl_context(self) -> ssl.SSLContext:
        pki = self.state_dir / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def get(self, path: str, *, port: int | None = None) -> tuple[int, str]:
        """GET ``path`` on the API server (or a component's secure ``port``) as the admin."""
        url = f"https://127.0.0.1:{port}{path}" if port else f"{self.server}{path}"
        try:
            with urllib.request.urlopen(url, context=self.ssl_context(), timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode(errors="replace")

    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig of a client certificate for ``user`` (and ``groups``), whom RBAC
        allows nothing until a binding says otherwise."""
        from tests.k8s import pki  # noqa: PLC0415  # needs cryptography

        pki.issue_client(self.state_dir / "pki", user, groups)
        path = self.state_dir / f"{user}.kubeconfig"
        pki.write_kubeconfig(path, self.server, self.state_dir / "pki", user)
        return path

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop every component, newest first: SIGTERM to its process group, then SIGKILL."""
        for component in reversed(self.components):
            _stop_one(component, self._children.get(component.pid), timeout)
        self.components.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / "cluster.json").unlink()


def _ours(component: Component) -> bool:
    return _start_time(component.pid) == component.start_time


def _stop_one(
    component: Component,
    child: subprocess.Popen[bytes] | None,
    timeout: float,
    signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGKILL),
) -> None:
    if not _ours(component):  # exited (or the pid now belongs to someone else: leave it)
        if child is not None:
            child.wait(timeout)  # ours and exited: reap it
        return
    for sig in signals:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.pid, sig)  # each component leads its own process group
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.2)
            else:
                time.sleep(0.2)
            if (child is not None and child.returncode is not None) or not _ours(component):
                if child is not None:  # exited: reap it (a zombie is no longer "ours", so
                    child.wait(timeout)  # this can come before the wait above reaped it)
                return
    raise TestenvError(f"k8s-testenv stop: {component.name} (pid {component.pid}) did not exit")


def _killed_with(parent: int) -> None:
    """In a component, before it starts: ask Linux for SIGKILL when the thread that started
    it dies (``prctl(PR_SET_PDEATHSIG)``), so a test run that is itself killed (SIGKILL, an
    out-of-memory kill) leaves no control plane behind; exit at once if it died already."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)


PR_SET_PDEATHSIG = 1


def _spawn(
    cluster: Cluster,
    name: str,
    args: Sequence[str],
    program: Sequence[str] | None = None,
    *,
    at: int | None = None,
    pass_fds: Sequence[int] = (),
) -> None:
    """Start component ``name``: the built binary of that name (or ``program``) with ``args``,
    at index ``at`` of the components (default: last; ``stop`` stops the last first);
    ``pass_fds``: open files of this process it holds too."""
    log = cluster.state_dir / "logs" / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    parent = os.getpid()
    with log.open("ab") as out:
        child = subprocess.Popen(
            [*(program or [str(bin_dir() / name)]), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals the whole group
            pass_fds=pass_fds,
            preexec_fn=(lambda: _killed_with(parent)) if cluster.die_with_parent else None,  # noqa: PLW1509
        )
    start_time = _start_time(child.pid) or ""
    component = Component(name, child.pid, start_time, str(log))
    cluster.components.insert(len(cluster.components) if at is None else at, component)
    cluster._children[child.pid] = child
    cluster.save()


def _wait(cluster: Cluster, what: str, ready: Any, deadline: float) -> None:
    """Poll ``ready()`` until it is true; fail early, with the log's tail, if a component died."""
    last = ""
    while time.monotonic() < deadline:
        for component in cluster.components:
            child = cluster._children.get(component.pid)
            if child is not None and child.poll() is not None:
                tail = Path(component.log).read_text(errors="replace").splitlines()[-20:]
                raise TestenvError(
                    f"k8s-testenv start: {component.name} exited with code {child.returncode} "
                    f"while waiting for {what}; log {component.log}:\n" + "\n".join(tail)
                )
        try:
            ok, last = ready()
        except (OSError, ValueError) as error:
            ok, last = False, str(error)
        if ok:
            return
        time.sleep(0.5)
    raise TestenvError(f"k8s-testenv start: {what} not ready in time (last answer: {last[:300]})")


def _healthy(cluster: Cluster, port: int, path: str = "/healthz") -> Any:
    def check() -> tuple[bool, str]:
        status, body = cluster.get(path, port=port)
        return status == 200, body

    return check


def start(
    state_dir: Path,
    *,
    timeout: float = START_TIMEOUT_S,
    die_with_parent: bool = False,
    run_pods: bool = False,
    workloads: bool = True,
) -> Cluster:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler; return once
    all answer healthy and the ``default`` service account exists (pods can be created).
    ``die_with_parent``: the components are killed when this process dies (a test run);
    without it they outlive it (``scripts/k8s-testenv start``) until ``stop``.
    ``run_pods``: the stand-in kubelet (:mod:`.podrunner`) too, for every namespace.
    ``workloads``: the Workload API served and gangs scheduled (:data:`WORKLOAD_API`); off,
    the control plane is one whose admin left that beta API off (Kubernetes' default)."""
    if not is_built():
        raise TestenvError(
            f"k8s-testenv start: the binaries are not built in {cache_dir()}; run "
            "`scripts/k8s-testenv build` (or `make test`) first"
        )
    state_dir = state_dir.resolve()
    previous = Cluster.load(state_dir)
    if previous is not None and any(_ours(c) for c in previous.components):
        raise TestenvError(
            f"k8s-testenv start: a control plane already runs from {state_dir}; "
            f"`scripts/k8s-testenv stop --state-dir {state_dir}` first"
        )
    from tests.k8s.pki import write_kubeconfig, write_pki  # noqa: PLC0415  # `build` needs neither

    state_dir.mkdir(parents=True, exist_ok=True)
    pki = state_dir / "pki"
    write_pki(pki)
    deadline = time.monotonic() + timeout
    for attempt in range(1, PORT_ATTEMPTS + 1):
        # free now, but another process (another test run's control plane) may bind one
        # before our component does: then every component again, on other ports
        ports = {
            name: free_port()
            for name in (
                "etcd",
                "etcd-peer",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            )
        }
        server = f"https://127.0.0.1:{ports['kube-apiserver']}"
        cluster = Cluster(
            state_dir,
            server,
            state_dir / "kubeconfig",
            ports=ports,
            die_with_parent=die_with_parent,
            workloads=workloads,
        )
        for user in ("admin", "kube-scheduler", "kube-controller-manager"):
            path = cluster.kubeconfig if user == "admin" else state_dir / f"{user}.kubeconfig"
            write_kubeconfig(path, server, pki, user)
        try:
            _start_all(cluster, deadline)
            if run_pods:
                _start_pod_runner(cluster, deadline)
        except TestenvError as error:
            cluster.stop()
            if "address already in use" not in str(error) or attempt == PORT_ATTEMPTS:
                raise
            continue
        except BaseException:
            cluster.stop()
            raise
        return cluster
    raise AssertionError("unreachable: the last attempt returns or raises")


APISERVER = "kube-apiserver"


def _tls(pki: Path) -> list[str]:
    """The serving certificate and client CA of every component."""
    return [
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
    ]


def _apiserver_args(cluster: Cluster) -> list[str]:
    """kube-apiserver's command line: on the cluster's port, certificates and etcd (the same
    at each start, so that a restarted one is the same server to its clients)."""
    pki, ports = cluster.state_dir / "pki", cluster.ports
    gates = [f"--feature-gates={WORKLOAD_GATES}"] if cluster.workloads else []
    return [
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports[APISERVER]}",
        *_tls(pki),
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        # No front proxy: a CA for its client certificates, and a name nobody holds.
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--enable-admission-plugins=NodeRestriction",
        # pods/log reaches the stand-in kubelet (podrunner.py) as it would a kubelet
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--endpoint-reconciler-type=none",  # a loopback address may not be an endpoint
        "--profiling=false",
        *gates,
        *([f"--runtime-config={WORKLOAD_API}=true"] if cluster.workloads else []),
    ]


def _apiserver_ready(cluster: Cluster) -> Any:
    return _healthy(cluster, cluster.ports[APISERVER], "/readyz")


def kill_apiserver(cluster: Cluster) -> None:
    """Kill the API server as a crash does (SIGKILL: open connections and watches break with
    no goodbye); etcd and the other components run on. :func:`restart_apiserver` starts it
    again."""
    component = next(c for c in cluster.components if c.name == APISERVER)
    child = cluster._children.pop(component.pid, None)
    _stop_one(component, child, STOP_TIMEOUT_S, signals=(signal.SIGKILL,))
    cluster.components.remove(component)
    cluster.save()


def restart_apiserver(cluster: Cluster, timeout: float = START_TIMEOUT_S) -> None:
    """Start the API server killed by :func:`kill_apiserver` again: on the same port,
    certificates, keys and etcd (its clients' kubeconfigs and tokens hold), in its place
    among the components; returns once its /readyz answers."""
    if any(c.name == APISERVER for c in cluster.components):
        raise TestenvError("k8s-testenv: the API server runs already")
    at = next(i for i, c in enumerate(cluster.components) if c.name == "etcd") + 1
    _spawn(cluster, APISERVER, _apiserver_args(cluster), at=at)
    ready = _apiserver_ready(cluster)
    _wait(cluster, "kube-apiserver /readyz", ready, time.monotonic() + timeout)


def _start_all(cluster: Cluster, deadline: float) -> None:
    state, pki, ports = cluster.state_dir, cluster.state_dir / "pki", cluster.ports
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    data = state / "etcd-data"
    shutil.rmtree(data, ignore_errors=True)
    _spawn(
        cluster,
        "etcd",
        [
            "--name=testenv",
            f"--data-dir={data}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=testenv={peer_url}",
            "--unsafe-no-fsync",  # a throwaway test store
            "--log-level=warn",
        ],
    )

    def etcd_ready() -> tuple[bool, str]:
        with urllib.request.urlopen(f"{etcd_url}/health", timeout=5) as r:
            body = r.read().decode()
        return json.loads(body).get("health") == "true", body

    _wait(cluster, "etcd", etcd_ready, deadline)
    gates = [f"--feature-gates={WORKLOAD_GATES}"] if cluster.workloads else []
    tls = _tls(pki)
    _spawn(cluster, APISERVER, _apiserver_args(cluster))
    _wait(cluster, "kube-apiserver /readyz", _apiserver_ready(cluster), deadline)
    for name, extra in (
        (
            "kube-controller-manager",
            [
                # No kubelet heartbeats: the node lifecycle controller would taint every node.
                "--controllers=*,-node-lifecycle-controller",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=true",
            ],
        ),
        ("kube-scheduler", []),
    ):
        config = state / f"{name}.kubeconfig"
        _spawn(
            cluster,
            name,
            [
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports[name]}",
                *tls,
                "--leader-elect=false",
                "--profiling=false",
                *extra,
                *gates,
            ],
        )
    for name in ("kube-controller-manager", "kube-scheduler"):
        _wait(cluster, f"{name} /healthz", _healthy(cluster, ports[name]), deadline)

    def service_account() -> tuple[bool, str]:
        status, body = cluster.get("/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200, body

    _wait(cluster, "the default service account", service_account, deadline)


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k8s-testenv"


def _start_pod_runner(cluster: Cluster, deadline: float) -> None:
    """The stand-in kubelet as a component: ``scripts/k8s-testenv run-pods``."""
    state = cluster.state_dir / "pod-runner.json"
    state.unlink(missing_ok=True)
    _spawn(
        cluster,
        "pod-runner",
        ["run-pods", "--state-dir", str(cluster.state_dir)],
        program=[sys.executable, str(SCRIPT)],
    )

    def written() -> tuple[bool, str]:
        return state.exists(), "no pod-runner.json yet"

    _wait(cluster, "the pod runner", written, deadline)


def run_pods(state_dir: Path, namespaces: Sequence[str], backoff_s: float) -> None:
    """Run the stand-in kubelet in this process until SIGTERM or SIGINT."""
    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415  # only this needs them
    from tests.k8s.podrunner import PodRunner, write_state  # noqa: PLC0415

    state_dir = state_dir.resolve()
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    with (
        api_client(str(state_dir / "kubeconfig")) as api,
        PodRunner(
            api,
            state_dir / "pod-runner",
            pki=state_dir / "pki",
            namespaces=namespaces or None,
            backoff_s=backoff_s,
        ) as runner,
    ):
        write_state(state_dir, runner)
        sys.stderr.write(f"k8s-testenv: running pods; logs served on 127.0.0.1:{runner.port}\n")
        reported = 0
        while not stopped.wait(1.0):
            for problem in runner.problems[reported:]:
                sys.stderr.write(f"k8s-testenv run-pods: {problem}\n")
            reported = len(runner.problems)


def stop(state_dir: Path) -> bool:
    """Stop the control plane started from ``state_dir``; False if none was running."""
    cluster = Cluster.load(state_dir.resolve())
    if cluster is None:
        return False
    cluster.stop()
    return True


@contextlib.contextmanager
def started(state_dir: Path, *, workloads: bool = True) -> Iterator[Cluster]:
    """A control plane for a block of tests: built (a no-op once built), started in
    ``state_dir`` and killed with this process (a test run stopped with SIGKILL leaves no
    control plane), stopped at the end of the block (``workloads``: as :func:`start`)."""
    build()
    cluster = start(state_dir, die_with_parent=True, workloads=workloads)
    try:
        yield cluster
    finally:
        cluster.stop()

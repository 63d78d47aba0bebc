"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, built from the Go module proxy at pinned versions and run on loopback.

    scripts/k8s-testenv build                 # once per machine; later calls reuse the cache
    scripts/k8s-testenv start [--state-dir D] # prints the admin kubeconfig's path
    scripts/k8s-testenv stop  [--state-dir D]

``k8s.io/kubernetes`` cannot be ``go install``-ed (its go.mod replaces every ``k8s.io/*``
staging module with a local directory), so :func:`build` writes a throwaway module that
requires it and replaces each staging module with its published ``v0.X.Y``, then builds the
three commands; etcd gets a module of its own (its server and Kubernetes' etcd client would
otherwise be pushed to one version). Everything lives in a cache directory outside the
repository, ``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/k8s/<versions>/``, with a stamp of the
versions: a second build is a no-op.

:func:`start` runs them on 127.0.0.1 with free ports: a CA and certificates made here, a
service-account key pair, admin/scheduler/controller-manager kubeconfigs, and etcd with a data
directory in the state directory. There is no kubelet: the node lifecycle controller is off,
so simulated Node objects (``dra-jupyter publish-slices``) stay Ready and untainted and the
scheduler binds pods to them; the pods stay Pending, which is all the tests need.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

# Pinned versions: the newest Kubernetes release the Go module proxy serves, and the newest
# etcd 3.6 (the series Kubernetes 1.37 is tested with).
KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
GO_DIRECTIVE = "1.26.0"  # what k8s.io/kubernetes v1.37.2 and etcd v3.6.16 declare

GO_FALLBACKS = ("/usr/local/go/bin/go",)  # where the official archive installs Go
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
BINARIES = ("etcd", *KUBE_COMMANDS)
SERVICE_CIDR = "10.96.0.0/16"
START_TIMEOUT_S = 180.0  # a loaded 2-core machine needs ~30 s; bounded, polled
STOP_TIMEOUT_S = 30.0


class TestenvError(Exception):
    """The control plane could not be built, started or stopped; the message says why."""

    __test__ = False  # not a pytest test class


# --- building ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where the binaries of the pinned versions are built and kept."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dra-jupyter" / "k8s" / f"kubernetes-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def _stamp() -> dict[str, str]:
    return {"kubernetes": KUBERNETES_VERSION, "etcd": ETCD_VERSION}


def is_built() -> bool:
    """True when every binary exists and the stamp names the pinned versions."""
    stamp = cache_dir() / "stamp.json"
    try:
        built = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return built == _stamp() and all((bin_dir() / b).is_file() for b in BINARIES)


def find_go() -> str:
    """The ``go`` command: on PATH, or where the official archive installs it."""
    found = shutil.which("go") or next((p for p in GO_FALLBACKS if os.access(p, os.X_OK)), None)
    if found is None:
        raise TestenvError(
            "k8s-testenv build: the Go toolchain (1.26 or newer) is not installed; install it "
            "(e.g. to /usr/local/go) or put `go` on PATH, then run `scripts/k8s-testenv build`"
        )
    return found


def staging_replaces(kubernetes_go_mod: str, version: str) -> list[str]:
    """``k8s.io/X => k8s.io/X v0.Y.Z`` for every staging module that ``k8s.io/kubernetes``'s
    go.mod replaces with a local directory (``./staging/src/k8s.io/X``)."""
    staging = "v0." + version.removeprefix("v1.")
    modules = re.findall(r"(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/", kubernetes_go_mod)
    if not modules:
        raise TestenvError(
            f"k8s-testenv build: k8s.io/kubernetes {version}'s go.mod replaces no staging module; "
            "the build recipe does not fit this version"
        )
    return [f"{m} => {m} {staging}" for m in sorted(set(modules))]


def kubernetes_module(go_mod_of_kubernetes: str) -> str:
    """The throwaway go.mod that builds the Kubernetes commands."""
    replaces = "\n".join(
        f"\t{r}" for r in staging_replaces(go_mod_of_kubernetes, KUBERNETES_VERSION)
    )
    return (
        "module k8stestenv\n\n"
        f"go {GO_DIRECTIVE}\n\n"
        f"require k8s.io/kubernetes {KUBERNETES_VERSION}\n\n"
        f"replace (\n{replaces}\n)\n"
    )


def etcd_module() -> str:
    return (
        "module etcdtestenv\n\n"
        f"go {GO_DIRECTIVE}\n\n"
        f"require go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
    )


def _tools_go(packages: Sequence[str]) -> str:
    """Imports that keep the commands' modules required through ``go mod tidy``."""
    imports = "\n".join(f'\t_ "{p}"' for p in packages)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build at a time per cache directory (make test and a fixture may race)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class _Go:
    def __init__(self, log: TextIO, log_path: Path) -> None:
        self.go = find_go()
        self.log = log
        self.log_path = log_path
        self.env = {
            **os.environ,
            "GOFLAGS": "-mod=mod",
            "GOTOOLCHAIN": "local",  # never download another toolchain
            "CGO_ENABLED": "0",
        }
        self.nice = ["nice", "-n", "19"] if shutil.which("nice") else []

    def run(self, args: Sequence[str], cwd: Path, what: str) -> str:
        command = [*self.nice, self.go, *args]
        with self.log_path.open("a") as log:
            log.write(f"\n$ (cd {cwd} && {' '.join(command)})\n")
            log.flush()
            done = subprocess.run(
                command,
                check=False,
                cwd=cwd,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        if done.returncode != 0:
            tail = self.log_path.read_text().splitlines()[-15:]
            raise TestenvError(
                f"k8s-testenv build: {what} failed (go exit code {done.returncode}); "
                f"full log: {self.log_path}\n" + "\n".join(tail)
            )
        return done.stdout


def build(*, force: bool = False, log: TextIO = sys.stderr) -> Path:
    """Build the four binaries into :func:`bin_dir` unless they are there already."""
    root = cache_dir()
    with _locked(root.parent / f"{root.name}.lock"):
        if is_built() and not force:
            return bin_dir()
        start = time.monotonic()
        root.mkdir(parents=True, exist_ok=True)
        log_path = root / "build.log"
        log_path.write_text("")
        log.write(
            f"k8s-testenv: building Kubernetes {KUBERNETES_VERSION} and etcd {ETCD_VERSION} into "
            f"{root} (once per machine; 20-30 minutes on 2 cores; log: {log_path})\n"
        )
        log.flush()
        go = _Go(log, log_path)
        out = bin_dir()
        out.mkdir(exist_ok=True)

        kube = root / "kubernetes"
        kube.mkdir(exist_ok=True)
        (kube / "go.mod").write_text(
            f"module k8stestenv\n\ngo {GO_DIRECTIVE}\n\nrequire k8s.io/kubernetes "
            f"{KUBERNETES_VERSION}\n"
        )
        info = json.loads(
            go.run(
                ["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
                kube,
                f"downloading k8s.io/kubernetes {KUBERNETES_VERSION}",
            )
        )
        (kube / "go.mod").write_text(kubernetes_module(Path(info["GoMod"]).read_text()))
        commands = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]
        (kube / "tools.go").write_text(_tools_go(commands))
        go.run(["mod", "tidy"], kube, "resolving the Kubernetes modules (go mod tidy)")
        version = KUBERNETES_VERSION.removeprefix("v").split(".")
        ldflags = " ".join(
            [
                "-s -w",
                f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
                f"-X k8s.io/component-base/version.gitMajor={version[0]}",
                f"-X k8s.io/component-base/version.gitMinor={version[1]}",
            ]
        )
        go.run(
            ["build", "-ldflags", ldflags, "-o", f"{out}/", *commands],
            kube,
            "building " + ", ".join(KUBE_COMMANDS),
        )

        etcd = root / "etcd"
        etcd.mkdir(exist_ok=True)
        (etcd / "go.mod").write_text(etcd_module())
        (etcd / "tools.go").write_text(_tools_go(["go.etcd.io/etcd/server/v3"]))
        go.run(["mod", "tidy"], etcd, "resolving the etcd modules (go mod tidy)")
        go.run(
            ["build", "-ldflags", "-s -w", "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3"],
            etcd,
            "building etcd",
        )
        missing = [b for b in BINARIES if not (out / b).is_file()]
        if missing:
            raise TestenvError(f"k8s-testenv build: go build left no {', '.join(missing)}")
        (root / "stamp.json").write_text(json.dumps(_stamp()))
        sizes = ", ".join(f"{b} {(out / b).stat().st_size / 2**20:.0f} MiB" for b in BINARIES)
        log.write(f"k8s-testenv: built in {time.monotonic() - start:.0f} s: {sizes}\n")
        return out


# --- certificates and kubeconfigs --------------------------------------------------------------


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: str,
    groups: Sequence[str] = (),
    *,
    issuer: tuple[Any, Any] | None = None,
    hosts: Sequence[str] = (),
    client: bool = False,
) -> tuple[Any, Any]:
    """An ECDSA P-256 key and a certificate for it, signed by ``issuer`` (else self-signed)."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, subject))
    name = x509.Name(attributes)
    signer_cert, signer_key = issuer if issuer else (None, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(signer_cert.subject if signer_cert else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        )
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
    return builder.sign(signer_key, hashes.SHA256()), key


def write_pki(pki: Path) -> None:
    """CA, serving certificate, client certificates and the service-account key pair."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    ca = _certificate("dra-jupyter-testenv-ca")

    def save(name: str, pair: tuple[Any, Any]) -> None:
        cert, key = pair
        (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (pki / f"{name}.key").write_bytes(_pem_key(key))

    save("ca", ca)
    hosts = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "10.96.0.1")
    save("serving", _certificate("kube-apiserver", issuer=ca, hosts=hosts))
    for name, cn, groups in (
        ("admin", "dra-jupyter-testenv-admin", ["system:masters"]),
        ("kube-scheduler", "system:kube-scheduler", []),
        ("kube-controller-manager", "system:kube-controller-manager", []),
    ):
        save(name, _certificate(cn, groups, issuer=ca, client=True))
    sa = ec.generate_private_key(ec.SECP256R1())
    (pki / "sa.key").write_bytes(_pem_key(sa))
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def kubeconfig(server: str, pki: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with the CA and the client certificate embedded (portable)."""

    def data(name: str) -> str:
        return b64encode((pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {"server": server, "certificate-authority-data": data("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(f"{user}.crt"),
                    "client-key-data": data(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": user}}],
        "current-context": "testenv",
    }


# --- running ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    _children: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def save(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports,
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
        import yaml  # noqa: PLC0415
        from cryptography import x509  # noqa: PLC0415
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        pki = self.state_dir / "pki"
        ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
        cert, key = _certificate(user, groups, issuer=(ca_cert, ca_key), client=True)
        (pki / f"{user}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (pki / f"{user}.key").write_bytes(_pem_key(key))
        path = self.state_dir / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(self.server, pki, user)))
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


def _stop_one(component: Component, child: subprocess.Popen[bytes] | None, timeout: float) -> None:
    if not _ours(component):  # exited (or the pid now belongs to someone else: leave it)
        if child is not None:
            child.wait(timeout)  # ours and exited: reap it
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
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
                return
    raise TestenvError(f"k8s-testenv stop: {component.name} (pid {component.pid}) did not exit")


def _spawn(cluster: Cluster, name: str, args: Sequence[str]) -> None:
    log = cluster.state_dir / "logs" / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            [str(bin_dir() / name), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals the whole group
        )
    start_time = _start_time(child.pid) or ""
    cluster.components.append(Component(name, child.pid, start_time, str(log)))
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


def start(state_dir: Path, *, timeout: float = START_TIMEOUT_S) -> Cluster:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler; return once
    all answer healthy and the ``default`` service account exists (pods can be created)."""
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
    import yaml  # noqa: PLC0415  # `build` runs with any Python 3.11, without PyYAML

    state_dir.mkdir(parents=True, exist_ok=True)
    pki = state_dir / "pki"
    write_pki(pki)
    ports = {
        name: free_port()
        for name in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager")
    }
    ports["kube-scheduler"] = free_port()
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    cluster = Cluster(state_dir, server, state_dir / "kubeconfig", ports=ports)
    for user in ("admin", "kube-scheduler", "kube-controller-manager"):
        path = cluster.kubeconfig if user == "admin" else state_dir / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(server, pki, user)))
        path.chmod(0o600)
    deadline = time.monotonic() + timeout
    try:
        _start_all(cluster, deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


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
    tls = [
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
    ]
    _spawn(
        cluster,
        "kube-apiserver",
        [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}",
            *tls,
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
            "--endpoint-reconciler-type=none",  # a loopback address may not be an endpoint
            "--profiling=false",
        ],
    )
    _wait(
        cluster,
        "kube-apiserver /readyz",
        _healthy(cluster, ports["kube-apiserver"], "/readyz"),
        deadline,
    )
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
            ],
        )
    for name in ("kube-controller-manager", "kube-scheduler"):
        _wait(cluster, f"{name} /healthz", _healthy(cluster, ports[name]), deadline)

    def service_account() -> tuple[bool, str]:
        status, body = cluster.get("/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200, body

    _wait(cluster, "the default service account", service_account, deadline)


def stop(state_dir: Path) -> bool:
    """Stop the control plane started from ``state_dir``; False if none was running."""
    cluster = Cluster.load(state_dir.resolve())
    if cluster is None:
        return False
    cluster.stop()
    return True


# --- command line -----------------------------------------------------------------------------


def default_state_dir() -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "dra-jupyter" / "k8s-testenv"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="k8s-testenv",
        description=f"A real Kubernetes {KUBERNETES_VERSION} control plane (etcd {ETCD_VERSION}) "
        "on loopback, for tests and demos.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help=f"build the binaries into {cache_dir()} (skipped if built)")
    p.add_argument("--force", action="store_true", help="rebuild even if built")
    for name, helptext in (
        ("start", "start the control plane; prints the admin kubeconfig's path"),
        ("stop", "stop the control plane started from the state directory"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument(
            "--state-dir",
            type=Path,
            default=default_state_dir(),
            help="certificates, kubeconfigs, etcd data and logs (default: %(default)s)",
        )
    sub.add_parser("where", help="print the cache directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(force=args.force)
            print(bin_dir())
        elif args.command == "start":
            build()
            cluster = start(args.state_dir)
            print(cluster.kubeconfig)
            sys.stderr.write(
                f"k8s-testenv: API server {cluster.server}; "
                f"export KUBECONFIG={cluster.kubeconfig}\n"
            )
        elif args.command == "stop":
            if not stop(args.state_dir):
                sys.stderr.write(f"k8s-testenv: nothing runs from {args.state_dir}\n")
        else:
            print(cache_dir())
    except TestenvError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    return 0

"""Building a real node's parts for the test environment, at pinned versions, cached outside the
repository like the control plane (:mod:`.k8sbuild`):

* the kubelet of ``k8s.io/kubernetes`` (the control plane's module, flags and ldflags);
* upstream's DRA test driver, ``k8s.io/kubernetes/test/e2e/dra/test-driver`` of the same
  module (its ``kubelet-plugin`` command: a second, independent DRA driver on the node);
* containerd, its runc shim and ``ctr`` from ``github.com/containerd/containerd/v2`` (CDI on
  by default; tag ``no_btrfs``: no btrfs headers needed);
* the project's simulated GPU driver, ``tools/dra-sim-plugin`` (a DRA kubelet plugin, pinned by
  its go.mod and go.sum), in a directory named after the digest of its source;
* the pause program, ``build/pause/linux/pause.c`` of the kubernetes module, ``gcc -static``.

runc, the CNI plugins, iptables, conntrack and the test image's busybox are Debian's packages
(:data:`DEBIAN_PACKAGES`), installed with apt-get when missing and this is root.

Everything lives in ``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/k8s/node-<versions>-<key>/``
(``key``: a digest of the stamp, the versions and the binaries built, so that a cache of
another set of binaries is built anew once) with the stamp: a second build is a no-op.
Standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tests.k8s.k8sbuild import (
    GO_DIRECTIVE,
    KUBERNETES_VERSION,
    TestenvError,
    _Go,
    _tools_go,
    kubernetes_module,
    locked,
)
from tests.k8s.k8sbuild import cache_dir as control_plane_cache

CONTAINERD_VERSION = "v2.4.2"  # the newest containerd the Go module proxy serves; CDI on
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
TEST_DRIVER_PACKAGE = "k8s.io/kubernetes/test/e2e/dra/test-driver"  # upstream's DRA test driver
TEST_DRIVER = "test-driver"  # its binary, named after its package
BINARIES = ("kubelet", TEST_DRIVER, *CONTAINERD_COMMANDS, "pause")
PLUGIN_SOURCE = Path(__file__).resolve().parents[2] / "tools" / "dra-sim-plugin"
PLUGIN_FILES = ("go.mod", "go.sum", "main.go", "sharing.go")
PLUGIN = "dra-sim-plugin"
# Debian packages a node needs: the program each must put on this machine
DEBIAN_PACKAGES = {
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "iptables": "/usr/sbin/iptables",
    "conntrack": "/usr/sbin/conntrack",
    "busybox-static": "/bin/busybox",
    "gcc": "/usr/bin/gcc",
    "libc6-dev": "/usr/lib/x86_64-linux-gnu/libc.a",
}
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = DEBIAN_PACKAGES["runc"]
BUSYBOX = DEBIAN_PACKAGES["busybox-static"]


def cache_dir() -> Path:
    """Where the node's binaries of the pinned versions are built and kept."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(json.dumps(_stamp(), sort_keys=True).encode()).hexdigest()[:8]
    name = f"node-kubernetes-{KUBERNETES_VERSION}-containerd-{CONTAINERD_VERSION}-{key}"
    return base / "dra-jupyter" / "k8s" / name


def bin_dir() -> Path:
    return cache_dir() / "bin"


def plugin_digest() -> str:
    """What the plugin's build depends on: its files, byte for byte."""
    sha = hashlib.sha256()
    for name in PLUGIN_FILES:
        sha.update(name.encode() + b"\0" + (PLUGIN_SOURCE / name).read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def plugin_binary() -> Path:
    return cache_dir() / f"plugin-{plugin_digest()}" / PLUGIN


def _stamp() -> dict[str, Any]:
    return {
        "kubernetes": KUBERNETES_VERSION,
        "containerd": CONTAINERD_VERSION,
        "binaries": list(BINARIES),
    }


def missing_packages() -> list[str]:
    return [name for name, path in DEBIAN_PACKAGES.items() if not Path(path).exists()]


def _binaries_built() -> bool:
    try:
        built = json.loads((cache_dir() / "stamp.json").read_text())
    except (OSError, ValueError):
        return False
    return built == _stamp() and all((bin_dir() / b).is_file() for b in BINARIES)


def is_built() -> bool:
    """True when every binary and the plugin of this source exist, the stamp names the pinned
    versions and the Debian packages are installed."""
    return _binaries_built() and plugin_binary().is_file() and not missing_packages()


def install_packages(log: TextIO = sys.stderr) -> None:
    """The Debian packages of :data:`DEBIAN_PACKAGES` that are missing, with apt-get (root)."""
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise TestenvError(
            "k8s-testenv build: a real node needs Debian's " + " ".join(missing) + ": run "
            f"`sudo apt-get install {' '.join(missing)}`, or the build as root"
        )
    log.write(f"k8s-testenv: apt-get install {' '.join(missing)}\n")
    log.flush()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", *missing],
    ):
        done = subprocess.run(command, check=False, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise TestenvError(
                f"k8s-testenv build: {' '.join(command)} failed:\n{done.stderr[-2000:]}"
            )


def _build_plugin(go: _Go) -> None:
    out = plugin_binary()
    if out.is_file():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    env = dict(go.env)
    go.env["GOFLAGS"] = "-mod=readonly"  # go.mod and go.sum are the pins
    try:
        go.run(["build", "-trimpath", "-o", str(partial), "."], PLUGIN_SOURCE, f"building {PLUGIN}")
    finally:
        go.env = env
    partial.rename(out)


def _build_from_kubernetes(go: _Go, root: Path, out: Path) -> None:
    """The kubelet, upstream's DRA test driver and the pause program, from the kubernetes
    module at :data:`KUBERNETES_VERSION`, into ``out``."""
    kube = root / "kubelet"
    kube.mkdir(exist_ok=True)
    # the control plane's module resolved already: its go.sum saves a download round
    built = control_plane_cache() / "kubernetes" / "go.sum"
    if built.is_file():
        shutil.copy(built, kube / "go.sum")
    (kube / "go.mod").write_text(
        f"module k8snode\n\ngo {GO_DIRECTIVE}\n\nrequire k8s.io/kubernetes {KUBERNETES_VERSION}\n"
    )
    info = json.loads(
        go.run(
            ["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
            kube,
            f"downloading k8s.io/kubernetes {KUBERNETES_VERSION}",
        )
    )
    module = kubernetes_module(Path(info["GoMod"]).read_text())
    (kube / "go.mod").write_text(module.replace("module k8stestenv", "module k8snode", 1))
    (kube / "tools.go").write_text(
        _tools_go(["k8s.io/kubernetes/cmd/kubelet", TEST_DRIVER_PACKAGE])
    )
    go.run(["mod", "tidy"], kube, "resolving the kubelet's modules (go mod tidy)")
    major, minor = KUBERNETES_VERSION.removeprefix("v").split(".")[:2]
    ldflags = (
        f"-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} "
        f"-X k8s.io/component-base/version.gitMajor={major} "
        f"-X k8s.io/component-base/version.gitMinor={minor}"
    )
    go.run(
        ["build", "-ldflags", ldflags, "-o", f"{out}/", "k8s.io/kubernetes/cmd/kubelet"],
        kube,
        "building the kubelet",
    )
    t0 = time.monotonic()
    go.run(
        ["build", "-ldflags", ldflags, "-o", f"{out}/", TEST_DRIVER_PACKAGE],
        kube,
        "building upstream's DRA test driver",
    )
    go.log.write(f"k8s-testenv: built {TEST_DRIVER_PACKAGE} in {time.monotonic() - t0:.0f} s\n")
    pause_c = Path(info["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    done = subprocess.run(
        ["gcc", "-Os", "-static", "-o", str(out / "pause"), str(pause_c)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise TestenvError(f"k8s-testenv build: gcc -static {pause_c} failed:\n{done.stderr}")


def build(*, force: bool = False, log: TextIO = sys.stderr) -> Path:
    """Build the node's binaries into :func:`bin_dir` unless they are there already; then
    remove the node caches it supersedes (:func:`prune`)."""
    root = cache_dir()
    with locked(root.parent / f"{root.name}.lock"):
        out = _build(root, force, log)
    prune(root, log)
    return out


# a node cache's name, as cache_dir() gives it now or gave it before it was keyed
NODE_CACHE = re.compile(r"node-kubernetes-v[0-9][0-9.]*-containerd-v[0-9][0-9.]*(-[0-9a-f]{8})?")


def superseded(current: Path) -> list[Path]:
    """The node caches beside ``current`` of other versions or keys, and their lock files:
    only names :data:`NODE_CACHE` matches, never ``current`` or its lock."""
    if not current.parent.is_dir():
        return []
    return sorted(
        entry
        for entry in current.parent.iterdir()
        if entry.name.removesuffix(".lock") != current.name
        and NODE_CACHE.fullmatch(entry.name.removesuffix(".lock"))
    )


def _in_use(cache: Path) -> bool:
    """A build holds its lock, or a process runs one of its programs (a node of it runs)."""
    lock = cache.parent / f"{cache.name}.lock"
    if lock.is_file():
        with lock.open("a") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(held, fcntl.LOCK_UN)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "exe").readlink().is_relative_to(cache):
                    return True
            except OSError:
                continue
    return False


def prune(current: Path, log: TextIO = sys.stderr) -> list[Path]:
    """Remove the node caches that ``current`` supersedes (:func:`superseded`), less any in
    use (:func:`_in_use`); what was removed."""
    removed = []
    for path in superseded(current):
        if path.is_dir() and not path.is_symlink():
            if _in_use(path):
                continue
            shutil.rmtree(path)
        elif path.name.endswith(".lock") and (path.parent / path.name[: -len(".lock")]).is_dir():
            continue  # its cache was kept (in use): so is its lock
        else:
            path.unlink()
        removed.append(path)
    if removed:
        log.write(f"k8s-testenv: removed {len(removed)} superseded node cache entries: ")
        log.write(", ".join(p.name for p in removed) + "\n")
    return removed


def _build(root: Path, force: bool, log: TextIO) -> Path:
    """:func:`build`'s work, its lock held."""
    install_packages(log)
    if is_built() and not force:
        return bin_dir()
    if _binaries_built() and not force:  # only the plugin's source changed
        root.mkdir(parents=True, exist_ok=True)
        _build_plugin(_Go(log, root / "build.log"))
        return bin_dir()
    start = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "build.log"
    log_path.write_text("")
    log.write(
        f"k8s-testenv: building the node (kubelet and DRA test driver {KUBERNETES_VERSION}, "
        f"containerd {CONTAINERD_VERSION}, {PLUGIN}) into {root} (once per machine; log: "
        f"{log_path})\n"
    )
    log.flush()
    go = _Go(log, log_path)
    out = bin_dir()
    out.mkdir(exist_ok=True)

    _build_from_kubernetes(go, root, out)

    containerd = root / "containerd"
    containerd.mkdir(exist_ok=True)
    (containerd / "go.mod").write_text(
        f"module containerdnode\n\ngo {GO_DIRECTIVE}\n\nrequire {CONTAINERD_MODULE} "
        f"{CONTAINERD_VERSION}\n"
    )
    commands = [f"{CONTAINERD_MODULE}/cmd/{c}" for c in CONTAINERD_COMMANDS]
    (containerd / "tools.go").write_text(_tools_go(commands))
    go.run(["mod", "tidy"], containerd, "resolving containerd's modules (go mod tidy)")
    go.run(
        [
            "build",
            "-tags",
            "no_btrfs",
            "-ldflags",
            f"-s -w -X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}",
            "-o",
            f"{out}/",
            *commands,
        ],
        containerd,
        "building containerd",
    )
    _build_plugin(go)
    missing = [b for b in BINARIES if not (out / b).is_file()]
    if missing:
        raise TestenvError(f"k8s-testenv build: the node's build left no {', '.join(missing)}")
    (root / "stamp.json").write_text(json.dumps(_stamp()))
    log.write(f"k8s-testenv: built the node in {time.monotonic() - start:.0f} s\n")
    return out

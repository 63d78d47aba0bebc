"""Building the test environment's binaries from the Go module proxy, at pinned versions.

``k8s.io/kubernetes`` cannot be ``go install``-ed (its go.mod replaces every ``k8s.io/*``
staging module with a local directory), so :func:`build` writes a throwaway module that
requires it and replaces each staging module with its published ``v0.X.Y``, then builds the
three commands; etcd gets a module of its own (its server and Kubernetes' etcd client would
otherwise be pushed to one version). Everything lives in a cache directory outside the
repository, ``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/k8s/<versions>/``, with a stamp of the
versions: a second build is a no-op. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

# Pinned versions: the newest Kubernetes release the Go module proxy serves, and the newest
# etcd 3.6 (the series Kubernetes 1.37 is tested with).
KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
GO_DIRECTIVE = "1.26.0"  # what k8s.io/kubernetes v1.37.2 and etcd v3.6.16 declare

GO_FALLBACKS = ("/usr/local/go/bin/go",)  # where the official archive installs Go
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
BINARIES = ("etcd", *KUBE_COMMANDS)


class TestenvError(Exception):
    """The control plane could not be built, started or stopped; the message says why."""

    __test__ = False  # not a pytest test class


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
def locked(path: Path) -> Iterator[None]:
    """One build at a time per cache directory (make test and a fixture may race): ``path``
    is the lock file, held (flock) while the block runs."""
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
    with locked(root.parent / f"{root.name}.lock"):
        if is_built() and not force:
            return bin_dir()
        start = time.monotonic()
        root.mkdir(parents=True, exist_ok=True)
        log_path = root / "build.log"
        log_path.write_text("")
        log.write(
            f"k8s-testenv: building Kubernetes {KUBERNETES_VERSION} and etcd {ETCD_VERSION} into "
            f"{root} (once per machine; about 5-15 minutes on 2 cores; log: {log_path})\n"
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

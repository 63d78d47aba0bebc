"""Building the upstream allocator harness (``tools/upstream-allocator``) from the Go module
proxy, at the versions its go.mod and go.sum pin.

The binary is kept outside the repository, in
``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/upstream-allocator/<digest>/``, where the digest
covers the harness's source, go.mod and go.sum: a second build of the same source is a
no-op, a changed source builds anew. The Go toolchain is found as for the control plane
(:func:`tests.k8s.k8sbuild.find_go`); the modules are those of ``k8s.io/kubernetes``
v1.37.2 (already in the module cache once the control plane is built). Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TextIO

from tests.k8s.k8sbuild import TestenvError, _Go, locked

SOURCE = Path(__file__).resolve().parents[2] / "tools" / "upstream-allocator"
FILES = ("go.mod", "go.sum", "main.go")
BINARY = "upstream-allocator"


def digest() -> str:
    """What the build depends on: the harness's files, byte for byte."""
    sha = hashlib.sha256()
    for name in FILES:
        sha.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dra-jupyter" / "upstream-allocator" / digest()


def binary() -> Path:
    return cache_dir() / BINARY


def is_built() -> bool:
    return binary().is_file()


def build(*, log: TextIO = sys.stderr) -> Path:
    """Build the harness into :func:`cache_dir` unless it is there; returns the binary."""
    root = cache_dir()
    with locked(root.parent / f"{root.name}.lock"):
        if is_built():
            return binary()
        root.mkdir(parents=True, exist_ok=True)
        log_path = root / "build.log"
        log_path.write_text("")
        log.write(f"upstream-allocator: building {SOURCE} into {root} (log: {log_path})\n")
        log.flush()
        go = _Go(log, log_path)
        partial = root / f"{BINARY}.partial"
        # -mod=readonly: go.mod and go.sum are the pins; a build never rewrites them
        go.env["GOFLAGS"] = "-mod=readonly"
        go.run(["build", "-trimpath", "-o", str(partial), "."], SOURCE, "building the harness")
        if not partial.is_file():
            raise TestenvError(f"upstream-allocator: go build left no {partial}")
        partial.rename(binary())
        return binary()


def main() -> int:
    try:
        print(build())
    except TestenvError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The kernel image of the real node (:data:`KERNEL`), written from what this machine runs the
project with, without any registry or download:

* the Python interpreter the venv is based on, at its own path (``sys.base_prefix``), with
  its shared library and the libraries that it and every extension module in the image
  need (``ldd``), at the paths ``ldd`` names;
* its standard library, less what a kernel never imports (tests, IDLE, tkinter, ensurepip,
  lib2to3, the static library of ``config-*``, the extension modules of tests and of
  tkinter) and less ``__pycache__`` (compiled in the
  container at the kernel's first start);
* in its ``site-packages``, the files (their ``RECORD``) of exactly the distributions of
  ipykernel's dependency closure among the venv's installed ones (extras left out), and the
  ``dra_jupyter`` package's modules from this checkout: the boot module is standard library
  only, and ``import dra_jupyter`` then works in the kernel; its own dependencies (pandas,
  jupyter_server, the Kubernetes client ...) are not there, so ``dra.request`` in such a
  kernel says what is missing;
* ``python3`` and ``python`` on ``PATH``, ``/tmp`` and an ``/etc/passwd`` of root.

The archive is cached in ``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/images/`` under a digest
of its inputs (every file's path, size and modification time, and this module), written once
and byte for byte the same from the same files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.k8s import images

KERNEL = "dra-jupyter.test/kernel:testenv"
ROOT_DISTRIBUTION = "ipykernel"
ROOT = Path(__file__).resolve().parents[2]
STDLIB_LEFT_OUT = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip")
STDLIB_LEFT_OUT_TOO = ("lib2to3", "config-")  # prefixes: config-3.11-x86_64-linux-gnu
# extension modules of the tests and of tkinter (which brings X11 and Tcl/Tk along)
DYNLOAD_LEFT_OUT = ("_tkinter", "_test", "_ctypes_test", "_xxtestfuzz", "xxlimited")
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dra-jupyter" / "images"


def prefix() -> Path:
    """The interpreter's installation (a venv's base)."""
    return Path(sys.base_prefix)


def version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def interpreter() -> Path:
    return prefix() / "bin" / f"python{version()}"


def stdlib() -> Path:
    return prefix() / "lib" / f"python{version()}"


def site_packages() -> str:
    """Where the distributions go in the image: the interpreter's own site-packages."""
    return f"{image_path(stdlib())}/site-packages"


def image_path(path: Path) -> str:
    return str(path).lstrip("/")


def distributions(root: str = ROOT_DISTRIBUTION) -> list[importlib.metadata.Distribution]:
    """``root`` and what it requires, transitively, as installed here (extras left out;
    markers evaluated for this interpreter), sorted by name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        dist = importlib.metadata.distribution(name)
        found[name] = dist
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[name] for name in sorted(found)]


def _distribution_entries(dist: importlib.metadata.Distribution) -> list[images.Entry]:
    """The files of ``dist``'s RECORD under site-packages (not its scripts, not compiled
    bytecode)."""
    entries = []
    base = Path(str(dist.locate_file(""))).resolve()
    for file in dist.files or ():
        path = Path(str(dist.locate_file(file))).resolve()
        if "__pycache__" in path.parts or not path.is_file():
            continue
        try:
            relative = path.relative_to(base)
        except ValueError:
            continue  # a script in the venv's bin/: not the kernel's
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        entries.append(images.Entry(f"{site_packages()}/{relative}", path, mode=mode))
    return entries


def _stdlib_entries() -> list[images.Entry]:
    entries = []
    base = stdlib()
    for top in sorted(base.iterdir()):
        if top.name in STDLIB_LEFT_OUT or top.name.startswith(STDLIB_LEFT_OUT_TOO):
            continue
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.name.startswith(DYNLOAD_LEFT_OUT):
                continue
            mode = 0o755 if path.suffix == ".so" else 0o644
            entries.append(images.Entry(image_path(path), path, mode=mode))
    return entries


def _package_entries() -> list[images.Entry]:
    """This checkout's ``dra_jupyter`` modules (not the built lab extension)."""
    package = ROOT / "dra_jupyter"
    return [
        images.Entry(f"{site_packages()}/{path.relative_to(ROOT)}", path, mode=0o644)
        for path in sorted(package.rglob("*"))
        if path.is_file()
        and (path.suffix == ".py" or path.name == "py.typed")
        and "__pycache__" not in path.parts
        and "labextension" not in path.relative_to(package).parts
    ]


LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def shared_libraries(programs: Iterable[Path]) -> list[Path]:
    """What ``ldd`` says ``programs`` load (the dynamic loader among them), sorted."""
    needed: set[Path] = set()
    programs = list(programs)
    for start in range(0, len(programs), 64):  # one ldd for many files
        said = subprocess.run(
            ["ldd", *map(str, programs[start : start + 64])],
            check=False,
            capture_output=True,
            text=True,
        ).stdout
        for line in said.splitlines():
            if "not found" in line:
                raise RuntimeError(f"kernel image: a library is missing here: {line.strip()}")
            if match := LDD_LINE.search(line):
                needed.add(Path(match.group(1)))
    return sorted(needed)


def entries() -> list[images.Entry]:
    """Every file of the kernel image (see the module)."""
    python = interpreter()
    found = [images.Entry(image_path(python), python)]
    bin_dir = image_path(python.parent)
    found += [images.Entry(f"{bin_dir}/{name}", link=python.name) for name in ("python3", "python")]
    found += _stdlib_entries()
    for dist in distributions():
        found += _distribution_entries(dist)
    found += _package_entries()
    programs = [python] + [e.source for e in found if e.source and e.source.suffix == ".so"]
    # those not in the image already (libpython is beside the interpreter; a wheel's own
    # libraries, found through its RPATH, are in its RECORD)
    taken = {e.source.resolve() for e in found if e.source}
    for library in shared_libraries(programs):
        if library.resolve() not in taken:
            found.append(images.Entry(image_path(library), library.resolve()))
            taken.add(library.resolve())
    found += [
        images.Entry("tmp", mode=0o1777),
        images.Entry("root", mode=0o700),
        images.Entry("etc/passwd", data=PASSWD, mode=0o644),
        images.Entry("etc/group", data=GROUP, mode=0o644),
    ]
    return found


def env() -> list[str]:
    return [f"PATH=/{image_path(interpreter().parent)}:/usr/bin:/bin", "HOME=/root"]


def digest(found: list[images.Entry]) -> str:
    """Of the image's inputs: each entry, with its source's size and modification time (a
    file changed here makes a new image), and the code that writes it."""
    sha = hashlib.sha256()
    for module in (Path(__file__), Path(images.__file__)):
        sha.update(module.read_bytes())
    for entry in sorted(found, key=lambda e: e.path):
        stat = entry.source.stat() if entry.source else None
        sha.update(
            json.dumps(
                [
                    entry.path,
                    entry.link,
                    entry.mode,
                    entry.data.decode() if entry.data else None,
                    str(entry.source) if entry.source else None,
                    stat.st_size if stat else None,
                    stat.st_mtime_ns if stat else None,
                ]
            ).encode()
        )
    sha.update(json.dumps(env()).encode())
    return sha.hexdigest()[:16]


def archive(cache: Path | None = None) -> Path:
    """The kernel image's archive, written if its inputs changed (older ones removed)."""
    cache = cache or cache_dir()
    found = entries()
    path = cache / f"kernel-{digest(found)}.tar"
    if path.is_file():
        return path
    started = time.monotonic()
    boot = ["python3", "-m", "dra_jupyter.kube.kernels.boot"]
    images.write_archive(path, KERNEL, found, boot, env())
    for old in cache.glob("kernel-*.tar"):
        if old != path:
            old.unlink(missing_ok=True)
    print(
        f"kernel image: {path} ({path.stat().st_size / 2**20:.0f} MiB) written in "
        f"{time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return path

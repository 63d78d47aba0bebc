"""GPU kernels on the real node (tests/k8s/node.py): the kernel image
(:mod:`tests.k8s.kernelimage`, written from this machine's interpreter and the venv's
ipykernel, no registry), and a real jupyter_server whose ``dra-kubernetes`` provisioner starts
a kernel in a pod there: run by the kubelet from that image, its devices prepared by the
simulated driver through CDI, its ZMQ ports reached at its address on the bridge.

The module has a control plane and a node of its own (as test_real_node.py: one node on a
machine at a time, so the two modules' nodes run one after the other).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.k8s import kernelimage

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a real node needs root (mounts, cgroups, iptables, chroot)"
)


@pytest.fixture(scope="module")
def kernel_archive() -> Path:
    return kernelimage.archive()


def _layer(archive: Path, into: Path) -> Path:
    """The image's one layer, unpacked into ``into``."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
        with tarfile.open(fileobj=tar.extractfile(f"blobs/sha256/{layer}")) as files:
            files.extractall(into, filter="fully_trusted")
    return into


@pytest.mark.pure
def test_the_kernel_image_holds_ipykernels_closure_and_nothing_of_the_venv_else() -> None:
    names = {canonicalize_name(d.metadata["Name"]) for d in kernelimage.distributions()}
    assert {"ipykernel", "ipython", "jupyter-client", "pyzmq", "tornado", "traitlets"} <= names
    assert not names & {"jupyter-server", "pandas", "kubernetes", "pytest", "jupyterlab"}
    paths = {e.path for e in kernelimage.entries()}
    site = kernelimage.site_packages()
    assert f"{site}/ipykernel/kernelapp.py" in paths
    assert f"{site}/dra_jupyter/kube/kernels/boot.py" in paths
    assert not any(p.startswith(f"{site}/pandas/") for p in paths)
    assert not any("__pycache__" in p for p in paths)
    stdlib = kernelimage.image_path(kernelimage.stdlib())
    assert f"{stdlib}/asyncio/events.py" in paths
    assert not any(p.startswith(f"{stdlib}/{n}/") for p in paths for n in ("test", "tkinter"))
    assert "lib64/ld-linux-x86-64.so.2" in paths  # what ldd named


def test_the_kernel_image_is_written_once_from_the_same_files(
    kernel_archive: Path, tmp_path: Path
) -> None:
    written = kernel_archive.stat().st_mtime_ns
    again = kernelimage.archive()
    assert again == kernel_archive
    assert again.stat().st_mtime_ns == written  # cached: not written again
    assert kernel_archive.parent == kernelimage.cache_dir()
    assert not kernel_archive.is_relative_to(kernelimage.ROOT)  # outside the repository
    elsewhere = kernelimage.archive(tmp_path)  # written anew, from the same files
    assert elsewhere.name == kernel_archive.name  # the same digest of its inputs
    assert _sha256(elsewhere) == _sha256(kernel_archive)  # the same bytes


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


@needs_root
def test_the_kernel_images_python_runs_ipykernel_with_nothing_of_this_machine(
    kernel_archive: Path, tmp_path: Path
) -> None:
    """The layer alone, as the root of a process (chroot, an environment of the image's):
    the interpreter, its libraries and the kernel's packages are all there."""
    root = _layer(kernel_archive, tmp_path / "root")
    code = "import ipykernel.kernelapp, dra_jupyter, sys; print(dra_jupyter.__file__)"
    done = subprocess.run(
        ["/usr/sbin/chroot", str(root), "python3", "-c", code],
        env=dict(e.split("=", 1) for e in kernelimage.env()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"/{kernelimage.site_packages()}/dra_jupyter/__init__.py"

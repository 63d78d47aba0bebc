"""Container images without a registry: OCI image archives written here from files of this
machine, for ``ctr images import`` (the real node's containerd; pods use
``imagePullPolicy: Never``).

* :data:`PAUSE`: the pause program built from the kubernetes module (:mod:`.nodebuild`), the
  sandbox image;
* :data:`BUSYBOX`: Debian's static busybox with a link per applet in ``/bin``, the test pods'.

An archive is one uncompressed layer, its config, a manifest and ``index.json`` whose
annotation ``io.containerd.image.name`` names the image; written byte for byte the same from
the same files (times and owners zeroed). Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAUSE = "dra-jupyter.test/pause:testenv"
BUSYBOX = "dra-jupyter.test/busybox:testenv"
# The applets the test pods' commands use; each is /bin/<name> -> busybox.
BUSYBOX_APPLETS = ("sh", "env", "cat", "echo", "sleep", "ls", "ip", "hostname", "true", "wget")


@dataclass(frozen=True)
class Entry:
    """A file of a layer: ``source`` copied to ``path``, or ``data``, or a symlink to
    ``link``, or (none of them) a directory."""

    path: str
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755
    data: bytes | None = None


def _ancestors(path: str) -> list[str]:
    parents = [str(p) for p in Path(path).parents]
    return [p for p in parents if p != "."]


def _write_layer(out: Any, entries: Sequence[Entry]) -> None:
    """The layer's tar into ``out``: every parent directory first (0755), then the entries
    sorted by path; times and owners zero."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        explicit = {e.path for e in entries}
        dirs = {a for e in entries for a in _ancestors(e.path)} - explicit
        for directory in sorted(dirs):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path)
            info.mode = entry.mode
            if entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                tar.addfile(info)
            elif entry.data is not None:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            elif entry.source is not None:
                info.size = entry.source.stat().st_size
                with entry.source.open("rb") as source:
                    tar.addfile(info, source)
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def _descriptor(media_type: str, blob: bytes, **extra: Any) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
        **extra,
    }


def write_archive(
    path: Path,
    name: str,
    entries: Sequence[Entry],
    cmd: Sequence[str],
    env: Sequence[str] = (),
) -> Path:
    """An OCI image archive at ``path`` of image ``name`` (``host/repo:tag``): one layer of
    ``entries``, ``cmd`` as its command, ``env`` its environment (``PATH=/bin`` unless
    given). The layer is written to a file beside ``path`` on the way (an image of a
    Python runtime is over 100 MB), which is then moved into place whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".image-") as scratch:
        layer = Path(scratch) / "layer.tar"
        with layer.open("wb") as out:
            _write_layer(out, entries)
        written = Path(scratch) / "image.tar"
        _write_image(written, name, layer, cmd, list(env) or ["PATH=/bin"])
        written.replace(path)
    return path


def _write_image(path: Path, name: str, layer: Path, cmd: Sequence[str], env: list[str]) -> None:
    layer_digest, layer_size = _sha256(layer), layer.stat().st_size
    layer_ref = {
        "mediaType": "application/vnd.oci.image.layer.v1.tar",
        "digest": "sha256:" + layer_digest,
        "size": layer_size,
    }
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": list(cmd), "Env": env, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [layer_ref],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                _descriptor(
                    "application/vnd.oci.image.manifest.v1+json",
                    manifest,
                    platform={"architecture": "amd64", "os": "linux"},
                    annotations={
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                )
            ],
        },
        sort_keys=True,
    ).encode()
    files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (config, manifest):
        files["blobs/sha256/" + hashlib.sha256(blob).hexdigest()] = blob
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("blobs/sha256/" + layer_digest)
        info.size, info.mode = layer_size, 0o644
        with layer.open("rb") as stream:
            tar.addfile(info, stream)


def pause_archive(path: Path, pause: Path) -> Path:
    return write_archive(path, PAUSE, [Entry("pause", pause)], ["/pause"])


def busybox_archive(path: Path, busybox: Path) -> Path:
    entries = [Entry("bin/busybox", busybox)]
    entries += [Entry(f"bin/{applet}", link="busybox") for applet in BUSYBOX_APPLETS]
    return write_archive(path, BUSYBOX, entries, ["/bin/sh"])

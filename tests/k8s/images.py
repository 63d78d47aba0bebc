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
    """A file of a layer: ``source`` copied to ``path`` (or a symlink to ``link``)."""

    path: str
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755


def _layer(entries: Sequence[Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(e.path).parent) for e in entries} - {"."})
        for directory in dirs:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path)
            info.mode = entry.mode
            if entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                tar.addfile(info)
            else:
                assert entry.source is not None
                data = entry.source.read_bytes()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _descriptor(media_type: str, blob: bytes, **extra: Any) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
        **extra,
    }


def write_archive(path: Path, name: str, entries: Sequence[Entry], cmd: Sequence[str]) -> Path:
    """An OCI image archive at ``path`` of image ``name`` (``host/repo:tag``): one layer of
    ``entries``, ``cmd`` as its command, ``PATH=/bin``."""
    layer = _layer(entries)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": list(cmd), "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()],
            },
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer)],
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
    for blob in (layer, config, manifest):
        files["blobs/sha256/" + hashlib.sha256(blob).hexdigest()] = blob
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def pause_archive(path: Path, pause: Path) -> Path:
    return write_archive(path, PAUSE, [Entry("pause", pause)], ["/pause"])


def busybox_archive(path: Path, busybox: Path) -> Path:
    entries = [Entry("bin/busybox", busybox)]
    entries += [Entry(f"bin/{applet}", link="busybox") for applet in BUSYBOX_APPLETS]
    return write_archive(path, BUSYBOX, entries, ["/bin/sh"])

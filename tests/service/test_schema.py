"""Every frame a real client and a real daemon exchange, for every op, validates against
``specification/service-protocol.schema.json``; and the schema's ops are the protocol's."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from typing import Any

import jsonschema

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.service import protocol
from dra_jupyter.service.client import Channel, ServiceBackend
from dra_jupyter.types import Owner
from tests.service.accounts import REPO, service

SCHEMA = json.loads((REPO / "specification" / "service-protocol.schema.json").read_text())


class Recording(Channel):
    """A real connection that keeps a copy of every frame each way."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.frames: list[Any] = []

    def _send(self, sock: socket.socket, frame: bytes) -> None:
        self.frames.append(json.loads(frame))
        super()._send(sock, frame)

    def _read(self, sock: socket.socket) -> dict[str, Any]:
        reply = super()._read(sock)
        self.frames.append(reply)
        return reply


def test_the_schema_names_every_op() -> None:
    assert SCHEMA["$defs"]["request"]["properties"]["op"]["enum"] == list(protocol.OPS)


def test_every_frame_of_every_op_validates() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    with service() as svc:
        channel = Recording(svc.socket)
        owner = Owner(user="ignored", host=socket.gethostname(), pid=0, kernel_id="k-1")
        backend = ServiceBackend(svc.socket, owner, channel=channel)
        backend.hello()
        classes = [c["metadata"]["name"] for c in backend.inventory().device_classes]
        claim = build_claim("", {"gpu": 1}, classes=classes)
        made = backend.allocate(claim, lease=60)
        backend.touch(made.name, 0)
        assert backend.activity(kernel_id="k-1", busy=True) == 1  # the claim's kernel
        assert backend.activity(name=made.name) == 1
        backend.claims(all_users=True)
        backend.holders()
        backend.waiting()
        assert backend.notices() == []  # nobody waits
        backend.record(made.name)
        backend.explain(claim)
        backend.adopt("k-1", owner, 0)
        backend.release(made.name, "idle")
        backend.released_at(made.name)
        assert backend.ended(made.name) is not None
        assert backend.metrics_source().sample((), 0.0)
        assert [i.claim for i in backend.usage_book(3600).intervals] == [made.name]
        backend.usage_book(float("inf"))
        assert backend.health_events() == []  # no NVML here: no watcher, an empty record
        backend.health_events(device="gpu-0")
        made_taint = backend.taint("gpu-1", "NoSchedule", "fan", "dra-jupyter/admin")  # root
        assert backend.untaint("gpu-1", "dra-jupyter/admin").removed is not None
        (kept,) = backend.taints(history=True)
        assert (kept.device, kept.user, kept.removed_by) == (made_taint.device, "root", "root")
        assert backend.taints() == []
        with contextlib.suppress(DraJupyterError):  # a refusal, for its frame
            backend.allocate(build_claim("", {"gpu": 9}, classes=classes), checked=True)
        for frame in (b"nonsense\n", b'{"v": 2, "id": 1, "op": "hello"}\n'):
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.connect(str(svc.socket))
            raw.sendall(frame)
            channel.frames.append(json.loads(raw.makefile("rb").readline()))
            raw.close()
        channel.close()
    ops = {f["op"] for f in channel.frames if "op" in f}
    assert ops == set(protocol.OPS)
    assert any(f.get("ok") is False for f in channel.frames)
    for frame in channel.frames:
        validator.validate(frame)
    records = [f["result"] for f in channel.frames if f.get("ok") and isinstance(f["result"], dict)]
    record_schema = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/record"}
    for record in [r for r in records if "owner" in r]:
        jsonschema.validate(record, record_schema, cls=jsonschema.Draft202012Validator)

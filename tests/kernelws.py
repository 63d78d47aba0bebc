"""A kernel's websocket as a notebook's client uses it (``/api/kernels/<id>/channels``): a
cell executed, a kernel_info asked. Used by tests/hub (a kernel behind JupyterHub's proxy)
and tests/k8s (a kernel in a pod); tornado's client is imported when a test calls."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tornado.websocket import WebSocketClientConnection


async def execute(url: str, token: str, code: str, *, deadline: float, answer: bool = True) -> str:
    """What ``code`` prints in the kernel whose channels are at ``url`` (``ws://...``),
    opened with ``token``; nothing, without waiting, unless ``answer``. Connecting, each
    message and the whole answer may take ``deadline`` seconds; an error in the cell, a
    closed websocket or no answer fails the test."""
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}}
    ws = await connect(url, token, deadline)
    msg_id = await _send(ws, "execute_request", content)
    printed = []
    end = time.monotonic() + deadline
    try:
        if not answer:
            return ""
        while time.monotonic() < end:
            raw = await asyncio.wait_for(ws.read_message(), deadline)
            assert raw is not None, "the kernel's websocket closed"
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = reply["header"]["msg_type"]
            if kind == "stream":
                printed.append(reply["content"]["text"])
            elif kind == "error":
                raise AssertionError(f"the kernel failed: {reply['content']}")
            elif kind == "status" and reply["content"]["execution_state"] == "idle":
                return "".join(printed)
        raise AssertionError(f"no answer from the kernel in {deadline}s")
    finally:
        _close(ws)


async def answers(url: str, token: str, within: float = 5.0) -> bool:
    """Whether the kernel whose channels are at ``url`` answers a kernel_info_request on a
    new websocket within ``within`` seconds (connecting may take 30)."""
    ws = await connect(url, token, 30)
    msg_id = await _send(ws, "kernel_info_request", {})
    end = time.monotonic() + within
    try:
        while time.monotonic() < end:
            try:
                raw = await asyncio.wait_for(ws.read_message(), end - time.monotonic())
            except TimeoutError:
                return False
            if raw is None:
                return False
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return True
        return False
    finally:
        _close(ws)


async def connect(url: str, token: str, timeout: float) -> WebSocketClientConnection:
    """A websocket of the server at ``url`` (``ws://...``), opened with ``token``."""
    from tornado.httpclient import HTTPRequest  # noqa: PLC0415  # the test's client only
    from tornado.websocket import websocket_connect  # noqa: PLC0415

    return await websocket_connect(
        HTTPRequest(url, headers={"Authorization": f"token {token}"}, request_timeout=timeout)
    )


async def _send(ws: WebSocketClientConnection, msg_type: str, content: dict[str, Any]) -> str:
    """Send a request on the shell channel; its msg_id (the parent of its replies)."""
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": msg_type,
        "username": "test",
        "session": uuid.uuid4().hex,
        "version": "5.3",
        "date": "",
    }
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    await ws.write_message(json.dumps({**message, "channel": "shell", "buffers": []}))
    return msg_id


def _close(ws: WebSocketClientConnection) -> None:
    ws.close()
    # the close handshake is not waited for: the connection goes with this loop
    stream = getattr(ws, "stream", None) or getattr(ws.protocol, "stream", None)
    if stream is not None:
        stream.close()

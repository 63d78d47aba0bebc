"""A real ipykernel (jupyter_client) with a temporary ledger and a simulated inventory,
and a client that keeps every IOPub message, so tests can look at widget traffic."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.browser.conftest import browser, page  # noqa: F401  # fixtures of the browser tests

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@dataclass
class Kernel:
    manager: KernelManager
    client: Any  # jupyter_client's BlockingKernelClient (untyped)
    iopub: list[dict[str, Any]] = field(default_factory=list)

    def send(self, code: str) -> str:
        """Start executing ``code``; returns the request's id (see :meth:`wait`)."""
        msg_id: str = self.client.execute(code)
        return msg_id

    def read_until(self, done: Any, tries: int = 2000) -> dict[str, Any]:
        """Read IOPub (keeping every message) until ``done(msg)``; returns that message."""
        for _ in range(tries):
            msg: dict[str, Any] = self.client.get_iopub_msg(timeout=120)
            self.iopub.append(msg)
            if done(msg):
                return msg
        raise AssertionError("the kernel did not send the message waited for")

    def wait(self, msg_id: str) -> dict[str, Any]:
        """Until the request is done; returns its execute_reply content."""
        self.read_until(
            lambda m: (
                m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"
                and m["parent_header"].get("msg_id") == msg_id
            )
        )
        for _ in range(100):
            reply: dict[str, Any] = self.client.get_shell_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == msg_id:
                content: dict[str, Any] = reply["content"]
                return content
        raise AssertionError("no execute_reply")

    def run(self, code: str) -> list[dict[str, Any]]:
        """Execute ``code``, which must succeed; returns its IOPub messages."""
        msg_id = self.send(code)
        start = len(self.iopub)
        reply = self.wait(msg_id)
        assert reply["status"] == "ok", reply
        return [m for m in self.iopub[start:] if m["parent_header"].get("msg_id") == msg_id]

    def value(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the kernel."""
        out = self.run(f"import json as _json; print(_json.dumps({expression}))")
        text = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream")
        return json.loads(text)

    def custom(self, comm_id: str, content: dict[str, Any]) -> str:
        """What a widget view's ``model.send(content)`` sends; returns the message id."""
        data = {"method": "custom", "content": content}
        msg = self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.client.shell_channel.send(msg)
        msg_id: str = msg["header"]["msg_id"]
        return msg_id

    def updates(self, comm_id: str) -> list[dict[str, Any]]:
        """The state updates the kernel sent for a widget, in order."""
        return [
            m["content"]["data"]["state"]
            for m in self.iopub
            if m["msg_type"] == "comm_msg"
            and m["content"]["comm_id"] == comm_id
            and m["content"]["data"].get("method") == "update"
        ]


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


@pytest.fixture
def kernel(ledger_path: Path) -> Iterator[Kernel]:
    env = {**os.environ, "DRA_JUPYTER_LEDGER": str(ledger_path)}
    env["DRA_JUPYTER_INVENTORY"] = "h200-8x"
    env.pop("DRA_JUPYTER_KERNEL_ID", None)
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        kernel = Kernel(manager, client)
        kernel.run("import dra_jupyter as dra")
        yield kernel
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


@pytest.fixture
def session(ledger_path: Path) -> Session:
    """Another process's view of the kernel's ledger (this test process)."""
    return Session(Settings(ledger=ledger_path, inventory="h200-8x"))

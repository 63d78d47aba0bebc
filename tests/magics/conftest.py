"""A real ipykernel per test module, with ``%load_ext dra_jupyter``, a temporary ledger
and a simulated inventory; helpers that run code in it and collect what it shows."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import ClaimRecord

TIMEOUT = 120  # seconds: a bound for a stuck kernel, not a measured time
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    return _ANSI.sub("", text)


@dataclass
class Outcome:
    """What one execution showed: the reply and every IOPub message for it."""

    reply: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.reply["content"]["status"])

    def stream(self, name: str) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.messages
            if m["msg_type"] == "stream" and m["content"]["name"] == name
        )

    @property
    def stdout(self) -> str:
        return self.stream("stdout")

    @property
    def stderr(self) -> str:
        return self.stream("stderr")

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [m["content"] for m in self.messages if m["msg_type"] == "error"]

    def error_lines(self) -> list[str]:
        """The traceback lines of every error shown, without colours."""
        return [plain(line) for e in self.errors for line in e["traceback"]]

    def results(self, mime: str = "text/plain") -> list[Any]:
        """The ``mime`` data of every execute_result and display_data."""
        return [
            m["content"]["data"][mime]
            for m in self.messages
            if m["msg_type"] in ("execute_result", "display_data") and mime in m["content"]["data"]
        ]

    @property
    def result(self) -> str:
        found = self.results()
        assert len(found) == 1, (found, self.messages)
        return str(found[0])


@dataclass
class Kernel:
    manager: KernelManager
    client: BlockingKernelClient
    ledger_path: Path

    def run(self, code: str) -> Outcome:
        messages: list[dict[str, Any]] = []
        reply = self.client.execute_interactive(
            code, timeout=TIMEOUT, output_hook=messages.append, allow_stdin=False
        )
        return Outcome(reply, messages)

    def ok(self, code: str) -> Outcome:
        outcome = self.run(code)
        assert outcome.status == "ok", (outcome.reply["content"], outcome.messages)
        return outcome

    def run_cell(self, code: str, cell_id: str) -> Outcome:
        """Run ``code`` as a notebook cell of that id runs: JupyterLab's execute requests
        carry the cell's id (``cellId``) in their metadata, a new request for each run."""
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}  # fmt: skip
        msg = self.client.session.msg("execute_request", content, metadata={"cellId": cell_id})
        self.client.shell_channel.send(msg)
        running = Running(self, msg["header"]["msg_id"])
        while True:
            found = running.next()
            if found["msg_type"] == "status" and found["content"]["execution_state"] == "idle":
                break
        while True:
            reply: dict[str, Any] = self.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == running.msg_id:
                return Outcome(reply, [m for m in running.messages if m["msg_type"] != "status"])

    def start(self, code: str, until: Callable[[dict[str, Any]], bool]) -> Running:
        """Execute ``code`` without waiting for it to end: until an IOPub message for it
        satisfies ``until``."""
        running = Running(self, self.client.execute(code))
        while not until(running.next()):
            pass
        return running

    def claims(self) -> list[ClaimRecord]:
        """The live claims, read from the ledger by this (the test) process."""
        return Ledger(self.ledger_path).read_claims()

    def complete(self, code: str, cursor: int | None = None) -> dict[str, Any]:
        msg_id = self.client.complete(code, len(code) if cursor is None else cursor)
        reply: dict[str, Any] = self.client.get_shell_msg(timeout=TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        content: dict[str, Any] = reply["content"]
        return content


@dataclass
class Running:
    """An execution in progress: its IOPub messages so far."""

    kernel: Kernel
    msg_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)

    def next(self) -> dict[str, Any]:
        while True:
            msg: dict[str, Any] = self.kernel.client.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") == self.msg_id:
                self.messages.append(msg)
                return msg

    def interrupt(self) -> Outcome:
        """Interrupt the kernel (SIGINT) and wait for the execution to end."""
        self.kernel.manager.interrupt_kernel()
        while True:
            msg = self.next()
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        while True:
            reply: dict[str, Any] = self.kernel.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == self.msg_id:
                return Outcome(reply, self.messages)


def printed(text: str) -> Callable[[dict[str, Any]], bool]:
    """``until`` for :meth:`Kernel.start`: the code printed ``text`` on stdout."""
    return lambda msg: msg["msg_type"] == "stream" and text in msg["content"]["text"]


def waiting(msg: dict[str, Any]) -> bool:
    """``until`` for :meth:`Kernel.start`: a request says it waits in line (on its claim
    card, or on stderr where there is no card)."""
    if msg["msg_type"] == "display_data":
        return "waiting" in str(msg["content"]["data"].get("text/plain", ""))
    return msg["msg_type"] == "stream" and "dra: waiting for" in msg["content"]["text"]


def start_kernel(ledger: Path, inventory: str, kernel_id: str = "") -> Kernel:
    """A kernel as a plain one (no Jupyter server) or, with ``kernel_id``, as one that a
    server with the dra-jupyter extension started."""
    env = {
        **os.environ,
        "DRA_JUPYTER_LEDGER": str(ledger),
        "DRA_JUPYTER_INVENTORY": inventory,
        "DRA_JUPYTER_POLL_INTERVAL": "0.05",
        "DRA_JUPYTER_KERNEL_ID": kernel_id,
    }
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT, env=env)
    kernel = Kernel(manager, client, ledger)
    kernel.ok("%load_ext dra_jupyter")
    return kernel


def kernel_fixture(inventory: str, kernel_id: str = "") -> Any:
    """A module-scoped fixture: one kernel for the module's tests, claims released after
    each test so that tests do not see each other's."""

    @pytest.fixture(scope="module")
    def module_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
        ledger = tmp_path_factory.mktemp("magics") / "ledger.sqlite"
        kernel = start_kernel(ledger, inventory, kernel_id)
        try:
            yield kernel
        finally:
            kernel.client.stop_channels()
            kernel.manager.shutdown_kernel(now=True)

    return module_kernel


@pytest.fixture
def kernel(module_kernel: Kernel) -> Iterator[Kernel]:
    yield module_kernel
    module_kernel.ok("import dra_jupyter as _dra; _dra.release_all(); del _dra")

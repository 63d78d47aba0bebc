"""A real ipykernel per test module, with ``%load_ext dra_jupyter``, a temporary ledger
and a simulated inventory; helpers that run code in it and collect what it shows."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from dra_jupyter.local.ledger import ClaimRecord, Ledger

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

    def claims(self) -> list[ClaimRecord]:
        """The live claims, read from the ledger by this (the test) process."""
        return Ledger(self.ledger_path).read_claims()

    def complete(self, code: str, cursor: int | None = None) -> dict[str, Any]:
        msg_id = self.client.complete(code, len(code) if cursor is None else cursor)
        reply: dict[str, Any] = self.client.get_shell_msg(timeout=TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        content: dict[str, Any] = reply["content"]
        return content


def start_kernel(ledger: Path, inventory: str) -> Kernel:
    env = {
        **os.environ,
        "DRA_JUPYTER_LEDGER": str(ledger),
        "DRA_JUPYTER_INVENTORY": inventory,
        "DRA_JUPYTER_POLL_INTERVAL": "0.05",
    }
    env.pop("DRA_JUPYTER_KERNEL_ID", None)
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT, env=env)
    kernel = Kernel(manager, client, ledger)
    kernel.ok("%load_ext dra_jupyter")
    return kernel


def kernel_fixture(inventory: str) -> Any:
    """A module-scoped fixture: one kernel for the module's tests, claims released after
    each test so that tests do not see each other's."""

    @pytest.fixture(scope="module")
    def module_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
        kernel = start_kernel(tmp_path_factory.mktemp("magics") / "ledger.sqlite", inventory)
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

"""``%dra status`` shows the line: this user's own waiting requests, each with its place
and why, and how many of others wait; real requests wait in threads of this (the test)
process while the kernel holds every device of the simulated machine."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from dra_jupyter.api import Claim, Session
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.magics.conftest import TIMEOUT, Kernel, kernel_fixture

module_kernel = kernel_fixture("h200-8x")


class Waits:
    """Requests that wait in line in threads, each as ``user``; released at the end."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.threads: list[threading.Thread] = []
        self.claims: list[Claim] = []
        self.errors: list[BaseException] = []

    def session(self, user: str) -> Session:
        owner = dataclasses.replace(Owner.current(), user=user)
        return Session(Settings(ledger=self.kernel.ledger_path, inventory="h200-8x"), owner=owner)

    def wait(self, user: str, gpus: int) -> None:
        """A request of ``user`` for ``gpus`` GPUs that waits in line, once it does."""
        session = self.session(user)
        before = len(session.waiting())

        def request() -> None:
            try:
                self.claims.append(session.request(gpu=gpus, timeout="10m", apply_env=False))
            except BaseException as err:  # the test reports it
                self.errors.append(err)

        thread = threading.Thread(target=request, daemon=True)
        thread.start()
        self.threads.append(thread)
        until(lambda: len(session.waiting()) > before or bool(self.errors))
        assert not self.errors, self.errors

    def end(self) -> None:
        """Each wait ends with its devices once the kernel releases its claims."""
        for thread in self.threads:
            thread.join(TIMEOUT)
        for claim in self.claims:
            claim.release()
        assert not self.errors, self.errors


def until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT  # a bound for a stuck wait, not a measured time
    while not done():
        assert time.monotonic() < deadline, "the request never waited in line"
        time.sleep(0.05)


@pytest.fixture
def waits(kernel: Kernel) -> Iterator[Waits]:
    kernel.ok("c = %dra request gpu=8")  # every device held: requests wait
    line = Waits(kernel)
    try:
        yield line
    finally:
        kernel.ok("c.release()")
        line.end()


def test_status_shows_your_waiting_requests_and_how_many_others_wait(
    kernel: Kernel, waits: Waits
) -> None:
    me = Owner.current().user  # the kernel's user: this process's
    waits.wait("bob", 2)
    waits.wait(me, 2)  # behind bob's, same request
    waits.wait("carol", 1)  # another request shape: first in its own line
    text = kernel.ok("%dra status").result
    lines = text.splitlines()
    assert lines[2].split()[:3] == [kernel.claims()[0].name, "gpu-0,", "gpu-1,"]
    assert lines[3].startswith("you wait in line: #2 for gpu=2, ")
    assert lines[3].endswith(" so far: behind bob's same request, made earlier")
    assert lines[4] == "2 requests of other users wait too; dra.waiting() shows the line"
    assert len(lines) == 5
    html = kernel.ok("%dra status").results("text/html")
    assert len(html) == 1 and "behind bob&#x27;s same request" in html[0], html


def test_status_says_others_wait_when_you_do_not(kernel: Kernel, waits: Waits) -> None:
    waits.wait("bob", 1)
    lines = kernel.ok("%dra status").result.splitlines()
    assert lines[-1] == "1 request of another user waits; dra.waiting() shows the line"
    assert not any(line.startswith("you wait") for line in lines)

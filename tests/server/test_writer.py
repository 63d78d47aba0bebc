"""The server's writer: calls in order on one thread, those queued together committed in one
batch, every answer given only after its batch's commit (dra_jupyter/server/writer.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest

from dra_jupyter.server.writer import Writer


class Batches:
    """A ``batch()`` that records which calls ran in which batch, and can fail its commit."""

    def __init__(self) -> None:
        self.done: list[list[str]] = []
        self.current: list[str] | None = None
        self.fail_commit = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self.current = []
        yield
        ran, self.current = self.current, None
        if self.fail_commit:
            raise OSError("disk full")
        self.done.append(ran)

    def call(self, name: str, result: Any = None) -> Any:
        assert self.current is not None, "a call ran outside a batch"
        self.current.append(name)
        return result


def test_calls_queued_while_a_batch_runs_share_the_next_commit() -> None:
    batches = Batches()
    writer = Writer(batches, most=16)
    started, go = threading.Event(), threading.Event()

    def first() -> str:
        batches.call("first")
        started.set()
        go.wait()
        return "first"

    futures: list[Future[Any]] = [writer.submit(first)]
    started.wait()
    futures += [writer.submit(partial(batches.call, f"next-{i}", i)) for i in range(5)]
    assert not any(f.done() for f in futures)  # nothing answered before its commit
    go.set()
    assert [f.result(timeout=60) for f in futures] == ["first", 0, 1, 2, 3, 4]
    writer.shutdown()
    assert batches.done == [["first"], [f"next-{i}" for i in range(5)]]


def test_a_batch_holds_at_most_most_calls() -> None:
    batches = Batches()
    writer = Writer(batches, most=2)
    started, go = threading.Event(), threading.Event()

    def block_call() -> None:
        batches.call("block")
        started.set()
        go.wait()

    block = writer.submit(block_call)
    started.wait()
    rest = [writer.submit(partial(batches.call, str(i))) for i in range(5)]
    go.set()
    for f in [block, *rest]:
        f.result(timeout=60)
    writer.shutdown()
    assert batches.done == [["block"], ["0", "1"], ["2", "3"], ["4"]]


def test_a_failed_commit_fails_the_calls_that_succeeded_and_keeps_their_own_errors() -> None:
    batches = Batches()
    writer = Writer(batches)
    started, go = threading.Event(), threading.Event()

    def block_call() -> None:
        started.set()
        go.wait()

    block = writer.submit(block_call)
    started.wait()

    def refused() -> None:
        raise ValueError("refused by itself")

    ok = writer.submit(lambda: batches.call("ok", 1))
    own = writer.submit(refused)
    batches.fail_commit = True
    go.set()
    with pytest.raises(OSError, match="disk full"):
        block.result(timeout=60)
    with pytest.raises(OSError, match="disk full"):
        ok.result(timeout=60)
    with pytest.raises(ValueError, match="refused by itself"):
        own.result(timeout=60)
    batches.fail_commit = False
    assert writer.submit(lambda: batches.call("later", 2)).result(timeout=60) == 2
    writer.shutdown()


def test_a_batch_that_cannot_begin_fails_its_calls() -> None:
    @contextmanager
    def broken() -> Iterator[None]:
        raise OSError("cannot open the ledger")
        yield  # pragma: no cover

    writer = Writer(broken)
    with pytest.raises(OSError, match="cannot open"):
        writer.submit(lambda: 1).result(timeout=60)
    writer.shutdown()


def test_shutdown_runs_what_is_queued_and_refuses_more() -> None:
    batches = Batches()
    writer = Writer(batches)
    futures = [writer.submit(partial(batches.call, str(i), i)) for i in range(3)]
    writer.shutdown()
    assert [f.result(timeout=0) for f in futures] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="shut down"):
        writer.submit(lambda: None)

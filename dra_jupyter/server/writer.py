"""The server's writer: one thread that runs the blocking calls that write, in order, and
commits the calls queued together as one (a group commit).

Each call the loop hands over while a batch runs waits for the next; the next batch takes
every call waiting (at most ``most``) and runs them one after the other inside one
``batch()`` (locally one ledger transaction, a savepoint per call: a call that fails is
rolled back alone). The callers get their answers only after that commit: a 201 means
committed, as when each call committed alone, but one fsync serves many requests. If the
commit fails, every call of the batch that had succeeded gets the commit's error (nothing
of it was written); a call that failed by itself keeps its own error.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Callable[[], Any], "Future[Any]"]


class Writer:
    """Runs submitted calls on one thread (they never overlap), in batches of at most
    ``most`` calls, each batch inside ``batch()``."""

    def __init__(
        self,
        batch: Callable[[], AbstractContextManager[None]],
        *,
        most: int = 16,
        name: str = "dra-ledger",
    ) -> None:
        self._batch = batch
        self.most = most
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn``; its future is resolved once the batch it ran in is committed."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("dra_jupyter: the writer is shut down")
            if not self._started:
                self._thread.start()
                self._started = True
            self._queue.put((fn, future))
        return future

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread (and wait for it)."""
        with self._lock:
            self._closed = True
            started = self._started
            self._queue.put(None)
        if started:
            self._thread.join()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            stop = False
            while len(jobs) < self.most:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                jobs.append(more)
            self._run_batch(jobs)
            if stop:
                return

    def _run_batch(self, jobs: list[_Job]) -> None:
        done: list[tuple[Future[Any], Any, BaseException | None]] = []
        try:
            with self._batch():
                for fn, future in jobs:
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        done.append((future, fn(), None))
                    except BaseException as err:  # the caller's: handed over
                        done.append((future, None, err))
        except BaseException as err:  # the commit failed: nothing was written
            for future, _, own in done:
                future.set_exception(own if own is not None else err)
            for _, future in jobs:  # not run: the batch could not begin
                if not future.done() and future.set_running_or_notify_cancel():
                    future.set_exception(err)
            return
        for future, result, error in done:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

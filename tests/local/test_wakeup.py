"""The hand-off between processes of one ledger: a release wakes the waiter in line of
another process at once (:mod:`dra_jupyter.local.wakeup`), the line keeps its order, sockets
left behind are removed, and where the wake-up folder cannot be used waiters poll as before.

The waiters are real processes (``python -m tests.local.worker queue ...``). A waiter that
polls once an hour can only be served within the test's bounds by a wake-up; no test
measures how soon.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.wakeup import SOCKET_SUFFIX, Bell, wake_folder
from dra_jupyter.types import Owner
from tests.local.worker import WorkerProcess, claim_for, gpu_inventory

ALL_GPUS = json.dumps({"gpu": 8})
HOUR = "3600"  # a waiter's poll interval: only a wake-up serves it within a test


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a socket's path has at most 107 bytes, and pytest's
    ``tmp_path`` can be longer with the socket's name."""
    with tempfile.TemporaryDirectory(prefix="dj-") as folder:
        yield Path(folder)


def waiter_count(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM waiters").fetchone()[0])


def sockets(ledger: Path) -> list[str]:
    folder = wake_folder(ledger)
    return sorted(p.name for p in folder.glob(f"*{SOCKET_SUFFIX}")) if folder.is_dir() else []


def holder(ledger: Path, workers: list[WorkerProcess]) -> WorkerProcess:
    """A process that holds every GPU of the test inventory until told to release."""
    worker = WorkerProcess("hold", str(ledger), "gpu", ALL_GPUS, "0")
    workers.append(worker)
    held = worker.event()
    assert held["event"] == "held", held
    return worker


def queued(
    ledger: Path, workers: list[WorkerProcess], poll: str = HOUR, spec: str = ALL_GPUS
) -> WorkerProcess:
    """A process that waits in line for ``spec`` (every GPU; trying again every ``poll``
    seconds, and when woken); returned once it waits."""
    worker = WorkerProcess("queue", str(ledger), "gpu", spec, "600", poll)
    workers.append(worker)
    waiting = worker.event()
    assert waiting["event"] == "waiting", waiting
    return worker


def test_a_release_wakes_the_waiter_of_another_process(
    short_dir: Path, workers: list[WorkerProcess]
) -> None:
    path = short_dir / "ledger.sqlite"
    Ledger(path)
    first = holder(path, workers)
    second = queued(path, workers)
    assert len(sockets(path)) == 1  # the waiter listens
    assert oct(wake_folder(path).stat().st_mode & 0o777) == oct(0o700)

    first.send("release")
    assert first.event()["event"] == "released"
    held = second.event()
    assert held["event"] == "held", held
    assert len(held["devices"]) == 8
    assert sockets(path) == []  # served: its socket is gone
    assert waiter_count(path) == 0
    second.send("release")
    assert second.wait() == 0


def test_the_line_keeps_its_order_when_woken(short_dir: Path, workers: list[WorkerProcess]) -> None:
    """Both waiters wake at the release; the first in line is served, the second stays
    second (it is served at the next release)."""
    path = short_dir / "ledger.sqlite"
    Ledger(path)
    first = holder(path, workers)
    early = queued(path, workers)
    late = WorkerProcess("queue", str(path), "gpu", ALL_GPUS, "600", HOUR)
    workers.append(late)
    assert late.event() == {"event": "waiting", "position": 2, "pid": late.pid}

    first.send("release")
    held = early.event()
    assert held["event"] == "held", held
    backend = LocalBackend(gpu_inventory(), Ledger(path), Owner.current())
    owners = {r.owner.pid for r in backend.claims(all_users=True)}
    assert owners == {early.pid}
    assert waiter_count(path) == 1  # the late one still waits

    early.send("release")
    held = late.event()
    assert held["event"] == "held", held
    late.send("release")
    assert late.wait() == 0


def test_the_next_in_line_is_woken_when_the_first_is_served(
    short_dir: Path, workers: list[WorkerProcess]
) -> None:
    """Two waiters for 4 GPUs each: the release wakes both, the second stays behind the
    first, and is served once the first is (woken by it, where it tried too early)."""
    path = short_dir / "ledger.sqlite"
    Ledger(path)
    first = holder(path, workers)
    half = json.dumps({"gpu": 4})
    early = queued(path, workers, spec=half)
    late = queued(path, workers, spec=half)
    first.send("release")
    held = {w.pid: w.event() for w in (early, late)}
    assert {e["event"] for e in held.values()} == {"held"}, held
    assert set(held[early.pid]["devices"]).isdisjoint(held[late.pid]["devices"])
    for w in (early, late):
        w.send("release")
        assert w.wait() == 0


def test_what_moves_the_line_rings_once_committed(short_dir: Path) -> None:
    """A waiter leaving the line, a release and a reclaim ring after their commit; a new
    waiter, a claim made, or a release rolled back do not."""
    inventory = gpu_inventory()
    ledger = Ledger(short_dir / "ledger.sqlite")
    backend = LocalBackend(inventory, ledger, Owner.current())
    listener = ledger.bell.listen()
    assert listener is not None
    with listener:
        with ledger.transaction() as conn:
            waiter = Ledger.enqueue(conn, "shape", Owner.current(), 1.0)
        record = backend.allocate(claim_for(inventory, {"gpu": 1}))
        assert not listener.wait(0)
        with ledger.transaction() as conn:
            Ledger.dequeue(conn, waiter)
            assert not listener.wait(0)  # not before the commit
        assert listener.wait(0)
        with contextlib.suppress(RuntimeError), ledger.transaction() as conn:
            Ledger.delete(conn, record, "user")
            raise RuntimeError("rolled back")
        assert not listener.wait(0)
        assert [r.name for r in backend.claims()] == [record.name]
        assert backend.release(record.name)
        assert listener.wait(0)
        leased = backend.allocate(claim_for(inventory, {"gpu": 1}), lease=0.001)
        with ledger.transaction() as conn:
            assert Ledger.reclaim(conn, leased.created + 1) == [(leased, "expired")]
        assert listener.wait(0)


def test_sockets_left_by_gone_processes_are_removed(
    short_dir: Path, workers: list[WorkerProcess]
) -> None:
    path = short_dir / "ledger.sqlite"
    Ledger(path)
    first = holder(path, workers)
    killed = queued(path, workers)
    killed.kill()  # SIGKILL: its socket stays behind
    left = wake_folder(path) / f"1-left{SOCKET_SUFFIX}"  # bound, then closed unremoved
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(left))
    assert len(sockets(path)) == 2

    first.send("release")  # rings: nobody holds those sockets
    assert first.event() == {"event": "released", "command": "release", "found": True}
    assert first.wait() == 0
    assert sockets(path) == []


def test_a_waiter_tries_again_when_a_lease_runs_out(
    short_dir: Path, workers: list[WorkerProcess]
) -> None:
    """Nobody rings when a lease runs out: the waiter's sleep ends then (its try reclaims
    the claim), not at its next poll an hour later."""
    path = short_dir / "ledger.sqlite"
    inventory = gpu_inventory()
    backend = LocalBackend(inventory, Ledger(path), Owner.current())
    leased = backend.allocate(claim_for(inventory, {"gpu": 8}), lease=8.0)
    second = queued(path, workers)
    held = second.event()
    assert held["event"] == "held", held
    assert [(r.name, r.reason) for r in backend.ledger.releases()] == [(leased.name, "expired")]
    second.send("release")
    assert second.wait() == 0


def test_a_waiter_that_listens_is_woken_and_a_ring_without_waiters_is_harmless(
    short_dir: Path,
) -> None:
    path = short_dir / "ledger.sqlite"
    bell = Bell(path)
    assert bell.ring() == 0  # no folder yet
    listener = bell.listen()
    assert listener is not None
    with listener:
        assert not listener.wait(0)
        assert bell.ring() == 1
        assert bell.ring() == 1
        assert listener.wait(0)  # both rings read at once
        assert not listener.wait(0)
        assert listener.path.exists()
    assert not listener.path.exists()
    assert bell.ring() == 0


@pytest.mark.parametrize("how", ["a file", "open to others", "a link"])
def test_an_unusable_wake_folder_leaves_waiters_polling(
    short_dir: Path, workers: list[WorkerProcess], how: str
) -> None:
    path = short_dir / "ledger.sqlite"
    Ledger(path)
    folder = wake_folder(path)
    if how == "a file":
        folder.write_text("not a folder")
    elif how == "open to others":
        folder.mkdir()
        folder.chmod(0o777)
    else:
        (short_dir / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(short_dir / "elsewhere")
    assert Bell(path).listen() is None

    first = holder(path, workers)
    second = queued(path, workers, poll="0.05")  # polls: no wake-up reaches it
    first.send("release")
    held = second.event()
    assert held["event"] == "held", held
    second.send("release")
    assert second.wait() == 0
    assert sockets(path) == []


def test_a_path_too_long_for_a_socket_leaves_waiters_polling(short_dir: Path) -> None:
    deep = short_dir / ("d" * 100)
    deep.mkdir()
    assert Bell(deep / "ledger.sqlite").listen() is None

"""The ledger's kept connections, its batches (a group commit) and reads that do not wait
for the write lock.

Another connection stands for another process wherever only SQLite's locks matter; a
forked child and a subprocess are used where the process itself does."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dra_jupyter.errors import AllocationError, LedgerError
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger, LedgerBusyError
from tests.local.test_ledger import INVENTORY, claim, owner, record


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


def names(path: Path) -> set[str]:
    """The claims another connection sees (committed ones only)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM claims")}


@contextlib.contextmanager
def lock_held(path: Path) -> Iterator[None]:
    """Another connection holds the write lock inside the block."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


def test_a_batch_commits_its_transactions_together(ledger: Ledger) -> None:
    with ledger.batch():
        with ledger.transaction() as conn:
            Ledger.insert(conn, record("c1", owner("alice")))
        with ledger.transaction() as conn:
            Ledger.insert(conn, record("c2", owner("alice"), device="gpu-1"))
        assert {r.name for r in ledger.read_claims()} == {"c1", "c2"}  # its own writes
        assert names(ledger.path) == set()  # nobody else sees them before the commit
    assert names(ledger.path) == {"c1", "c2"}


def test_a_failed_transaction_in_a_batch_is_rolled_back_alone(ledger: Ledger) -> None:
    with ledger.batch():
        with ledger.transaction() as conn:
            Ledger.insert(conn, record("c1", owner("alice")))
        with pytest.raises(sqlite3.IntegrityError), ledger.transaction() as conn:
            Ledger.insert(conn, record("c2", owner("alice"), device="gpu-1"))
            Ledger.insert(conn, record("c1", owner("bob")))  # the name is taken
        with pytest.raises(AllocationError), ledger.transaction() as conn:
            Ledger.insert(conn, record("c3", owner("alice"), device="gpu-2"))
            raise AllocationError("changed its mind")
    assert names(ledger.path) == {"c1"}


def test_a_batch_that_fails_writes_nothing(ledger: Ledger) -> None:
    with pytest.raises(RuntimeError), ledger.batch():
        with ledger.transaction() as conn:
            Ledger.insert(conn, record("c1", owner("alice")))
        raise RuntimeError("the writer stopped")
    assert names(ledger.path) == set()
    with ledger.transaction() as conn:  # and the ledger goes on
        Ledger.insert(conn, record("c2", owner("alice")))
    assert names(ledger.path) == {"c2"}


def test_allocations_in_one_batch_see_each_other(ledger: Ledger) -> None:
    backend = LocalBackend(INVENTORY, ledger, owner("alice"))
    with ledger.batch():
        made = [backend.allocate(claim({"gpu": 1})) for _ in range(4)]
    devices = [r.device_keys[0] for r in made]
    assert len(set(devices)) == 4
    assert names(ledger.path) == {r.name for r in made}


def test_a_transaction_that_must_not_wait_fails_at_once_on_a_held_lock(ledger: Ledger) -> None:
    with (
        lock_held(ledger.path),
        pytest.raises(LedgerBusyError),
        ledger.transaction(wait=False) as conn,
    ):
        Ledger.insert(conn, record("c1", owner("alice")))
    assert names(ledger.path) == set()
    with ledger.transaction(wait=False) as conn:  # free again: it writes
        Ledger.insert(conn, record("c1", owner("alice")))
    assert names(ledger.path) == {"c1"}


def test_a_read_sweep_neither_waits_for_the_lock_nor_keeps_what_is_due(ledger: Ledger) -> None:
    alive = owner("alice")
    expired = replace(record("old", alive, device="gpu-1"), lease_expires=1.0)
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("live", alive))
        Ledger.insert(conn, expired)
    backend = LocalBackend(INVENTORY, ledger, alive)
    with lock_held(ledger.path):
        swept = backend.sweep(None, 1000.0, set(), wait=False)
        assert [r.name for r in swept.kept] == ["live"]  # the expired one is left out
        assert swept.released == []  # not released yet: the lock is another's
        without_release = backend.sweep(None, 1000.0, set(), wait=False)
        assert [r.name for r in without_release.kept] == ["live"]
    assert names(ledger.path) == {"live", "old"}
    swept = backend.sweep(None, 1000.0, set(), wait=False)
    assert [(r.name, reason) for r, reason in swept.released] == [("old", "expired")]
    assert names(ledger.path) == {"live"}


def test_a_sweep_with_nothing_to_release_does_not_take_the_lock(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("live", owner("alice")))
    backend = LocalBackend(INVENTORY, ledger, owner("alice"))
    quick = Ledger(ledger.path, busy_timeout=0.01)
    with lock_held(ledger.path):  # a sweep that waited would fail after its busy timeout
        swept = LocalBackend(INVENTORY, quick, owner("alice")).sweep(None, 1000.0, set())
    assert [r.name for r in swept.kept] == ["live"]
    assert backend.sweep(None, 1000.0, set()).released == []


def test_a_kept_connection_is_not_used_by_a_forked_child(ledger: Ledger) -> None:
    with ledger.transaction() as conn:  # the parent keeps its connection
        Ledger.insert(conn, record("parent", owner("alice")))
    pid = os.fork()
    if pid == 0:  # the child: its own connection, the parent's untouched
        code = 1
        try:
            with ledger.transaction() as conn:
                Ledger.insert(conn, record("child", owner("alice"), device="gpu-1"))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert {r.name for r in ledger.read_claims()} == {"parent", "child"}
    with ledger.transaction() as conn:  # the parent's connection still works
        Ledger.delete(conn, record("child", owner("alice")), "user")
    assert names(ledger.path) == {"parent"}


def test_a_ledger_moved_away_is_not_read_through_a_kept_connection(ledger: Ledger) -> None:
    with ledger.transaction() as conn:  # this thread keeps its connection
        Ledger.insert(conn, record("old", owner("alice")))
    moved = ledger.path.with_name("moved-" + ledger.path.name)
    for side in [ledger.path, *ledger.path.parent.glob(ledger.path.name + "-*")]:
        side.rename(side.with_name("moved-" + side.name))
    Ledger(ledger.path)  # a new, empty ledger there (as the README advises)
    assert ledger.read_claims() == []
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("new", owner("alice")))
    assert names(ledger.path) == {"new"}
    assert names(moved) == {"old"}


def test_a_lock_held_past_the_busy_timeout_is_a_ledger_error(ledger: Ledger) -> None:
    quick = Ledger(ledger.path, busy_timeout=0.05)
    with (
        lock_held(ledger.path),
        pytest.raises(LedgerError, match="held its lock for more than"),
        quick.transaction() as conn,
    ):
        Ledger.insert(conn, record("c1", owner("alice")))
    assert names(ledger.path) == set()

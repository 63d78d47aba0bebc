"""The durable claim ledger: one SQLite file (WAL) that every process on the machine shares.

Every allocation and release is one ``BEGIN IMMEDIATE`` transaction: it takes the write
lock first, reads all live claims, decides, and writes, so two processes can never hand
out the same device. SQLite's atomic commit makes a claim either fully there or not at
all, even when a process is killed with SIGKILL mid-way (``synchronous=FULL`` keeps it
across power loss too).

Tables: ``claims`` (live claims), ``waiters`` (the FIFO queue of requests waiting for
devices), ``releases`` (why, when and, since schema version 2, which claim as it was and
with what message claims ended), ``meta`` (schema version, name sequence),
``damaged_claims`` (rows of ``claims`` that could not be read, moved aside as they were),
``usage`` (since schema version 3: the usage book, one row per claim interval,
:mod:`~dra_jupyter.local.book`), ``taints`` (since schema version 4: taints admins put on
devices by hand, and those they took off, :mod:`~dra_jupyter.local.taints`),
``health_events`` (since schema version 5: GPUs the health watcher took out, with the
claims that held them, :mod:`~dra_jupyter.local.health`), ``claim_activity`` and
``reclaim_notices`` (since schema version 7: reclaim under pressure,
:mod:`~dra_jupyter.local.notices`).

What can go wrong, and what each raises or does:

* a file that is not a dra-jupyter ledger (another program's SQLite file, a file that is
  not SQLite, a schema version newer than :data:`SCHEMA_VERSION`): :class:`LedgerError`,
  checked before anything in the file is changed (not even its journal mode);
* a full disk, a file or folder that cannot be written, a damaged file, an I/O error, a
  lock held too long: :class:`LedgerError` with advice that fits the cause (SQLite's own
  error is its ``__cause__``); a transaction that fails leaves the ledger as it was;
* a damaged row of a claim: reported once, by claim name, as a :class:`DraJupyterWarning`,
  and moved aside (:mod:`~dra_jupyter.local.claims`).

What the ledger holds is in modules of its own: :mod:`~dra_jupyter.local.schema` (the
tables, the migrations from older versions, the checks that a file is a ledger),
:mod:`~dra_jupyter.local.claims` (the live claims' rows) and
:mod:`~dra_jupyter.local.releases` (the history), and so are its connections, transactions
and batches (:mod:`~dra_jupyter.local.connections`). This module opens the file, reclaims,
and keeps the queue; what frees devices wakes the queue's waiters in every process
(:mod:`~dra_jupyter.local.wakeup`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

from dra_jupyter.accounting.book import Interval
from dra_jupyter.errors import LedgerError
from dra_jupyter.local import book as _book
from dra_jupyter.local import claims as _claims
from dra_jupyter.local import health as _health
from dra_jupyter.local import notices as _notices
from dra_jupyter.local import releases as _releases
from dra_jupyter.local import schema
from dra_jupyter.local import taints as _taints
from dra_jupyter.local.claims import DamagedRowError, owner_from, record_from_row, report_damage
from dra_jupyter.local.connections import Connections, LedgerBusyError, freed
from dra_jupyter.local.releases import Release
from dra_jupyter.local.schema import SCHEMA_VERSION
from dra_jupyter.local.wakeup import Bell
from dra_jupyter.model.health import HealthTaint
from dra_jupyter.sharing.reclaim import Notice
from dra_jupyter.types import ClaimRecord, DeviceTaint, HealthEvent, Owner, process_start_time

# One sampler's report of a claim: its name, seconds active, idle and unknown since the last
# report, and joules (None: no energy counter).
Activity = tuple[str, float, float, float, float | None]


class Ledger:
    """A SQLite ledger at ``path``. Each thread keeps one connection between calls
    (:class:`~dra_jupyter.local.connections.Connections`: fork-safe, reopened when the file
    is replaced)."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 30.0, synchronous: str = "FULL"
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.bell = Bell(self.path)  # wakes the waiters of every process on this ledger
        # the file's connections (synchronous: FULL but in the daemon, DaemonLedger)
        self.connections = Connections(self.path, busy_timeout, self.bell, synchronous=synchronous)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerError(
                f"ledger {self.path}: cannot create its folder: {err.strerror}; "
                "choose another path (DRA_JUPYTER_LEDGER)"
            ) from err
        with self._reading(wal=False) as conn:  # nothing is changed before this check
            version, complete = schema.check_ours(conn, self.path)
        if complete and version == SCHEMA_VERSION:  # opened without waiting for the write lock
            # May this process write it (not a read-only file or mount)? A write that
            # changes nothing says so; where another writer holds the lock now, the first
            # real write tells instead.
            with contextlib.suppress(LedgerBusyError), self.transaction(wait=False) as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
            return
        # A new file, or one of an older version (or missing tables): one transaction brings
        # it to this version, so a process killed half-way leaves it as it was.
        with self.transaction() as conn:
            self._prepare(conn)

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Inside the write transaction: bring the file to this schema version
        (:func:`~dra_jupyter.local.schema.prepare`)."""
        schema.prepare(conn, self.path)

    def _reading(self, *, wal: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        """A connection for reads (no transaction); SQLite's errors become LedgerError
        (:meth:`~dra_jupyter.local.connections.Connections.reading`)."""
        return self.connections.reading(wal=wal)

    def transaction(self, *, wait: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        """An exclusive write transaction: committed on success, rolled back on any error
        (SQLite's errors of the file or the disk become :class:`LedgerError`); a savepoint
        inside this thread's :meth:`batch`. ``wait=False``: :class:`LedgerBusyError` at once
        where another connection holds the write lock. A commit that freed devices or moved
        the line (:func:`~dra_jupyter.local.connections.freed`) wakes the waiters of every
        process on the ledger (:meth:`~dra_jupyter.local.connections.Connections.transaction`)."""
        return self.connections.transaction(wait=wait)

    def batch(self) -> AbstractContextManager[None]:
        """Group every :meth:`transaction` of this thread inside into one write transaction,
        committed (one fsync) at the end, each a savepoint of it: a group commit. Other
        processes wait for the write lock meanwhile, so keep batches short
        (:meth:`~dra_jupyter.local.connections.Connections.batch`)."""
        return self.connections.batch()

    # --- claims ------------------------------------------------------------------------------

    # What a transaction does to the claims and the history (its connection the first
    # argument): :mod:`~dra_jupyter.local.claims` and :mod:`~dra_jupyter.local.releases`.
    claims = staticmethod(_claims.claims)
    next_name = staticmethod(_claims.next_name)
    insert = staticmethod(_claims.insert)
    set_owner = staticmethod(_claims.set_owner)

    @staticmethod
    def delete(
        conn: sqlite3.Connection,
        record: ClaimRecord,
        reason: str,
        now: float | None = None,
        message: str | None = None,
        by: str | None = None,
    ) -> None:
        """Release a claim (:func:`~dra_jupyter.local.releases.delete`; ``by``: the user who
        released it, None where dra-jupyter did by its rules), with its warning under
        pressure and its reported activity (:func:`~dra_jupyter.local.notices.forget`); its
        devices are free once the transaction commits, which wakes the waiters."""
        _releases.delete(conn, record, reason, now, message, by)
        _notices.forget(conn, record.name)
        freed(conn)

    def read_claims(self) -> list[ClaimRecord]:
        with self._reading() as conn:
            return self.claims(conn)

    @classmethod
    def claims_in(cls, path: str | Path, *, busy_timeout: float = 30.0) -> list[ClaimRecord]:
        """The live claims of the ledger file at ``path``, of this schema version or any
        earlier one, read without changing the file (not migrated, not even its journal
        mode): to import another process's ledger. Refused like :class:`Ledger` refuses
        (another program's file, a newer version)."""
        file = Path(path)
        with Connections(file, busy_timeout, Bell(file)).reading(wal=False) as conn:
            version, _complete = schema.check_ours(conn, file)
            return [] if version is None else cls.claims(conn)

    def touch(self, name: str, now: float | None = None) -> bool:
        """Record activity on a claim; False if it no longer exists."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE claims SET last_activity = ? WHERE name = ?",
                (time.time() if now is None else now, name),
            )
            return cur.rowcount > 0

    def under_pressure(self) -> bool:
        """Whether a request waits, for reclaim under pressure
        (:func:`~dra_jupyter.local.notices.pending`): a read, without the write lock."""
        with self._reading() as conn:
            return _notices.pending(conn)

    def reclaim_notices(self) -> dict[str, Notice]:
        """The warnings of reclaim under pressure in force, by claim."""
        with self._reading() as conn:
            return _notices.notices(conn)

    def releases(self, limit: int = 100) -> list[Release]:
        """The latest releases, newest first; damaged rows of the history are left out."""
        with self._reading() as conn:
            return _releases.latest(conn, limit)

    def released(self, name: str) -> Release | None:
        """The latest release of the claim ``name`` (whichever process released it), or None
        when the history has none (or only a damaged one)."""
        with self._reading() as conn:
            return _releases.latest_of(conn, name)

    # --- the usage book ----------------------------------------------------------------------

    def usage(
        self,
        since: float,
        until: float,
        *,
        user: str | None = None,
        weigh: _book.Weigh | None = None,
    ) -> list[Interval]:
        """The book's intervals that overlap ``[since, until]`` (``user``'s only, where
        named); ``weigh``: a device's worth where its row did not record it."""
        with self._reading() as conn:
            return _book.intervals(conn, since, until, user=user, weigh=weigh)

    def add_activity(
        self,
        claim: str,
        active_s: float,
        idle_s: float,
        unknown_s: float = 0.0,
        energy_j: float | None = None,
    ) -> bool:
        """Add a sampler's report of a claim's GPU use (seconds active, idle, unknown since
        its last report, and joules) to its interval; False when the book has none."""
        with self.transaction() as conn:
            return _book.add_activity(conn, claim, active_s, idle_s, unknown_s, energy_j)

    def add_activities(self, reports: Iterable[Activity]) -> list[bool]:
        """Many reports (one sampling tick's, ``(claim, active_s, idle_s, unknown_s,
        energy_j)`` each) in one transaction: one commit per tick, not per claim."""
        with self.transaction() as conn:
            return [_book.add_activity(conn, *report) for report in reports]

    @classmethod
    def reclaim(cls, conn: sqlite3.Connection, now: float) -> list[tuple[ClaimRecord, str]]:
        """Release claims whose owner process is gone or whose lease ran out; drop the
        waiters of gone processes. Returns what was released and why."""
        released = []
        for record in cls.claims(conn):
            if record.lease_expires is not None and record.lease_expires <= now:
                reason = "expired"
            elif not record.owner.is_alive():
                reason = "kernel-shutdown" if record.owner.kernel_id else "reclaimed"
            else:
                continue
            cls.delete(conn, record, reason, now)
            released.append((record, reason))
        for row in conn.execute("SELECT id, owner FROM waiters").fetchall():
            try:
                alive = owner_from(row["owner"]).is_alive()
            except DamagedRowError as damage:  # a place in line of nobody: it would block
                report_damage(conn, f"waiter {row['id']}", damage.problem, "dropped from the queue")
                alive = False
            if not alive:  # its place is the next one's: they may try now
                conn.execute("DELETE FROM waiters WHERE id = ?", (row["id"],))
                _notices.waiter_gone(conn, row["id"])
                freed(conn)
        return released

    # --- taints ------------------------------------------------------------------------------

    def taint(
        self, device: str, key: str, effect: str, reason: str, now: float, *, by: str | None = None
    ) -> DeviceTaint:
        """Put an admin's taint on ``device`` (:func:`~dra_jupyter.local.taints.add`;
        ``by``: the admin, where not this process's user: the service's caller)."""
        with self.transaction() as conn:
            return _taints.add(conn, device, key, effect, reason, now, by=by)

    def untaint(self, device: str, key: str, now: float, *, by: str | None = None) -> DeviceTaint:
        """Take it off, recording who and when (:func:`~dra_jupyter.local.taints.remove`)."""
        with self.transaction() as conn:
            removed = _taints.remove(conn, device, key, now, by=by)
            freed(conn)  # the device may be given again: waiters may try now
            return removed

    def taints(self, *, history: bool = False) -> list[DeviceTaint]:
        """The live taints (``history``: the removed ones too), oldest first."""
        with self._reading() as conn:
            return _taints.listed(conn, history=history)

    # --- health ------------------------------------------------------------------------------

    def take_out(self, devices: list[str], taint: HealthTaint, now: float) -> HealthEvent | None:
        """A GPU failed: taint it and its partitions, and record the event with the claims
        that hold them now, in one transaction (:func:`~dra_jupyter.local.health.take_out`)."""
        with self.transaction() as conn:
            return _health.take_out(conn, devices, taint, now, self.claims(conn))

    def health_events(self, device: str | None = None) -> list[HealthEvent]:
        """The record of the devices' health, oldest first (``device``: one GPU's)."""
        with self._reading() as conn:
            return _health.events(conn, device)

    # --- the queue ---------------------------------------------------------------------------

    @staticmethod
    def enqueue(conn: sqlite3.Connection, shape: str, owner: Owner, now: float) -> int:
        """Take a place in line for ``owner``; the place lives while the process that waits
        does: a detached owner's (the CLI's claims live by their lease, not its pid) is tied
        to this process, which is the one waiting, so that a killed waiter leaves the line."""
        if owner.pid <= 0:
            owner = dataclasses.replace(
                owner, pid=os.getpid(), start_time=process_start_time(os.getpid())
            )
        cur = conn.execute(
            "INSERT INTO waiters (shape, owner, created) VALUES (?, ?, ?)",
            (shape, json.dumps(owner.to_dict()), now),
        )
        assert cur.lastrowid is not None  # an INSERT into a rowid table always has one
        return cur.lastrowid

    @staticmethod
    def position(conn: sqlite3.Connection, shape: str, waiter: int | None) -> int:
        """1-based place in the queue of its shape (for a newcomer: the place it would take)."""
        if waiter is None:
            row = conn.execute("SELECT COUNT(*) FROM waiters WHERE shape = ?", (shape,)).fetchone()
        else:
            row = conn.execute(
                "SELECT COUNT(*) FROM waiters WHERE shape = ? AND id < ?", (shape, waiter)
            ).fetchone()
        return int(row[0]) + 1

    def waiters(self) -> list[tuple[str, Owner, float]]:
        """``(shape, owner, since)`` of every request waiting now, oldest first; a damaged
        row is left out (the next reclaim drops it)."""
        with self._reading() as conn:
            rows = conn.execute("SELECT shape, owner, created FROM waiters ORDER BY id").fetchall()
        out: list[tuple[str, Owner, float]] = []
        for row in rows:
            try:
                owner, since = (
                    owner_from(row["owner"]),
                    _claims.time_column(row["created"], "created"),
                )
            except DamagedRowError:
                continue
            out.append((str(row["shape"]), owner, float(since or 0)))
        return out

    @staticmethod
    def dequeue(conn: sqlite3.Connection, waiter: int) -> None:
        """Take a waiter out of the queue (served, or given up): the next of its shape goes
        first from now on, so its commit wakes the waiters. Nobody gives way to it any more:
        the warnings for it are withdrawn."""
        conn.execute("DELETE FROM waiters WHERE id = ?", (waiter,))
        _notices.waiter_gone(conn, waiter)
        freed(conn)


__all__ = [
    "SCHEMA_VERSION",
    "Ledger",
    "LedgerBusyError",
    "Release",
    "record_from_row",
]

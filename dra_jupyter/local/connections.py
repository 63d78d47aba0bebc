"""The ledger's connections (:class:`Connections`): the file opened, one connection kept per
thread between calls, transactions, savepoints and batches, and SQLite's errors of the file or
the disk as :class:`~dra_jupyter.errors.LedgerError` with advice that fits their cause.

A kept connection is fork-safe (a forked child opens its own and never closes its parent's)
and opened again when the file or its -shm was replaced or removed, or after any error of
SQLite's. A transaction takes the write lock itself (``BEGIN IMMEDIATE``, tried again every
0.2-2 ms), not by SQLite's busy handler, and its commit rings the ledger's
:class:`~dra_jupyter.local.wakeup.Bell` where it freed devices or moved the line
(:func:`freed`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dra_jupyter.errors import LedgerError
from dra_jupyter.local.schema import NEW_LEDGER
from dra_jupyter.local.wakeup import Bell

# Connections a forked child inherited from its parent: kept referenced, so that the
# child's garbage collector never closes them (closing would checkpoint the parent's WAL).
_FORKED: list[sqlite3.Connection] = []
# A thread's kept connection: the connection, the pid that opened it, the file's identity.
_Kept = tuple[sqlite3.Connection, int, tuple[int, int, int] | None]


def _ledger_error(path: Path, err: sqlite3.Error, busy_timeout: float) -> LedgerError | None:
    """What a SQLite error means for the user, with advice that fits its cause; None for
    errors that are not the file's or the disk's (a constraint, a bug: they stay as
    they are)."""
    if not (isinstance(err, sqlite3.OperationalError) or type(err) is sqlite3.DatabaseError):
        return None
    name = getattr(err, "sqlite_errorname", "") or ""
    text = str(err)
    if name == "SQLITE_FULL" or "disk is full" in text:
        what, advice = (
            "the disk is full",
            "free space on it, or choose another path (DRA_JUPYTER_LEDGER); the ledger "
            "was not changed",
        )
    elif name.startswith(("SQLITE_READONLY", "SQLITE_PERM")) or "readonly" in text:
        what, advice = (
            "cannot write it",
            "let this user write the file and its folder (SQLite keeps -wal and -shm files "
            "beside it), mount the file system read-write, or choose another path "
            "(DRA_JUPYTER_LEDGER)",
        )
    elif name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        what, advice = (
            "cannot open the file",
            "check that its folder exists and this user may read and write it and the file, "
            "or choose another path (DRA_JUPYTER_LEDGER)",
        )
    elif name == "SQLITE_NOTADB" or "not a database" in text:
        what, advice = "cannot open it as a SQLite database", NEW_LEDGER
    elif name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        what, advice = "the file is damaged", NEW_LEDGER
    elif name.startswith("SQLITE_IOERR") or "I/O error" in text:
        what, advice = (
            "the file system failed to read or write it",
            "check the disk, or choose another path (DRA_JUPYTER_LEDGER)",
        )
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        what, advice = (
            f"another process held its lock for more than {busy_timeout:g}s",
            "try again; if it stays locked, find the process that holds the file open",
        )
    else:
        what, advice = "cannot use it", NEW_LEDGER
    return LedgerError(f"ledger {path}: {what} ({text}); {advice}")


class LedgerConnection(sqlite3.Connection):
    """A ledger connection that remembers whether its transaction freed devices or moved
    the line (:func:`freed`): the ledger rings its :class:`~dra_jupyter.local.wakeup.Bell`
    once that transaction commits."""

    freed = False


def freed(conn: sqlite3.Connection) -> None:
    """Mark ``conn``'s transaction as one that freed devices or moved the line: its commit
    wakes the waiters (a mark on a transaction that is rolled back is dropped; one on a
    savepoint rolled back inside a batch costs the waiters one try)."""
    if isinstance(conn, LedgerConnection):
        conn.freed = True


def _take_freed(conn: sqlite3.Connection) -> bool:
    """Whether ``conn``'s transaction was marked by :func:`freed`; the mark is dropped."""
    if not isinstance(conn, LedgerConnection) or not conn.freed:
        return False
    conn.freed = False
    return True


class LedgerBusyError(LedgerError):
    """A transaction that was asked not to wait (``wait=False``) met another writer's lock.
    Internal: callers that ask not to wait catch it (a read answers without writing)."""


class Connections:
    """The connections of the ledger file at ``path``: each thread keeps one between calls
    (:meth:`_connection`); a commit that freed devices rings ``bell``. ``synchronous``:
    SQLite's synchronous mode of the WAL connections (``FULL``: a commit survives a power
    loss; ``NORMAL``: a crash of the process only, the daemon's choice)."""

    def __init__(
        self, path: Path, busy_timeout: float, bell: Bell, *, synchronous: str = "FULL"
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self._shm = Path(f"{self.path}-shm")  # made once: stat() at every call
        self.busy_timeout = busy_timeout
        self._kept = threading.local()
        self.bell = bell

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """SQLite's errors of the file or the disk become :class:`LedgerError`."""
        try:
            yield
        except sqlite3.Error as err:
            translated = _ledger_error(self.path, err, self.busy_timeout)
            if translated is None:
                raise
            raise translated from err

    def _connect(self, *, wal: bool = True) -> sqlite3.Connection:
        with self._translated():
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                factory=LedgerConnection,
            )
        try:
            with self._translated():
                conn.row_factory = sqlite3.Row
                if wal:
                    self._wal(conn)
                    conn.execute(f"PRAGMA synchronous={self.synchronous}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _identity(self) -> tuple[int, int, int] | None:
        """The ledger file and its shared-memory index as the file system has them now
        (None when either is gone): a kept connection is used only while they are the
        ones it opened."""
        try:
            db, shm = self.path.stat(), self._shm.stat()
        except OSError:
            return None
        return db.st_dev, db.st_ino, shm.st_ino

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, kept between calls: opening a WAL database and
        closing the last connection to it (which checkpoints and deletes the WAL, with
        their fsyncs) cost several milliseconds, more than a transaction. A new one is
        opened in a forked child (a connection must not cross ``fork``), when the file
        or its -shm was replaced or removed, and after any error of SQLite's."""
        kept: _Kept | None = getattr(self._kept, "conn", None)
        pid = os.getpid()
        if kept is not None and kept[1] == pid and kept[0].in_transaction:
            yield kept[0]  # inside this thread's transaction (a batch): it sees what it wrote
            return
        if kept is not None and (kept[1] != pid or kept[2] is None or kept[2] != self._identity()):
            self._drop()
            kept = None
        if kept is None:
            conn = self._connect()
            kept = self._kept.conn = (conn, pid, self._identity())
        conn = kept[0]
        try:
            yield conn
        except (sqlite3.IntegrityError, LedgerBusyError):
            raise  # a constraint, another writer's lock: the connection is fine
        except (sqlite3.Error, LedgerError):
            self._drop()
            raise
        finally:
            if self._kept.conn is kept and conn.in_transaction:  # a rollback that failed
                self._drop()

    def _drop(self) -> None:
        """Forget this thread's kept connection (the next call opens a new one): closed,
        or, in a forked child, kept unused (it is the parent's)."""
        kept: _Kept | None = getattr(self._kept, "conn", None)
        self._kept.conn = None
        self._kept.no_busy_wait = None
        if kept is None:
            return
        if kept[1] != os.getpid():
            _FORKED.append(kept[0])
            return
        with contextlib.suppress(sqlite3.Error):
            kept[0].close()

    @contextmanager
    def reading(self, *, wal: bool = True) -> Iterator[sqlite3.Connection]:
        """A connection for reads (no transaction); SQLite's errors become LedgerError."""
        if wal:
            with self._connection() as conn, self._translated():
                if getattr(self._kept, "no_busy_wait", None) is conn and not conn.in_transaction:
                    conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                    self._kept.no_busy_wait = None
                yield conn
            return
        conn = self._connect(wal=wal)
        try:
            with self._translated():
                yield conn
        finally:
            conn.close()

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL. Switching needs a moment of exclusive access, which SQLite does not
        wait for (the busy timeout does not apply): retry for a bounded time."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextmanager
    def transaction(self, *, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """An exclusive write transaction: committed on success, rolled back on any error
        (SQLite's errors of the file or the disk become :class:`LedgerError`).

        Inside this thread's :meth:`batch` it is a savepoint of the batch's transaction
        instead: rolled back alone on an error, committed with the batch. ``wait=False``:
        raise :class:`LedgerBusyError` at once, instead of waiting up to ``busy_timeout``,
        when another connection holds the write lock. A commit of a transaction that freed
        devices or moved the line (:func:`freed`) wakes the waiters of every process on
        the ledger (:mod:`~dra_jupyter.local.wakeup`)."""
        batch: sqlite3.Connection | None = getattr(self._kept, "batch", None)
        if batch is not None:
            with self._savepoint(batch):
                yield batch
            return
        with self._connection() as conn, self._translated():
            self._begin(conn, wait=wait)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite rolls back by itself on some errors
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            finally:
                rung = _take_freed(conn)
        if rung:  # committed: the line may move now
            self.bell.ring()

    def _begin(self, conn: sqlite3.Connection, *, wait: bool) -> None:
        """``BEGIN IMMEDIATE``: take the write lock, trying again every 0.2-2 ms for up to
        ``busy_timeout`` while another connection holds it (not at all with ``wait=False``).
        SQLite's own busy handler sleeps up to 100 ms between tries, so a waiter would
        often sleep long after the lock was free again: under load, two servers on one
        ledger waited up to 1.7 s that way."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.0002
        # SQLite's busy handler off: left off after the transaction (a PRAGMA costs tens of
        # microseconds, as much as a small transaction), and set again before a read
        # (reading); within a transaction that holds the write lock nothing waits anyway.
        if getattr(self._kept, "no_busy_wait", None) is not conn:
            conn.execute("PRAGMA busy_timeout = 0")
            self._kept.no_busy_wait = conn
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as err:
                if not getattr(err, "sqlite_errorname", "").startswith("SQLITE_BUSY"):
                    raise
                if not wait:
                    raise LedgerBusyError(
                        f"ledger {self.path}: another writer holds its lock"
                    ) from err
                if time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.002)

    @contextmanager
    def _savepoint(self, conn: sqlite3.Connection) -> Iterator[None]:
        with self._translated():
            if not conn.in_transaction:  # SQLite rolled the whole batch back (a full disk)
                raise LedgerError(
                    f"ledger {self.path}: the batch's transaction was rolled back by an "
                    "earlier error; nothing of it was written"
                )
            conn.execute("SAVEPOINT call")
            try:
                yield
                conn.execute("RELEASE call")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK TO call")
                        conn.execute("RELEASE call")
                raise

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group every :meth:`transaction` of this thread inside into one write
        transaction, committed (one fsync) at the end: each is a savepoint of it, rolled
        back alone on an error. Nothing done inside is durable, nor seen by other
        connections, before the batch ends without error: a caller answers the requests
        of a batch only then (a group commit). Other processes wait for the write lock
        while a batch runs, so keep batches short. Nested batches are one."""
        if getattr(self._kept, "batch", None) is not None:
            yield
            return
        with self.transaction() as conn:
            self._kept.batch = conn
            try:
                yield
            finally:
                self._kept.batch = None
            if not conn.in_transaction:  # SQLite rolled it back on an error inside
                raise LedgerError(
                    f"ledger {self.path}: the batch's transaction was rolled back by an "
                    "earlier error; nothing of it was written"
                )

"""The durable claim ledger: one SQLite file (WAL) that every process on the machine shares.

Every allocation and release is one ``BEGIN IMMEDIATE`` transaction: it takes the write
lock first, reads all live claims, decides, and writes, so two processes can never hand
out the same device. SQLite's atomic commit makes a claim either fully there or not at
all, even when a process is killed with SIGKILL mid-way (``synchronous=FULL`` keeps it
across power loss too).

Tables: ``claims`` (live claims), ``waiters`` (the FIFO queue of requests waiting for
devices), ``releases`` (why claims ended), ``meta`` (schema version, name sequence).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_jupyter.errors import LedgerError
from dra_jupyter.types import ClaimRecord, Owner

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
    name TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    allocation TEXT NOT NULL,
    created REAL NOT NULL,
    last_activity REAL NOT NULL,
    lease_expires REAL
);
CREATE TABLE IF NOT EXISTS waiters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    shape TEXT NOT NULL,
    owner TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    reason TEXT NOT NULL,
    time REAL NOT NULL
);
"""


def record_from_row(row: sqlite3.Row) -> ClaimRecord:
    """A claim as the ``claims`` table keeps it."""
    return ClaimRecord(
        name=row["name"],
        namespace=row["namespace"],
        owner=Owner.from_dict(json.loads(row["owner"])),
        spec=json.loads(row["spec"]),
        allocation=json.loads(row["allocation"]),
        created=row["created"],
        last_activity=row["last_activity"],
        lease_expires=row["lease_expires"],
    )


@dataclass(frozen=True)
class Release:
    name: str
    owner: Owner
    reason: str  # user, reclaimed (owner gone), expired (lease), idle, kernel-shutdown, ...
    time: float


class Ledger:
    """A SQLite ledger at ``path``; each method opens its own short connection (fork-safe)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerError(
                f"ledger {self.path}: cannot create its folder: {err.strerror}; "
                "choose another path (DRA_JUPYTER_LEDGER)"
            ) from err
        with self.transaction() as conn:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            ours = {"meta", "claims", "waiters", "releases", "sqlite_sequence"}
            if tables and "meta" not in tables:
                raise LedgerError(
                    f"ledger {self.path}: the file is a SQLite database of something else "
                    f"(tables {', '.join(sorted(tables - ours) or sorted(tables))}); "
                    "choose another path (DRA_JUPYTER_LEDGER)"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if int(row["value"]) != SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path}: schema version {row['value']}, this dra-jupyter "
                    f"reads version {SCHEMA_VERSION}; use another path or upgrade dra-jupyter"
                )

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.DatabaseError as err:
            raise self._unreadable(err) from err
        try:
            conn.row_factory = sqlite3.Row
            self._wal(conn)
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as err:
            conn.close()
            raise self._unreadable(err) from err
        return conn

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

    def _unreadable(self, err: sqlite3.DatabaseError) -> LedgerError:
        return LedgerError(
            f"ledger {self.path}: cannot open it as a SQLite database ({err}); "
            "move the file away or choose another path (DRA_JUPYTER_LEDGER)"
        )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An exclusive write transaction: committed on success, rolled back on any error."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    # --- claims ------------------------------------------------------------------------------

    @staticmethod
    def claims(conn: sqlite3.Connection) -> list[ClaimRecord]:
        rows = conn.execute("SELECT * FROM claims ORDER BY created, name").fetchall()
        return [record_from_row(r) for r in rows]

    def read_claims(self) -> list[ClaimRecord]:
        conn = self._connect()
        try:
            return self.claims(conn)
        finally:
            conn.close()

    @staticmethod
    def next_name(conn: sqlite3.Connection, prefix: str) -> str:
        """``<prefix>-<n>``: the next number of the prefix whose name is not taken."""
        key = f"seq:{prefix}"
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        seq = int(row["value"]) if row else 0
        while True:
            seq += 1
            name = f"{prefix}-{seq}"
            if conn.execute("SELECT 1 FROM claims WHERE name = ?", (name,)).fetchone() is None:
                break
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(seq)))
        return name

    @staticmethod
    def insert(conn: sqlite3.Connection, record: ClaimRecord) -> None:
        conn.execute(
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.name,
                record.namespace,
                json.dumps(record.owner.to_dict()),
                json.dumps(record.spec),
                json.dumps(record.allocation),
                record.created,
                record.last_activity,
                record.lease_expires,
            ),
        )

    @staticmethod
    def delete(
        conn: sqlite3.Connection, record: ClaimRecord, reason: str, now: float | None = None
    ) -> None:
        conn.execute("DELETE FROM claims WHERE name = ?", (record.name,))
        conn.execute(
            "INSERT INTO releases (name, owner, reason, time) VALUES (?, ?, ?, ?)",
            (
                record.name,
                json.dumps(record.owner.to_dict()),
                reason,
                time.time() if now is None else now,
            ),
        )

    @staticmethod
    def set_owner(conn: sqlite3.Connection, name: str, owner: Owner) -> None:
        """Hand a claim to another holder (the server, while it restarts the kernel)."""
        conn.execute(
            "UPDATE claims SET owner = ? WHERE name = ?", (json.dumps(owner.to_dict()), name)
        )

    def touch(self, name: str, now: float | None = None) -> bool:
        """Record activity on a claim; False if it no longer exists."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE claims SET last_activity = ? WHERE name = ?",
                (time.time() if now is None else now, name),
            )
            return cur.rowcount > 0

    def releases(self, limit: int = 100) -> list[Release]:
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT * FROM releases ORDER BY id DESC LIMIT ?", (limit,)
            ).fetchall()
        finally:
            conn.close()
        return [
            Release(r["name"], Owner.from_dict(json.loads(r["owner"])), r["reason"], r["time"])
            for r in rows
        ]

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
            if not Owner.from_dict(json.loads(row["owner"])).is_alive():
                conn.execute("DELETE FROM waiters WHERE id = ?", (row["id"],))
        return released

    # --- the queue ---------------------------------------------------------------------------

    @staticmethod
    def enqueue(conn: sqlite3.Connection, shape: str, owner: Owner, now: float) -> int:
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

    @staticmethod
    def dequeue(conn: sqlite3.Connection, waiter: int) -> None:
        conn.execute("DELETE FROM waiters WHERE id = ?", (waiter,))

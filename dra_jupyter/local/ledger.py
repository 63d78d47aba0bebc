"""The durable claim ledger: one SQLite file (WAL) that every process on the machine shares.

Every allocation and release is one ``BEGIN IMMEDIATE`` transaction: it takes the write
lock first, reads all live claims, decides, and writes, so two processes can never hand
out the same device. SQLite's atomic commit makes a claim either fully there or not at
all, even when a process is killed with SIGKILL mid-way (``synchronous=FULL`` keeps it
across power loss too).

Tables: ``claims`` (live claims), ``waiters`` (the FIFO queue of requests waiting for
devices), ``releases`` (why, when and, since schema version 2, which claim as it was and
with what message claims ended), ``meta`` (schema version, name sequence),
``damaged_claims`` (rows of ``claims`` that could not be read, moved aside as they were).

What can go wrong, and what each raises or does:

* a file that is not a dra-jupyter ledger (another program's SQLite file, a file that is
  not SQLite, a schema version newer than :data:`SCHEMA_VERSION`): :class:`LedgerError`,
  checked before anything in the file is changed (not even its journal mode);
* a full disk, a file or folder that cannot be written, a damaged file, an I/O error, a
  lock held too long: :class:`LedgerError` with advice that fits the cause (SQLite's own
  error is its ``__cause__``); a transaction that fails leaves the ledger as it was;
* a damaged row of a claim (owner or allocation not JSON, fields missing or of the wrong
  type, a claim that is not a valid ResourceClaim): reported once, by claim name, as a
  :class:`DraJupyterWarning`, and skipped; a write transaction moves it to
  ``damaged_claims`` (nothing is deleted), so every other claim, and every other user's
  command, keeps working. Its devices count as free from then on.

Schema versions: a ledger of an older version is migrated forward when first opened
(:data:`_MIGRATIONS`, one step per version, every step and the new version number in one
transaction: a process killed mid-way leaves it as it was). A new version adds its step
there and keeps a builder of real files of the version before it in ``tests/local``
(``ledger_v1.py``: that version's schema and statements verbatim), which the migration
tests use.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from dra_jupyter.errors import DraJupyterWarning, LedgerError, ObjectError, shown
from dra_jupyter.model.parse import parse_resource_claim
from dra_jupyter.types import ClaimRecord, Owner

SCHEMA_VERSION = 2
# The schema as a new ledger gets it (the latest version). An older ledger is brought up to
# it by _MIGRATIONS, one version at a time, all in one transaction (see Ledger._migrate).
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
    time REAL NOT NULL,
    claim TEXT,
    message TEXT
);
CREATE INDEX IF NOT EXISTS releases_by_name ON releases (name, id);
CREATE TABLE IF NOT EXISTS damaged_claims (
    name, namespace, owner, spec, allocation, created, last_activity, lease_expires,
    problem TEXT NOT NULL,
    time REAL NOT NULL
);
"""

# Version n to n + 1, by n. Each step only adds (columns, indexes, tables): what an older
# version wrote stays readable.
#
# 1 to 2: a release keeps the claim as it was (``claim``: namespace, spec, allocation, times,
# as JSON) and the words said to its user (``message``), so that any process, not only the
# one that released it, can say why a claim ended (GET claims/{name}, the service's
# ``record``). Releases of version 1 have neither (NULL): they still say when and why.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE releases ADD COLUMN claim TEXT",
        "ALTER TABLE releases ADD COLUMN message TEXT",
        "CREATE INDEX IF NOT EXISTS releases_by_name ON releases (name, id)",
    ),
}
_OURS = {"meta", "claims", "waiters", "releases", "damaged_claims", "sqlite_sequence"}
_CLAIM_COLUMNS = "name, namespace, owner, spec, allocation, created, last_activity, lease_expires"

# The history keeps the claim itself (``releases.claim``) of this many latest releases; older
# ones keep who, why, when and the message (a few bytes instead of a claim's kilobyte or two).
# Dropped PRUNE_EVERY releases at a time, by id range: the ledger stays bounded in size.
RELEASED_CLAIMS_KEPT = 10_000
PRUNE_EVERY = 256

_NEW_LEDGER = (
    "move the file away or choose another path (DRA_JUPYTER_LEDGER); dra-jupyter then "
    "starts a new, empty ledger there"
)


# Claims parsed from the ledger's rows, by the rows' values: the ledger is read at every
# call, and a claim's row rarely changes, so each is parsed (JSON, owner, the ResourceClaim)
# once. The same record object comes back for the same row, which lets the allocator's cache
# reuse what it parsed of it. Records are frozen; their dicts must not be changed.
_PARSED: dict[tuple[Any, ...], ClaimRecord] = {}
_PARSED_MOST = 4096

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
        what, advice = "cannot open it as a SQLite database", _NEW_LEDGER
    elif name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        what, advice = "the file is damaged", _NEW_LEDGER
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
        what, advice = "cannot use it", _NEW_LEDGER
    return LedgerError(f"ledger {path}: {what} ({text}); {advice}")


class LedgerBusyError(LedgerError):
    """A transaction that was asked not to wait (``wait=False``) met another writer's lock.
    Internal: callers that ask not to wait catch it (a read answers without writing)."""


# --- rows ----------------------------------------------------------------------------------


class DamagedRowError(ValueError):
    """A row of the ledger that cannot be read; ``problem`` says why."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


_OWNER_FIELDS = {f.name for f in fields(Owner)}
_OWNER_REQUIRED = {"user", "host", "pid"}


def _json(value: Any, column: str) -> Any:
    if not isinstance(value, str):
        raise DamagedRowError(f"{column} is a {type(value).__name__}, not JSON text")
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, a 5000-digit number
        raise DamagedRowError(f"{column} is not JSON") from err


def owner_from(value: Any, column: str = "owner") -> Owner:
    """An :class:`Owner` from its JSON column, or :class:`DamagedRowError`."""
    data = _json(value, column)
    if not isinstance(data, dict):
        raise DamagedRowError(f"{column} is not a JSON object")
    missing, extra = _OWNER_REQUIRED - data.keys(), data.keys() - _OWNER_FIELDS
    if missing or extra:
        named = [f"missing {', '.join(sorted(missing))}"] * bool(missing)
        named += [f"unknown {', '.join(shown(k) for k in sorted(extra))}"] * bool(extra)
        raise DamagedRowError(f"{column} has fields {'; '.join(named)}")
    for key, types in (
        ("user", (str,)),
        ("host", (str,)),
        ("pid", (int,)),
        ("start_time", (int, type(None))),
        ("kernel_id", (str, type(None))),
    ):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, types):
            raise DamagedRowError(f"{column}.{key} is {shown(value)}")
    return Owner.from_dict(data)


def _time(value: Any, column: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise DamagedRowError(f"{column} is {shown(value)}, not a time")
    if not optional and not math.isfinite(value):  # an endless lease is an older ledger's
        raise DamagedRowError(f"{column} is {shown(value)}, not a time")
    return value


@functools.lru_cache(maxsize=1024)
def _claim_problem(spec: str, allocation: str) -> str | None:
    """Why the stored ResourceClaim and its allocation are not valid, or None (parsed once
    per text: a ledger is read at every call)."""
    try:
        parse_resource_claim({**json.loads(spec), "status": {"allocation": json.loads(allocation)}})
    except ObjectError as err:
        return f"not a valid ResourceClaim: {str(err)[:200]}"
    except (TypeError, ValueError, RecursionError) as err:
        return f"not a valid ResourceClaim: {type(err).__name__}"
    return None


def record_from_row(row: sqlite3.Row) -> ClaimRecord:
    """A claim as the ``claims`` table keeps it; :class:`DamagedRowError` if it is not one."""
    name, namespace = row["name"], row["namespace"]
    if not isinstance(name, str) or not name:
        raise DamagedRowError(f"name is {shown(name)}")
    if not isinstance(namespace, str):
        raise DamagedRowError(f"namespace is {shown(namespace)}")
    spec, allocation = _json(row["spec"], "spec"), _json(row["allocation"], "allocation")
    for column, value in (("spec", spec), ("allocation", allocation)):
        if not isinstance(value, dict):
            raise DamagedRowError(f"{column} is not a JSON object")
    problem = _claim_problem(row["spec"], row["allocation"])
    if problem is not None:
        raise DamagedRowError(problem)
    created = _time(row["created"], "created")
    last_activity = _time(row["last_activity"], "last_activity")
    assert created is not None and last_activity is not None  # not optional
    return ClaimRecord(
        name=name,
        namespace=namespace,
        owner=owner_from(row["owner"]),
        spec=spec,
        allocation=allocation,
        created=created,
        last_activity=last_activity,
        lease_expires=_time(row["lease_expires"], "lease_expires", optional=True),
    )


def _file_of(conn: sqlite3.Connection) -> str:
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def _report(conn: sqlite3.Connection, what: str, problem: str, done: str) -> None:
    warnings.warn(
        f"ledger {_file_of(conn)}: {what} is damaged ({problem}); {done}",
        DraJupyterWarning,
        stacklevel=3,
    )


def _release_from_row(row: sqlite3.Row) -> Release | None:
    """A row of ``releases``; None when damaged (the history only informs: nothing to report).
    A claim that cannot be read leaves the release without its record."""
    try:
        owner = owner_from(row["owner"])
        when = _time(row["time"], "time")
    except DamagedRowError:
        return None
    name, reason = row["name"], row["reason"]
    if not isinstance(name, str) or not isinstance(reason, str) or when is None:
        return None
    record = None
    with contextlib.suppress(DamagedRowError, KeyError, TypeError):
        kept = _json(row["claim"], "claim") if row["claim"] is not None else None
        if isinstance(kept, dict):
            record = record_from_row(
                {  # type: ignore[arg-type]  # a mapping with a row's keys
                    "name": name,
                    "namespace": kept["namespace"],
                    "owner": row["owner"],
                    "spec": json.dumps(kept["spec"]),
                    "allocation": json.dumps(kept["allocation"]),
                    "created": kept["created"],
                    "last_activity": kept["last_activity"],
                    "lease_expires": kept["lease_expires"],
                }
            )
    message = row["message"]
    return Release(name, owner, reason, when, record, message if isinstance(message, str) else None)


@dataclass(frozen=True)
class Release:
    name: str
    owner: Owner
    reason: str  # user, reclaimed (owner gone), expired (lease), idle, kernel-shutdown, ...
    time: float
    # The claim as it was when it ended (None for a release of a version-1 ledger, or a
    # damaged row), and what was said to its user (None: the reason says it).
    record: ClaimRecord | None = None
    message: str | None = None


class Ledger:
    """A SQLite ledger at ``path``. Each thread keeps one connection between calls
    (:meth:`_connection`: fork-safe, reopened when the file is replaced)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._shm = Path(f"{self.path}-shm")  # made once: stat() at every call
        self.busy_timeout = busy_timeout
        self._kept = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerError(
                f"ledger {self.path}: cannot create its folder: {err.strerror}; "
                "choose another path (DRA_JUPYTER_LEDGER)"
            ) from err
        with self._reading(wal=False) as conn:  # nothing is changed before this check
            version, complete = self._check_ours(conn)
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
        """Inside the write transaction: migrate an older ledger forward step by step, create
        what is missing, and record this schema version. Read again under the lock: another
        process may have migrated it meanwhile."""
        version = self._stored_version(conn)
        if version is not None and version < SCHEMA_VERSION:
            for step in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        self._check_version(conn)

    def _stored_version(self, conn: sqlite3.Connection) -> int | None:
        """The version the file has (checked: a known one), or None for a new file."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            return None
        if conn.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone() is None:
            return None
        return self._check_version(conn)

    def _check_ours(self, conn: sqlite3.Connection) -> tuple[int | None, bool]:
        """Refuse a SQLite file of another program, or of a schema version newer than this
        one's. Its version (None: a new, empty file) and whether every table is there."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return None, False  # a new (or empty) file: it becomes a ledger
        row = None
        if {"meta", "claims"} <= tables:
            with contextlib.suppress(sqlite3.OperationalError):  # a "meta" of another shape
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            others = sorted(tables - _OURS) or sorted(tables)
            raise LedgerError(
                f"ledger {self.path}: the file is a SQLite database of something else "
                f"(tables {', '.join(shown(t, 40) for t in others[:5])}"
                f"{', …' if len(others) > 5 else ''}); it was not changed; choose another "
                "path (DRA_JUPYTER_LEDGER)"
            )
        return self._check_version(conn), _OURS - {"sqlite_sequence"} <= tables

    def _check_version(self, conn: sqlite3.Connection) -> int:
        """The stored schema version: this one or an older one (which :meth:`_prepare`
        migrates); a newer or unreadable one is refused."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        value = row["value"] if row is not None else None
        if isinstance(value, str) and value.strip().isdigit() and len(value) < 10:
            version = int(value)
            if 1 <= version <= SCHEMA_VERSION:
                return version
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path}: schema version {version} is newer than this "
                    f"dra-jupyter reads (1 to {SCHEMA_VERSION}); it was not changed; upgrade "
                    "dra-jupyter, or use another path (DRA_JUPYTER_LEDGER)"
                )
            raise LedgerError(
                f"ledger {self.path}: the file is damaged (its schema version is {version}, "
                f"which no dra-jupyter writes); {_NEW_LEDGER}"
            )
        raise LedgerError(
            f"ledger {self.path}: the file is damaged (its schema version is {shown(value)}, "
            f"not a number); {_NEW_LEDGER}"
        )

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
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
        try:
            with self._translated():
                conn.row_factory = sqlite3.Row
                if wal:
                    self._wal(conn)
                    conn.execute("PRAGMA synchronous=FULL")
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
    def _reading(self, *, wal: bool = True) -> Iterator[sqlite3.Connection]:
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
        when another connection holds the write lock."""
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
        # (_reading); within a transaction that holds the write lock nothing waits anyway.
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

    # --- claims ------------------------------------------------------------------------------

    @staticmethod
    def claims(conn: sqlite3.Connection) -> list[ClaimRecord]:
        """The live claims, by creation. A damaged row is reported and skipped; inside a
        (write) transaction it is also moved to ``damaged_claims``."""
        rows = conn.execute(
            "SELECT rowid AS row_id, * FROM claims ORDER BY created, name"
        ).fetchall()
        records = []
        for row in rows:
            key = tuple(row)[1:]  # the stored values (not the row id): the same ones parse alike
            record = _PARSED.get(key)
            if record is None:
                try:
                    record = record_from_row(row)
                except DamagedRowError as damage:
                    Ledger._quarantine(conn, row, damage.problem)
                    continue
                if len(_PARSED) >= _PARSED_MOST:
                    _PARSED.clear()
                _PARSED[key] = record
            records.append(record)
        return records

    @staticmethod
    def _quarantine(conn: sqlite3.Connection, row: sqlite3.Row, problem: str) -> None:
        name = row["name"]
        label = name if isinstance(name, str) and name and len(name) <= 80 else shown(name)
        done = "skipped"
        if conn.in_transaction:
            conn.execute(
                f"INSERT INTO damaged_claims ({_CLAIM_COLUMNS}, problem, time) "
                f"SELECT {_CLAIM_COLUMNS}, ?, ? FROM claims WHERE rowid = ?",
                (problem, time.time(), row["row_id"]),
            )
            conn.execute("DELETE FROM claims WHERE rowid = ?", (row["row_id"],))
            done = "moved to the table damaged_claims"
        _report(conn, f"claim {label}", problem, f"{done}; its devices count as free")

    def read_claims(self) -> list[ClaimRecord]:
        with self._reading() as conn:
            return self.claims(conn)

    @classmethod
    def claims_in(cls, path: str | Path, *, busy_timeout: float = 30.0) -> list[ClaimRecord]:
        """The live claims of the ledger file at ``path``, of this schema version or any
        earlier one, read without changing the file (not migrated, not even its journal
        mode): to import another process's ledger. Refused like :class:`Ledger` refuses
        (another program's file, a newer version)."""
        ledger = cls.__new__(cls)
        ledger.path, ledger.busy_timeout, ledger._kept = Path(path), busy_timeout, threading.local()
        with ledger._reading(wal=False) as conn:
            version, _complete = ledger._check_ours(conn)
            return [] if version is None else cls.claims(conn)

    @staticmethod
    def next_name(conn: sqlite3.Connection, prefix: str) -> str:
        """``<prefix>-<n>``: the next number of the prefix whose name is not taken."""
        key = f"seq:{prefix}"
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        value = row["value"] if row else None
        # a damaged sequence starts again at 0: taken names are skipped below
        seq = int(value) if isinstance(value, str) and value.isdigit() and len(value) < 19 else 0
        while True:
            seq += 1
            name = f"{prefix}-{seq}"
            if conn.execute("SELECT 1 FROM claims WHERE name = ?", (name,)).fetchone() is None:
                break
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(seq)))
        return name

    @staticmethod
    def insert(conn: sqlite3.Connection, record: ClaimRecord) -> None:
        values = (
            record.name,
            record.namespace,
            json.dumps(record.owner.to_dict()),
            json.dumps(record.spec),
            json.dumps(record.allocation),
            record.created,
            record.last_activity,
            record.lease_expires,
        )
        conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
        # The row as a read will parse it (its JSON read back), known now: the next reads
        # find it parsed. A row that is rolled back is never read, so never looked up.
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        lease = record.lease_expires
        _PARSED[values] = replace(
            record,
            spec=json.loads(values[3]),
            allocation=json.loads(values[4]),
            created=float(record.created),  # REAL columns: read back as floats
            last_activity=float(record.last_activity),
            lease_expires=None if lease is None else float(lease),
        )

    @staticmethod
    def delete(
        conn: sqlite3.Connection,
        record: ClaimRecord,
        reason: str,
        now: float | None = None,
        message: str | None = None,
    ) -> None:
        """Release a claim: its row goes, and the history keeps the claim as it was, why and
        when it ended (and ``message``, the words for its user, where the reason is not)."""
        conn.execute("DELETE FROM claims WHERE name = ?", (record.name,))
        cur = conn.execute(
            "INSERT INTO releases (name, owner, reason, time, claim, message) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                record.name,
                json.dumps(record.owner.to_dict()),
                reason,
                time.time() if now is None else now,
                json.dumps(
                    {
                        "namespace": record.namespace,
                        "spec": record.spec,
                        "allocation": record.allocation,
                        "created": record.created,
                        "last_activity": record.last_activity,
                        "lease_expires": record.lease_expires,
                    }
                ),
                message,
            ),
        )
        last = cur.lastrowid or 0
        if last % PRUNE_EVERY == 0 and last > RELEASED_CLAIMS_KEPT:
            edge = last - RELEASED_CLAIMS_KEPT
            conn.execute(
                "UPDATE releases SET claim = NULL WHERE id > ? AND id <= ?",
                (edge - PRUNE_EVERY, edge),
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
        """The latest releases, newest first; damaged rows of the history are left out."""
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT * FROM releases ORDER BY id DESC LIMIT ?", (limit,)
            ).fetchall()
        return [r for r in map(_release_from_row, rows) if r is not None]

    def released(self, name: str) -> Release | None:
        """The latest release of the claim ``name`` (whichever process released it), or None
        when the history has none (or only a damaged one)."""
        with self._reading() as conn:
            row = conn.execute(
                "SELECT * FROM releases WHERE name = ? ORDER BY id DESC LIMIT 1", (name,)
            ).fetchone()
        return None if row is None else _release_from_row(row)

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
                _report(conn, f"waiter {row['id']}", damage.problem, "dropped from the queue")
                alive = False
            if not alive:
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

    def waiters(self) -> list[tuple[str, Owner, float]]:
        """``(shape, owner, since)`` of every request waiting now, oldest first; a damaged
        row is left out (the next reclaim drops it)."""
        with self._reading() as conn:
            rows = conn.execute("SELECT shape, owner, created FROM waiters ORDER BY id").fetchall()
        out: list[tuple[str, Owner, float]] = []
        for row in rows:
            try:
                owner, since = owner_from(row["owner"]), _time(row["created"], "created")
            except DamagedRowError:
                continue
            out.append((str(row["shape"]), owner, float(since or 0)))
        return out

    @staticmethod
    def dequeue(conn: sqlite3.Connection, waiter: int) -> None:
        conn.execute("DELETE FROM waiters WHERE id = ?", (waiter,))

"""The ledger's schema: its tables as a new ledger gets them (:data:`SCHEMA_VERSION`), the
migrations from each older version, and the checks that a file is a dra-jupyter ledger of a
version this one reads.

A ledger of an older version is migrated forward when first opened (:data:`MIGRATIONS`, one
step per version, every step and the new version number in one transaction: a process
killed mid-way leaves it as it was). A new version adds its step there and keeps a builder
of real files of the version before it in ``tests/local`` (``ledger_v1.py``: that version's
schema and statements verbatim), which the migration tests use.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.errors import LedgerError, shown

SCHEMA_VERSION = 8
# The schema as a new ledger gets it (the latest version). An older ledger is brought up to
# it by MIGRATIONS, one version at a time, all in one transaction (:func:`prepare`).
SCHEMA = """
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
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    claim TEXT NOT NULL,
    uid TEXT NOT NULL,
    user TEXT NOT NULL,
    groups TEXT NOT NULL,
    devices TEXT NOT NULL,
    gpus REAL,
    started REAL NOT NULL,
    ended REAL,
    reason TEXT,
    active_s REAL NOT NULL DEFAULT 0,
    idle_s REAL NOT NULL DEFAULT 0,
    unknown_s REAL NOT NULL DEFAULT 0,
    energy_j REAL,
    released_by TEXT
);
CREATE INDEX IF NOT EXISTS usage_open ON usage (claim) WHERE ended IS NULL;
CREATE INDEX IF NOT EXISTS usage_by_claim ON usage (claim, id);
CREATE INDEX IF NOT EXISTS usage_by_end ON usage (ended);
CREATE TABLE IF NOT EXISTS taints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device TEXT NOT NULL,
    key TEXT NOT NULL,
    effect TEXT NOT NULL,
    reason TEXT NOT NULL,
    uid INTEGER NOT NULL,
    user TEXT NOT NULL,
    added REAL NOT NULL,
    removed REAL,
    removed_uid INTEGER,
    removed_by TEXT,
    value TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS taints_live ON taints (device, key) WHERE removed IS NULL;
CREATE TABLE IF NOT EXISTS runs (
    name TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    host TEXT NOT NULL,
    spec TEXT NOT NULL,
    phase TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    pid INTEGER,
    start_time INTEGER,
    child INTEGER,
    claim TEXT,
    devices TEXT NOT NULL DEFAULT '[]',
    exit_code INTEGER,
    message TEXT NOT NULL DEFAULT '',
    error TEXT,
    log TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user, created);
CREATE TABLE IF NOT EXISTS health_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device TEXT NOT NULL,
    time REAL NOT NULL,
    source TEXT NOT NULL,
    what TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    effect TEXT NOT NULL,
    meaning TEXT NOT NULL,
    claims TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS health_by_device ON health_events (device, id);
CREATE TABLE IF NOT EXISTS claim_activity (
    claim TEXT PRIMARY KEY,
    reported REAL NOT NULL,
    busy_until REAL
);
CREATE TABLE IF NOT EXISTS reclaim_notices (
    claim TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    devices TEXT NOT NULL,
    waiter INTEGER NOT NULL,
    waiter_user TEXT NOT NULL,
    what TEXT NOT NULL,
    why TEXT NOT NULL,
    warned REAL NOT NULL,
    deadline REAL NOT NULL,
    keeps INTEGER NOT NULL DEFAULT 0
);
"""

# Version n to n + 1, by n. Each step only adds (columns, indexes, tables): what an older
# version wrote stays readable.
#
# 1 to 2: a release keeps the claim as it was (``claim``: namespace, spec, allocation, times,
# as JSON) and the words said to its user (``message``), so that any process, not only the
# one that released it, can say why a claim ended (GET claims/{name}, the service's
# ``record``). Releases of version 1 have neither (NULL): they still say when and why.
#
# 2 to 3: the usage book (``usage``: one row per claim interval, :mod:`dra_jupyter.local.book`),
# and an open interval for each live claim, from when it was made (its devices' worth is
# worked out when read; its user's groups are not known then: none).
#
# 3 to 4: taints an admin put on devices by hand (``taints``: one row per taint, live
# while ``removed`` is NULL, kept with who removed it and when after,
# :mod:`dra_jupyter.local.taints`). An older ledger had none.
#
# 4 to 5: background runs (``runs``: one row per ``dra.run`` on this machine, its launcher
# process, claim, phase, exit code and log file, :mod:`dra_jupyter.local.runs`). An older
# ledger had none.
# 5 to 6: the record of the devices' health (``health_events``: one row per signal that
# took a device out, with the claims that held it then, :mod:`dra_jupyter.local.health`),
# and a taint's value (``taints.value``: the watcher's, e.g. the XID ``79``). An older
# ledger had no watcher: no events, and its taints' values are their reasons where those
# are label values, as before (NULL).
# 6 to 7: reclaim under pressure on the embedded ledger (:mod:`dra_jupyter.local.pressure`):
# the claims whose activity a Jupyter server reports, and whether a cell runs
# (``claim_activity``), and the warnings in force (``reclaim_notices``: a holder's claim,
# the waiter it gives way to, the deadline, the Keeps used). An older ledger had neither:
# nobody reported, nobody was warned.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE releases ADD COLUMN claim TEXT",
        "ALTER TABLE releases ADD COLUMN message TEXT",
        "CREATE INDEX IF NOT EXISTS releases_by_name ON releases (name, id)",
    ),
    2: (  # the book's table as version 3 made it (version 8 adds a column: step 7)
        """
        CREATE TABLE IF NOT EXISTS usage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            claim TEXT NOT NULL,
            uid TEXT NOT NULL,
            user TEXT NOT NULL,
            groups TEXT NOT NULL,
            devices TEXT NOT NULL,
            gpus REAL,
            started REAL NOT NULL,
            ended REAL,
            reason TEXT,
            active_s REAL NOT NULL DEFAULT 0,
            idle_s REAL NOT NULL DEFAULT 0,
            unknown_s REAL NOT NULL DEFAULT 0,
            energy_j REAL
        )
        """,
        *(
            s
            for s in SCHEMA.split(";")
            if "ON usage" in s and s.strip().startswith("CREATE")  # the book's indexes
        ),
        """
        INSERT INTO usage (claim, uid, user, groups, devices, gpus, started)
        SELECT
            c.name,
            coalesce(json_extract(c.spec, '$.metadata.uid'), lower(hex(randomblob(16)))),
            json_extract(c.owner, '$.user'),
            '[]',
            (
                SELECT json_group_array(json_object(
                    'device',
                    json_extract(r.value, '$.driver') || '/' || json_extract(r.value, '$.pool')
                    || '/' || json_extract(r.value, '$.device'),
                    'gpus', NULL,
                    'model', ''
                ))
                FROM json_each(c.allocation, '$.devices.results') AS r
            ),
            NULL,
            c.created
        FROM claims AS c
        WHERE json_valid(c.owner) AND json_valid(c.spec) AND json_valid(c.allocation)
            AND json_type(c.owner, '$.user') = 'text'
            AND json_type(c.allocation, '$.devices.results') = 'array'
            AND typeof(c.created) IN ('real', 'integer')
        ORDER BY c.created, c.name
        """,
    ),
    3: (  # the table as version 4 made it (version 6 adds a column: step 5)
        """
        CREATE TABLE IF NOT EXISTS taints (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            device TEXT NOT NULL,
            key TEXT NOT NULL,
            effect TEXT NOT NULL,
            reason TEXT NOT NULL,
            uid INTEGER NOT NULL,
            user TEXT NOT NULL,
            added REAL NOT NULL,
            removed REAL,
            removed_uid INTEGER,
            removed_by TEXT
        )
        """,
        "CREATE UNIQUE INDEX IF NOT EXISTS taints_live ON taints (device, key) "
        "WHERE removed IS NULL",
    ),
    4: (  # the table as version 5 made it
        """
        CREATE TABLE IF NOT EXISTS runs (
            name TEXT PRIMARY KEY,
            user TEXT NOT NULL,
            host TEXT NOT NULL,
            spec TEXT NOT NULL,
            phase TEXT NOT NULL,
            created REAL NOT NULL,
            started REAL,
            ended REAL,
            pid INTEGER,
            start_time INTEGER,
            child INTEGER,
            claim TEXT,
            devices TEXT NOT NULL DEFAULT '[]',
            exit_code INTEGER,
            message TEXT NOT NULL DEFAULT '',
            error TEXT,
            log TEXT NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user, created)",
    ),
    5: (
        "ALTER TABLE taints ADD COLUMN value TEXT",
        *(
            s
            for s in SCHEMA.split(";")
            if "health_events" in s and s.strip().startswith("CREATE")  # the table and index
        ),
    ),
    6: (  # the tables as version 7 made them
        """
        CREATE TABLE IF NOT EXISTS claim_activity (
            claim TEXT PRIMARY KEY,
            reported REAL NOT NULL,
            busy_until REAL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS reclaim_notices (
            claim TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            devices TEXT NOT NULL,
            waiter INTEGER NOT NULL,
            waiter_user TEXT NOT NULL,
            what TEXT NOT NULL,
            why TEXT NOT NULL,
            warned REAL NOT NULL,
            deadline REAL NOT NULL,
            keeps INTEGER NOT NULL DEFAULT 0
        )
        """,
    ),
    7: ("ALTER TABLE usage ADD COLUMN released_by TEXT",),  # who released (NULL: automatic)
}
TABLES = {
    "meta",
    "claims",
    "waiters",
    "releases",
    "damaged_claims",
    "usage",
    "taints",
    "runs",
    "health_events",
    "claim_activity",
    "reclaim_notices",
    "sqlite_sequence",
}

NEW_LEDGER = (
    "move the file away or choose another path (DRA_JUPYTER_LEDGER); dra-jupyter then "
    "starts a new, empty ledger there"
)


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Inside the write transaction: migrate an older ledger forward step by step, create
    what is missing, and record this schema version. Read again under the lock: another
    process may have migrated it meanwhile."""
    version = stored_version(conn, path)
    if version is not None and version < SCHEMA_VERSION:
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    check_version(conn, path)


def stored_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """The version the file has (checked: a known one), or None for a new file."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables:
        return None
    if conn.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone() is None:
        return None
    return check_version(conn, path)


def check_ours(conn: sqlite3.Connection, path: Path) -> tuple[int | None, bool]:
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
        others = sorted(tables - TABLES) or sorted(tables)
        raise LedgerError(
            f"ledger {path}: the file is a SQLite database of something else "
            f"(tables {', '.join(shown(t, 40) for t in others[:5])}"
            f"{', …' if len(others) > 5 else ''}); it was not changed; choose another "
            "path (DRA_JUPYTER_LEDGER)"
        )
    return check_version(conn, path), TABLES - {"sqlite_sequence"} <= tables


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The stored schema version: this one or an older one (which :func:`prepare`
    migrates); a newer or unreadable one is refused."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    value = row["value"] if row is not None else None
    if isinstance(value, str) and value.strip().isdigit() and len(value) < 10:
        version = int(value)
        if 1 <= version <= SCHEMA_VERSION:
            return version
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {path}: schema version {version} is newer than this "
                f"dra-jupyter reads (1 to {SCHEMA_VERSION}); it was not changed; upgrade "
                "dra-jupyter, or use another path (DRA_JUPYTER_LEDGER)"
            )
        raise LedgerError(
            f"ledger {path}: the file is damaged (its schema version is {version}, "
            f"which no dra-jupyter writes); {NEW_LEDGER}"
        )
    raise LedgerError(
        f"ledger {path}: the file is damaged (its schema version is {shown(value)}, "
        f"not a number); {NEW_LEDGER}"
    )

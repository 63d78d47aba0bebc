"""Version 2 of the ledger's schema, as dra-jupyter wrote it until version 3 (kept verbatim,
with the statements version 2 wrote rows with), to build real version-2 files for the
migration tests: never change it."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner

VERSION = 2
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
"""


def write_v2(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-2 ledger at ``path``, as version 2 made and wrote it: WAL, FULL sync, the
    schema in one transaction, claims, waiters and releases by version 1's statements."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(VERSION),))
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("seq:alice", "7"))
        for record in claims + [r for r, _, _ in released]:
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
        for record, reason, when in released:
            conn.execute("DELETE FROM claims WHERE name = ?", (record.name,))
            conn.execute(
                "INSERT INTO releases (name, owner, reason, time, claim, message) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.name,
                    json.dumps(record.owner.to_dict()),
                    reason,
                    when,
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
                    None,
                ),
            )
        for shape, owner, since in waiters:
            conn.execute(
                "INSERT INTO waiters (shape, owner, created) VALUES (?, ?, ?)",
                (shape, json.dumps(owner.to_dict()), since),
            )
        conn.execute("COMMIT")

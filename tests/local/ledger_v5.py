"""Version 5 of the ledger's schema, as dra-jupyter wrote it until version 6: a version-4
file (:func:`tests.local.ledger_v4.write_v4`) taken to version 5 by version 5's own step
(the ``runs`` table of background runs and its index; kept verbatim), to build real
version-5 files for the migration tests: never change it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner
from tests.local.ledger_v4 import write_v4

VERSION = 5
STEP = (
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
    """
    CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user, created)
    """,
)


def write_v5(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-5 ledger at ``path``: version 4's rows, then version 5's step."""
    write_v4(path, claims, released, waiters)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in STEP:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(VERSION),))
        conn.execute("COMMIT")

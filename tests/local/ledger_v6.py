"""Version 6 of the ledger's schema, as dra-jupyter wrote it until version 7: a version-5
file (:func:`tests.local.ledger_v5.write_v5`) taken to version 6 by version 6's own step
(a taint's ``value``, and the ``health_events`` table and its index; kept verbatim), to
build real version-6 files for the migration tests: never change it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner
from tests.local.ledger_v5 import write_v5

VERSION = 6
STEP = (
    "ALTER TABLE taints ADD COLUMN value TEXT",
    """
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
)
    """,
    "CREATE INDEX IF NOT EXISTS health_by_device ON health_events (device, id)",
)


def write_v6(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-6 ledger at ``path``: version 5's rows, then version 6's step."""
    write_v5(path, claims, released, waiters)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in STEP:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(VERSION),))
        conn.execute("COMMIT")

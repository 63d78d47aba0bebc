"""Version 7 of the ledger's schema, as dra-jupyter wrote it until version 8: a version-6
file (:func:`tests.local.ledger_v6.write_v6`) taken to version 7 by version 7's own step
(the ``claim_activity`` and ``reclaim_notices`` tables; kept verbatim), to build real
version-7 files for the migration tests: never change it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner
from tests.local.ledger_v6 import write_v6

VERSION = 7
STEP = (
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
)


def write_v7(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-7 ledger at ``path``: version 6's rows, then version 7's step."""
    write_v6(path, claims, released, waiters)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in STEP:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(VERSION),))
        conn.execute("COMMIT")

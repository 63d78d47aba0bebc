"""Version 4 of the ledger's schema, as dra-jupyter wrote it until version 5: a version-3
file (:func:`tests.local.ledger_v3.write_v3`) taken to version 4 by version 4's own step
(the ``taints`` table of an admin's taints and its index; kept verbatim), to build real
version-4 files for the migration tests: never change it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner
from tests.local.ledger_v3 import write_v3

VERSION = 4
STEP = (
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
    """
    CREATE UNIQUE INDEX IF NOT EXISTS taints_live ON taints (device, key) WHERE removed IS NULL
    """,
)


def write_v4(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-4 ledger at ``path``: version 3's rows, then version 4's step, and one
    admin's taint (live) on gpu-7."""
    write_v3(path, claims, released, waiters)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in STEP:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO taints (device, key, effect, reason, uid, user, added) "
            "VALUES ('gpu.nvidia.com/node-1/gpu-7', 'dra-jupyter/admin', 'NoSchedule', "
            "'fan', 0, 'root', 1000.0)"
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(VERSION),))
        conn.execute("COMMIT")

"""Version 3 of the ledger's schema, as dra-jupyter wrote it until version 4: a version-2
file (:func:`tests.local.ledger_v2.write_v2`) taken to version 3 by version 3's own step
(its usage book's table and indexes, and an open interval per live claim; kept verbatim),
to build real version-3 files for the migration tests: never change it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dra_jupyter.types import ClaimRecord, Owner
from tests.local.ledger_v2 import write_v2

VERSION = 3
STEP = (
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
    """
    CREATE INDEX IF NOT EXISTS usage_open ON usage (claim) WHERE ended IS NULL
    """,
    """
    CREATE INDEX IF NOT EXISTS usage_by_claim ON usage (claim, id)
    """,
    """
    CREATE INDEX IF NOT EXISTS usage_by_end ON usage (ended)
    """,
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
)


def write_v3(
    path: Path,
    claims: list[ClaimRecord],
    released: list[tuple[ClaimRecord, str, float]],
    waiters: list[tuple[str, Owner, float]] = [],  # noqa: B006  # never changed
) -> None:
    """A version-3 ledger at ``path``: version 2's rows, then version 3's step."""
    write_v2(path, claims, released, waiters)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in STEP:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(VERSION),))
        conn.execute("COMMIT")

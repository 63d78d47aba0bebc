"""Releases as the ledger's ``releases`` table keeps them: why, when and (since schema
version 2) which claim as it was and with what message each claim ended, whichever process
released it; the claims themselves kept for the latest :data:`RELEASED_CLAIMS_KEPT` only.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from dataclasses import dataclass

from dra_jupyter.local import book
from dra_jupyter.local.claims import (
    DamagedRowError,
    json_column,
    owner_from,
    record_from_row,
    time_column,
)
from dra_jupyter.types import ClaimRecord, Owner

# The history keeps the claim itself (``releases.claim``) of this many latest releases; older
# ones keep who, why, when and the message (a few bytes instead of a claim's kilobyte or two).
# Dropped PRUNE_EVERY releases at a time, by id range: the ledger stays bounded in size.
RELEASED_CLAIMS_KEPT = 10_000
PRUNE_EVERY = 256


@dataclass(frozen=True)
class Release:
    """How a claim ended: its name, holder, why and when (and the claim as it was, and the
    words said to its user, where the ledger kept them)."""

    name: str
    owner: Owner
    reason: str  # user, reclaimed (owner gone), expired (lease), idle, kernel-shutdown, ...
    time: float
    # The claim as it was when it ended (None for a release of a version-1 ledger, or a
    # damaged row), and what was said to its user (None: the reason says it).
    record: ClaimRecord | None = None
    message: str | None = None


def _release_from_row(row: sqlite3.Row) -> Release | None:
    """A row of ``releases``; None when damaged (the history only informs: nothing to report).
    A claim that cannot be read leaves the release without its record."""
    try:
        owner = owner_from(row["owner"])
        when = time_column(row["time"], "time")
    except DamagedRowError:
        return None
    name, reason = row["name"], row["reason"]
    if not isinstance(name, str) or not isinstance(reason, str) or when is None:
        return None
    record = None
    with contextlib.suppress(DamagedRowError, KeyError, TypeError):
        kept = json_column(row["claim"], "claim") if row["claim"] is not None else None
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


def delete(
    conn: sqlite3.Connection,
    record: ClaimRecord,
    reason: str,
    now: float | None = None,
    message: str | None = None,
    by: str | None = None,
) -> None:
    """Release a claim: its row goes, and the history keeps the claim as it was, why and
    when it ended (and ``message``, the words for its user, where the reason is not); its
    interval in the usage book is closed, with who released it (``by``; None: dra-jupyter,
    by its rules)."""
    when = time.time() if now is None else now
    conn.execute("DELETE FROM claims WHERE name = ?", (record.name,))
    book.close_interval(conn, record, reason, when, by)
    cur = conn.execute(
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


def latest(conn: sqlite3.Connection, limit: int) -> list[Release]:
    """The latest ``limit`` releases, newest first; damaged rows of the history are left out."""
    rows = conn.execute("SELECT * FROM releases ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [r for r in map(_release_from_row, rows) if r is not None]


def latest_of(conn: sqlite3.Connection, name: str) -> Release | None:
    """The latest release of the claim ``name``, or None when the history has none (or only
    a damaged one)."""
    row = conn.execute(
        "SELECT * FROM releases WHERE name = ? ORDER BY id DESC LIMIT 1", (name,)
    ).fetchone()
    return None if row is None else _release_from_row(row)

"""Reclaim under pressure as the ledger keeps it (since schema version 7): the claims whose
activity a Jupyter server reports (``claim_activity``: when last, and until when a cell
counts as running), and the warnings in force (``reclaim_notices``: one per warned claim,
:class:`~dra_jupyter.sharing.reclaim.Notice`). What to do with them is
:mod:`~dra_jupyter.local.pressure`'s; a released claim takes both rows with it
(:func:`forget`). Each function works inside its caller's transaction (its connection the
first argument).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from dra_jupyter.sharing.reclaim import Notice

# seconds a report that a claim's kernel runs a cell holds without a new one: its server
# renews it while the cell runs (every 30 s, server/reclaims.py); a server that died says
# nothing (the service's BUSY_HOLD)
BUSY_HOLD = 120.0


def record_activity(
    conn: sqlite3.Connection, names: Iterable[str], now: float, *, busy: bool
) -> int:
    """The claims ``names`` were active at ``now`` (their idle countdown starts again), and a
    cell runs (``busy``: for :data:`BUSY_HOLD` at most) or not; how many exist."""
    done = 0
    for name in names:
        cur = conn.execute("UPDATE claims SET last_activity = ? WHERE name = ?", (now, name))
        if cur.rowcount == 0:
            continue
        conn.execute(
            "INSERT OR REPLACE INTO claim_activity (claim, reported, busy_until) VALUES (?, ?, ?)",
            (name, now, now + BUSY_HOLD if busy else None),
        )
        done += 1
    return done


def reported(conn: sqlite3.Connection) -> dict[str, float | None]:
    """The claims whose activity is reported, each with until when a cell runs (None: none
    runs)."""
    out: dict[str, float | None] = {}
    for row in conn.execute("SELECT claim, busy_until FROM claim_activity"):
        until = row["busy_until"]
        out[str(row["claim"])] = float(until) if isinstance(until, int | float) else None
    return out


def notices(conn: sqlite3.Connection) -> dict[str, Notice]:
    """The warnings in force, by claim: those whose waiter still waits (a damaged row is
    left out; the next warning of its claim replaces it)."""
    out: dict[str, Notice] = {}
    rows = conn.execute(
        "SELECT * FROM reclaim_notices AS n WHERE EXISTS "
        "(SELECT 1 FROM waiters AS w WHERE w.id = n.waiter) ORDER BY claim"
    )
    for row in rows:
        try:
            devices = json.loads(row["devices"])
            notice = Notice(
                claim=str(row["claim"]),
                holder=str(row["holder"]),
                devices=tuple(str(d) for d in devices),
                waiter_key=int(row["waiter"]),
                waiter=str(row["waiter_user"]),
                what=str(row["what"]),
                why=str(row["why"]),
                warned=float(row["warned"]),
                deadline=float(row["deadline"]),
                keeps=int(row["keeps"]),
            )
        except (TypeError, ValueError):
            continue
        out[notice.claim] = notice
    return out


def write(conn: sqlite3.Connection, notice: Notice) -> None:
    """Put ``notice`` in force (or update it: a Keep's new deadline)."""
    conn.execute(
        "INSERT OR REPLACE INTO reclaim_notices (claim, holder, devices, waiter, waiter_user, "
        "what, why, warned, deadline, keeps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            notice.claim,
            notice.holder,
            json.dumps(list(notice.devices)),
            notice.waiter_key,
            notice.waiter,
            notice.what,
            notice.why,
            notice.warned,
            notice.deadline,
            notice.keeps,
        ),
    )


def withdraw(conn: sqlite3.Connection, claim: str) -> None:
    """The warning of ``claim`` is no longer in force."""
    conn.execute("DELETE FROM reclaim_notices WHERE claim = ?", (claim,))


def waiter_gone(conn: sqlite3.Connection, waiter: int) -> None:
    """The waiter ``waiter`` (its row in ``waiters``) was served or left: the warnings given
    for it are withdrawn."""
    conn.execute("DELETE FROM reclaim_notices WHERE waiter = ?", (waiter,))


def forget(conn: sqlite3.Connection, claim: str) -> None:
    """``claim`` is released: its warning and its reported activity go with it (a later
    claim of the same name starts afresh)."""
    withdraw(conn, claim)
    conn.execute("DELETE FROM claim_activity WHERE claim = ?", (claim,))


def pending(conn: sqlite3.Connection) -> bool:
    """Whether anything is to be done under pressure: a request waits (a warning is in force
    only while its waiter waits). A read: no lock."""
    return conn.execute("SELECT 1 FROM waiters LIMIT 1").fetchone() is not None

"""The usage book as the ledger's ``usage`` table keeps it (since schema version 3): one row
per claim interval, opened when a claim is written (:func:`open_interval`, from
``claims.insert``) and closed when it is released, whichever way (:func:`close_interval`,
from ``releases.delete`` and a damaged claim's quarantine), with the GPU-active, idle and
unknown seconds and the energy its sampler reported (:func:`add_activity`).

Append-only: a row is only ever added, closed once, and given more activity; nothing is
deleted. The arithmetic of a window is :mod:`dra_jupyter.accounting.book`'s.
"""

from __future__ import annotations

import grp
import json
import math
import os
import pwd
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

from dra_jupyter.accounting.book import DevicePart, Interval
from dra_jupyter.types import ClaimRecord

# A device's worth where the writer did not record it (a row of a writer that had no
# inventory at hand): by device key, from the reader's inventory.
Weigh = Callable[[str], DevicePart]

COLUMNS = (
    "claim, uid, user, groups, devices, gpus, started, ended, reason, "
    "active_s, idle_s, unknown_s, energy_j, released_by"
)


def user_groups(user: str) -> tuple[str, ...]:
    """The groups of ``user`` in the user database, its primary group first (none for a
    user it does not know: a JupyterHub user without a Unix account)."""
    try:
        entry = pwd.getpwnam(user)
        gids = os.getgrouplist(user, entry.pw_gid)
    except (KeyError, OSError):
        return ()
    names = []
    for gid in [entry.pw_gid, *sorted(set(gids) - {entry.pw_gid})]:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return tuple(names)


def _devices_json(record: ClaimRecord, parts: tuple[DevicePart, ...] | None) -> str:
    if parts is None:
        return json.dumps([{"device": k, "gpus": None, "model": ""} for k in record.device_keys])
    return json.dumps([p.to_dict() for p in parts])


def open_interval(
    conn: sqlite3.Connection,
    record: ClaimRecord,
    parts: tuple[DevicePart, ...] | None = None,
    *,
    ended: float | None = None,
    reason: str | None = None,
    by: str | None = None,
) -> None:
    """Open the interval of a claim just written, from its ``created`` (``parts``: its
    devices' worth, where the writer knows the inventory; else worked out when read)."""
    meta = record.spec.get("metadata") or {}
    uid = meta.get("uid") if isinstance(meta, dict) else None
    conn.execute(
        f"INSERT INTO usage ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, NULL, ?)",
        (
            record.name,
            uid if isinstance(uid, str) and uid else uuid.uuid4().hex,
            record.owner.user,
            json.dumps(list(user_groups(record.owner.user))),
            _devices_json(record, parts),
            None if parts is None else sum(p.gpus for p in parts),
            record.created,
            ended,
            reason,
            by,
        ),
    )


def close_interval(
    conn: sqlite3.Connection, record: ClaimRecord, reason: str, now: float, by: str | None = None
) -> None:
    """Close the open interval of a claim released at ``now`` (``by``: the user who released
    it, its holder or an admin; None where dra-jupyter did, by its rules); one that has none
    (a ledger's claim written before the book began) gets one, from its ``created``."""
    cur = conn.execute(
        "UPDATE usage SET ended = max(started, ?), reason = ?, released_by = ? "
        "WHERE claim = ? AND ended IS NULL",
        (now, reason, by, record.name),
    )
    if cur.rowcount == 0:
        open_interval(conn, record, ended=max(now, record.created), reason=reason, by=by)


def close_named(conn: sqlite3.Connection, name: Any, reason: str, now: float) -> None:
    """Close the open interval of the claim ``name``, if any (a damaged claim moved aside)."""
    if isinstance(name, str):
        conn.execute(
            "UPDATE usage SET ended = max(started, ?), reason = ? "
            "WHERE claim = ? AND ended IS NULL",
            (now, reason, name),
        )


def add_activity(
    conn: sqlite3.Connection,
    claim: str,
    active_s: float,
    idle_s: float,
    unknown_s: float,
    energy_j: float | None,
) -> bool:
    """Add a sampler's report to the claim's open interval (else its latest one: the last
    tick of a claim released meanwhile); False when the book has none of that name.
    Values that are not finite, or negative, count as 0."""

    def seconds(value: float | None) -> float:
        return value if value is not None and math.isfinite(value) and value > 0 else 0.0

    row = conn.execute(
        "SELECT id FROM usage WHERE claim = ? ORDER BY ended IS NULL DESC, id DESC LIMIT 1",
        (claim,),
    ).fetchone()
    if row is None:
        return False
    conn.execute(
        "UPDATE usage SET active_s = active_s + ?, idle_s = idle_s + ?, "
        "unknown_s = unknown_s + ?, "
        "energy_j = CASE WHEN ? IS NULL THEN energy_j ELSE coalesce(energy_j, 0) + ? END "
        "WHERE id = ?",
        (
            seconds(active_s),
            seconds(idle_s),
            seconds(unknown_s),
            None if energy_j is None else seconds(energy_j),
            seconds(energy_j),
            row[0],
        ),
    )
    return True


def _parts(text: Any, weigh: Weigh | None) -> tuple[DevicePart, ...] | None:
    try:
        devices = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(devices, list):
        return None
    parts = []
    for d in devices:
        if not isinstance(d, dict) or not isinstance(d.get("device"), str):
            return None
        gpus, model = d.get("gpus"), d.get("model")
        if isinstance(gpus, int | float) and not isinstance(gpus, bool) and math.isfinite(gpus):
            named = model if isinstance(model, str) else ""
            parts.append(DevicePart(d["device"], float(gpus), named))
        elif weigh is not None:
            parts.append(weigh(d["device"]))
        else:
            parts.append(DevicePart(d["device"], 1.0, ""))
    return tuple(parts)


def _groups(text: Any) -> tuple[str, ...] | None:
    try:
        groups = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return tuple(str(g) for g in groups) if isinstance(groups, list) else None


def _number(value: Any) -> float | None:
    if type(value) is float or type(value) is int:  # not bool; the usual case first
        return float(value) if math.isfinite(value) else None
    return None


class _Reader:
    """Rows of the book as intervals; a text of devices or groups (the same for many rows:
    a user's groups, a machine's few shapes of claims) is parsed once per read."""

    def __init__(self, weigh: Weigh | None) -> None:
        self.weigh = weigh
        self.devices: dict[Any, tuple[DevicePart, ...] | None] = {}
        self.groups: dict[Any, tuple[str, ...] | None] = {}

    def interval(self, row: sqlite3.Row) -> Interval | None:
        """A row of the book, or None when it cannot be read (left out of every report)."""
        text, listed = row[4], row[3]
        if text in self.devices:
            parts = self.devices[text]
        else:
            parts = self.devices[text] = _parts(text, self.weigh)
        if listed in self.groups:
            groups = self.groups[listed]
        else:
            groups = self.groups[listed] = _groups(listed)
        start, end = _number(row[6]), _number(row[7])
        claim, user = row[0], row[2]
        if (
            not parts
            or start is None
            or (row[7] is not None and end is None)
            or groups is None
            or type(claim) is not str
            or type(user) is not str
        ):
            return None
        reason, by = row[8], row[13]
        return Interval(
            claim=claim,
            uid=str(row[1]),
            user=user,
            groups=groups,
            devices=parts,
            start=start,
            end=end,
            reason=reason if isinstance(reason, str) else None,
            active_s=_number(row[9]) or 0.0,
            idle_s=_number(row[10]) or 0.0,
            unknown_s=_number(row[11]) or 0.0,
            energy_j=_number(row[12]),
            released_by=by if isinstance(by, str) else None,
        )


def intervals(
    conn: sqlite3.Connection,
    since: float,
    until: float,
    *,
    user: str | None = None,
    weigh: Weigh | None = None,
) -> list[Interval]:
    """The intervals that overlap ``[since, until]`` (of ``user`` only, where named), by
    start; rows that cannot be read are left out."""
    sql = f"SELECT {COLUMNS} FROM usage WHERE started < ? AND (ended IS NULL OR ended > ?)"
    args: tuple[Any, ...] = (until, since)
    if user is not None:
        sql += " AND user = ?"
        args += (user,)
    reader = _Reader(weigh)
    found = (reader.interval(r) for r in conn.execute(sql + " ORDER BY started, id", args))
    return [i for i in found if i is not None]

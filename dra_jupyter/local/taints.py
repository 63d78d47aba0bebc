"""Taints an admin put on devices by hand, as the ledger's ``taints`` table keeps them (since
schema version 4): one row per taint, live while ``removed`` is NULL (one live taint per
device and key, a unique index), kept after ``untaint`` with who removed it and when, so
that admins can read the history.

Who is the process's OS user, from its uid (``pwd``), not from the environment a caller
can set. The ledger trusts every process that can write its file: whoever may write it
may taint its devices (by default the file is its user's own, so only that user;
docs/shared-machine.md: the service decides admins instead).

The live taints reach the allocator as DeviceTaintRules (:func:`rules`), one per taint,
which the local backend puts in its inventory, so that allocation, explanations and
counts follow the upstream semantics :mod:`dra_jupyter.model.taintrules` implements.
"""

from __future__ import annotations

import os
import pwd
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from dra_jupyter.errors import InvalidInputError, NotFoundError
from dra_jupyter.model.admintaints import device_rule, partitions_of, rule_name, taint_value
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import DeviceTaint

_COLUMNS = "device, key, effect, reason, uid, user, added, removed, removed_uid, removed_by, value"


def os_user() -> tuple[int, str]:
    """This process's uid and its user's name from the password database (the uid itself
    where it has no entry): what a process cannot change by its environment."""
    uid = os.getuid()
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, str(uid)


def _taint(row: sqlite3.Row) -> DeviceTaint:
    return DeviceTaint(
        device=str(row["device"]),
        key=str(row["key"]),
        effect=str(row["effect"]),
        reason=str(row["reason"]),
        user=str(row["user"]),
        added=float(row["added"]),
        uid=row["uid"],
        removed=row["removed"],
        removed_by=row["removed_by"],
        removed_uid=row["removed_uid"],
        rule=rule_name(str(row["device"]), str(row["key"])),
        # a row of an admin's taint keeps no value (NULL): it is the reason where that fits
        value=str(row["value"] or taint_value(str(row["reason"]))),
    )


def add(
    conn: sqlite3.Connection,
    device: str,
    key: str,
    effect: str,
    reason: str,
    now: float,
    *,
    by: str | None = None,
    value: str = "",
) -> DeviceTaint:
    """Put the taint on the device (in the caller's transaction); a device that has a live
    taint of this key already is refused, naming who put it and why. ``by``: who, where it
    is not a user (the ``health watcher``; the uid stays the process's); ``value``: the
    taint's value (none: the reason, where it is a label value)."""
    live = conn.execute(
        f"SELECT {_COLUMNS} FROM taints WHERE device = ? AND key = ? AND removed IS NULL",
        (device, key),
    ).fetchone()
    if live is not None:
        old = _taint(live)
        raise InvalidInputError(
            f"taint: {device} has the taint {key} already ({old.effect}, by {old.user}: "
            f"{old.reason!r}); untaint it first to change it"
        )
    uid, user = os_user()
    user = by or user
    conn.execute(
        "INSERT INTO taints (device, key, effect, reason, uid, user, added, value) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (device, key, effect, reason, uid, user, now, value or None),
    )
    return DeviceTaint(
        device,
        key,
        effect,
        reason,
        user,
        now,
        uid,
        rule=rule_name(device, key),
        value=value or taint_value(reason),
    )


def remove(
    conn: sqlite3.Connection, device: str, key: str, now: float, *, by: str | None = None
) -> DeviceTaint:
    """Take the taint off (the row stays, with who and when); one that is not there is
    :class:`NotFoundError`. ``by``: as for :func:`add`."""
    uid, user = os_user()
    user = by or user
    cur = conn.execute(
        "UPDATE taints SET removed = ?, removed_uid = ?, removed_by = ? "
        "WHERE device = ? AND key = ? AND removed IS NULL",
        (now, uid, user, device, key),
    )
    if cur.rowcount == 0:
        raise NotFoundError(
            f"untaint: {device} has no taint {key}; dra-jupyter taint --list shows the "
            "devices' taints"
        )
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM taints WHERE device = ? AND key = ? AND removed = ? "
        "ORDER BY id DESC LIMIT 1",
        (device, key, now),
    ).fetchone()
    return _taint(row)


def live(conn: sqlite3.Connection, device: str, key: str) -> DeviceTaint | None:
    """The live taint ``key`` of ``device``, if there is one."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM taints WHERE device = ? AND key = ? AND removed IS NULL",
        (device, key),
    ).fetchone()
    return None if row is None else _taint(row)


def listed(conn: sqlite3.Connection, *, history: bool = False) -> list[DeviceTaint]:
    """The live taints (``history``: the removed ones too), oldest first."""
    where = "" if history else "WHERE removed IS NULL"
    rows = conn.execute(f"SELECT {_COLUMNS} FROM taints {where} ORDER BY id").fetchall()
    return [_taint(r) for r in rows]


def rules(taints: list[DeviceTaint], slices: Iterable[Mapping[str, Any]] = ()) -> tuple[Wire, ...]:
    """The DeviceTaintRules of the live ``taints``: one each, and one for each partition of
    a whole GPU tainted (:func:`~dra_jupyter.model.admintaints.partitions_of` in
    ``slices``), so that no new claim gets a MIG slice of a GPU taken out either. A
    partition's own taint of the same key (the health watcher taints each) is kept as it
    is; ``untaint`` of the GPU takes the covering rules away with its row."""
    live = [t for t in taints if t.removed is None]
    own = {(t.device, t.key) for t in live}
    slices = tuple(slices)
    out: dict[str, Wire] = {}
    for t in live:
        out[rule_name(t.device, t.key)] = device_rule(
            t.device, t.key, t.effect, t.reason, t.user, value=t.value or None
        )
    for t in live:
        for part in partitions_of(slices, t.device) if slices else ():
            name = rule_name(part, t.key)
            if (part, t.key) in own or name in out:
                continue
            out[name] = device_rule(
                part,
                t.key,
                t.effect,
                t.reason,
                t.user,
                value=t.value or None,
                part_of=rule_name(t.device, t.key),
            )
    return tuple(out.values())

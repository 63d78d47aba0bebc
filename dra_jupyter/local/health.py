"""The devices' health in the ledger (since schema version 5): a GPU that failed is tainted
(the ``taints`` table, by the ``health watcher``) and the failure recorded
(``health_events``: one row per signal that took a GPU out, with the claims that held it).

:func:`take_out` does both in the caller's transaction. The taint goes on the GPU and on
every MIG partition of it (a DeviceTaintRule selects one device; partitions are devices
of their own), so that no allocation hands out any of them, on the local backend as in
the service (both read the ledger's taints at every allocation). A signal seen again (the
same taint key, meaning and effect live on the GPU: the ECC counter read every few seconds)
is not recorded again; a stronger one (NoExecute after NoSchedule) replaces the taint.
"""

from __future__ import annotations

import json
import sqlite3

from dra_jupyter.local import taints as _taints
from dra_jupyter.model.health import WATCHER, HealthTaint, stronger
from dra_jupyter.types import ClaimRecord, HealthEvent

_COLUMNS = "device, time, source, what, key, value, effect, meaning, claims"


def take_out(
    conn: sqlite3.Connection,
    devices: list[str],
    taint: HealthTaint,
    now: float,
    holders: list[ClaimRecord],
) -> HealthEvent | None:
    """Taint ``devices`` (a GPU, first, and its partitions) with ``taint`` and record the
    event with the claims of ``holders`` that hold any of them; None (nothing written)
    where the GPU has that taint already, as strong and for the same reason."""
    gpu = devices[0]
    live = _taints.live(conn, gpu, taint.key)
    if (
        live is not None
        and live.reason == taint.meaning
        and not stronger(taint.effect, live.effect)
    ):
        return None
    for device in devices:
        old = _taints.live(conn, device, taint.key)
        if old is not None and not stronger(taint.effect, old.effect):
            continue  # as strong already: it stays as it is
        if old is not None:
            _taints.remove(conn, device, taint.key, now, by=WATCHER)
        _taints.add(
            conn, device, taint.key, taint.effect, taint.meaning, now, by=WATCHER, value=taint.value
        )
    taken = set(devices)
    claims = tuple((r.name, r.owner.user) for r in holders if taken & set(r.device_keys))
    event = HealthEvent(
        gpu,
        now,
        taint.source,
        taint.what,
        taint.key,
        taint.value,
        taint.effect,
        taint.meaning,
        claims,
    )
    conn.execute(
        f"INSERT INTO health_events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            gpu,
            now,
            taint.source,
            taint.what,
            taint.key,
            taint.value,
            taint.effect,
            taint.meaning,
            json.dumps([{"name": n, "user": u} for n, u in claims]),
        ),
    )
    return event


def events(conn: sqlite3.Connection, device: str | None = None) -> list[HealthEvent]:
    """The health events (``device``'s only: a GPU as ``driver/pool/name``), oldest first."""
    where, args = ("WHERE device = ?", (device,)) if device is not None else ("", ())
    rows = conn.execute(f"SELECT {_COLUMNS} FROM health_events {where} ORDER BY id", args)
    out = []
    for row in rows.fetchall():
        try:
            claims = tuple((str(c["name"]), str(c["user"])) for c in json.loads(row["claims"]))
        except (ValueError, TypeError, KeyError):
            claims = ()  # a damaged list of claims: the event itself is still worth reading
        out.append(
            HealthEvent(
                str(row["device"]),
                float(row["time"]),
                str(row["source"]),
                str(row["what"]),
                str(row["key"]),
                str(row["value"]),
                str(row["effect"]),
                str(row["meaning"]),
                claims,
            )
        )
    return out

"""Claims as the ledger's ``claims`` table keeps them: each row read back as a
:class:`~dra_jupyter.types.ClaimRecord` (parsed once per row), a damaged row reported and
moved aside to ``damaged_claims``, a claim written, named and handed to another holder.

A damaged row of a claim (owner or allocation not JSON, fields missing or of the wrong type,
a claim that is not a valid ResourceClaim) is reported once, by claim name, as a
:class:`~dra_jupyter.errors.DraJupyterWarning`, and skipped; a write transaction moves it to
``damaged_claims`` (nothing is deleted), so every other claim, and every other user's
command, keeps working. Its devices count as free from then on.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
import warnings
from dataclasses import fields, replace
from typing import Any

from dra_jupyter.accounting.book import DevicePart
from dra_jupyter.errors import DraJupyterWarning, ObjectError, shown
from dra_jupyter.local import book
from dra_jupyter.model.parse import parse_resource_claim
from dra_jupyter.types import ClaimRecord, Owner

CLAIM_COLUMNS = "name, namespace, owner, spec, allocation, created, last_activity, lease_expires"

# Claims parsed from the ledger's rows, by the rows' values: the ledger is read at every
# call, and a claim's row rarely changes, so each is parsed (JSON, owner, the ResourceClaim)
# once. The same record object comes back for the same row, which lets the allocator's cache
# reuse what it parsed of it. Records are frozen; their dicts must not be changed.
_PARSED: dict[tuple[Any, ...], ClaimRecord] = {}
_PARSED_MOST = 4096


class DamagedRowError(ValueError):
    """A row of the ledger that cannot be read; ``problem`` says why."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


_OWNER_FIELDS = {f.name for f in fields(Owner)}
_OWNER_REQUIRED = {"user", "host", "pid"}


def json_column(value: Any, column: str) -> Any:
    """The JSON of a text column, or :class:`DamagedRowError`."""
    if not isinstance(value, str):
        raise DamagedRowError(f"{column} is a {type(value).__name__}, not JSON text")
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, a 5000-digit number
        raise DamagedRowError(f"{column} is not JSON") from err


def owner_from(value: Any, column: str = "owner") -> Owner:
    """An :class:`Owner` from its JSON column, or :class:`DamagedRowError`."""
    data = json_column(value, column)
    if not isinstance(data, dict):
        raise DamagedRowError(f"{column} is not a JSON object")
    missing, extra = _OWNER_REQUIRED - data.keys(), data.keys() - _OWNER_FIELDS
    if missing or extra:
        named = [f"missing {', '.join(sorted(missing))}"] * bool(missing)
        named += [f"unknown {', '.join(shown(k) for k in sorted(extra))}"] * bool(extra)
        raise DamagedRowError(f"{column} has fields {'; '.join(named)}")
    for key, types in (
        ("user", (str,)),
        ("host", (str,)),
        ("pid", (int,)),
        ("start_time", (int, type(None))),
        ("kernel_id", (str, type(None))),
    ):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, types):
            raise DamagedRowError(f"{column}.{key} is {shown(value)}")
    return Owner.from_dict(data)


def time_column(value: Any, column: str, *, optional: bool = False) -> float | None:
    """A time column (``optional``: or NULL), or :class:`DamagedRowError`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise DamagedRowError(f"{column} is {shown(value)}, not a time")
    if not optional and not math.isfinite(value):  # an endless lease is an older ledger's
        raise DamagedRowError(f"{column} is {shown(value)}, not a time")
    return value


@functools.lru_cache(maxsize=1024)
def _claim_problem(spec: str, allocation: str) -> str | None:
    """Why the stored ResourceClaim and its allocation are not valid, or None (parsed once
    per text: a ledger is read at every call)."""
    try:
        parse_resource_claim({**json.loads(spec), "status": {"allocation": json.loads(allocation)}})
    except ObjectError as err:
        return f"not a valid ResourceClaim: {str(err)[:200]}"
    except (TypeError, ValueError, RecursionError) as err:
        return f"not a valid ResourceClaim: {type(err).__name__}"
    return None


def record_from_row(row: sqlite3.Row) -> ClaimRecord:
    """A claim as the ``claims`` table keeps it; :class:`DamagedRowError` if it is not one."""
    name, namespace = row["name"], row["namespace"]
    if not isinstance(name, str) or not name:
        raise DamagedRowError(f"name is {shown(name)}")
    if not isinstance(namespace, str):
        raise DamagedRowError(f"namespace is {shown(namespace)}")
    spec, allocation = (
        json_column(row["spec"], "spec"),
        json_column(row["allocation"], "allocation"),
    )
    for column, value in (("spec", spec), ("allocation", allocation)):
        if not isinstance(value, dict):
            raise DamagedRowError(f"{column} is not a JSON object")
    problem = _claim_problem(row["spec"], row["allocation"])
    if problem is not None:
        raise DamagedRowError(problem)
    created = time_column(row["created"], "created")
    last_activity = time_column(row["last_activity"], "last_activity")
    assert created is not None and last_activity is not None  # not optional
    return ClaimRecord(
        name=name,
        namespace=namespace,
        owner=owner_from(row["owner"]),
        spec=spec,
        allocation=allocation,
        created=created,
        last_activity=last_activity,
        lease_expires=time_column(row["lease_expires"], "lease_expires", optional=True),
    )


def _file_of(conn: sqlite3.Connection) -> str:
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def report_damage(conn: sqlite3.Connection, what: str, problem: str, done: str) -> None:
    """Warn (once per call) that ``what`` of the ledger is damaged, and what was done."""
    warnings.warn(
        f"ledger {_file_of(conn)}: {what} is damaged ({problem}); {done}",
        DraJupyterWarning,
        stacklevel=3,
    )


def claims(conn: sqlite3.Connection) -> list[ClaimRecord]:
    """The live claims, by creation. A damaged row is reported and skipped; inside a
    (write) transaction it is also moved to ``damaged_claims``."""
    rows = conn.execute("SELECT rowid AS row_id, * FROM claims ORDER BY created, name").fetchall()
    records = []
    for row in rows:
        key = tuple(row)[1:]  # the stored values (not the row id): the same ones parse alike
        record = _PARSED.get(key)
        if record is None:
            try:
                record = record_from_row(row)
            except DamagedRowError as damage:
                _quarantine(conn, row, damage.problem)
                continue
            if len(_PARSED) >= _PARSED_MOST:
                _PARSED.clear()
            _PARSED[key] = record
        records.append(record)
    return records


def _quarantine(conn: sqlite3.Connection, row: sqlite3.Row, problem: str) -> None:
    name = row["name"]
    label = name if isinstance(name, str) and name and len(name) <= 80 else shown(name)
    done = "skipped"
    if conn.in_transaction:
        conn.execute(
            f"INSERT INTO damaged_claims ({CLAIM_COLUMNS}, problem, time) "
            f"SELECT {CLAIM_COLUMNS}, ?, ? FROM claims WHERE rowid = ?",
            (problem, time.time(), row["row_id"]),
        )
        conn.execute("DELETE FROM claims WHERE rowid = ?", (row["row_id"],))
        book.close_named(conn, name, "damaged", time.time())
        done = "moved to the table damaged_claims"
    report_damage(conn, f"claim {label}", problem, f"{done}; its devices count as free")


def next_name(conn: sqlite3.Connection, prefix: str) -> str:
    """``<prefix>-<n>``: the next number of the prefix whose name is not taken."""
    key = f"seq:{prefix}"
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    value = row["value"] if row else None
    # a damaged sequence starts again at 0: taken names are skipped below
    seq = int(value) if isinstance(value, str) and value.isdigit() and len(value) < 19 else 0
    while True:
        seq += 1
        name = f"{prefix}-{seq}"
        if conn.execute("SELECT 1 FROM claims WHERE name = ?", (name,)).fetchone() is None:
            break
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(seq)))
    return name


def insert(
    conn: sqlite3.Connection, record: ClaimRecord, parts: tuple[DevicePart, ...] | None = None
) -> None:
    """Write a new claim (its name not taken: an IntegrityError otherwise), and open its
    interval in the usage book (``parts``: its devices' worth, where the writer knows it)."""
    values = (
        record.name,
        record.namespace,
        json.dumps(record.owner.to_dict()),
        json.dumps(record.spec),
        json.dumps(record.allocation),
        record.created,
        record.last_activity,
        record.lease_expires,
    )
    conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
    book.open_interval(conn, record, parts)
    # The row as a read will parse it (its JSON read back), known now: the next reads
    # find it parsed. A row that is rolled back is never read, so never looked up.
    if len(_PARSED) >= _PARSED_MOST:
        _PARSED.clear()
    lease = record.lease_expires
    _PARSED[values] = replace(
        record,
        spec=json.loads(values[3]),
        allocation=json.loads(values[4]),
        created=float(record.created),  # REAL columns: read back as floats
        last_activity=float(record.last_activity),
        lease_expires=None if lease is None else float(lease),
    )


def set_owner(conn: sqlite3.Connection, name: str, owner: Owner) -> None:
    """Hand a claim to another holder (the server, while it restarts the kernel)."""
    conn.execute("UPDATE claims SET owner = ? WHERE name = ?", (json.dumps(owner.to_dict()), name))

"""A ledger that cannot be used, and damaged rows in one that can.

A ledger that cannot be used (a full disk, a file that cannot be written, a damaged file,
another program's SQLite file, another schema version) is a :class:`LedgerError`: exit 3
from the command line, one line, with advice that fits the cause, and the file as it was.
A damaged row of one claim is reported once, by its name, and moved aside (table
``damaged_claims``): every other claim, and every other user's command, keeps working.

First the cases the fuzzing found, as examples; then a property (hypothesis) over the
rows: any value in any column of a claim's row. ``make fuzz`` runs it far longer.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dra_jupyter.cli import main
from dra_jupyter.errors import DraJupyterWarning, LedgerError
from dra_jupyter.local.connections import Connections
from dra_jupyter.local.ledger import Ledger
from tests.fuzzing import fuzz_settings
from tests.local.test_ledger import backend, claim, owner, record

Wire = dict[str, Any]
DAMAGED = "damaged_claims"


def cli(ledger: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--ledger", str(ledger), "--inventory", "h200-8x"], out, err)
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def exit_3(ledger: Path, *argv: str) -> str:
    """The command fails with exit 3 and one line; returns it."""
    code, out, err = cli(ledger, *argv)
    assert (code, out) == (3, ""), err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: ledger {ledger}: "), err
    return err.rstrip("\n")


def sql(path: Path, statement: str, *args: Any) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return conn.execute(statement, args).fetchall()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


@contextlib.contextmanager
def held_open(path: Path) -> Iterator[None]:
    """Another process that holds the ledger open (a reader) while the block runs."""
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('SELECT COUNT(*) FROM claims').fetchall(); print('open', flush=True); "
        "sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "open\n"
        yield
    finally:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of the ledger may use no more pages than the file has now: SQLite
    answers 'database or disk is full' (SQLITE_FULL), as on a full disk."""
    connect = Connections._connect

    def connect_full(self: Connections, *, wal: bool = True) -> sqlite3.Connection:
        conn = connect(self, wal=wal)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(Connections, "_connect", connect_full)


def read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger's connections open the file read-only, as on a read-only mount (or for a
    user without write permission: root writes anyway, so the tests cannot chmod)."""
    connect = sqlite3.connect

    def connect_read_only(path: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = connect(f"file:{path}?mode=ro", *args, uri=True, **kwargs)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_read_only)


# --- a ledger that cannot be used ----------------------------------------------------------


def test_a_full_disk_while_another_process_holds_the_ledger(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = backend(ledger, "alice")
    with held_open(ledger.path):
        full_disk(monkeypatch)
        made = []
        with pytest.raises(LedgerError) as info:  # until the disk is full
            for i in range(40):
                made.append(alice.allocate(claim({"gpu": 1}, f"c{i}"), lease=600).name)
                if len(made) == 8:
                    alice.release(made.pop(0))
        message = str(info.value)
        assert message.startswith(f"ledger {ledger.path}: the disk is full (database or disk")
        assert "free space on it, or choose another path (DRA_JUPYTER_LEDGER)" in message
        assert "move the file away" not in message
        assert "cannot open it as a SQLite database" not in message
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert [r.name for r in ledger.read_claims()] == made  # nothing lost, nothing half
        line = exit_3(ledger.path, "request", "gpu=1", "--name", "more")
        assert "the disk is full" in line
        assert "free space on it" in line
    assert [r.name for r in ledger.read_claims()] == made


def test_a_ledger_that_cannot_be_written(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("c1", owner("alice")))
    read_only(monkeypatch)
    with pytest.raises(LedgerError) as info:
        Ledger(ledger.path)
    message = str(info.value)
    assert message.startswith(f"ledger {ledger.path}: cannot write it (attempt to write a readonly")
    assert "let this user write the file and its folder" in message
    assert "move the file away" not in message
    assert "cannot open it as a SQLite database" not in message
    line = exit_3(ledger.path, "claims")
    assert "cannot write it" in line


def test_a_file_whose_later_pages_are_damaged(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        for i in range(40):
            Ledger.insert(conn, record(f"c{i}", owner("alice"), f"gpu-{i % 8}"))
    sql(ledger.path, "PRAGMA wal_checkpoint(TRUNCATE)")
    [(pages,)] = sql(ledger.path, "PRAGMA page_count")
    [(size,)] = sql(ledger.path, "PRAGMA page_size")
    data = bytearray(ledger.path.read_bytes())
    data[(pages - 3) * size :] = b"\xa5" * (3 * size)  # the claims' last pages
    ledger.path.write_bytes(bytes(data))
    opened = Ledger(ledger.path)  # the first pages are whole
    for read in (opened.read_claims, backend(opened).claims):
        with pytest.raises(LedgerError) as info:
            read()
        assert str(info.value) == (
            f"ledger {ledger.path}: the file is damaged (database disk image is malformed); "
            "move the file away or choose another path (DRA_JUPYTER_LEDGER); dra-jupyter "
            "then starts a new, empty ledger there"
        )
    assert "the file is damaged" in exit_3(ledger.path, "claims")
    assert "the file is damaged" in exit_3(ledger.path, "devices")


def test_another_programs_sqlite_file_is_refused_before_anything_changes(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    sql(path, "CREATE TABLE claims (x INTEGER)")
    sql(path, "INSERT INTO claims VALUES (1)")
    before = digest(path)
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert str(info.value) == (
        f"ledger {path}: the file is a SQLite database of something else (tables 'claims'); "
        "it was not changed; choose another path (DRA_JUPYTER_LEDGER)"
    )
    assert digest(path) == before
    assert sql(path, "PRAGMA journal_mode") == [("delete",)]  # not switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]
    assert "something else" in exit_3(path, "claims")
    assert digest(path) == before


def test_a_foreign_file_with_a_meta_table_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    sql(path, "CREATE TABLE meta (id INTEGER, blob BLOB)")
    sql(path, "CREATE TABLE claims (x)")
    before = digest(path)
    with pytest.raises(LedgerError, match="a SQLite database of something else"):
        Ledger(path)
    assert digest(path) == before


def test_a_schema_version_that_is_not_a_number(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        conn.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema'")
    before = digest(ledger.path)
    with pytest.raises(LedgerError) as info:
        Ledger(ledger.path)
    assert str(info.value) == (
        f"ledger {ledger.path}: the file is damaged (its schema version is 'abc', not a "
        "number); move the file away or choose another path (DRA_JUPYTER_LEDGER); "
        "dra-jupyter then starts a new, empty ledger there"
    )
    assert digest(ledger.path) == before
    assert "its schema version is 'abc'" in exit_3(ledger.path, "request", "gpu=1")


# --- damaged rows --------------------------------------------------------------------------

OWNER = json.dumps(owner("alice").to_dict())
OWNER_DATA = json.loads(OWNER)

# id -> (column, the value written into it, what the report says)
DAMAGE: dict[str, tuple[str, Any, str]] = {
    "owner-not-json": ("owner", "{user: alice", "owner is not JSON"),
    "allocation-not-json": ("allocation", "not json", "allocation is not JSON"),
    "spec-not-json": ("spec", b"\x00\xff", "spec is a bytes, not JSON text"),
    "owner-missing-field": (
        "owner",
        json.dumps({k: v for k, v in OWNER_DATA.items() if k != "pid"}),
        "owner has fields missing pid",
    ),
    "owner-extra-field": (
        "owner",
        json.dumps({**OWNER_DATA, "colour": "red"}),
        "owner has fields unknown 'colour'",
    ),
    "owner-pid-text": ("owner", json.dumps({**OWNER_DATA, "pid": "12"}), "owner.pid is '12'"),
    "owner-a-list": ("owner", "[1, 2]", "owner is not a JSON object"),
    "lease-as-text": ("lease_expires", "in two hours", "lease_expires is 'in two hours'"),
    "created-null-text": ("created", "yesterday", "created is 'yesterday', not a time"),
    "created-infinite": ("created", float("inf"), "created is inf, not a time"),
    "activity-infinite": ("last_activity", float("-inf"), "last_activity is -inf, not a time"),
    "allocation-a-number": ("allocation", "5", "allocation is not a JSON object"),
    "spec-not-a-claim": (
        "spec",
        json.dumps({"kind": "ResourceClaim", "metadata": {"name": "c1"}, "spec": 5}),
        "not a valid ResourceClaim: ResourceClaim default/c1, spec: must be an object",
    ),
    "results-not-a-list": (
        "allocation",
        json.dumps({"devices": {"results": {"a": 1}}}),
        "status.allocation.devices.results: must be a list",
    ),
}


def two_users(ledger: Ledger) -> tuple[str, str]:
    """alice holds one GPU (the claim that gets damaged), bob another."""
    alice = backend(ledger, "alice").allocate(claim({"gpu": 1}, "c1"))
    bob = backend(ledger, "bob").allocate(claim({"gpu": 1}, "c2"))
    return alice.name, bob.name


def damage(ledger: Ledger, name: str, column: str, value: Any) -> None:
    sql(ledger.path, f"UPDATE claims SET {column} = ? WHERE name = ?", value, name)


def reports(caught: list[warnings.WarningMessage]) -> list[str]:
    assert all(issubclass(w.category, DraJupyterWarning) for w in caught), caught
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_row_is_reported_once_and_moved_aside(ledger: Ledger, case: str) -> None:
    column, value, problem = DAMAGE[case]
    damaged, kept = two_users(ledger)
    damage(ledger, damaged, column, value)
    bob = backend(ledger, "bob")
    with pytest.warns(DraJupyterWarning) as caught:
        assert [r.name for r in bob.claims(all_users=True)] == [kept]
    [report] = reports(list(caught))
    assert report.startswith(f"ledger {ledger.path}: claim {damaged} is damaged ("), report
    assert problem in report, report
    assert report.endswith("moved to the table damaged_claims; its devices count as free")
    # moved, as it was, with why: nothing deleted
    [(name, stored, why)] = sql(ledger.path, f"SELECT name, {column}, problem FROM {DAMAGED}")
    assert (name, stored) == (damaged, value)
    assert problem in why
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once: now it is out of the way
        assert [r.name for r in bob.claims(all_users=True)] == [kept]
        assert len(backend(ledger, "alice").allocate(claim({"gpu": 7})).device_keys) == 7
        assert bob.release(kept)


@pytest.mark.parametrize("case", ["owner-not-json", "lease-as-text", "spec-not-a-claim"])
@pytest.mark.parametrize("first", ["claims", "devices", "request"])
def test_the_command_line_reports_a_damaged_row_and_goes_on(
    ledger: Ledger, case: str, first: str
) -> None:
    column, value, problem = DAMAGE[case]
    damaged, kept = two_users(ledger)
    damage(ledger, damaged, column, value)
    argv = {"claims": ("claims", "--all"), "devices": ("devices",), "request": ("request", "gpu=1")}
    code, out, err = cli(ledger.path, *argv[first])
    assert code == 0, err
    [line] = err.splitlines()
    assert line.startswith(f"warning: ledger {ledger.path}: claim {damaged} is damaged (")
    assert problem in line
    if first == "claims":  # (the claims hold devices of the tests' inventory, not h200-8x's)
        assert kept in out
        assert damaged not in out
    for again in (("devices",), ("request", "gpu=1"), ("claims", "--all"), ("release", "--all")):
        code, out, err = cli(ledger.path, *again)
        assert (code, err) == (0, ""), again  # reported once: moved aside by the first


def test_a_damaged_row_read_outside_a_transaction_is_skipped(ledger: Ledger) -> None:
    damaged, kept = two_users(ledger)
    damage(ledger, damaged, "owner", "{")
    with pytest.warns(DraJupyterWarning, match=f"claim {damaged} is damaged .*; skipped;"):
        assert [r.name for r in ledger.read_claims()] == [kept]
    assert sql(ledger.path, f"SELECT COUNT(*) FROM {DAMAGED}") == [(0,)]


def test_a_row_without_a_name(ledger: Ledger) -> None:
    _, kept = two_users(ledger)
    sql(ledger.path, "UPDATE claims SET name = NULL WHERE name = 'c1'")
    with pytest.warns(DraJupyterWarning, match=r"claim None is damaged \(name is None\)"):
        assert [r.name for r in backend(ledger).claims(all_users=True)] == [kept]


def test_damaged_waiters_releases_and_name_sequence(ledger: Ledger) -> None:
    alice = backend(ledger, "alice")
    made = alice.allocate(claim({"gpu": 1}))
    assert alice.release(made.name)
    sql(ledger.path, "UPDATE releases SET owner = 'x'")
    sql(ledger.path, "UPDATE meta SET value = 'many' WHERE key LIKE 'seq:%'")
    sql(ledger.path, "INSERT INTO waiters (shape, owner, created) VALUES ('s', '{', 1)")
    assert ledger.releases() == []  # history only informs: damaged entries are left out
    assert alice.released_at(made.name) is None
    with pytest.warns(DraJupyterWarning, match=r"waiter \d+ is damaged .*dropped from the queue"):
        again = alice.allocate(claim({"gpu": 1}))
    assert again.name == made.name  # the sequence starts again, skipping taken names
    assert sql(ledger.path, "SELECT COUNT(*) FROM waiters") == [(0,)]


# --- property: any value in any column of a claim's row ------------------------------------

COLUMNS = (
    "name",
    "namespace",
    "owner",
    "spec",
    "allocation",
    "created",
    "last_activity",
    "lease_expires",
)
JSON_COLUMNS = ("owner", "spec", "allocation")


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)


JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["alice", "", "gpu.nvidia.com", "n1", "gpu-0", "default", 2**63]),
    _containers,
    max_leaves=6,
)
SQL_VALUES = (
    st.none()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=30)
    | st.binary(max_size=20)
    | JUNK.map(json.dumps)
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


@st.composite
def mutated_json(draw: st.DrawFn, text: str) -> str:
    """The JSON text of a column with one value inside it replaced or removed."""
    data = json.loads(text)
    path = draw(st.sampled_from(list(_paths(data))))
    if not path:
        return json.dumps(draw(JUNK))
    parent = copy.deepcopy(data)
    target = parent
    for step in path[:-1]:
        target = target[step]
    if draw(st.booleans()):
        target[path[-1]] = draw(JUNK)
    else:
        del target[path[-1]]
    return json.dumps(parent)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger of three users' claims, checkpointed into one file, copied per example."""
    path = tmp_path_factory.mktemp("template") / "ledger.sqlite"
    ledger = Ledger(path)
    for user, name in (("alice", "a1"), ("bob", "b1"), ("carol", "c1")):
        backend(ledger, user).allocate(claim({"gpu": 1}, name))
    sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    return path


_COPIES = iter(range(10**9))


@fuzz_settings(60)
@given(data=st.data())
def test_any_damage_to_a_row_takes_down_only_that_claim(
    template: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    path = tmp_path_factory.getbasetemp() / f"ledger-{next(_COPIES)}.sqlite"
    shutil.copyfile(template, path)
    victim = data.draw(st.sampled_from(["a1", "b1", "c1"]), label="claim")
    column = data.draw(st.sampled_from(COLUMNS), label="column")
    others = {r.name: r for r in Ledger(path).read_claims() if r.name != victim}
    [(row, current)] = sql(path, f"SELECT rowid, {column} FROM claims WHERE name = ?", victim)
    if column in JSON_COLUMNS and data.draw(st.booleans(), label="inside the JSON"):
        value: Any = data.draw(mutated_json(current), label="value")
    else:
        value = data.draw(SQL_VALUES, label="value")
    try:
        damage(Ledger(path), victim, column, value)
    except sqlite3.IntegrityError:  # NOT NULL (NaN is NULL), or the name of another claim
        assume(False)
    [(stored,)] = sql(path, "SELECT name FROM claims WHERE rowid = ?", row)  # as SQLite kept it
    ledger = Ledger(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        held = {r.name: r for r in backend(ledger, "dave").claims(all_users=True)}
        made = backend(ledger, "dave").allocate(claim({"gpu": 1}))
    messages = reports(caught)
    for name, rec in others.items():  # the others stay as they were
        assert held.get(name) == rec, (name, messages)
    assert made.name in {r.name for r in ledger.read_claims()}
    in_use = stored in held
    released = stored in {r.name for r in ledger.releases(1000)}
    moved = sql(path, f"SELECT name IS ? FROM {DAMAGED}", stored) == [(1,)]
    # the claim is read as it is (the value is a valid one), released (an owner that is
    # gone, a lease that ended), or reported once and moved aside as it was
    assert in_use or released or moved, (value, messages)
    assert len(messages) == (1 if moved else 0), messages
    if moved:
        assert " is damaged (" in messages[0]
        assert messages[0].startswith(f"ledger {path}: claim ")

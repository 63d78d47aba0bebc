"""The ledger's schema versions: a ledger of every earlier version (built by that version's
own statements, :mod:`tests.local.ledger_v1`) is migrated forward in one transaction, with
nothing lost, also when the migrating process is killed; a newer version is refused."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_jupyter.errors import LedgerError
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import SCHEMA_VERSION, Ledger
from tests.local.ledger_v1 import write_v1
from tests.local.ledger_v2 import write_v2
from tests.local.ledger_v3 import write_v3
from tests.local.ledger_v4 import write_v4
from tests.local.ledger_v5 import write_v5
from tests.local.ledger_v6 import write_v6
from tests.local.ledger_v7 import write_v7
from tests.local.test_ledger import INVENTORY, claim, owner, record
from tests.local.worker import WorkerProcess

# A builder of a real ledger file for every version before this one: a new version needs
# the one before it kept here (its schema and statements verbatim).
BUILDERS: dict[int, Callable[..., None]] = {
    1: write_v1,
    2: write_v2,
    3: write_v3,
    4: write_v4,
    5: write_v5,
    6: write_v6,
    7: write_v7,
}


def stored(path: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def columns(path: Path, table: str) -> list[str]:
    return [str(r[1]) for r in stored(path, f"PRAGMA table_info({table})")]


def old_ledger(path: Path, version: int) -> None:
    alice, bob = owner("alice"), owner("bob")
    BUILDERS[version](
        path,
        [record("alice-1", alice, "gpu-0"), record("bob-1", bob, "gpu-1")],
        [(record("alice-2", alice, "gpu-2"), "idle", 1500.0)],
        [("shape-a", bob, 1200.0)],
    )


def test_every_earlier_version_has_a_builder() -> None:
    assert set(BUILDERS) == set(range(1, SCHEMA_VERSION))


@pytest.mark.parametrize("version", sorted(BUILDERS))
def test_an_older_ledger_is_migrated_with_nothing_lost(tmp_path: Path, version: int) -> None:
    path = tmp_path / "ledger.sqlite"
    old_ledger(path, version)
    before = stored(path, "SELECT * FROM claims ORDER BY name")
    ledger = Ledger(path)
    assert stored(path, "SELECT value FROM meta WHERE key = 'schema'") == [(str(SCHEMA_VERSION),)]
    assert stored(path, "SELECT * FROM claims ORDER BY name") == before
    assert [r.name for r in ledger.read_claims()] == ["alice-1", "bob-1"]
    assert [(s, o.user, t) for s, o, t in ledger.waiters()] == [("shape-a", "bob", 1200.0)]
    assert stored(path, "PRAGMA integrity_check") == [("ok",)]
    # what the older version kept of a release: who, why and when (version 1: not the claim)
    gone = ledger.released("alice-2")
    assert gone is not None
    assert (gone.owner.user, gone.reason, gone.time) == ("alice", "idle", 1500.0)
    assert (gone.record is None) == (version == 1)
    # the usage book begins: an open interval for each live claim, from when it was made
    book = ledger.usage(0.0, 1e12, weigh=LocalBackend(INVENTORY, ledger, owner("x")).weights.of_key)
    assert [(i.claim, i.user, i.start, i.end, i.gpus) for i in book] == [
        (r.name, r.owner.user, r.created, None, 1.0)
        for r in sorted(ledger.read_claims(), key=lambda r: (r.created, r.name))
    ]
    with ledger.transaction() as tx:
        assert Ledger.next_name(tx, "alice") == "alice-8"  # the name sequence goes on
    # and the migrated ledger works: a claim is allocated, released, and its end is kept
    backend = LocalBackend(INVENTORY, ledger, owner("carol"))
    made = backend.allocate(claim({"gpu": 1}))
    assert made.device_keys[0].endswith(("gpu-2", "gpu-3"))
    assert backend.release(made.name)
    ended = Ledger(path).released(made.name)
    assert ended is not None and ended.record == made and ended.reason == "user"
    closed = [i for i in Ledger(path).usage(0.0, 1e12) if i.claim == made.name]
    assert [(i.start, i.end, i.reason, i.released_by) for i in closed] == [
        (made.created, ended.time, "user", "carol")  # who released it (version 8)
    ]
    assert Ledger(path).read_claims() == ledger.read_claims()  # opened again: no second step


def test_a_release_keeps_the_claim_and_its_message(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    kept = record("alice-1", owner("alice"))
    with ledger.transaction() as tx:
        Ledger.insert(tx, kept)
    with ledger.transaction() as tx:
        Ledger.delete(tx, kept, "idle", 2000.0, "idle for 40 min")
    gone = ledger.released("alice-1")
    assert gone is not None
    assert (gone.record, gone.reason, gone.time, gone.message) == (
        kept,
        "idle",
        2000.0,
        "idle for 40 min",
    )
    assert ledger.released("nobody-1") is None
    assert ledger.releases()[0] == gone


def test_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION + 1),))
        conn.commit()
    before = path.read_bytes()
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    text = str(info.value)
    assert "\n" not in text
    assert text == (
        f"ledger {path}: schema version {SCHEMA_VERSION + 1} is newer than this dra-jupyter "
        f"reads (1 to {SCHEMA_VERSION}); it was not changed; upgrade dra-jupyter, or use "
        "another path (DRA_JUPYTER_LEDGER)"
    )
    assert path.read_bytes() == before


def test_a_migration_killed_before_its_commit_loses_nothing(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    path = tmp_path / "ledger.sqlite"
    old_ledger(path, 1)
    claims = stored(path, "SELECT * FROM claims ORDER BY name")
    releases = stored(path, "SELECT * FROM releases")
    migrating = WorkerProcess("migrate", str(path))
    workers.append(migrating)
    assert migrating.event()["event"] == "migrated"  # every step ran, the commit did not
    migrating.kill()
    assert not any("committed" in line for line in migrating.output)
    # still version 1, as it was: another version-1 program could go on using it
    assert stored(path, "SELECT value FROM meta WHERE key = 'schema'") == [("1",)]
    assert "claim" not in columns(path, "releases")
    assert stored(path, "SELECT * FROM claims ORDER BY name") == claims
    assert stored(path, "SELECT * FROM releases") == releases
    assert stored(path, "PRAGMA integrity_check") == [("ok",)]
    # opened again, it is migrated (the killed process's lock went with it)
    ledger = Ledger(path)
    assert columns(path, "releases")[-2:] == ["claim", "message"]
    assert [r.name for r in ledger.read_claims()] == ["alice-1", "bob-1"]


def test_many_processes_migrate_one_ledger_once(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    path = tmp_path / "ledger.sqlite"
    old_ledger(path, 1)
    started = [WorkerProcess("open", str(path)) for _ in range(6)]
    workers.extend(started)
    for w in started:
        assert w.event()["event"] == "ready"
    for w in started:  # all at once: they race to migrate it
        w.send("go")
    errors = [e["error"] for w in started if (e := w.event())["event"] != "opened"]
    assert errors == []
    assert columns(path, "releases").count("claim") == 1
    assert [r.name for r in Ledger(path).read_claims()] == ["alice-1", "bob-1"]


def test_the_history_keeps_the_claims_of_the_latest_releases_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older releases keep who, why and when; the claim itself only the latest ones, so the
    history stays bounded in size."""
    from dra_jupyter.local import releases as module  # noqa: PLC0415  # its constants

    monkeypatch.setattr(module, "RELEASED_CLAIMS_KEPT", 20)
    monkeypatch.setattr(module, "PRUNE_EVERY", 8)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    who = owner("alice")
    for i in range(1, 61):
        kept = record(f"alice-{i}", who)
        with ledger.transaction() as tx:
            Ledger.insert(tx, kept)
            Ledger.delete(tx, kept, "user", float(i))
    with_claim = [r[0] for r in stored(ledger.path, "SELECT id FROM releases WHERE claim NOT NULL")]
    assert with_claim == list(range(37, 61))  # the latest 20, and up to 8 until the next prune
    assert len(stored(ledger.path, "SELECT id FROM releases")) == 60  # who, why, when: all
    old = ledger.released("alice-1")
    assert old is not None and (old.reason, old.time, old.record) == ("user", 1.0, None)
    latest = ledger.released("alice-60")
    assert latest is not None and latest.record is not None


def test_a_version_no_dra_jupyter_wrote_is_refused_as_such(tmp_path: Path) -> None:
    """Version 0 is a number, but none this dra-jupyter (or an older one) wrote: refused in
    one line that says so, not as a version that is not a number."""
    path = tmp_path / "ledger.sqlite"
    Ledger(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
        conn.commit()
    before = path.read_bytes()
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert str(info.value) == (
        f"ledger {path}: the file is damaged (its schema version is 0, which no dra-jupyter "
        "writes); move the file away or choose another path (DRA_JUPYTER_LEDGER); "
        "dra-jupyter then starts a new, empty ledger there"
    )
    assert path.read_bytes() == before


def test_a_version_4_ledger_keeps_its_taints_and_gets_an_empty_health_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite"
    old_ledger(path, 4)
    ledger = Ledger(path)
    (kept,) = ledger.taints()
    assert (kept.device, kept.reason, kept.user) == ("gpu.nvidia.com/node-1/gpu-7", "fan", "root")
    assert ledger.health_events() == []
    assert "claims" in columns(path, "health_events")


def test_a_version_6_ledger_is_under_no_pressure_and_keeps_what_reclaim_needs(
    tmp_path: Path,
) -> None:
    """Version 7's step: nobody was reported or warned before; after it, a claim's
    reported activity and its warning are kept, and go with its release."""
    path = tmp_path / "ledger.sqlite"
    old_ledger(path, 6)
    ledger = Ledger(path)
    assert ledger.reclaim_notices() == {}
    assert ledger.under_pressure()  # bob's request of version 6 still waits
    assert "busy_until" in columns(path, "claim_activity")
    assert "keeps" in columns(path, "reclaim_notices")
    alice = LocalBackend(INVENTORY, ledger, owner("alice"))
    assert alice.activity(name="alice-1", busy=True) == 1
    assert stored(path, "SELECT claim FROM claim_activity") == [("alice-1",)]
    assert alice.release("alice-1")
    assert stored(path, "SELECT claim FROM claim_activity") == []

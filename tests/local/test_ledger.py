"""The SQLite ledger, owner liveness and the local backend, one process (plus helpers) at a time.

Time is faked (``clock``/``sleep`` of :class:`LocalBackend`) wherever a test depends on it,
so nothing here asserts how long anything takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.errors import AllocationError, DraJupyterError, ForbiddenError, LedgerError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import SCHEMA_VERSION, Ledger, Release, record_from_row
from dra_jupyter.local.shapes import shape_of
from dra_jupyter.types import ClaimRecord, Owner, Waiting, claim_prefix, process_start_time
from tests.local.worker import WorkerProcess, claim_for, gpu_inventory

Wire = dict[str, Any]
HOST = socket.gethostname()
INVENTORY = gpu_inventory()


def owner(user: str) -> Owner:
    """An owner that is alive: this process, under another user name."""
    pid = os.getpid()
    return Owner(user, HOST, pid, process_start_time(pid))


def claim(spec: Wire, name: str = "") -> Wire:
    return claim_for(INVENTORY, spec, name)


def record(name: str, who: Owner, device: str = "gpu-0", now: float = 1000.0) -> ClaimRecord:
    spec = claim({"gpu": 1}, name)
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": device}
    return ClaimRecord(
        name=name,
        namespace="default",
        owner=who,
        spec=spec,
        allocation={"devices": {"results": [result]}},
        created=now,
        last_activity=now,
    )


def devices(rec: ClaimRecord) -> list[str]:
    return [r["device"] for r in rec.allocation["devices"]["results"]]


def waiter_count(ledger: Ledger) -> int:
    with contextlib.closing(sqlite3.connect(ledger.path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM waiters").fetchone()[0])


class FakeTime:
    """A clock that only moves when the backend sleeps; at most ``limit`` sleeps."""

    def __init__(self, limit: int = 100) -> None:
        self.now = 1_000_000.0
        self.sleeps = 0
        self.limit = limit
        self.on_sleep: Callable[[int], None] | None = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps > self.limit:
            raise AssertionError(f"the backend slept more than {self.limit} times")
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


@pytest.fixture
def inventory() -> Inventory:
    return INVENTORY


def backend(
    ledger: Ledger, user: str = "alice", fake: FakeTime | None = None, **kw: Any
) -> LocalBackend:
    if fake is not None:
        kw.update(clock=fake.clock, sleep=fake.sleep)
    return LocalBackend(INVENTORY, ledger, owner(user), **kw)


@contextlib.contextmanager
def short_lived() -> Iterator[subprocess.Popen[bytes]]:
    """A real process that lives until the block ends (it exits when its stdin closes)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def owner_of(pid: int, user: str = "carol") -> Owner:
    start = process_start_time(pid)
    assert start is not None
    return Owner(user, HOST, pid, start)


def process_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


# --- the schema, rows and history -------------------------------------------------------------


def test_schema_is_created_once(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "folder" / "ledger.sqlite"
    Ledger(path)
    Ledger(path)  # opening again keeps what is there
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        schema = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert {"meta", "claims", "waiters", "releases"} <= tables
    assert schema == [(str(SCHEMA_VERSION),)]
    assert mode == "wal"
    assert Ledger(path).read_claims() == []


def test_empty_file_becomes_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"")
    assert Ledger(path).read_claims() == []


def test_folder_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(LedgerError, match="cannot create its folder") as info:
        Ledger(tmp_path / "file" / "ledger.sqlite")
    assert "DRA_JUPYTER_LEDGER" in str(info.value)


@pytest.mark.parametrize(
    "garbage",
    [b"hello, world\n", bytes(range(256)) * 16, b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["text", "binary", "bad-header"],
)
def test_corrupt_file_is_one_clear_error(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(garbage)
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    message = str(info.value)
    assert isinstance(info.value, DraJupyterError)
    assert "\n" not in message
    assert message.startswith(f"ledger {path}: cannot open it as a SQLite database")
    assert "move the file away or choose another path (DRA_JUPYTER_LEDGER)" in message


def test_ledger_overwritten_with_garbage(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("c1", owner("alice")))
    for side in ledger.path.parent.glob(ledger.path.name + "-*"):  # -wal, -shm
        side.unlink()
    ledger.path.write_bytes(b"garbage " * 512)
    with pytest.raises(LedgerError, match="cannot open it as a SQLite database"):
        ledger.read_claims()


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE claims (x INTEGER)")
        conn.execute("INSERT INTO claims VALUES (1)")
        conn.commit()
    with pytest.raises(LedgerError):
        Ledger(path).read_claims()


def test_insert_read_touch_delete(ledger: Ledger) -> None:
    alice = owner("alice")
    first, second = record("c1", alice, "gpu-0", now=10.0), record("c2", alice, "gpu-1", 20.0)
    with ledger.transaction() as conn:
        Ledger.insert(conn, second)
        Ledger.insert(conn, first)
    assert ledger.read_claims() == [first, second]  # by creation time
    assert first.to_object()["status"] == {"allocation": first.allocation}
    assert first.to_object()["metadata"]["name"] == "c1"

    assert ledger.touch("c1", now=50.0)
    assert not ledger.touch("nope", now=50.0)
    touched = ledger.read_claims()[0]
    assert (touched.name, touched.last_activity, touched.created) == ("c1", 50.0, 10.0)

    with ledger.transaction() as conn:
        Ledger.delete(conn, first, "user", now=60.0)
    assert [r.name for r in ledger.read_claims()] == ["c2"]
    assert ledger.releases() == [Release("c1", alice, "user", 60.0, first)]


def test_a_row_just_inserted_reads_back_as_its_file_has_it(ledger: Ledger) -> None:
    """The ledger keeps the row it inserted as parsed: what a read gives then is what a
    reader that parses the file gives (whole numbers of time come back as floats)."""
    alice = owner("alice")
    made = record("c1", alice, "gpu-0", now=10)
    with ledger.transaction() as conn:
        Ledger.insert(conn, made)
    rows = sqlite3.connect(ledger.path)
    rows.row_factory = sqlite3.Row
    parsed = [record_from_row(r) for r in rows.execute("SELECT * FROM claims").fetchall()]
    rows.close()
    assert ledger.read_claims() == parsed == [made]
    assert type(ledger.read_claims()[0].created) is float


def test_an_owner_as_a_dict_has_every_field() -> None:
    who = Owner("alice", HOST, 12, start_time=34, kernel_id="k-1")
    assert who.to_dict() == dataclasses.asdict(who)
    assert Owner.from_dict(who.to_dict()) == who


def test_one_name_one_claim(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        Ledger.insert(conn, record("c1", owner("alice")))
    with pytest.raises(sqlite3.IntegrityError), ledger.transaction() as conn:
        Ledger.insert(conn, record("c1", owner("bob"), "gpu-1"))
    assert [r.owner.user for r in ledger.read_claims()] == ["alice"]


def test_failed_transaction_leaves_nothing(ledger: Ledger) -> None:
    with pytest.raises(RuntimeError), ledger.transaction() as conn:
        Ledger.insert(conn, record("c1", owner("alice")))
        Ledger.next_name(conn, "alice")
        raise RuntimeError("stop")
    assert ledger.read_claims() == []
    with ledger.transaction() as conn:
        assert Ledger.next_name(conn, "alice") == "alice-1"


def test_names_count_per_prefix(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        names = [Ledger.next_name(conn, p) for p in ("alice", "alice", "bob", "alice")]
    assert names == ["alice-1", "alice-2", "bob-1", "alice-3"]
    assert claim_prefix("Jane.Doe@Example") == "jane-doe-example"
    assert claim_prefix("___") == "user"


def test_release_history_newest_first(ledger: Ledger) -> None:
    alice = owner("alice")
    with ledger.transaction() as conn:
        for i, reason in enumerate(("user", "reclaimed", "expired", "idle")):
            rec = record(f"c{i}", alice, f"gpu-{i}")
            Ledger.insert(conn, rec)
            Ledger.delete(conn, rec, reason, now=100.0 + i)
    assert [(r.name, r.reason) for r in ledger.releases()] == [
        ("c3", "idle"),
        ("c2", "expired"),
        ("c1", "reclaimed"),
        ("c0", "user"),
    ]
    assert [r.time for r in ledger.releases(limit=2)] == [103.0, 102.0]


# --- owners -----------------------------------------------------------------------------------


def test_owner_liveness() -> None:
    me = Owner.current(kernel_id="k-1")
    assert me.pid == os.getpid()
    assert me.kernel_id == "k-1"
    assert me.is_alive()
    assert Owner.from_dict(json.loads(json.dumps(me.to_dict()))) == me
    assert Owner(me.user, "some-other-host", 999_999_999, 1).is_alive()  # unknown: alive
    assert me.start_time is not None
    assert not Owner(me.user, HOST, me.pid, me.start_time + 1).is_alive()  # pid reused


def test_exited_process_is_dead() -> None:
    with short_lived() as proc:
        who = owner_of(proc.pid)
        assert who.is_alive()
    assert not who.is_alive()


def test_zombie_counts_as_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        who = owner_of(proc.pid)  # readable while it runs and while it is a zombie
        deadline = time.monotonic() + 30
        for _ in range(3000):
            if process_state(proc.pid) == "Z" or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert process_state(proc.pid) == "Z"
        assert not who.is_alive()
    finally:
        proc.wait(timeout=30)


# --- reclaim ----------------------------------------------------------------------------------


def test_claim_of_dead_owner_is_reclaimed(ledger: Ledger) -> None:
    with short_lived() as proc:
        carol = LocalBackend(INVENTORY, ledger, owner_of(proc.pid, "carol"))
        held = carol.allocate(claim({"gpu": 8}))
        alice = backend(ledger, "alice")
        with pytest.raises(AllocationError, match="busy"):
            alice.allocate(claim({"gpu": 1}))
        assert [r.name for r in alice.claims(all_users=True)] == [held.name]
    # carol's process has exited: her claim goes at the next look at the ledger
    assert alice.claims(all_users=True) == []
    [release] = ledger.releases()
    assert (release.name, release.reason, release.owner.pid) == (held.name, "reclaimed", proc.pid)
    assert len(devices(alice.allocate(claim({"gpu": 8})))) == 8


def test_expired_lease_is_released(ledger: Ledger) -> None:
    fake = FakeTime()
    alice = backend(ledger, "alice", fake)
    bob = backend(ledger, "bob", fake)
    held = alice.allocate(claim({"gpu": 8}), lease=60)
    assert held.lease_expires == fake.now + 60
    fake.now += 59.5
    assert [r.name for r in bob.claims(all_users=True)] == [held.name]
    with pytest.raises(AllocationError, match="busy"):
        bob.allocate(claim({"gpu": 2}))
    fake.now += 0.5
    got = bob.allocate(claim({"gpu": 2}))  # its transaction releases the expired claim first
    assert [r.name for r in bob.claims(all_users=True)] == [got.name]
    assert [(r.name, r.reason, r.time) for r in ledger.releases()] == [
        (held.name, "expired", fake.now)
    ]


def test_no_lease_never_expires(ledger: Ledger) -> None:
    fake = FakeTime()
    alice = backend(ledger, "alice", fake)
    held = alice.allocate(claim({"gpu": 1}))
    assert held.lease_expires is None
    fake.now += 10 * 365 * 86400
    assert [r.name for r in alice.claims()] == [held.name]


def test_waiters_of_dead_owners_are_dropped(ledger: Ledger) -> None:
    shape = shape_of(claim({"gpu": 1}))
    with short_lived() as proc:
        with ledger.transaction() as conn:
            Ledger.enqueue(conn, shape, owner_of(proc.pid), 1.0)
        with pytest.raises(AllocationError, match="number 2 in the queue"):
            backend(ledger).allocate(claim({"gpu": 1}))  # the live waiter goes first
    got = backend(ledger).allocate(claim({"gpu": 1}))
    assert len(devices(got)) == 1
    assert waiter_count(ledger) == 0


# --- the FIFO queue ---------------------------------------------------------------------------


def test_positions_per_shape(ledger: Ledger) -> None:
    a, b = shape_of(claim({"gpu": 1})), shape_of(claim({"gpu": 2}))
    assert a != b
    assert shape_of(claim({"gpu": 1}, "x")) == a  # the name is not part of the shape
    with ledger.transaction() as conn:
        assert Ledger.position(conn, a, None) == 1
        a1 = Ledger.enqueue(conn, a, owner("alice"), 1.0)
        b1 = Ledger.enqueue(conn, b, owner("bob"), 2.0)
        a2 = Ledger.enqueue(conn, a, owner("carol"), 3.0)
        assert [Ledger.position(conn, a, w) for w in (a1, a2)] == [1, 2]
        assert Ledger.position(conn, b, b1) == 1
        assert Ledger.position(conn, a, None) == 3  # a newcomer queues behind both
        assert Ledger.position(conn, b, None) == 2
        Ledger.dequeue(conn, a1)
        assert Ledger.position(conn, a, a2) == 1
        assert Ledger.position(conn, b, b1) == 1


def test_newcomer_waits_behind_earlier_request_of_its_shape(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        Ledger.enqueue(conn, shape_of(claim({"gpu": 1})), owner("bob"), 1.0)
    alice = backend(ledger, "alice")
    with pytest.raises(AllocationError, match=r"number 2 in the queue"):
        alice.allocate(claim({"gpu": 1}))  # devices are free, but bob asked first
    assert len(devices(alice.allocate(claim({"gpu": 2})))) == 2  # another shape: no wait
    assert waiter_count(ledger) == 1  # a request that did not wait leaves no waiter behind


def test_on_wait_reports_positions(ledger: Ledger) -> None:
    fake = FakeTime()
    shape = shape_of(claim({"gpu": 8}))
    with ledger.transaction() as conn:
        ahead = Ledger.enqueue(conn, shape, owner("bob"), 1.0)
    carol = backend(ledger, "carol", fake)
    blocker = carol.allocate(claim({"gpu": 1}))

    def progress(sleeps: int) -> None:
        if sleeps == 1:  # bob gives up: alice is next, but a GPU is still held
            with ledger.transaction() as conn:
                Ledger.dequeue(conn, ahead)
        elif sleeps == 2:
            carol.release(blocker.name)

    fake.on_sleep = progress
    waits: list[Waiting] = []
    alice = backend(ledger, "alice", fake, poll_interval=1.0)
    got = alice.allocate(claim({"gpu": 8}), timeout=100, on_wait=waits.append)
    assert len(devices(got)) == 8
    assert [(w.position, w.waited, w.timeout) for w in waits] == [(2, 0.0, 100), (1, 1.0, 100)]
    assert waiter_count(ledger) == 0


# --- the local backend ------------------------------------------------------------------------


def test_busy_names_the_holder(ledger: Ledger) -> None:
    alice, bob = backend(ledger, "alice"), backend(ledger, "bob")
    held = alice.allocate(claim({"gpu": 8}, name="training"))
    assert held.owner.user == "alice"
    with pytest.raises(AllocationError) as info:
        bob.allocate(claim({"gpu": 1}))
    message = str(info.value)
    assert message.startswith("the devices are busy; pass timeout=")
    assert "held by training (8)" in message  # the namespace means nothing here
    assert info.value.explanation is not None
    assert waiter_count(ledger) == 0


def test_impossible_request_fails_at_once(ledger: Ledger) -> None:
    fake = FakeTime(limit=0)  # any wait fails the test
    alice = backend(ledger, "alice", fake)
    for spec in ({"gpu": 9}, {"gpu": 4, "same": "pcieRoot"}, {"memory": "1Ti"}):
        with pytest.raises(AllocationError, match="the request can never be met on test:"):
            alice.allocate(claim(spec), timeout=None)
    assert alice.claims() == []
    assert waiter_count(ledger) == 0


def test_timeout_expires(ledger: Ledger) -> None:
    fake = FakeTime()
    backend(ledger, "alice", fake).allocate(claim({"gpu": 8}, "big"))
    waits: list[Waiting] = []
    bob = backend(ledger, "bob", fake, poll_interval=1.0)
    with pytest.raises(AllocationError, match=r"(?s)busy after waiting 5s; .*held by big"):
        bob.allocate(claim({"gpu": 2}), timeout=5, on_wait=waits.append)
    assert [w.position for w in waits] == [1] * 5
    assert fake.sleeps == 5
    assert waiter_count(ledger) == 0  # the waiter left the queue


def test_waiter_gets_devices_another_process_releases(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    holder = WorkerProcess("hold", str(ledger.path), "gpu", json.dumps({"gpu": 8}), "0")
    try:
        held = holder.event()
        assert held["event"] == "held", held
        assert len(held["devices"]) == 8
        waits: list[Waiting] = []

        def on_wait(w: Waiting) -> None:
            waits.append(w)
            if len(waits) == 1:
                holder.send("release")

        bob = backend(ledger, "bob", poll_interval=0.02)
        got = bob.allocate(claim({"gpu": 4}), timeout=60, on_wait=on_wait)
        assert len(devices(got)) == 4
        assert waits
        assert {w.position for w in waits} == {1}
        assert {w.timeout for w in waits} == {60}
        assert holder.event() == {"event": "released", "command": "release", "found": True}
        assert holder.wait() == 0
        assert [r.reason for r in ledger.releases()] == ["user"]
        assert waiter_count(ledger) == 0
    finally:
        holder.close()


def test_waiters_are_served_in_order(ledger: Ledger) -> None:
    alice = backend(ledger, "alice")
    held = alice.allocate(claim({"gpu": 8}))
    served: list[str] = []
    positions: dict[str, list[int]] = {"bob": [], "carol": []}
    waiting = {user: threading.Event() for user in positions}
    errors: list[BaseException] = []
    records: dict[str, ClaimRecord] = {}

    def wait_for_all(user: str) -> None:
        def on_wait(w: Waiting) -> None:
            positions[user].append(w.position)
            waiting[user].set()

        try:
            got = backend(ledger, user, poll_interval=0.01).allocate(
                claim({"gpu": 8}), timeout=60, on_wait=on_wait
            )
        except BaseException as err:
            errors.append(err)
            waiting[user].set()
        else:
            records[user] = got
            served.append(user)

    threads = {u: threading.Thread(target=wait_for_all, args=(u,)) for u in positions}
    try:
        threads["bob"].start()
        assert waiting["bob"].wait(timeout=30)
        threads["carol"].start()
        assert waiting["carol"].wait(timeout=30)
        assert positions["carol"][0] == 2
        alice.release(held.name)
        threads["bob"].join(timeout=60)
        assert served == ["bob"]
        backend(ledger, "bob").release(records["bob"].name)
        threads["carol"].join(timeout=60)
    finally:
        for t in threads.values():
            if t.is_alive():  # only when an assertion above failed; bounded by timeout=60
                t.join(timeout=90)
    assert errors == []
    assert served == ["bob", "carol"]
    assert set(positions["bob"]) == {1}
    assert positions["carol"][0] == 2
    assert positions["carol"] == sorted(positions["carol"], reverse=True)  # only moves up
    assert set(positions["carol"]) <= {1, 2}


def test_release_rules(ledger: Ledger) -> None:
    alice, bob = backend(ledger, "alice"), backend(ledger, "bob")
    held = alice.allocate(claim({"gpu": 1}))
    with pytest.raises(ForbiddenError, match=rf"claim {held.name} belongs to user alice; only"):
        bob.release(held.name)
    assert [r.name for r in alice.claims()] == [held.name]
    assert not alice.release("no-such-claim")
    assert alice.release(held.name, reason="kernel-shutdown")
    assert not alice.release(held.name)
    other = alice.allocate(claim({"gpu": 1}))
    assert bob.release(other.name, reason="admin", any_owner=True)
    assert [(r.name, r.reason) for r in ledger.releases()] == [
        (other.name, "admin"),
        (held.name, "kernel-shutdown"),
    ]


def test_same_name_is_refused(ledger: Ledger) -> None:
    alice, bob = backend(ledger, "alice"), backend(ledger, "bob")
    alice.allocate(claim({"gpu": 1}, name="train"))
    for who in (alice, bob):
        with pytest.raises(AllocationError, match="claim train exists already; release it first"):
            who.allocate(claim({"gpu": 2}, name="train"))
    [only] = alice.claims(all_users=True)
    assert (only.name, len(devices(only))) == ("train", 1)
    alice.release("train")
    assert backend(ledger, "bob").allocate(claim({"gpu": 2}, name="train")).owner.user == "bob"


def test_automatic_name_skips_a_taken_name(ledger: Ledger) -> None:
    alice = backend(ledger, "alice")
    alice.allocate(claim({"gpu": 1}, name="alice-1"))
    assert alice.allocate(claim({"gpu": 1})).name != "alice-1"


def test_claims_per_user(ledger: Ledger) -> None:
    alice, bob = backend(ledger, "alice"), backend(ledger, "bob")
    a = alice.allocate(claim({"gpu": 2}))
    b = bob.allocate(claim({"gpu": 1}, name="bobs"))
    assert a.name == "alice-1"
    assert a.namespace == "default"
    assert [r.name for r in alice.claims()] == [a.name]
    assert [r.name for r in bob.claims()] == ["bobs"]
    assert {r.name for r in alice.claims(all_users=True)} == {a.name, b.name}
    assert not set(devices(a)) & set(devices(b))
    assert a.spec["metadata"]["name"] == a.name


def test_a_claim_released_elsewhere_is_remembered_with_why(tmp_path: Path) -> None:
    """What one process released, another (its own Ledger on the file) reads back: the
    claim as it was, the reason and when (GET claims/{name} of a claim the CLI released)."""
    path = tmp_path / "ledger.sqlite"
    cli = backend(Ledger(path), "alice")
    made = cli.allocate(claim({"gpu": 1}))
    assert cli.release(made.name)
    server = backend(Ledger(path), "alice")
    ended = server.ended(made.name)
    assert ended is not None
    assert (ended.record, ended.reason, ended.message) == (made, "user", None)
    assert server.released_at(made.name) == ended.time
    assert server.ended("alice-99") is None

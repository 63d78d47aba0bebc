"""Reclaim under pressure on the embedded ledger, with two real processes: this one holds
every GPU of the simulated h200-8x as alice, its activity reported and idle; a worker
process waits for one GPU as bob and takes turns while it waits. alice's claim is warned
in the ledger with bob's request, Kept once (the second Keep is refused in one line), and
released at the deadline with reason ``fair-share``; bob's wait returns the GPU. A busy
holder, and one whose activity nobody reports, are never warned. Timing is never
asserted: a wait that runs out is an answer, everything else is waited for as a state."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dra_jupyter.api import Claim, Session
from dra_jupyter.errors import ForbiddenError, InvalidInputError, KeepRefusedError
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.kernel.environment import ProcessEnvironment
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.sharing.reclaim import Notice, ReclaimSettings
from dra_jupyter.widgets.notebook import reclaim_lines
from tests.local.test_ledger import owner
from tests.local.worker import WorkerProcess, claim_for

GRACE = 2.0  # reclaim_grace: seconds from the warning to the release
IDLE = 0.5  # reclaim_idle: seconds without activity before a holder counts as idle
SETTINGS = ReclaimSettings(grace=GRACE, idle_after=IDLE)
INVENTORY = resolve_inventory("h200-8x")


def press(
    path: Path, workers: list[WorkerProcess], timeout: float, grace: float = GRACE
) -> WorkerProcess:
    """bob's request for one GPU, in a process of its own: waiting (up to ``timeout``) and
    taking turns of reclaim under pressure while it waits (``grace``: its reclaim_grace)."""
    spec = json.dumps({"gpu": 1})
    args = ("press", str(path), "h200-8x", spec, str(timeout), "bob", str(grace), str(IDLE))
    bob = WorkerProcess(*args)
    workers.append(bob)
    event = bob.event(timeout=60)
    assert event["event"] == "waiting", event
    return bob


def session_of(backend: LocalBackend) -> Session:
    """A session whose backend is ``backend`` (its claims' ``Claim`` objects need one)."""
    session = Session.__new__(Session)
    session.backend = backend
    return session


def warned(ledger: Ledger, name: str) -> Notice:
    """The warning on ``name``, once a turn of the waiting process wrote it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        notice = ledger.reclaim_notices().get(name)
        if notice is not None:
            return notice
        time.sleep(0.05)
    raise AssertionError(f"claim {name} was never warned")


def test_an_idle_holder_is_warned_kept_once_then_released_for_the_waiter(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    alice = LocalBackend(INVENTORY, ledger, owner("alice"), reclaim=SETTINGS)
    held = alice.allocate(claim_for(INVENTORY, {"gpu": 8}))
    assert alice.activity(name=held.name, busy=False) == 1  # its server reports its cells

    bob = press(path, workers, timeout=60)
    notice = warned(ledger, held.name)
    assert (notice.holder, notice.waiter, notice.what) == ("alice", "bob", "1× NVIDIA H200")
    assert notice.devices == tuple(held.device_keys) and notice.keeps == 0
    [shown] = alice.notices()  # as alice's Jupyter server reads it, after a turn of its own
    assert ledger.reclaim_notices()[held.name] == notice  # the second turn warned nobody anew
    assert shown.claim == held.name and shown.keeps_left == 1
    assert shown.message.startswith(f"bob is waiting for 1× NVIDIA H200; your {held.name}, idle")
    # the holder's kernel says it before its next cell, once (a notebook outside JupyterLab)
    environment = ProcessEnvironment({})
    environment.claims.append(Claim(session_of(alice), held))
    told: set[tuple[str, float]] = set()
    assert reclaim_lines(environment, told) == [f"dra: {shown.message}"]
    assert reclaim_lines(environment, told) == []

    assert alice.touch(held.name, time.time())  # the Keep allowed while bob waits
    assert ledger.reclaim_notices()[held.name].keeps == 1
    with pytest.raises(KeepRefusedError) as refused:
        alice.touch(held.name, time.time())
    message = str(refused.value)
    assert message.startswith(f"claim {held.name}: Keep refused: bob is waiting for 1× NVIDIA H200")
    assert "(keeps_under_pressure)" in message and "\n" not in message

    got = bob.event(timeout=60)
    assert got["event"] == "held", got
    assert len(got["devices"]) == 1
    gone = ledger.released(held.name)
    assert gone is not None and gone.reason == "fair-share"
    assert gone.message is not None
    assert gone.message.startswith("released for bob, who waited for 1× NVIDIA H200 (idle for ")
    assert ledger.reclaim_notices() == {}  # the release took its warning with it
    bob.send("release")
    assert bob.wait() == 0


def test_a_busy_holder_and_one_nobody_reports_on_are_never_warned(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    alice = LocalBackend(INVENTORY, ledger, owner("alice"), reclaim=SETTINGS)
    busy = alice.allocate(claim_for(INVENTORY, {"gpu": 4}))
    unknown = alice.allocate(claim_for(INVENTORY, {"gpu": 4}))  # a script's: no reports
    assert alice.activity(name=busy.name, busy=True) == 1  # a cell runs

    bob = press(path, workers, timeout=IDLE + GRACE + 2)  # longer than a reclaim takes
    got = bob.event(timeout=60)
    assert got["event"] == "failed" and "the devices are busy" in got["error"], got
    assert bob.wait() == 2
    assert ledger.reclaim_notices() == {}
    assert {r.name for r in ledger.read_claims()} == {busy.name, unknown.name}
    assert alice.notices() == []


def test_a_warning_is_withdrawn_when_its_waiter_gives_up(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    alice = LocalBackend(INVENTORY, ledger, owner("alice"), reclaim=SETTINGS)
    held = alice.allocate(claim_for(INVENTORY, {"gpu": 8}))
    alice.activity(name=held.name, busy=False)

    bob = press(path, workers, timeout=10, grace=3600)  # gives up long before the deadline
    warned(ledger, held.name)
    got = bob.event(timeout=60)
    assert got["event"] == "failed", got
    assert ledger.reclaim_notices() == {}  # nobody waits: nobody is warned
    assert alice.notices() == []
    assert alice.touch(held.name, time.time())  # an ordinary Keep, as many as wanted
    assert alice.touch(held.name, time.time())
    assert [r.name for r in ledger.read_claims()] == [held.name]


def test_activity_is_recorded_on_ones_own_claims_only(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    alice = LocalBackend(INVENTORY, ledger, owner("alice"), reclaim=SETTINGS)
    held = alice.allocate(claim_for(INVENTORY, {"gpu": 1}))
    bob = alice.with_owner(owner("bob"))
    with pytest.raises(ForbiddenError, match=f"claim {held.name} belongs to user alice"):
        bob.activity(name=held.name)
    assert bob.activity(kernel_id="k1") == 0  # bob's claims of that kernel: none
    server = alice.with_owner(owner(""))  # a Jupyter server's: it acts for its users
    assert server.activity(name=held.name, busy=True) == 1
    with pytest.raises(InvalidInputError, match="name one claim"):
        alice.activity()

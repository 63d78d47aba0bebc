"""Real processes sharing one ledger file: a stress run with invariant checks after every step,
SIGKILL at random points, and a kill in the middle of a write transaction.

The workers live in :mod:`tests.local.worker`; each is a separate ``python`` process.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate

from dra_jupyter.allocator import Allocator
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.model.parse import parse_resource_claim, parse_resource_slice
from dra_jupyter.types import ClaimRecord, Owner
from tests.local.worker import (
    STRESS_SHAPES,
    WorkerProcess,
    claim_for,
    counter_totals,
    device_index,
    gpu_inventory,
    partitionable_inventory,
    results_of,
    violations,
)

STRESS_WORKERS = 16
STRESS_ITERATIONS = 25


def integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def waiter_count(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM waiters").fetchone()[0])


def fake_record(name: str, *devices: str, spec: Mapping[str, Any] | None = None) -> ClaimRecord:
    """A claim of ``devices`` of the partitionable node, whether or not they fit its spec."""
    inv = partitionable_inventory()
    claim = claim_for(inv, spec or {"device_class": "gpu.nvidia.com", "count": len(devices)})
    request = claim["spec"]["devices"]["requests"][0]["name"]
    return ClaimRecord(
        name=name,
        namespace="default",
        owner=Owner.current(),
        spec=claim,
        allocation={
            "devices": {
                "results": [
                    {"request": request, "driver": "gpu.nvidia.com", "pool": "p1", "device": d}
                    for d in devices
                ]
            }
        },
        created=1.0,
        last_activity=1.0,
    )


# --- the test inventory and the invariant checks themselves ------------------------------------


def test_partitionable_inventory_is_valid() -> None:
    inv = partitionable_inventory()
    for obj in inv.slices:
        parse_resource_slice(obj)
        with warnings.catch_warnings():
            # kubernetes-validate's jsonschema stack may deprecate its own APIs: only those
            warnings.filterwarnings(
                "ignore",
                category=DeprecationWarning,
                module=r"(kubernetes_validate|jsonschema|referencing)(\.|$)",
            )
            assert kubernetes_validate.validate(obj, "1.36.0", strict=True) == "1.36"
    totals = counter_totals(inv)
    assert len(totals) == 8 * 4
    assert set(totals.values()) == {1}
    assert len(device_index(inv)) == 8 * (1 + 4 + 2)
    # every shape of the stress test can be met on the idle node
    allocator = Allocator(inv.slices, inv.device_classes)
    for spec in STRESS_SHAPES:
        assert allocator.allocate([claim_for(inv, spec, "probe")]) is not None, spec


def test_invariant_checks_catch_violations() -> None:
    inv = partitionable_inventory()
    assert violations(inv, [fake_record("a", "gpu-0"), fake_record("b", "gpu-1")]) == []
    double = violations(inv, [fake_record("a", "gpu-0"), fake_record("b", "gpu-0")])
    assert double[0] == "gpu.nvidia.com/p1/gpu-0 held by ['a', 'b']"
    assert len(double) == 1 + 4  # and each of its four memory slices is used twice
    # a partition of GPU 1 while GPU 1 is held whole: memory-slice-0 twice
    mig = {"mig": "1g.10gb"}
    over = violations(
        inv, [fake_record("a", "gpu-1"), fake_record("b", "gpu-1-mig-1g10gb-0", spec=mig)]
    )
    assert over == ["counter gpu.nvidia.com/p1/gpu-1-counter-set/memory-slice-0: 2 used of 1"]
    apart = violations(
        inv, [fake_record("a", "gpu-0", "gpu-2", spec={"gpu": 2, "same": "pcieRoot"})]
    )
    assert len(apart) == 1
    assert "matchAttribute resource.kubernetes.io/pcieRoot violated" in apart[0]
    wrong = violations(inv, [fake_record("a", "gpu-0-mig-2g20gb-0", spec=mig)])
    assert wrong == ["a: gpu-0-mig-2g20gb-0 has profile 2g.20gb"]
    assert violations(inv, [fake_record("a", "gpu-9")]) == [
        "a: devices not in the inventory: [('gpu.nvidia.com', 'p1', 'gpu-9')]"
    ]


# --- stress -----------------------------------------------------------------------------------


def test_stress_keeps_every_invariant(tmp_path: Path, workers: list[WorkerProcess]) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path)  # created before the workers start
    workers.extend(
        WorkerProcess("stress", str(path), str(seed), str(STRESS_ITERATIONS))
        for seed in range(STRESS_WORKERS)
    )
    reports = []
    for w in workers:
        report = w.event(timeout=120)
        assert w.wait() == 0, "".join(w.output)
        reports.append(report)
    found = [v for r in reports for v in r["violations"]]
    assert found == []
    assert sum(r["violation_count"] for r in reports) == 0
    allocations = sum(r.get("allocations", 0) for r in reports)
    assert allocations > 0
    assert sum(r.get("releases", 0) for r in reports) == allocations
    assert sum(r["checks"] for r in reports) >= STRESS_WORKERS * STRESS_ITERATIONS
    ledger = Ledger(path)
    assert ledger.read_claims() == []  # everything was released
    assert waiter_count(path) == 0
    assert {r.reason for r in ledger.releases(limit=10_000)} == {"user"}
    assert len(ledger.releases(limit=10_000)) == allocations
    assert integrity(path) == "ok"


# --- SIGKILL ----------------------------------------------------------------------------------


def test_killed_holders_leave_nothing_behind(tmp_path: Path, workers: list[WorkerProcess]) -> None:
    """Eight holders ask for 2 of 8 GPUs each (so half of them wait in line); four are
    killed at random points, from start-up to holding. One more holder, killed while it
    holds, makes sure a held claim is reclaimed. The four survivors need all 8 GPUs, which
    they only get if nothing of the killed ones is left."""
    rng = random.Random(20240607)
    inventory = gpu_inventory()
    path = tmp_path / "ledger.sqlite"
    Ledger(path)
    spec = json.dumps({"gpu": 2})

    first = WorkerProcess("hold", str(path), "gpu", spec, "60")
    workers.append(first)
    first_held = first.event()
    assert first_held["event"] == "held", first_held
    first.kill()

    holders = [WorkerProcess("hold", str(path), "gpu", spec, "60") for _ in range(8)]
    workers.extend(holders)
    victims = set(rng.sample(range(8), 4))
    schedule = sorted((rng.uniform(0.0, 1.0), i) for i in victims)
    start = time.monotonic()
    for delay, i in schedule:
        time.sleep(max(0.0, start + delay - time.monotonic()))
        holders[i].kill()
    survivors = [h for i, h in enumerate(holders) if i not in victims]
    held = {}
    for h in survivors:
        event = h.event(timeout=60)
        assert event["event"] == "held", event
        held[event["pid"]] = event
    killed_pids = {first.pid} | {holders[i].pid for i in victims}

    records = LocalBackend(inventory, Ledger(path), Owner.current()).claims(all_users=True)
    assert not {r.owner.pid for r in records} & killed_pids
    assert {r.owner.pid for r in records} == set(held)
    index = device_index(inventory)
    for r in records:
        parse_resource_claim(r.to_object())
        assert all(
            k in index for k in ((x["driver"], x["pool"], x["device"]) for x in results_of(r))
        )
        event = held[r.owner.pid]
        assert (r.name, [x["device"] for x in results_of(r)]) == (event["name"], event["devices"])
    assert violations(inventory, records) == []
    assert sum(len(results_of(r)) for r in records) == 8
    reclaimed = [x for x in Ledger(path).releases(limit=100) if x.reason == "reclaimed"]
    assert first_held["name"] in {x.name for x in reclaimed}
    assert {x.owner.pid for x in reclaimed} <= killed_pids
    assert integrity(path) == "ok"

    for h in survivors:
        h.send("release")
    for h in survivors:
        assert h.event()["event"] == "released"
        assert h.wait() == 0
    fresh = LocalBackend(inventory, Ledger(path), Owner.current())
    everything = fresh.allocate(claim_for(inventory, {"gpu": 8}))  # nothing leaked
    assert len(results_of(everything)) == 8
    assert fresh.release(everything.name)
    assert waiter_count(path) == 0
    assert integrity(path) == "ok"


def test_kill_inside_a_transaction_leaves_no_trace(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    inventory = gpu_inventory()
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    half = WorkerProcess("half", str(path))
    workers.append(half)
    assert half.event()["event"] == "inserted"
    assert ledger.read_claims() == []  # not committed: invisible to readers meanwhile
    half.kill()
    assert ledger.read_claims() == []
    assert integrity(path) == "ok"
    backend = LocalBackend(inventory, Ledger(path), Owner.current())
    assert backend.claims(all_users=True) == []
    got = backend.allocate(claim_for(inventory, {"gpu": 8}))  # the write lock is free again
    assert len(results_of(got)) == 8
    assert not any("committed" in line for line in half.output)


# --- first use ----------------------------------------------------------------------------


def test_many_processes_create_one_ledger(tmp_path: Path, workers: list[WorkerProcess]) -> None:
    for round_ in range(3):
        path = tmp_path / f"ledger-{round_}.sqlite"
        started = [WorkerProcess("open", str(path)) for _ in range(8)]
        workers.extend(started)
        for w in started:
            assert w.event()["event"] == "ready"
        for w in started:  # all at once: they race to create the file's schema
            w.send("go")
        errors = [e["error"] for w in started if (e := w.event())["event"] != "opened"]
        assert errors == [], f"round {round_}"

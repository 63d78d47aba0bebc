"""Inventories, invariant checks and worker processes for the local-backend tests.

The concurrency tests run this module as real processes (``python -m tests.local.worker``)
that share one ledger file:

* ``stress LEDGER SEED ITERATIONS``: allocate and release random shapes on the
  partitionable inventory, checking every invariant over all live claims after each step;
  prints one JSON line (counts and violations), exits 1 on any violation.
* ``hold LEDGER INVENTORY SPEC TIMEOUT``: allocate ``SPEC`` (JSON keywords of
  ``build_claim``), print ``{"event": "held", ...}``, then wait for ``release`` on stdin.
* ``queue LEDGER INVENTORY SPEC TIMEOUT POLL``: as ``hold``, trying again every ``POLL``
  seconds while it waits (and when woken), and printing ``{"event": "waiting", ...}`` first
  once it waits in line (and listens for wake-ups).
* ``press LEDGER INVENTORY SPEC TIMEOUT USER GRACE IDLE``: as ``queue``, as ``USER`` (this
  process under another user name), taking turns of reclaim under pressure while it waits
  (``reclaim_grace`` GRACE, ``reclaim_idle`` IDLE, one Keep), trying again every 0.1 s.
* ``half LEDGER``: open a ledger transaction, insert a claim row, print
  ``{"event": "inserted"}`` and sleep before the commit (to be killed there).
* ``migrate LEDGER``: open an older ledger, print ``{"event": "migrated"}`` once every
  step of the migration ran, and sleep before its commit (to be killed there).
* ``open LEDGER``: print ``{"event": "ready"}``, wait for ``go`` on stdin, open the ledger
  and print ``opened`` or ``error``.

Every loop is bounded in count and in time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import AllocationError
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.sharing.reclaim import ReclaimSettings
from dra_jupyter.types import ClaimRecord, Owner, Waiting

Wire = dict[str, Any]
DeviceKey = tuple[str, str, str]  # driver, pool, device

SMALL_GPU = nvidia.GpuModel("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", "40Gi")
MEMORY_SLICES = 4
PROFILES = {"1g.10gb": 1, "2g.20gb": 2}  # profile -> memory slices it takes

# Request shapes of the stress test: full GPUs (1, 2, 4; with and without a common PCIe
# root) and MIG-like partitions (alone, in pairs on one GPU or one PCIe root).
STRESS_SHAPES: tuple[Wire, ...] = (
    {"gpu": 1},
    {"gpu": 2},
    {"gpu": 4},
    {"gpu": 2, "same": "pcieRoot"},
    {"mig": "1g.10gb"},
    {"mig": "2g.20gb"},
    {"mig": "1g.10gb", "count": 2, "same": "parentUUID"},
    {"mig": "1g.10gb", "count": 2, "same": "pcieRoot"},
    {"mig": "2g.20gb", "count": 2, "same": "pcieRoot"},
)


def gpu_inventory() -> Inventory:
    """One simulated 8-GPU HGX H200 node (``n1``)."""
    return Inventory(
        name="t",
        description="test",
        slices=(nvidia.hgx_node("n1"),),
        device_classes=tuple(nvidia.device_classes()),
        simulated=True,
        source="test",
    )


def _slices(slots: Iterable[int]) -> Wire:
    return {f"memory-slice-{i}": {"value": "1"} for i in slots}


def partitionable_inventory(gpus: int = 8, node: str = "p1") -> Inventory:
    """A node of ``gpus`` partitionable 40Gi GPUs, two per PCIe root.

    One counter set per GPU, ``gpu-<minor>-counter-set``, with four ``memory-slice-<i>``
    counters of 1. Devices: the full GPU consumes all four; ``1g.10gb`` partitions take
    one slice each (4 placements), ``2g.20gb`` partitions two (placements at 0 and 2).
    Split layout: a counters-only slice, then a devices-only slice.
    """
    counter_sets: list[Wire] = []
    devices: list[Wire] = []
    for minor in range(gpus):
        placement = nvidia.GpuPlacement(
            f"0000:{0x18 + minor:02x}:00.0", f"pci0000:{minor // 2:02x}", minor // 4
        )
        parent = nvidia.gpu_device(node, minor, SMALL_GPU, placement)
        cs = mig.counter_set_name(minor)
        counter_sets.append({"name": cs, "counters": _slices(range(MEMORY_SLICES))})
        devices.append(
            {**parent, "consumesCounters": [{"counterSet": cs, "counters": _slices(range(4))}]}
        )
        for profile, size in PROFILES.items():
            for start in range(0, MEMORY_SLICES, size):
                devices.append(
                    {
                        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{start}",
                        "attributes": mig.mig_attributes(parent, profile),
                        "capacity": {"memory": {"value": f"{10 * size}Gi"}},
                        "consumesCounters": [
                            {"counterSet": cs, "counters": _slices(range(start, start + size))}
                        ],
                    }
                )

    def make_slice(suffix: str, body: Wire) -> Wire:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{nvidia.DRIVER}-{suffix}"},
            "spec": {
                "driver": nvidia.DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
                **body,
            },
        }

    return Inventory(
        name="partitionable",
        description="test partitionable node",
        slices=(
            make_slice("counters", {"sharedCounters": counter_sets}),
            make_slice("devices", {"devices": devices}),
        ),
        device_classes=tuple(nvidia.device_classes()),
        simulated=True,
        source="test",
    )


def inventory_named(name: str) -> Inventory:
    """``gpu``, ``partitionable``, else a bundled simulated inventory (``h200-8x``)."""
    made = {"gpu": gpu_inventory, "partitionable": partitionable_inventory}.get(name)
    return made() if made is not None else resolve_inventory(name)


def claim_for(inventory: Inventory, spec: Mapping[str, Any], name: str = "") -> Wire:
    classes = [c["metadata"]["name"] for c in inventory.device_classes]
    return build_claim(name, spec, classes=classes)


# --- invariants -------------------------------------------------------------------------------


def device_index(inventory: Inventory) -> dict[DeviceKey, Wire]:
    out: dict[DeviceKey, Wire] = {}
    for s in inventory.slices:
        spec = s["spec"]
        for d in spec.get("devices") or ():
            out[(spec["driver"], spec["pool"]["name"], d["name"])] = d
    return out


def counter_totals(inventory: Inventory) -> dict[tuple[str, str, str, str], Fraction]:
    """(driver, pool, counter set, counter) -> what the pool has."""
    out: dict[tuple[str, str, str, str], Fraction] = {}
    for s in inventory.slices:
        spec = s["spec"]
        for cs in spec.get("sharedCounters") or ():
            for name, c in cs["counters"].items():
                key = (spec["driver"], spec["pool"]["name"], cs["name"], name)
                out[key] = Quantity.parse(c["value"]).value
    return out


def results_of(record: ClaimRecord) -> list[Wire]:
    results: list[Wire] = record.allocation.get("devices", {}).get("results", [])
    return results


def key_of(result: Mapping[str, Any]) -> DeviceKey:
    return (result["driver"], result["pool"], result["device"])


def attribute(device: Mapping[str, Any], driver: str, qualified: str) -> Any:
    """A device attribute's value by its fully qualified name (None if it has none)."""
    attrs = device.get("attributes") or {}
    domain, _, short = qualified.rpartition("/")
    raw = attrs.get(qualified) or (attrs.get(short) if domain == driver else None)
    return None if raw is None else next(iter(raw.values()))


def claim_violations(record: ClaimRecord, index: Mapping[DeviceKey, Wire]) -> list[str]:
    """What is wrong with one claim's allocation against its own spec and the inventory."""
    out: list[str] = []
    results = results_of(record)
    missing = [key_of(r) for r in results if key_of(r) not in index]
    if missing:
        return [f"{record.name}: devices not in the inventory: {missing}"]
    devices_spec = record.spec["spec"]["devices"]
    per_request = Counter(r["request"] for r in results)
    for request in devices_spec["requests"]:
        exactly = request.get("exactly")
        if exactly is None:
            continue
        got = per_request[request["name"]]
        if exactly.get("allocationMode") != "All" and got != exactly["count"]:
            out.append(f"{record.name}: request {request['name']}: {got} devices")
        kind = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig"}.get(exactly["deviceClassName"])
        for r in results:
            if r["request"] != request["name"]:
                continue
            device = index[key_of(r)]
            if kind and attribute(device, r["driver"], f"{nvidia.DRIVER}/type") != kind:
                out.append(f"{record.name}: {r['device']} is not of type {kind}")
            profile = attribute(device, r["driver"], f"{nvidia.DRIVER}/profile")
            expressions = [s["cel"]["expression"] for s in exactly.get("selectors", [])]
            if kind == "mig" and not any(f"'{profile}'" in e for e in expressions):
                out.append(f"{record.name}: {r['device']} has profile {profile}")
    for constraint in devices_spec.get("constraints", []):
        attr = constraint.get("matchAttribute")
        if attr is None:
            continue
        values = {attribute(index[key_of(r)], r["driver"], attr) for r in results}
        if len(values) != 1 or None in values:
            out.append(f"{record.name}: matchAttribute {attr} violated: {sorted(map(str, values))}")
    return out


def violations(inventory: Inventory, records: Sequence[ClaimRecord]) -> list[str]:
    """Every broken invariant over the live claims: a device in two claims, a shared counter
    overdrawn, a claim whose devices do not satisfy its requests and constraints."""
    index = device_index(inventory)
    totals = counter_totals(inventory)
    out: list[str] = []
    holders: dict[DeviceKey, list[str]] = {}
    used: dict[tuple[str, str, str, str], Fraction] = {}
    for record in records:
        out.extend(claim_violations(record, index))
        for r in results_of(record):
            key = key_of(r)
            holders.setdefault(key, []).append(record.name)
            for consumption in index.get(key, {}).get("consumesCounters") or ():
                for name, c in consumption["counters"].items():
                    ckey = (key[0], key[1], consumption["counterSet"], name)
                    used[ckey] = used.get(ckey, Fraction(0)) + Quantity.parse(c["value"]).value
    out.extend(f"{'/'.join(k)} held by {v}" for k, v in holders.items() if len(v) > 1)
    out.extend(
        f"counter {'/'.join(k)}: {v} used of {totals.get(k, Fraction(0))}"
        for k, v in used.items()
        if v > totals.get(k, Fraction(0))
    )
    return out


# --- workers ----------------------------------------------------------------------------------


def emit(event: Wire) -> None:
    print(json.dumps(event), flush=True)


def stress(ledger_path: Path, seed: int, iterations: int) -> int:
    rng = random.Random(seed)
    inventory = partitionable_inventory()
    ledger = Ledger(ledger_path)
    backend = LocalBackend(inventory, ledger, Owner.current(), poll_interval=0.01)
    held: list[ClaimRecord] = []
    found: list[str] = []
    stats = Counter[str]()

    def check(step: str) -> None:
        stats["checks"] += 1
        live = ledger.read_claims()
        problems = violations(inventory, live)
        names = {r.name for r in live}
        problems.extend(f"my claim {r.name} vanished" for r in held if r.name not in names)
        found.extend(f"{step}: {p}" for p in problems)

    for i in range(iterations):
        if held and (len(held) >= 2 or rng.random() < 0.4):
            record = held.pop(rng.randrange(len(held)))
            if not backend.release(record.name):
                found.append(f"step {i}: release of {record.name} found nothing")
            stats["releases"] += 1
            check(f"step {i} release {record.name}")
        else:
            spec = rng.choice(STRESS_SHAPES)
            timeout = rng.choice((0.0, 0.0, 0.05))
            try:
                record = backend.allocate(claim_for(inventory, spec), timeout=timeout)
            except AllocationError:
                stats["busy"] += 1
            else:
                held.append(record)
                stats["allocations"] += 1
            check(f"step {i} allocate {spec}")
        time.sleep(rng.uniform(0, 0.003))  # hold briefly
    while held:  # bounded: one claim fewer each time
        record = held.pop()
        if not backend.release(record.name):
            found.append(f"final release of {record.name} found nothing")
        stats["releases"] += 1
        check(f"final release {record.name}")
    emit({**stats, "violations": found[:20], "violation_count": len(found)})
    return 1 if found else 0


def hold(
    ledger_path: Path,
    inventory_name: str,
    spec: Wire,
    timeout: float,
    poll: float = 0.02,
    *,
    tell_waiting: bool = False,
    user: str | None = None,
    reclaim: ReclaimSettings | None = None,
) -> int:
    inventory = inventory_named(inventory_name)
    owner = Owner.current() if user is None else dataclasses.replace(Owner.current(), user=user)
    backend = LocalBackend(
        inventory, Ledger(ledger_path), owner, poll_interval=poll, reclaim=reclaim
    )
    said: list[int] = []

    def waiting(w: Waiting) -> None:
        if tell_waiting and not said:  # once: it waits in line now (and listens for wake-ups)
            said.append(w.position)
            emit({"event": "waiting", "position": w.position, "pid": os.getpid()})

    try:
        record = backend.allocate(claim_for(inventory, spec), timeout=timeout, on_wait=waiting)
    except AllocationError as err:
        emit({"event": "failed", "error": str(err)})
        return 2
    devices = [r["device"] for r in results_of(record)]
    emit({"event": "held", "name": record.name, "pid": os.getpid(), "devices": devices})
    ready, _, _ = select.select([sys.stdin], [], [], 60.0)  # bounded: the test drives us
    command = sys.stdin.readline().strip() if ready else ""
    released = backend.release(record.name)
    emit({"event": "released", "command": command, "found": released})
    return 0 if command == "release" and released else 3


def half(ledger_path: Path) -> int:
    inventory = gpu_inventory()
    ledger = Ledger(ledger_path)
    now = time.time()
    claim = claim_for(inventory, {"gpu": 1}, name="half-done")
    record = ClaimRecord(
        name="half-done",
        namespace="default",
        owner=Owner.current(),
        spec=claim,
        allocation={
            "devices": {
                "results": [
                    {"request": "gpu", "driver": nvidia.DRIVER, "pool": "n1", "device": "gpu-0"}
                ]
            }
        },
        created=now,
        last_activity=now,
    )
    with ledger.transaction() as conn:
        Ledger.insert(conn, record)
        emit({"event": "inserted", "pid": os.getpid()})
        time.sleep(60.0)  # killed here by the test
    emit({"event": "committed"})
    return 0


def migrate(ledger_path: Path) -> int:
    """Migrate the ledger, stopping before the commit (the test kills the process there)."""

    class Stopped(Ledger):
        def _prepare(self, conn: Any) -> None:
            super()._prepare(conn)
            emit({"event": "migrated", "pid": os.getpid()})
            time.sleep(60.0)  # killed here by the test

    Stopped(ledger_path)
    emit({"event": "committed"})
    return 0


def open_ledger(ledger_path: Path) -> int:
    """Wait for ``go`` on stdin, then open the ledger (many of these race for a new file)."""
    emit({"event": "ready"})
    ready, _, _ = select.select([sys.stdin], [], [], 60.0)
    if not ready or sys.stdin.readline().strip() != "go":
        return 3
    try:
        Ledger(ledger_path).read_claims()
    except Exception as err:  # the test wants to see any error
        emit({"event": "error", "error": f"{type(err).__name__}: {err}"})
        return 1
    emit({"event": "opened"})
    return 0


def main(argv: Sequence[str]) -> int:
    mode, path, *rest = argv
    if mode == "stress":
        return stress(Path(path), int(rest[0]), int(rest[1]))
    if mode == "hold":
        return hold(Path(path), rest[0], json.loads(rest[1]), float(rest[2]))
    if mode == "queue":
        spec = json.loads(rest[1])
        return hold(Path(path), rest[0], spec, float(rest[2]), float(rest[3]), tell_waiting=True)
    if mode == "press":
        spec = json.loads(rest[1])
        settings = ReclaimSettings(grace=float(rest[4]), idle_after=float(rest[5]))
        return hold(
            Path(path),
            rest[0],
            spec,
            float(rest[2]),
            0.1,
            tell_waiting=True,
            user=rest[3],
            reclaim=settings,
        )
    if mode == "half":
        return half(Path(path))
    if mode == "migrate":
        return migrate(Path(path))
    if mode == "open":
        return open_ledger(Path(path))
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# --- driving workers from a test --------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One ``python -m tests.local.worker`` process, its JSON events read by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.local.worker", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.pid = self.proc.pid
        self.output: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # ends when the process exits
            self.output.append(line)
            self._lines.put(line)

    def event(self, timeout: float = 30.0) -> Wire:
        """The next JSON line the worker prints (other lines are kept in ``output``)."""
        deadline = time.monotonic() + timeout
        for _ in range(1000):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line.startswith("{"):
                event: Wire = json.loads(line)
                return event
        raise AssertionError(
            f"worker {self.pid}: no event within {timeout}s; output:\n{''.join(self.output)}"
        )

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float = 30.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        return rc

    def close(self) -> None:
        """Kill it if it still runs, reap it and close its pipes (idempotent)."""
        self.kill()
        self._reader.join(timeout=10)
        with contextlib.suppress(BrokenPipeError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

"""The health watcher on a real ledger, the fake NVML only at the hardware seam: a GPU that
fails is tainted with its MIG partitions soon after NVML's event (a generous 30 s here, for
a loaded CI machine: the latency itself is measured by ``benchmarks/bench_health.py``, about
50 ms), the event is recorded
with the claims holding it, no allocation hands it out afterwards (a property over random
requests), and NoExecute releases its holders after the grace (at once for a lost GPU),
with words naming the GPU and what happened."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_jupyter.api import Session
from dra_jupyter.errors import BusyError, NeverPossibleError, UnavailableError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.nvml import discover
from dra_jupyter.inventory.nvmlhealth import NvmlHealth, Signal
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.watcher import FAILED, HealthWatcher, lock_for
from dra_jupyter.model import health
from dra_jupyter.settings import Settings
from dra_jupyter.types import ClaimRecord
from tests.fakes.fake_pynvml import FakePynvml
from tests.local.test_ledger import owner
from tests.local.worker import claim_for

NODE = "n1"


def machine(tmp_path: Path, gpus: int = 2, mig: list[bool] | None = None) -> FakePynvml:
    return FakePynvml(gpus=gpus, mig=mig if mig is not None else [False] * gpus)


def inventory_of(fake: FakePynvml, tmp_path: Path) -> Inventory:
    return discover(fake, node=NODE, sysfs=tmp_path)


def minor(fake: FakePynvml, index: int) -> int:
    return int(fake.capture.device["minor"]) + index


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def watching(
    tmp_path: Path, fake: FakePynvml, clock: Clock | None = None, grace: float = 300.0
) -> Iterator[tuple[HealthWatcher, LocalBackend]]:
    inventory = inventory_of(fake, tmp_path)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    backend = LocalBackend(inventory, ledger, owner("watcher"), clock=clock or time.time)
    watcher = HealthWatcher(backend, lambda: NvmlHealth(fake), grace=grace, wait_ms=50)
    watcher.start()
    try:
        yield watcher, backend
    finally:
        watcher.stop()


def user(backend: LocalBackend, name: str = "alice") -> LocalBackend:
    return backend.with_owner(owner(name))


def gpu_key(fake: FakePynvml, index: int) -> str:
    return f"gpu.nvidia.com/{NODE}/gpu-{minor(fake, index)}"


# Long enough that a busy CI machine does not fail the check, short enough that a watcher
# that never acts fails it: the behaviour is checked here, the latency in the benchmark.
WITHIN = 30.0


def wait_for_event(backend: LocalBackend, count: int = 1, within: float = WITHIN) -> float:
    """Seconds until the ledger holds ``count`` health events; fails after ``within``."""
    start = time.monotonic()
    while len(backend.health_events()) < count:
        assert time.monotonic() - start < within, f"no health event within {within:g} s"
        time.sleep(0.01)
    return time.monotonic() - start


def test_an_xid_79_takes_the_gpu_out_and_records_its_holder(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    with watching(tmp_path, fake) as (_, backend):
        alice = user(backend)
        held = alice.allocate(claim_for(backend.devices, {"gpu": 1}))
        (device,) = held.device_keys
        index = [gpu_key(fake, i) for i in range(2)].index(device)
        fake.fall_off_bus(index)
        wait_for_event(backend)
        event = backend.health_events()[0]  # then the poll reads the GPU lost: a second
        assert (event.device, event.source, event.what, event.key, event.value) == (
            device,
            "xid",
            "79",
            health.XID_KEY,
            "79",
        )
        assert (event.effect, event.meaning) == ("NoExecute", "the GPU fell off the bus")
        assert event.claims == ((held.name, "alice"),)
        (taint,) = [t for t in backend.taints() if t.key == health.XID_KEY]
        assert taint.device == device
        assert (taint.key, taint.effect, taint.user) == (
            health.XID_KEY,
            "NoExecute",
            "health watcher",
        )
        assert taint.reason == "the GPU fell off the bus"
        # a new claim gets the other GPU; a second one finds none
        bob = user(backend, "bob")
        other = bob.allocate(claim_for(backend.devices, {"gpu": 1}))
        assert other.device_keys != held.device_keys
        with pytest.raises(BusyError):
            bob.allocate(claim_for(backend.devices, {"gpu": 1}))
        wait_for_event(backend, 2, within=5 + WITHIN)  # the next poll
        assert [(e.key, e.device) for e in backend.health_events()] == [
            (health.XID_KEY, device),
            (health.LOST_KEY, device),
        ]


def test_noexecute_releases_the_holder_after_the_grace_with_words(tmp_path: Path) -> None:
    fake, clock = machine(tmp_path), Clock()
    with watching(tmp_path, fake, clock, grace=300) as (watcher, backend):
        alice = user(backend)
        held = alice.allocate(claim_for(backend.devices, {"gpu": 2}))
        fake.inject_xid(0, 48)
        wait_for_event(backend)
        assert watcher.enforce(clock.now + 299) == []  # time to save work
        assert alice.record(held.name) is not None
        released = watcher.enforce(clock.now + 300)
        assert [(r.name, why) for r, why in released] == [(held.name, FAILED)]
        ended = alice.ended(held.name)
        assert ended is not None and ended.reason == FAILED
        assert ended.message == (
            f"gpu-{minor(fake, 0)} was taken out "
            "(gpu.nvidia.com/xid=48: double-bit ECC error: GPU memory returned wrong data)"
        )


def test_a_lost_gpu_releases_at_once_and_noschedule_releases_nobody(tmp_path: Path) -> None:
    fake, clock = machine(tmp_path), Clock()
    with watching(tmp_path, fake, clock, grace=300) as (watcher, backend):
        alice = user(backend)
        both = alice.allocate(claim_for(backend.devices, {"gpu": 2}))
        fake.inject_xid(1, 94)  # contained ECC: NoSchedule
        wait_for_event(backend)
        assert watcher.enforce(clock.now + 10_000) == []
        assert alice.record(both.name) is not None  # kept: only new claims are kept off
        fake.lost.add(0)  # the poll reads GPU_IS_LOST
        wait_for_event(backend, 2, within=watcher.poll_interval + WITHIN)
        lost = backend.health_events()[-1]
        assert (lost.source, lost.key, lost.effect) == ("lost", health.LOST_KEY, "NoExecute")
        assert lost.claims == ((both.name, "alice"),)
        released = watcher.enforce(clock.now)  # no grace: the work on it is gone
        assert [r.name for r, _ in released] == [both.name]
        ended = alice.ended(both.name)
        assert ended is not None and ended.message is not None
        assert ended.message.startswith(
            f"gpu-{minor(fake, 0)} was taken out (gpu.nvidia.com/lost=true"
        )


def test_the_partitions_of_a_failed_gpu_are_taken_out_with_it(tmp_path: Path) -> None:
    fake = machine(tmp_path, gpus=2, mig=[True, True])
    with watching(tmp_path, fake) as (watcher, backend):
        watcher.handle([Signal(minor(fake, 0), health.of_xid(95))])
        tainted = {t.device for t in backend.taints()}
        names = {k.rsplit("/", 1)[-1] for k in tainted}
        assert f"gpu-{minor(fake, 0)}" in names
        assert len(names) > 1 and all(n.startswith(f"gpu-{minor(fake, 0)}") for n in names)
        alice = user(backend)
        for _ in range(7):  # the other GPU's 1g partitions only
            made = alice.allocate(claim_for(backend.devices, {"mig": "1g.18gb"}))
            assert not tainted & set(made.device_keys)
        with pytest.raises(BusyError):
            alice.allocate(claim_for(backend.devices, {"mig": "1g.18gb"}))


def test_a_signal_seen_again_is_one_event_and_a_stronger_one_replaces_the_taint(
    tmp_path: Path,
) -> None:
    fake = machine(tmp_path)
    with watching(tmp_path, fake) as (watcher, backend):
        gpu = minor(fake, 0)
        assert len(watcher.handle([Signal(gpu, health.of_ecc(1))])) == 1
        assert watcher.handle([Signal(gpu, health.of_ecc(1))]) == []  # the next poll's
        assert len(watcher.handle([Signal(gpu, health.of_ecc(2))])) == 1  # one more error
        assert len(watcher.handle([Signal(gpu, health.of_remapped_rows(True, False))])) == 1
        (rows,) = [t for t in backend.taints() if t.key == health.ROWS_KEY]
        assert rows.effect == "NoSchedule"
        watcher.handle([Signal(gpu, health.of_remapped_rows(True, True))])
        (rows,) = [t for t in backend.taints() if t.key == health.ROWS_KEY]
        assert rows.effect == "NoExecute"
        gone = [t for t in backend.taints(history=True) if t.removed is not None]
        assert [(t.key, t.effect, t.removed_by) for t in gone] == [
            (health.ROWS_KEY, "NoSchedule", "health watcher")
        ]
        # warnings are logged, never a taint
        assert watcher.handle([Signal(gpu, warning="slowed to cool down")]) == []


def test_an_admin_untaint_puts_the_gpu_back(tmp_path: Path) -> None:
    fake = machine(tmp_path, gpus=1)
    with watching(tmp_path, fake) as (watcher, backend):
        watcher.handle([Signal(minor(fake, 0), health.of_xid(63))])
        alice = user(backend)
        with pytest.raises(NeverPossibleError):
            alice.allocate(claim_for(backend.devices, {"gpu": 1}))
        backend.untaint(f"gpu-{minor(fake, 0)}", health.XID_KEY)
        assert alice.allocate(claim_for(backend.devices, {"gpu": 1})).device_keys


def test_one_watcher_per_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with lock_for(path), pytest.raises(UnavailableError, match="runs already"), lock_for(path):
        pass
    with lock_for(path):  # released: the next one starts
        pass


# --- no allocation includes a tainted device -----------------------------------------------

PROPERTY_FAKE = FakePynvml(gpus=4, mig=[True, False, True, False])
PROFILES = ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "7g.141gb")
SIGNALS = st.sampled_from(
    [health.of_xid(79), health.of_xid(94), health.gpu_lost(), health.of_ecc(1)]
)
REQUEST = st.one_of(
    st.builds(lambda n: {"gpu": n}, st.integers(1, 4)),
    st.builds(lambda p, n: {"mig": p, "count": n}, st.sampled_from(PROFILES), st.integers(1, 2)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    failed=st.lists(st.tuples(st.integers(0, 3), SIGNALS), min_size=1, max_size=3),
    requests=st.lists(REQUEST, min_size=1, max_size=8),
)
def test_no_allocation_includes_a_tainted_device(
    tmp_path_factory: pytest.TempPathFactory,
    failed: list[tuple[int, health.HealthTaint]],
    requests: list[dict[str, object]],
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    inventory = inventory_of(PROPERTY_FAKE, tmp)
    backend = LocalBackend(inventory, Ledger(tmp / "ledger.sqlite"), owner("watcher"))
    watcher = HealthWatcher(backend, lambda: NvmlHealth(PROPERTY_FAKE))
    for index, taint in failed:  # as the watcher's thread would, straight from the signal
        watcher.handle([Signal(minor(PROPERTY_FAKE, index), taint)])
    tainted = {t.device for t in backend.taints()}
    failed_gpus = {f"gpu-{minor(PROPERTY_FAKE, i)}" for i, _ in failed}
    assert {health.gpu_name(k) for k in tainted} == failed_gpus
    alice = user(backend)
    made: list[ClaimRecord] = []
    for spec in requests:
        try:
            made.append(alice.allocate(claim_for(inventory, spec)))
        except (BusyError, NeverPossibleError):
            continue
    for record in made:
        assert not tainted & set(record.device_keys), (record.device_keys, tainted)
        assert not {health.gpu_name(k) for k in record.device_keys} & failed_gpus


def test_the_devices_view_shows_the_taint_of_a_gpu_taken_out_meanwhile(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    with watching(tmp_path, fake) as (watcher, backend):
        session = Session(Settings(ledger=tmp_path / "ledger.sqlite"), inventory=backend.devices)
        assert {r.taints for r in session.devices().rows} == {""}  # read once before
        watcher.handle([Signal(minor(fake, 1), health.of_xid(79))])
        rows = {r.device: r.taints for r in session.devices().rows}
        assert rows[gpu_key(fake, 1)] == "gpu.nvidia.com/xid=79:NoExecute"
        assert rows[gpu_key(fake, 0)] == ""

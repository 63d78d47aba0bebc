"""Invariants of the placement benchmark's simulator (benchmarks/placement): a seeded trace,
every policy on the same arrivals, no device booked twice, claims released at their end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from benchmarks.placement import bound, policies, simulate
from benchmarks.placement.cluster import SHARED_MEMORY_MI, SHARES_PER_GPU, Cluster
from benchmarks.placement.policies import Held
from benchmarks.placement.trace import KINDS, Arrival, generate
from dra_jupyter.model.objects import AllocationResult

CLUSTER = Cluster(nodes=4, mig_nodes=1, shared_nodes=1)
HOURS = 4.0


@pytest.fixture(scope="module")
def arrivals() -> list[Arrival]:
    return generate(7, 0.9, CLUSTER.gpus, HOURS)


def _shape(trace: Sequence[Arrival]) -> list[tuple[float, float, str]]:
    return [(a.time, a.duration, a.kind.name) for a in trace]


def test_the_trace_is_seeded(arrivals: list[Arrival]) -> None:
    assert _shape(generate(7, 0.9, CLUSTER.gpus, HOURS)) == _shape(arrivals)
    assert _shape(generate(8, 0.9, CLUSTER.gpus, HOURS)) != _shape(arrivals)
    assert len(arrivals) > 40
    assert {a.kind.name for a in arrivals} == {k.name for k in KINDS}
    assert all(0 <= a.time < HOURS and a.duration > 0 for a in arrivals)
    assert [a.time for a in arrivals] == sorted(a.time for a in arrivals)


@dataclass
class Watched:
    """A policy wrapper that checks what the simulator tells it at every arrival."""

    inner: policies.Policy
    seen: list[int] = field(default_factory=list)
    served: dict[int, Arrival] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.inner.name

    def place(self, arrival: Arrival, held: Sequence[Held]) -> AllocationResult | None:
        running = {a.index for a in self.served.values() if a.end > arrival.time}
        assert {h.arrival.index for h in held} == running  # released exactly at their end
        self.seen.append(arrival.index)
        found = self.inner.place(arrival, held)
        if found is not None:
            self.served[arrival.index] = arrival
        return found


def _check_no_double_booking(records: Sequence[simulate.Record]) -> None:
    """Replay the records: whole GPUs and MIG memory slices are never held twice, shares
    stay within a GPU's memory and share count."""
    active: list[simulate.Record] = []
    for record in records:
        now = record.arrival.time
        active = [r for r in active if r.arrival.end > now]
        if not record.served:
            continue
        active.append(record)
        slices: dict[tuple[str, int], list[int]] = {}
        shares: dict[tuple[str, int], list[int]] = {}
        for r in active:
            for device in r.devices:
                info = CLUSTER.devices[device]
                key = (info.node, info.gpu)
                if r.arrival.kind.shared_gi:
                    shares.setdefault(key, []).append(r.arrival.kind.shared_gi * 1024)
                else:
                    slices.setdefault(key, []).extend(info.memory_slices)
        for key, used in slices.items():
            assert len(used) == len(set(used)), (key, used)
            assert key not in shares, key
        for key, memory in shares.items():
            assert len(memory) <= SHARES_PER_GPU and sum(memory) <= SHARED_MEMORY_MI, key


@pytest.mark.parametrize("name", ["first-fit", "spread", "topology"])
def test_policies_serve_the_same_trace_validly(name: str, arrivals: list[Arrival]) -> None:
    watched = Watched(policies.make(name, CLUSTER))
    records = simulate.run(watched, CLUSTER, arrivals, repack_check=False)
    assert watched.seen == [a.index for a in arrivals]
    assert [r.arrival for r in records] == arrivals
    assert any(r.served for r in records)
    for r in records:
        assert r.served == bool(r.devices)
        nodes = {CLUSTER.devices[d].node for d in r.devices}
        assert nodes == ({r.node} if r.served else set())
        kind = r.arrival.kind
        assert len(r.devices) == (1 if kind.profile or kind.shared_gi else kind.count) or not (
            r.served
        )
    _check_no_double_booking(records)


def test_a_run_is_deterministic(arrivals: list[Arrival]) -> None:
    def run() -> list[tuple[bool, tuple[object, ...]]]:
        records = simulate.run(policies.make("topology", CLUSTER), CLUSTER, arrivals)
        return [(r.served, r.devices) for r in records]

    assert run() == run()


def test_the_bound_packs_mig_by_the_h200_placements() -> None:
    profiles = ("1g.18gb", "2g.35gb", "3g.71gb")
    assert bound.mig_gpus(profiles, (7, 0, 0)) == 1  # seven 1g slices on one GPU
    assert bound.mig_gpus(profiles, (0, 0, 2)) == 1  # 3g at starts 0 and 4
    assert bound.mig_gpus(profiles, (0, 0, 3)) == 2
    assert bound.mig_gpus(profiles, (0, 3, 1)) == 2  # a 3g leaves room for one 2g only
    assert bound.share_gpus([40, 40, 40, 40]) == 2  # three 40Gi shares per GPU at most
    assert bound.share_gpus([20] * 5) == 2  # four shares per GPU at most


def test_the_bound_serves_what_fits_after_repacking() -> None:
    one, eight = (next(k for k in KINDS if k.name == n) for n in ("1 GPU", "8 GPUs"))
    gangs = [eight] * (CLUSTER.nodes - 1)
    assert bound.feasible(CLUSTER, KINDS, gangs, eight)
    assert not bound.feasible(CLUSTER, KINDS, [*gangs, one], eight)
    assert bound.feasible(CLUSTER, KINDS, [one] * 8, eight)  # eight singles fit on one node

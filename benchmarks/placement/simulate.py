"""The event loop: every policy serves the same arrivals, in time order.

A claim that cannot be placed when it arrives is **not served** and does not wait (a
loss system): the figure reported is the share of claims served on arrival, and every
policy sees the same offered load at every moment, whatever it did before. Held claims
are released at their end, before any later arrival is placed.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.placement import bound
from benchmarks.placement.cluster import Cluster
from benchmarks.placement.occupancy import Occupancy
from benchmarks.placement.policies import Held, Policy
from benchmarks.placement.trace import KINDS, Arrival
from dra_jupyter.model.objects import AllocationResult, DeviceID


@dataclass(frozen=True)
class Record:
    """What happened to one arrival, and the cluster as that arrival found it."""

    arrival: Arrival
    served: bool
    node: str | None
    devices: tuple[DeviceID, ...]
    busy_gpus: int
    free_nodes: int | None = None  # set for 8-GPU arrivals
    stranded_gpus: int | None = None  # set for 8-GPU arrivals
    stranded_mig_slices: int | None = None  # set for MIG 3g arrivals
    repackable: bool | None = None  # not served, but would have been after free repacking


def run(
    policy: Policy, cluster: Cluster, arrivals: Sequence[Arrival], *, repack_check: bool = True
) -> list[Record]:
    """Serve ``arrivals`` with ``policy``; with ``repack_check``, ask the bound's model
    about every claim not served whether a free repacking would have made room."""
    held: dict[int, Held] = {}
    ends: list[tuple[float, int]] = []
    records: list[Record] = []
    for arrival in arrivals:
        while ends and ends[0][0] <= arrival.time:
            _, index = heapq.heappop(ends)
            del held[index]
        current = list(held.values())
        occupancy = Occupancy.of(cluster, (h.allocation for h in current))
        found = policy.place(arrival, current)
        record = _record(cluster, arrival, found, occupancy)
        if found is None and repack_check:
            running = [h.arrival.kind for h in current]
            record = dataclasses.replace(
                record, repackable=bound.feasible(cluster, KINDS, running, arrival.kind)
            )
        records.append(record)
        if found is not None:
            claim = dataclasses.replace(arrival.claim, allocation=found)
            held[arrival.index] = Held(arrival, claim)
            heapq.heappush(ends, (arrival.end, arrival.index))
    return records


def _record(
    cluster: Cluster, arrival: Arrival, found: AllocationResult | None, occupancy: Occupancy
) -> Record:
    kind = arrival.kind
    gang = kind.profile is None and not kind.shared_gi and kind.count == 8
    return Record(
        arrival,
        found is not None,
        found.node if found is not None else None,
        tuple(r.device for r in found.results) if found is not None else (),
        occupancy.busy_gpus(),
        occupancy.free_nodes(cluster) if gang else None,
        occupancy.stranded_gpus(cluster) if gang else None,
        occupancy.stranded_mig_slices(cluster) if kind.profile == "3g.71gb" else None,
    )


def run_bound(
    cluster: Cluster, arrivals: Sequence[Arrival], packing: bound.Packing | None = None
) -> list[Record]:
    """The free-repacking bound: a claim is served if all running claims and it could be
    placed, moving running claims at will (``bound.Packing``); no devices are chosen."""
    packing = packing or bound.Packing(cluster, KINDS)
    ends: list[tuple[float, int]] = []
    held: dict[int, Arrival] = {}
    records: list[Record] = []
    for arrival in arrivals:
        while ends and ends[0][0] <= arrival.time:
            _, index = heapq.heappop(ends)
            packing.remove(held.pop(index).kind)
        served = packing.add(arrival.kind)
        records.append(Record(arrival, served, None, (), 0))
        if served:
            held[arrival.index] = arrival
            heapq.heappush(ends, (arrival.end, arrival.index))
    return records

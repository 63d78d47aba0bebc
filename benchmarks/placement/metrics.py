"""The figures reported for one policy's run: service per kind, device-hours, locality,
fragmentation. Arrivals before ``warmup`` hours (the cluster filling up) are left out."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.placement.cluster import Cluster
from benchmarks.placement.simulate import Record
from benchmarks.placement.trace import KINDS


@dataclass(frozen=True)
class Summary:
    policy: str
    load: float
    arrivals: int
    served: dict[str, float]  # kind name -> share served on arrival
    offered: dict[str, int]  # kind name -> arrivals of that kind
    served_all: float
    mig_slices_served: float  # MIG memory slices served / asked for
    gpu_hours: float  # GPU-equivalents x hours of the claims served
    busy_gpus: float  # mean GPUs with anything on them, as arrivals find the cluster
    root_local_2: float | None  # served 2-GPU claims on one pcieRoot
    numa_local_4: float | None  # served 4-GPU claims on one numaNode
    free_nodes_at_8: float | None  # mean wholly free nodes when an 8-GPU claim arrives
    stranded_gpus_at_8: float | None  # mean free GPUs on nodes not wholly free, then
    stranded_mig_at_3g: float | None  # mean free MIG slices in no free 3g placement
    repackable: float | None  # claims not served that a free repacking would have served

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize(
    policy: str, load: float, cluster: Cluster, records: Sequence[Record], warmup: float
) -> Summary:
    kept = [r for r in records if r.arrival.time >= warmup]
    served: dict[str, float] = {}
    offered: dict[str, int] = {}
    for kind in KINDS:
        mine = [r.served for r in kept if r.arrival.kind == kind]
        offered[kind.name] = len(mine)
        served[kind.name] = _share(mine) or 0.0
    mig = [r for r in kept if r.arrival.kind.profile is not None]
    asked = sum(r.arrival.kind.memory_slices for r in mig)
    got = sum(r.arrival.kind.memory_slices for r in mig if r.served)

    def local(count: int, attr: str) -> float | None:
        flags = [
            len({getattr(cluster.devices[d], attr) for d in r.devices}) == 1
            for r in kept
            if r.served
            and r.arrival.kind.count == count
            and r.arrival.kind.profile is None
            and not r.arrival.kind.shared_gi
        ]
        return _share(flags)

    lost = [r for r in kept if not r.served and r.repackable is not None]
    return Summary(
        policy=policy,
        load=load,
        arrivals=len(kept),
        served=served,
        offered=offered,
        served_all=_share([r.served for r in kept]) or 0.0,
        mig_slices_served=got / asked if asked else 0.0,
        gpu_hours=sum(float(r.arrival.kind.gpus) * r.arrival.duration for r in kept if r.served),
        busy_gpus=_mean([r.busy_gpus for r in kept]) or 0.0,
        root_local_2=local(2, "pcie_root"),
        numa_local_4=local(4, "numa_node"),
        free_nodes_at_8=_mean([r.free_nodes for r in kept if r.free_nodes is not None]),
        stranded_gpus_at_8=_mean([r.stranded_gpus for r in kept if r.stranded_gpus is not None]),
        stranded_mig_at_3g=_mean(
            [r.stranded_mig_slices for r in kept if r.stranded_mig_slices is not None]
        ),
        repackable=_share([bool(r.repackable) for r in lost]) if lost else None,
    )

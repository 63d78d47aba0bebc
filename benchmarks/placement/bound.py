"""The free-repacking bound, solved exactly with OR-Tools CP-SAT.

Question asked at an arrival: could the claims running now *and* the new one all be
placed if every running claim could be moved freely? If not, no allocator could serve
the arrival in that state; if so, only fragmentation (or locality) stood in the way.

Claims of one kind are interchangeable and a node's GPUs are interchangeable for claims
without constraints, so the model counts claims per kind and node (no device-level
variables), and is exact for this cluster:

* a whole-GPU claim of ``count`` GPUs takes ``count`` whole GPUs of one node (any kind);
* MIG claims take GPUs of MIG nodes; a MIG GPU holds any *configuration* of slices that
  the H200's real placements and counters allow (enumerated from ``mig.H200_PROFILES``);
* shares take GPUs of shared nodes: per GPU at most 4 shares, memory up to its capacity,
  and at most ``capacity // size`` shares of each size or more (exact for the trace's
  20Gi and 40Gi shares: a GPU holds any 4 of them with at most three 40Gi).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from ortools.sat.python import cp_model

from benchmarks.placement.cluster import GPUS_PER_NODE, SHARED_MEMORY_MI, SHARES_PER_GPU, Cluster
from benchmarks.placement.trace import Kind
from dra_jupyter.inventory import mig

TIME_LIMIT_S = 10.0


@cache
def mig_configs(profiles: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """The maximal per-GPU counts of each profile that fit one H200 together."""
    by_name = {p.name: p for p in mig.H200_PROFILES}
    limit = mig.max_capacities(mig.H200_PROFILES)
    options = [
        (i, set(range(start, start + size)))
        for i, name in enumerate(profiles)
        for start, size in by_name[name].placements
    ]
    found: set[tuple[int, ...]] = set()
    for n in range(len(options) + 1):
        for combo in itertools.combinations(options, n):
            slices = [s for _, s in combo]
            if sum(len(s) for s in slices) != len(set().union(*slices)):
                continue
            counts = Counter(i for i, _ in combo)
            used = Counter[str]()
            for i, c in counts.items():
                for cap, v in by_name[profiles[i]].capacities().items():
                    used[cap] += v * c
            if all(used[cap] <= v for cap, v in limit.items()):
                found.add(tuple(counts.get(i, 0) for i in range(len(profiles))))
    maximal = [
        c
        for c in found
        if not any(o != c and all(a <= b for a, b in zip(c, o, strict=True)) for o in found)
    ]
    return tuple(sorted(maximal))


@cache
def mig_gpus(profiles: tuple[str, ...], demand: tuple[int, ...]) -> int:
    """The fewest MIG GPUs that hold ``demand`` claims of each profile."""
    if not any(demand):
        return 0
    return 1 + min(
        mig_gpus(profiles, tuple(max(0, d - c) for d, c in zip(demand, config, strict=True)))
        for config in mig_configs(profiles)
        if any(d and c for d, c in zip(demand, config, strict=True))
    )


def share_gpus(sizes: Sequence[int]) -> int:
    """The fewest shared GPUs that hold shares of these sizes (Gi), by the bound's rules."""
    if not sizes:
        return 0
    need = max(-(-sum(sizes) * 1024 // SHARED_MEMORY_MI), -(-len(sizes) // SHARES_PER_GPU))
    for size in set(sizes):
        per_gpu = SHARED_MEMORY_MI // (size * 1024)
        need = max(need, -(-sum(1 for s in sizes if s >= size) // per_gpu))
    return need


@dataclass
class Packing:
    """Claims of each kind per node, checked and repacked against ``cluster``."""

    cluster: Cluster
    kinds: Sequence[Kind]
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # node -> kind name -> n
    unknown: int = 0  # solves that hit the time limit (counted as not servable)

    def __post_init__(self) -> None:
        self.counts = {n: Counter() for n in self.cluster.names}
        self.profiles = tuple(k.profile for k in self.kinds if k.profile is not None)
        self.by_name = {k.name: k for k in self.kinds}

    def eligible(self, kind: Kind, node: str) -> bool:
        node_kind = self.cluster.kind(node)
        if kind.profile is not None:
            return node_kind == "mig"
        if kind.shared_gi:
            return node_kind == "shared"
        return True

    def node_fits(self, node: str, counts: Mapping[str, int]) -> bool:
        whole = sum(self.by_name[k].count * n for k, n in counts.items() if self._whole(k))
        demand = tuple(
            sum(n for k, n in counts.items() if self.by_name[k].profile == p) for p in self.profiles
        )
        shares = [
            self.by_name[k].shared_gi
            for k, n in counts.items()
            for _ in range(n)
            if self.by_name[k].shared_gi
        ]
        partial = mig_gpus(self.profiles, demand) + share_gpus(shares)
        return whole + partial <= GPUS_PER_NODE

    def _whole(self, name: str) -> bool:
        k = self.by_name[name]
        return k.profile is None and not k.shared_gi

    def add(self, kind: Kind) -> bool:
        """Place one more claim of ``kind``, moving running ones if needed; False if impossible."""
        for node in self.cluster.names:
            if not self.eligible(kind, node):
                continue
            trial = self.counts[node] + Counter({kind.name: 1})
            if self.node_fits(node, trial):
                self.counts[node] = trial
                return True
        total = Counter[str]()
        for c in self.counts.values():
            total.update(c)
        total[kind.name] += 1
        solved = self.solve(total)
        if solved is None:
            return False
        self.counts = solved
        return True

    def remove(self, kind: Kind) -> None:
        """One claim of ``kind`` leaves (from any node that holds one: all are alike)."""
        for node in self.cluster.names:
            if self.counts[node][kind.name]:
                self.counts[node][kind.name] -= 1
                return
        raise ValueError(f"no claim of kind {kind.name} is held")

    def solve(self, total: Mapping[str, int]) -> dict[str, Counter[str]] | None:
        """Claims per kind and node for ``total``, or None if none exists (CP-SAT)."""
        model = cp_model.CpModel()
        nodes = self.cluster.names
        z = {
            (k, n): model.new_int_var(0, total[k], f"z[{k},{n}]")
            for k in total
            for n in nodes
            if total[k] and self.eligible(self.by_name[k], n)
        }
        for k in total:
            if total[k]:
                model.add(sum(z[k, n] for n in nodes if (k, n) in z) == total[k])
        configs = mig_configs(self.profiles)
        for n in nodes:
            used: list[cp_model.LinearExprT] = [
                self.by_name[k].count * z[k, n] for k in total if (k, n) in z and self._whole(k)
            ]
            node_kind = self.cluster.kind(n)
            if node_kind == "mig" and self.profiles:
                y = [
                    model.new_int_var(0, GPUS_PER_NODE, f"y[{n},{i}]") for i in range(len(configs))
                ]
                for p_index, profile in enumerate(self.profiles):
                    held = sum(
                        z[k, n] for k in total if (k, n) in z and self.by_name[k].profile == profile
                    )
                    model.add(
                        held <= sum(c[p_index] * y_c for c, y_c in zip(configs, y, strict=True))
                    )
                used.extend(y)
            if node_kind == "shared":
                s = model.new_int_var(0, GPUS_PER_NODE, f"s[{n}]")
                shares = [k for k in total if (k, n) in z and self.by_name[k].shared_gi]
                model.add(
                    sum(self.by_name[k].shared_gi * 1024 * z[k, n] for k in shares)
                    <= SHARED_MEMORY_MI * s
                )
                model.add(sum(z[k, n] for k in shares) <= SHARES_PER_GPU * s)
                for size in {self.by_name[k].shared_gi for k in shares}:
                    model.add(
                        sum(z[k, n] for k in shares if self.by_name[k].shared_gi >= size)
                        <= (SHARED_MEMORY_MI // (size * 1024)) * s
                    )
                used.append(s)
            model.add(sum(used) <= GPUS_PER_NODE)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = TIME_LIMIT_S
        solver.parameters.num_workers = 1
        status = solver.solve(model)
        if status == cp_model.UNKNOWN:
            self.unknown += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return {
            n: Counter(
                {k: solver.value(z[k, n]) for k in total if (k, n) in z and solver.value(z[k, n])}
            )
            for n in nodes
        }


def feasible(cluster: Cluster, kinds: Sequence[Kind], running: Sequence[Kind], new: Kind) -> bool:
    """Whether ``running`` and ``new`` could all be placed with free repacking."""
    packing = Packing(cluster, kinds)
    total = Counter(k.name for k in running)
    total[new.name] += 1
    return packing.solve(total) is not None

"""A seeded trace: claims arrive (Poisson) and leave (log-normal durations), mixed sizes.

Claims are written as users write them: a count of GPUs with no constraint, a MIG
profile by CEL selector, or a share of a GPU's memory (``capacity.requests``) on a device
that allows multiple allocations. The offered load is the GPU-equivalents asked for per
hour times the mean duration, over the cluster's GPUs (a MIG slice counts as its share of
the GPU's 8 memory slices, a share as its share of the GPU's memory).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from benchmarks.placement.cluster import SHARED_MEMORY_MI
from dra_jupyter.model.objects import ResourceClaim
from dra_jupyter.model.parse import parse_resource_claim

Wire = dict[str, Any]
MEAN_HOURS = 1.0
SIGMA = 1.0  # of log(duration): a heavy right tail, as notebook sessions and jobs have


@dataclass(frozen=True)
class Kind:
    """One kind of claim: whole GPUs (``count``), a MIG profile, or a share of memory."""

    name: str
    weight: float  # share of arrivals
    count: int = 1
    profile: str | None = None
    memory_slices: int = 0  # of the GPU's 8, for a MIG profile
    shared_gi: int = 0

    @property
    def gpus(self) -> Fraction:
        """GPU-equivalents this claim asks for."""
        if self.profile is not None:
            return Fraction(self.memory_slices, 8)
        if self.shared_gi:
            return Fraction(self.shared_gi * 1024, SHARED_MEMORY_MI)
        return Fraction(self.count)


KINDS: tuple[Kind, ...] = (
    Kind("1 GPU", 0.28, count=1),
    Kind("2 GPUs", 0.14, count=2),
    Kind("4 GPUs", 0.08, count=4),
    Kind("8 GPUs", 0.05, count=8),
    Kind("MIG 1g.18gb", 0.12, profile="1g.18gb", memory_slices=1),
    Kind("MIG 2g.35gb", 0.07, profile="2g.35gb", memory_slices=2),
    Kind("MIG 3g.71gb", 0.07, profile="3g.71gb", memory_slices=4),
    Kind("shared 20Gi", 0.12, shared_gi=20),
    Kind("shared 40Gi", 0.07, shared_gi=40),
)


def claim_wire(name: str, kind: Kind) -> Wire:
    """The ResourceClaim a user would write for ``kind`` (no constraints)."""
    exactly: Wire = {"deviceClassName": "gpu.nvidia.com", "count": kind.count}
    if kind.profile is not None:
        exactly = {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.attributes['gpu.nvidia.com'].profile == "
                        f"'{kind.profile}'"
                    }
                }
            ],
        }
    elif kind.shared_gi:
        exactly["selectors"] = [{"cel": {"expression": "device.allowMultipleAllocations"}}]
        exactly["capacity"] = {"requests": {"memory": f"{kind.shared_gi}Gi"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


@dataclass(frozen=True)
class Arrival:
    index: int
    time: float  # hours
    duration: float  # hours
    kind: Kind
    claim: ResourceClaim

    @property
    def end(self) -> float:
        return self.time + self.duration


def mean_gpus(kinds: tuple[Kind, ...] = KINDS) -> float:
    total = sum(k.weight for k in kinds)
    return sum(k.weight * float(k.gpus) for k in kinds) / total


def generate(
    seed: int, load: float, gpus: int, hours: float, kinds: tuple[Kind, ...] = KINDS
) -> list[Arrival]:
    """Arrivals over ``hours`` at offered ``load`` (0..1+) of ``gpus`` GPUs, from ``seed``."""
    rng = random.Random(f"{seed}/{load}")
    rate = load * gpus / (mean_gpus(kinds) * MEAN_HOURS)  # claims per hour
    mu = math.log(MEAN_HOURS) - SIGMA**2 / 2
    weights = [k.weight for k in kinds]
    out: list[Arrival] = []
    t = rng.expovariate(rate)
    while t < hours:
        kind = rng.choices(kinds, weights)[0]
        duration = rng.lognormvariate(mu, SIGMA)
        i = len(out)
        claim = parse_resource_claim(claim_wire(f"c{i:05d}", kind))
        out.append(Arrival(i, t, duration, kind, claim))
        t += rng.expovariate(rate)
    return out

"""Ours against the real Kubernetes 1.37.2 allocator on a few hundred seeded random worlds
(:mod:`tests.upstream.worlds`): the same exit code and, where both allocate, the same
``status.allocation`` for every claim (:mod:`tests.upstream.differential`). The Go harness
(``tools/upstream-allocator``) is built on first use and cached outside the repository
(:mod:`tests.upstream.build`; ``make test`` builds it first). ``make fuzz-upstream
N=10000`` runs more worlds from other seeds and shrinks each mismatch.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.upstream import build
from tests.upstream.differential import Mismatch, Upstream, compare, shrink_mismatch
from tests.upstream.worlds import world

SEEDS = range(1, 401)  # fixed: the same worlds in every run


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream(build.build()) as running:
        yield running


def test_the_harness_runs_with_the_1_37_default_gates() -> None:
    done = subprocess.run(
        [str(build.build()), "--print-features"], capture_output=True, text=True, check=True
    )
    features = json.loads(done.stdout)
    assert features["FractionalCapacityRange"] is False  # needs compatibility version 1.37
    assert features["ConsumableCapacity"] and features["PartitionableDevices"]
    assert features["DeviceTaints"] and features["PrioritizedList"] and features["AdminAccess"]
    assert not features["ListTypeAttributes"]


def test_seeded_worlds_agree_with_upstream(upstream: Upstream) -> None:
    mismatches, total, agree = compare(upstream, SEEDS)
    if mismatches:
        first: Mismatch = mismatches[0]
        small = shrink_mismatch(upstream, first)
        pytest.fail(
            f"{len(mismatches)} of {total['any']} worlds differ from upstream "
            f"(seeds {[m.seed for m in mismatches[:20]]}); the first, shrunk:\n"
            + Mismatch(first.seed, small, first.ours, first.upstream).describe()
        )
    # the worlds exercise what they are meant to: every feature in some agreeing world
    for name in (
        "all",
        "first-available",
        "partitionable",
        "consumable-capacity",
        "taints",
        "taint-rules",
    ):
        assert agree[name] > 0, name


@pytest.mark.pure
def test_worlds_are_a_function_of_their_seed() -> None:
    assert world(7) == world(7)
    assert world(7) != world(8)

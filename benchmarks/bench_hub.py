"""The spawn form's choices on 1,000 nodes of 8 GPUs, beside one allocation in the same world.

Run with ``make bench-hub`` (or ``.venv/bin/python benchmarks/bench_hub.py``). Prints a
Markdown table: wall-clock and CPU milliseconds (p50 and the slowest) of

* **baseline**: one cold allocation of 1 GPU in the same world:
  ``Allocator(slices, classes, held).allocate([1 GPU])``, a new allocator without cache (the
  first call of the process, which compiles CEL, is made before and not counted);
* **choices, cold**: :func:`dra_jupyter.hub.choices.choices` with a new
  :class:`~dra_jupyter.hub.counting.ChoiceCache`: the layout of the slices (sorts of
  devices, units, what idle devices take) and then the counts, the reasons of the choices
  none can start, the times;
* **choices, one claim changed**: the same cache, one allocated claim replaced by a new
  object before each call (a claim came or went), as a hub calls it on each spawn page;
* **choices, nothing changed**: the same cache and the same objects;

and the ratio of each to the baseline's p50, in the same run. Two worlds, half the GPUs held
(drawn at random, seeded; one allocated claim per node):

* ``8,000 GPUs``: 500 H200 HGX nodes and 500 H100 PCIe servers, 8 GPUs each;
* ``28,000 devices``: the cluster of ``bench_allocator.py`` (every tenth node an H200 HGX in
  MIG mode, each GPU with its 25 MIG placements on one counter set).

Slices, classes and claims are parsed beforehand (what a long-running hub holds); parsing
is not timed. Target of issue 17: the choices within 100 ms.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_allocator import cluster_slices, held_claims, pcie_switch_node
from dra_jupyter.allocator import Allocator
from dra_jupyter.hub.choices import World, choices
from dra_jupyter.hub.counting import ChoiceCache
from dra_jupyter.inventory import nvidia
from dra_jupyter.model.objects import DeviceClass, ResourceClaim, ResourceSlice
from dra_jupyter.model.parse import (
    parse_device_class,
    parse_many,
    parse_resource_claim,
    parse_resource_slice,
)

Wire = dict[str, Any]
TARGET_MS = 100.0
ONE_GPU: Wire = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "bench", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
            ]
        }
    },
}


def gpu_slices(nodes: int) -> list[Wire]:
    """Half H200 HGX nodes, half H100 PCIe servers, 8 GPUs each."""
    return [
        nvidia.hgx_node(f"node-{i:04d}", nvidia.H200)
        if i % 2 == 0
        else pcie_switch_node(f"node-{i:04d}")
        for i in range(nodes)
    ]


def gpu_claims(nodes: int, occupancy: float, seed: int = 7) -> list[Wire]:
    """One allocated claim per node holding that node's share of the randomly held GPUs."""
    rng = random.Random(seed)
    gpus = [(i, minor) for i in range(nodes) for minor in range(8)]
    by_node: dict[int, list[int]] = {}
    for i, minor in sorted(rng.sample(gpus, round(occupancy * len(gpus)))):
        by_node.setdefault(i, []).append(minor)
    out = []
    for i, minors in sorted(by_node.items()):
        node = f"node-{i:04d}"
        results = [
            {"request": "r", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{m}"}
            for m in minors
        ]
        out.append(
            {
                "metadata": {
                    "name": f"held-{node}",
                    "namespace": "default",
                    "creationTimestamp": f"2026-12-01T{8 + i % 10:02d}:{i % 60:02d}:00Z",
                },
                "spec": {"devices": {"requests": []}},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        )
    return out


def stats(times: Sequence[float]) -> tuple[float, float]:
    return statistics.median(times) * 1000, max(times) * 1000


def timed(
    fn: Callable[[], object], repeat: int, before: Callable[[], None] | None = None
) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``repeat`` calls (``before`` runs untimed before each)."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        if before is not None:
            before()
        gc.collect()
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return wall, cpu


def bench(
    name: str, slices_wire: list[Wire], claims_wire: list[Wire], repeat: int, cold_repeat: int
) -> list[str]:
    slices = parse_many(slices_wire, parse_resource_slice, ResourceSlice)
    classes = parse_many(nvidia.device_classes(), parse_device_class, DeviceClass)
    held = parse_many(claims_wire, parse_resource_claim, ResourceClaim)
    one = parse_resource_claim(ONE_GPU)
    devices = sum(len(s.devices) for s in slices)
    Allocator(slices[:8], classes).allocate([one])  # CEL compiled, once per process

    baseline = timed(lambda: Allocator(slices, classes, held).allocate([one]), repeat)
    cold = timed(lambda: choices(World(slices, classes, held), cache=ChoiceCache()), cold_repeat)

    cache = ChoiceCache()
    offered = choices(World(slices, classes, held), cache=cache)
    current = list(held)
    spare = [parse_resource_claim(w) for w in claims_wire[:2]]  # equal claims, new objects
    turn = [0]

    def change() -> None:
        turn[0] += 1
        current[0] = spare[turn[0] % 2]

    changed = timed(lambda: choices(World(slices, classes, current), cache=cache), repeat, change)
    same = World(slices, classes, current)
    choices(same, cache=cache)
    unchanged = timed(lambda: choices(same, cache=cache), repeat)

    base = stats(baseline[0])[0]
    rows = []
    for label, (wall, cpu) in (
        ("baseline: 1 GPU, one cold allocation", baseline),
        ("choices, cold (new cache)", cold),
        ("choices, one claim changed", changed),
        ("choices, nothing changed", unchanged),
    ):
        w50, wmax = stats(wall)
        c50, cmax = stats(cpu)
        ratio = w50 / base if base else float("nan")
        met = "" if label.startswith("baseline") else (" yes" if w50 <= TARGET_MS else " **no**")
        rows.append(
            f"| {name} ({devices:,} devices) | {label} | {w50:.1f} / {wmax:.1f} | "
            f"{c50:.1f} / {cmax:.1f} | {ratio:.1f} |{met} |"
        )
    gpus = [c for c in offered if c.slug != "none"]
    rows.append(
        f"| {name} | {len(offered)} choices ({len(gpus)} with devices, "
        f"{sum(c.available == 0 for c in gpus)} none can start now) | | | | |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20, help="calls per warm figure")
    parser.add_argument("--cold-repeat", type=int, default=5, help="calls per cold figure")
    parser.add_argument("--occupancy", type=float, default=0.5)
    args = parser.parse_args()
    print(
        "| world | what | wall ms p50 / max | CPU ms p50 / max | x baseline p50 | "
        f"<= {TARGET_MS:g} ms |"
    )
    print("|---|---|---|---|---|---|")
    worlds = (
        ("8,000 GPUs", gpu_slices(args.nodes), gpu_claims(args.nodes, args.occupancy)),
        ("MIG cluster", cluster_slices(args.nodes), held_claims(args.nodes, args.occupancy)),
    )
    for name, slices, claims in worlds:
        for row in bench(name, slices, claims, args.repeat, args.cold_repeat):
            print(row, flush=True)


if __name__ == "__main__":
    main()

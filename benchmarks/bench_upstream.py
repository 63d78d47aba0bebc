"""Ours against the real Kubernetes 1.37.2 allocator, side by side in one run: cold calls.

Run with ``make bench-upstream`` (or ``.venv/bin/python benchmarks/bench_upstream.py``).
The Go harness (``tools/upstream-allocator``, built as :mod:`tests.upstream.build` does) gets
each world ``--rounds`` times with ``--time --repeat N``: per call a new allocator
(kube-scheduler's ``structured.NewAllocator`` on the allocated state) and the nodes tried in
name order until one fits, objects already decoded and admitted (the CEL cache is kept
between calls, as kube-scheduler keeps it between scheduling cycles). Ours, after each of
the harness's rounds, so that both sides see the same load: ``Allocator(...).allocate([claim])``
on objects already parsed, a new allocator each call (no :class:`AllocatorCache`), for
first-fit and topology. Cold figures are medians in ms: the harness's is the median of its
rounds' medians, ours the median of all calls (in brackets: of the thread's CPU time, which a
loaded machine does not inflate as it does the wall clock); the ratios are ours over upstream,
wall clock on both sides. Both
answers are checked to be the same node and devices. **Warm**: p50 and p99 of 100 calls
through one :class:`AllocatorCache` on the same objects, as the local backend makes them
between two changes (the first call not counted), in wall-clock ms and, in brackets, the p99
of the thread's CPU time (``time.thread_time``), which leaves out the waits for a core that a
loaded machine adds to the wall clock. The parsed objects of each world are frozen out of the
collector's passes (``gc.freeze()``, as ``bench_allocator`` does; ``--no-gc-freeze`` leaves
them in). Then the model conversion table of :mod:`benchmarks.bench_model` (``--no-model``
leaves it out).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_model
from benchmarks.bench_allocator import (
    GPU,
    _claim,
    _exact,
    _held,
    cluster_slices,
    held_claims,
)
from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.allocator.core import STRATEGIES
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model.objects import DeviceClass, Node, ResourceClaim, ResourceSlice
from dra_jupyter.model.parse import (
    parse_device_class,
    parse_many,
    parse_node,
    parse_resource_claim,
    parse_resource_slice,
)
from tests.upstream import build

Wire = dict[str, Any]


def nodes_of(slices: list[Wire]) -> list[Wire]:
    names = sorted({s["spec"]["nodeName"] for s in slices if s["spec"].get("nodeName")})
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names]


def hgx(nodes: int) -> list[Wire]:
    return [nvidia.hgx_node(f"node-{i:04d}", nvidia.H200) for i in range(nodes)]


def mig_nodes(nodes: int) -> list[Wire]:
    return [s for i in range(nodes) for s in mig.h200_mig_node(f"node-{i:04d}", gpus=8)]


def crowded_held(nodes: int, occupancy: float, seed: int = 31) -> list[Wire]:
    """One seeded random draw of ``occupancy`` of the GPUs of ``nodes`` 8-GPU nodes, held by
    one allocated claim per node (the crowded world of issue #31)."""
    rng = random.Random(seed)
    gpus = [(i, minor) for i in range(nodes) for minor in range(8)]
    by_node: dict[int, list[str]] = {}
    for i, minor in sorted(rng.sample(gpus, round(occupancy * len(gpus)))):
        by_node.setdefault(i, []).append(f"gpu-{minor}")
    return [
        _held(f"held-node-{i:04d}", f"node-{i:04d}", devices)
        for i, devices in sorted(by_node.items())
    ]


def _kinded(claims: list[Wire]) -> list[Wire]:
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **c} for c in claims]


World = Callable[[], tuple[list[Wire], list[Wire], Wire]]


def worlds() -> dict[str, World]:
    """Each world's slices, allocated claims and claim, made when called (one at a time in
    memory)."""
    mig_claim = _claim(
        [
            {
                "name": "mig",
                "exactly": _exact(
                    1, f"device.attributes['{GPU}'].profile == '3g.71gb'", cls="mig.nvidia.com"
                ),
            }
        ]
    )
    return {
        "1 GPU, 1,000 empty 8-GPU nodes": lambda: (
            hgx(1000),
            [],
            _claim([{"name": "g", "exactly": _exact(1)}]),
        ),
        "4 GPUs on one pcieRoot, 100 nodes, 90% held": lambda: (
            cluster_slices(100),
            _kinded(held_claims(100, 0.9)),
            _claim(
                [{"name": "g", "exactly": _exact(4)}],
                [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            ),
        ),
        "9 GPUs on 100 8-GPU nodes (never fits)": lambda: (
            hgx(100),
            [],
            _claim([{"name": "g", "exactly": _exact(9)}]),
        ),
        "MIG 3g.71gb, 100 H200 nodes": lambda: (mig_nodes(100), [], mig_claim),
        # not tuned for: 1,000 HGX nodes (two GPUs per PCIe root), 90% of the GPUs held by
        # one seeded draw, and a claim for 4 GPUs on one root, which fits nowhere
        "4 GPUs on one pcieRoot, 1,000 crowded nodes (90% held, never fits)": lambda: (
            hgx(1000),
            _kinded(crowded_held(1000, 0.9)),
            _claim(
                [{"name": "g", "exactly": _exact(4)}],
                [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            ),
        ),
    }


def picks(allocation: Wire | None) -> Any:
    if allocation is None:
        return None
    node = allocation.get("nodeSelector")
    return json.dumps(node, sort_keys=True), [
        (r["request"], r["pool"], r["device"]) for r in allocation["devices"]["results"]
    ]


def p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def row(name: str, make: World, binary: Path, classes_wire: list[Wire], args: Any) -> str:
    """One world's line of the table (see the module's docstring)."""
    slices_wire, held_wire, claim = make()
    nodes = nodes_of(slices_wire)
    objects = [*classes_wire, *slices_wire, *nodes, *held_wire, claim]
    request = json.dumps({"objects": objects}) + "\n"
    slices = parse_many(slices_wire, parse_resource_slice, ResourceSlice)
    classes = parse_many(classes_wire, parse_device_class, DeviceClass)
    held = parse_many(held_wire, parse_resource_claim, ResourceClaim)
    [parsed] = parse_many([claim], parse_resource_claim, ResourceClaim)
    node_objects = parse_many(nodes, parse_node, Node)
    del objects, slices_wire
    if not args.no_gc_freeze:
        gc.collect()
        gc.freeze()
    go: list[float] = []
    ours: dict[str, list[float]] = {"first-fit": [], "topology": []}
    cpu: dict[str, list[float]] = {"first-fit": [], "topology": []}
    theirs: Any = None
    mine: Any = None
    for _ in range(args.rounds):
        done = subprocess.run(
            [str(binary), "--time", "--repeat", str(args.repeat)],
            input=request,
            capture_output=True,
            text=True,
            check=True,
        )
        answer = json.loads(done.stdout)
        go.append(answer["ns"] / 1e6)
        theirs = picks(answer["items"][0]["status"]["allocation"]) if answer["exit"] == 0 else None
        for strategy in STRATEGIES:
            for _ in range(args.repeat):
                start, start_cpu = time.perf_counter(), time.thread_time()
                allocator = Allocator(slices, classes, held, strategy, nodes=node_objects)
                found = allocator.allocate([parsed])
                ours[strategy].append((time.perf_counter() - start) * 1000)
                cpu[strategy].append((time.thread_time() - start_cpu) * 1000)
                if strategy == "first-fit":
                    mine = picks(found[0].to_dict()) if found is not None else None
    warm: dict[str, str] = {}
    for strategy in STRATEGIES:
        cache = AllocatorCache()
        times, cpu_times = [], []
        for i in range(args.warm_repeat + 1):
            start, start_cpu = time.perf_counter(), time.thread_time()
            Allocator(slices, classes, held, strategy, nodes=node_objects, cache=cache).allocate(
                [parsed]
            )
            if i:
                times.append((time.perf_counter() - start) * 1000)
                cpu_times.append((time.thread_time() - start_cpu) * 1000)
        warm[strategy] = f"{statistics.median(times):.2f} / {p99(times):.2f} ({p99(cpu_times):.2f})"
    go_ms = statistics.median(go)
    ff, topo = statistics.median(ours["first-fit"]), statistics.median(ours["topology"])
    same = "" if mine == theirs else " (answers differ!)"
    ff_cpu, topo_cpu = statistics.median(cpu["first-fit"]), statistics.median(cpu["topology"])
    line = (
        f"| {name} | {go_ms:.2f} | {ff:.2f} ({ff_cpu:.2f}) | {ff / go_ms:.2f}{same} | "
        f"{topo:.2f} ({topo_cpu:.2f}) | {topo / go_ms:.2f} | {warm['first-fit']} | "
        f"{warm['topology']} |"
    )
    if not args.no_gc_freeze:
        gc.unfreeze()
    del slices, held, node_objects, request
    gc.collect()
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="cold calls a round, each side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm-repeat", type=int, default=100)
    parser.add_argument("--model-repeat", type=int, default=7)
    parser.add_argument("--no-gc-freeze", action="store_true")
    parser.add_argument("--no-model", action="store_true")
    parser.add_argument(
        "--world", default="", metavar="SUBSTRING", help="only the worlds whose name has it"
    )
    args = parser.parse_args(argv)
    binary = build.build()
    classes_wire = nvidia.device_classes()
    print(
        "| world | upstream cold | ours first-fit cold (CPU) | first-fit / upstream "
        "| ours topology cold (CPU) | topology / upstream | warm first-fit p50 / p99 (CPU p99) "
        "| warm topology p50 / p99 (CPU p99) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, make in worlds().items():
        if args.world not in name:
            continue
        print(row(name, make, binary, classes_wire, args), flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores")
    if not args.no_model:
        print()
        print("\n".join(bench_model.table(args.model_repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Allocator latency and scaling: first-fit and topology side by side, cold and warm caches.

Run with ``make bench-latency`` (or ``.venv/bin/python benchmarks/bench_allocator.py``).
Prints Markdown tables; figures are wall-clock milliseconds on the machine that runs it,
p50 and p99 of ``--repeat`` calls.

The clusters have 10, 100 and 1,000 nodes of 8 GPUs in the NVIDIA driver's shape: every
tenth node an H200 HGX in MIG mode (DynamicMIG: each GPU published with its 25 MIG
placements, drawing on one counter set per GPU), the other odd nodes H100 PCIe servers
(two root complexes, four GPUs behind each), the even ones H200 HGX (four root
complexes, two GPUs each). Occupancy 0%, 50% or 90%: that share of the GPUs, drawn
at random (seeded), is held by one allocated claim per node; a held GPU of a MIG node
is held whole or, for odd minors, through a 3g.71gb at start 0 and a 1g.18gb at start 4.

Each call is ``Allocator(...).allocate([claim])``, constructor included, on slices and
claims already parsed (what a long-running process holds; parsing the wire dicts is not
timed):

* cold: a new allocator with no cache, as a one-off call makes it;
* warm: every call passes the same :class:`~dra_jupyter.allocator.cache.AllocatorCache`
  and the same slice and claim objects, as a backend does between two changes of the
  cluster (the first, cold call is not counted);
* warm, one claim changed: as warm, but one allocated claim is replaced by a new object
  before each call (a claim came or went since the last call).

Cold figures are ``--repeat`` calls, on 1,000 nodes ``--cold-repeat-big`` (default 3:
their p99 is the slowest of 3); warm figures ``--warm-repeat`` calls (default 100).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model.objects import DeviceClass, ResourceClaim, ResourceSlice
from dra_jupyter.model.parse import (
    parse_device_class,
    parse_many,
    parse_resource_claim,
    parse_resource_slice,
)

Wire = dict[str, Any]
GPU = "gpu.nvidia.com"
STRATEGIES: tuple[Strategy, ...] = ("first-fit", "topology")

# --- clusters --------------------------------------------------------------------------------


def pcie_switch_node(node: str) -> Wire:
    """An 8-GPU H100 PCIe server: 2 sockets, each root complex with 4 GPUs behind a switch."""
    devices = [
        nvidia.gpu_device(
            node,
            i,
            nvidia.H100_SXM,
            nvidia.GpuPlacement(
                f"0000:{0x18 + i:02x}:00.0", f"pci0000:{(i // 4) * 0x80:02x}", i // 4
            ),
        )
        for i in range(8)
    ]
    return nvidia.gpu_slice(node, devices)


def node_kind(i: int) -> str:
    return "mig" if i % 10 == 9 else "h100" if i % 2 else "h200"


def cluster_slices(nodes: int) -> list[Wire]:
    out: list[Wire] = []
    for i in range(nodes):
        name = f"node-{i:04d}"
        kind = node_kind(i)
        if kind == "mig":
            out.extend(mig.h200_mig_node(name, gpus=8))
        elif kind == "h100":
            out.append(pcie_switch_node(name))
        else:
            out.append(nvidia.hgx_node(name, nvidia.H200))
    return out


def held_claims(nodes: int, occupancy: float, seed: int = 7) -> list[Wire]:
    """One allocated claim per node holding that node's share of the randomly held GPUs."""
    rng = random.Random(seed)
    gpus = [(i, minor) for i in range(nodes) for minor in range(8)]
    held = sorted(rng.sample(gpus, round(occupancy * len(gpus))))
    by_node: dict[int, list[int]] = {}
    for i, minor in held:
        by_node.setdefault(i, []).append(minor)
    claims = []
    for i, minors in sorted(by_node.items()):
        name = f"node-{i:04d}"
        devices = []
        for minor in minors:
            if node_kind(i) == "mig" and minor % 2:
                devices += [f"gpu-{minor}-mig-3g71gb-9-0", f"gpu-{minor}-mig-1g18gb-19-4"]
            else:
                devices.append(f"gpu-{minor}")
        claims.append(_held(f"held-{name}", name, devices))
    return claims


def _held(claim: str, node: str, devices: list[str]) -> Wire:
    results = [{"request": "r", "driver": GPU, "pool": node, "device": d} for d in devices]
    return {
        "metadata": {"name": claim, "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


# --- claims ----------------------------------------------------------------------------------


def _claim(requests: list[Wire], constraints: list[Wire] | None = None) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": constraints or []}},
    }


def _exact(count: int, *selectors: str, cls: str = GPU) -> Wire:
    out: Wire = {"deviceClassName": cls, "count": count}
    if selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return out


def memory_at_least(size: str) -> str:
    return f"device.capacity['{GPU}'].memory.compareTo(quantity('{size}')) >= 0"


CLAIMS: dict[str, Wire] = {
    "1 GPU": _claim([{"name": "gpu", "exactly": _exact(1)}]),
    "1 GPU, CEL memory >= 100Gi": _claim(
        [{"name": "gpu", "exactly": _exact(1, memory_at_least("100Gi"))}]
    ),
    "4 GPUs, one PCIe root": _claim(
        [{"name": "gpu", "exactly": _exact(4)}],
        [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    ),
    "8 GPUs, one node": _claim([{"name": "gpu", "exactly": _exact(8)}]),
    "MIG 3g.71gb": _claim(
        [
            {
                "name": "mig",
                "exactly": _exact(
                    1, f"device.attributes['{GPU}'].profile == '3g.71gb'", cls="mig.nvidia.com"
                ),
            }
        ]
    ),
    "firstAvailable: 1 H200, else 2 smaller": _claim(
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {
                        "name": "h200",
                        **_exact(1, f"device.attributes['{GPU}'].productName == 'NVIDIA H200'"),
                    },
                    {
                        "name": "smaller",
                        **_exact(2, f"!({memory_at_least('100Gi')})"),
                    },
                ],
            }
        ]
    ),
    "unsatisfiable: 1 GPU >= 200Gi": _claim(
        [{"name": "gpu", "exactly": _exact(1, memory_at_least("200Gi"))}]
    ),
}


# --- measuring -------------------------------------------------------------------------------


@dataclass
class World:
    nodes: int
    devices: int
    slices: list[ResourceSlice]
    classes: list[DeviceClass]


def world(nodes: int) -> World:
    slices = parse_many(cluster_slices(nodes), parse_resource_slice, ResourceSlice)
    classes = parse_many(nvidia.device_classes(), parse_device_class, DeviceClass)
    return World(nodes, sum(len(s.devices) for s in slices), slices, classes)


def percentiles(times: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered), p99


def timed(
    call: Callable[[], object], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        start = clock()
        result = call()
        times.append((clock() - start) * 1000)
    return times, result


def measure(
    w: World,
    held: list[ResourceClaim],
    claim: Wire,
    strategy: Strategy,
    mode: str,
    repeat: int,
    variants: Sequence[Wire] = (),
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, float, bool]:
    if mode == "cold":

        def call() -> object:
            return Allocator(w.slices, w.classes, held, strategy).allocate([claim])

    elif mode == "warm":
        cache = AllocatorCache()

        def call() -> object:
            return Allocator(w.slices, w.classes, held, strategy, cache=cache).allocate([claim])

        call()
    else:  # warm, with one allocated claim replaced by a new object before each call
        cache = AllocatorCache()
        current = list(held)
        Allocator(w.slices, w.classes, current, strategy, cache=cache).allocate([claim])
        calls = [0]

        def call() -> object:
            calls[0] += 1
            current[0] = parse_resource_claim(variants[calls[0] % len(variants)])
            return Allocator(w.slices, w.classes, current, strategy, cache=cache).allocate([claim])

    times, result = timed(call, repeat, clock)
    p50, p99 = percentiles(times)
    return p50, p99, result is not None


def _synthetic(n: int, value: Callable[[int], tuple[int, int]]) -> tuple[list[Wire], list[Wire]]:
    devices = [
        {
            "name": f"dev-{i}",
            "attributes": {"v": {"int": value(i)[0]}, "w": {"int": value(i)[1]}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(n)
    ]
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": SYNTHETIC,
                "nodeName": "n1",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    ]
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "c"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{SYNTHETIC}'"}}]},
        }
    ]
    return slices, classes


def _requests(n: int, count: int) -> list[Wire]:
    return [
        {"name": f"r{i}", "exactly": {"deviceClassName": "c", "count": count}} for i in range(n)
    ]


SYNTHETIC = "d.example.com"
V, W = f"{SYNTHETIC}/v", f"{SYNTHETIC}/w"
HARD: dict[str, Callable[[], tuple[list[Wire], list[Wire], Wire]]] = {
    "match 8x1, all values distinct (unsat)": lambda: (
        *_synthetic(64, lambda i: (i, 0)),
        _claim(_requests(8, 1), [{"matchAttribute": V}]),
    ),
    "distinct 9x1, 8 values (unsat, pigeonhole)": lambda: (
        *_synthetic(64, lambda i: (i % 8, 0)),
        _claim(_requests(9, 1), [{"distinctAttribute": V}]),
    ),
    "match+distinct 4x2 (unsat)": lambda: (
        *_synthetic(64, lambda i: (i % 4, i % 3)),
        _claim(_requests(4, 2), [{"matchAttribute": V}, {"distinctAttribute": W}]),
    ),
    "32 devices in one request": lambda: (
        *_synthetic(64, lambda i: (i, 0)),
        _claim(_requests(1, 32)),
    ),
}


def _allocate(
    slices: list[ResourceSlice], classes: list[Wire], claim: Wire, strategy: Strategy
) -> object:
    return Allocator(slices, classes, (), strategy).allocate([claim])


def hard_inputs(repeat: int) -> None:
    """Inputs that are hard for the search itself: 64 devices on one node, cold calls."""
    print("| input (64 devices, one node, cold) | result | first-fit | topology |")
    print("|---|---|---|---|")
    for name, case in HARD.items():
        slices, classes, claim = case()
        parsed = parse_many(slices, parse_resource_slice, ResourceSlice)
        cells, ok = [], False
        for strategy in STRATEGIES:
            call = functools.partial(_allocate, parsed, classes, claim, strategy)
            times, result = timed(call, repeat)
            ok = result is not None
            cells.append("{:.2f} / {:.2f}".format(*percentiles(times)))
        print(f"| {name} | {'allocated' if ok else 'none'} | " + " | ".join(cells) + " |")
    print()


def fitted_exponent(points: list[tuple[int, float]]) -> float:
    """The slope of log(time) over log(devices): 1.0 is linear growth."""
    xs = [math.log(d) for d, _ in points]
    ys = [math.log(max(t, 1e-3)) for _, t in points]
    return statistics.linear_regression(xs, ys).slope


def slowest_oracle_cases(top: int = 3) -> list[tuple[float, str]]:
    """Best-of-5 time of each case of the oracle table, slowest first."""
    from dra_jupyter.errors import InvalidInputError  # noqa: PLC0415
    from tests.allocator.test_upstream_semantics import CASES  # noqa: PLC0415

    times = []
    for name, case in CASES.items():
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            with contextlib.suppress(InvalidInputError):
                Allocator(case.slices, case.classes, case.allocated, nodes=[case.node]).allocate(
                    case.claims, node=case.node["metadata"]["name"]
                )
            best = min(best, time.perf_counter() - start)
        times.append((best * 1000, name))
    return sorted(times, reverse=True)[:top]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cold-repeat-big", type=int, default=3, help="cold calls on 1,000 nodes")
    parser.add_argument("--warm-repeat", type=int, default=100, help="warm calls per figure")
    parser.add_argument("--sizes", default="10,100,1000", help="node counts, comma-separated")
    parser.add_argument("--occupancies", default="0,50,90", help="percent, comma-separated")
    parser.add_argument("--cpu-repeat", type=int, default=2000, help="calls of the CPU table")
    parser.add_argument("--claims", default="", help="only these claims, separated by ';'")
    parser.add_argument("--no-hard", action="store_true", help="skip the 64-device inputs")
    parser.add_argument("--oracle", action="store_true", help="also time the oracle table")
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the parsed inventory to the garbage collector's full passes",
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    if args.oracle:
        for ms, name in slowest_oracle_cases():
            print(f"oracle case {name}: {ms:.1f} ms (best of 5)")
        print()
    if not args.no_hard:
        hard_inputs(args.repeat)
    claims = {n: c for n, c in CLAIMS.items() if not args.claims or n in args.claims.split(";")}
    sizes = [int(s) for s in args.sizes.split(",")]
    occupancies = [int(p) for p in args.occupancies.split(",")]
    print(
        f"cold: {args.repeat} calls ({args.cold_repeat_big} on 1,000 nodes); "
        f"warm: {args.warm_repeat} calls"
    )
    print()
    print(
        "| nodes (devices) | occupied | claim | result | cold first-fit | cold topology "
        "| warm first-fit | warm topology |"
    )
    print("|---|---|---|---|---|---|---|---|")
    growth: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    targets: World | None = None
    changed: list[str] = []
    for nodes in sizes:
        w = world(nodes)
        for occupancy in occupancies:
            held = parse_many(
                held_claims(nodes, occupancy / 100), parse_resource_claim, ResourceClaim
            )
            if not args.no_gc_freeze:
                # what a long-running backend does once it has loaded the cluster: the parsed
                # slices and claims leave the collector's full passes, which otherwise walk
                # them now and then during a cold call on 1,000 nodes (540-810 ms)
                gc.collect()
                gc.freeze()
            for name, claim in claims.items():
                cells: list[str] = []
                outcomes: set[bool] = set()
                for mode in ("cold", "warm"):
                    repeat = (
                        args.warm_repeat
                        if mode == "warm"
                        else args.cold_repeat_big
                        if nodes >= 1000
                        else args.repeat
                    )
                    for strategy in STRATEGIES:
                        p50, p99, ok = measure(w, held, claim, strategy, mode, repeat)
                        outcomes.add(ok)
                        cells.append(f"{p50:.2f} / {p99:.2f}")
                        if occupancy == 50:
                            growth.setdefault((name, strategy, mode), []).append((w.devices, p50))
                result = {True: "allocated", False: "none"}.get(outcomes.pop(), "?")
                if outcomes:
                    result = "?"
                print(
                    f"| {nodes:,} ({w.devices:,}) | {occupancy}% | {name} | {result} | "
                    + " | ".join(cells)
                    + " |",
                    flush=True,
                )
            if occupancy == 50 and "1 GPU" in claims:
                changed.append(changed_row(w, held, args.warm_repeat))
            gc.unfreeze()
        if nodes == max(sizes) and "1 GPU" in claims:
            targets = w
    print()
    print("Warm, one allocated claim replaced by a new object before each call:")
    print()
    print("| nodes (devices) | occupied | claim | first-fit | topology |")
    print("|---|---|---|---|---|")
    for line in changed:
        print(line)
    if len(sizes) > 1 and growth:
        growth_table(growth, list(claims))
    if targets is not None:
        cpu_rows(targets, args.cpu_repeat)


def cpu_rows(w: World, repeat: int) -> None:
    """The 1-GPU target: warm p50 and p99 of wall-clock time and of the thread's CPU time
    (which leaves out the time the process waits while the machine runs others)."""
    print()
    print(f"1 GPU on {w.nodes:,} nodes, warm, {repeat} calls: wall-clock and CPU time")
    print()
    print("| occupied | strategy | wall p50 / p99 ms | CPU p50 / p99 ms |")
    print("|---|---|---|---|")
    for occupancy in (0, 50, 90):
        held = parse_many(
            held_claims(w.nodes, occupancy / 100), parse_resource_claim, ResourceClaim
        )
        for strategy in STRATEGIES:
            cells = [
                "{:.2f} / {:.2f}".format(
                    *measure(w, held, CLAIMS["1 GPU"], strategy, "warm", repeat, (), clock)[:2]
                )
                for clock in (time.perf_counter, time.thread_time)
            ]
            print(f"| {occupancy}% | {strategy} | " + " | ".join(cells) + " |")


def changed_row(w: World, held: list[ResourceClaim], repeat: int) -> str:
    """1 GPU, 50% occupied, while the first node's claim alternates between holding its
    GPUs and holding one fewer."""
    first = held_claims(w.nodes, 0.5)[0]
    results = first["status"]["allocation"]["devices"]["results"]
    fewer = _held(first["metadata"]["name"], results[0]["pool"], [r["device"] for r in results[1:]])
    cells = [
        "{:.2f} / {:.2f}".format(
            *measure(w, held, CLAIMS["1 GPU"], s, "changed", repeat, [first, fewer])[:2]
        )
        for s in STRATEGIES
    ]
    return f"| {w.nodes:,} ({w.devices:,}) | 50% | 1 GPU | " + " | ".join(cells) + " |"


def growth_table(
    growth: dict[tuple[str, str, str], list[tuple[int, float]]], claims: list[str]
) -> None:
    print()
    print("Growth with devices (50% occupied): exponent of p50 in devices (1.0 = linear)")
    print()
    print("| claim | cold first-fit | cold topology | warm first-fit | warm topology |")
    print("|---|---|---|---|---|")
    for name in claims:
        cells = [
            f"{fitted_exponent(growth[(name, s, m)]):.2f}"
            for m in ("cold", "warm")
            for s in STRATEGIES
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

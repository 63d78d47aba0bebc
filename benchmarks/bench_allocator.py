"""Allocator latency: hard inputs and a growing cluster, first-fit and topology side by side.

Run with ``make bench`` (or ``.venv/bin/python benchmarks/bench_allocator.py``). Prints a
Markdown table; figures are wall-clock milliseconds on the machine that runs it. Each
figure is the median (p50) and the 99th percentile (p99) of ``--repeat`` runs of one
``Allocator.allocate`` call on a fresh allocator (cold caches: CEL views and selector
results are built inside the timed call).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from dra_jupyter.allocator import Allocator
from dra_jupyter.inventory import nvidia

Wire = dict[str, Any]
DRIVER = "d.example.com"


def _claim(requests: list[Wire], constraints: list[Wire] | None = None) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": constraints or []}},
    }


def _requests(n: int, count: int, cls: str = "c") -> list[Wire]:
    return [
        {"name": f"r{i}", "exactly": {"deviceClassName": cls, "count": count}} for i in range(n)
    ]


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
                "driver": DRIVER,
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
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        }
    ]
    return slices, classes


def _cluster(nodes: int) -> tuple[list[Wire], list[Wire]]:
    return [nvidia.hgx_node(f"node-{i:04d}") for i in range(nodes)], nvidia.device_classes()


def _gpu_claim(count: int, *selectors: str, constraints: list[Wire] | None = None) -> Wire:
    exactly: Wire = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return _claim([{"name": "gpu", "exactly": exactly}], constraints)


HUGE = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0"
ROOT = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
V, W = f"{DRIVER}/v", f"{DRIVER}/w"

CASES: dict[str, Callable[[], tuple[list[Wire], list[Wire], Wire]]] = {
    "match 8x1, 64 devices, all values distinct (unsat)": lambda: (
        *_synthetic(64, lambda i: (i, 0)),
        _claim(_requests(8, 1), [{"matchAttribute": V}]),
    ),
    "distinct 9x1, 64 devices, 8 values (unsat, pigeonhole)": lambda: (
        *_synthetic(64, lambda i: (i % 8, 0)),
        _claim(_requests(9, 1), [{"distinctAttribute": V}]),
    ),
    "match+distinct 4x2, 64 devices (unsat)": lambda: (
        *_synthetic(64, lambda i: (i % 4, i % 3)),
        _claim(_requests(4, 2), [{"matchAttribute": V}, {"distinctAttribute": W}]),
    ),
    "32 devices of 64 in one request": lambda: (
        *_synthetic(64, lambda i: (i, 0)),
        _claim(_requests(1, 32)),
    ),
    "1 GPU, 100 nodes": lambda: (*_cluster(100), _gpu_claim(1)),
    "4 GPUs on one PCIe root, 100 nodes (unsat)": lambda: (
        *_cluster(100),
        _gpu_claim(4, constraints=ROOT),
    ),
    "1 GPU >= 200Gi, 100 nodes (unsat)": lambda: (*_cluster(100), _gpu_claim(1, HUGE)),
    "8 GPUs, 100 nodes": lambda: (*_cluster(100), _gpu_claim(8)),
    "1 GPU, 1,000 nodes": lambda: (*_cluster(1000), _gpu_claim(1)),
    "1 GPU >= 200Gi, 1,000 nodes (unsat)": lambda: (*_cluster(1000), _gpu_claim(1, HUGE)),
}


def measure(
    case: Callable[[], tuple[list[Wire], list[Wire], Wire]], strategy: str, repeat: int
) -> tuple[float, float, bool]:
    slices, classes, claim = case()
    times = []
    ok = False
    for _ in range(repeat):
        allocator = Allocator(slices, classes, strategy=strategy)  # type: ignore[arg-type]
        start = time.perf_counter()
        ok = allocator.allocate([claim]) is not None
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    return statistics.median(times), p99, ok


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--oracle", action="store_true", help="also time the oracle table")
    args = parser.parse_args()
    if args.oracle:
        for ms, name in slowest_oracle_cases():
            print(f"oracle case {name}: {ms:.1f} ms (best of 5)")
        print()
    print(f"repeat {args.repeat}")
    print()
    print("| input | result | first-fit p50 / p99 ms | topology p50 / p99 ms |")
    print("|---|---|---|---|")
    for name, case in CASES.items():
        ff50, ff99, ok = measure(case, "first-fit", args.repeat)
        tp50, tp99, _ = measure(case, "topology", args.repeat)
        print(
            f"| {name} | {'allocated' if ok else 'none'} | {ff50:.1f} / {ff99:.1f} "
            f"| {tp50:.1f} / {tp99:.1f} |"
        )


if __name__ == "__main__":
    main()

"""Ours against the real Kubernetes 1.37.2 allocator, side by side in one run: cold calls.

Run with ``make bench-upstream`` (or ``.venv/bin/python benchmarks/bench_upstream.py``).
The Go harness (``tools/upstream-allocator``, built as :mod:`tests.upstream.build` does) gets
each world once with ``--time --repeat N``: per call a new allocator (kube-scheduler's
``structured.NewAllocator`` on the allocated state) and the nodes tried in name order until
one fits, objects already decoded and admitted (the CEL cache is kept between calls, as
kube-scheduler keeps it between scheduling cycles). Ours: ``Allocator(...).allocate([claim])``
on objects already parsed, a new allocator each call (no :class:`AllocatorCache`), for
first-fit and topology. Figures are the median of ``--repeat`` calls in ms; the ratio is
ours (first-fit) over upstream. Both answers are checked to be the same node and devices.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_allocator import (
    GPU,
    _claim,
    _exact,
    cluster_slices,
    held_claims,
)
from dra_jupyter.allocator import Allocator
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


def _kinded(claims: list[Wire]) -> list[Wire]:
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **c} for c in claims]


def worlds() -> dict[str, tuple[list[Wire], list[Wire], Wire]]:
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
        "1 GPU, 1,000 empty 8-GPU nodes": (
            hgx(1000),
            [],
            _claim([{"name": "g", "exactly": _exact(1)}]),
        ),
        "4 GPUs on one pcieRoot, 100 nodes, 90% held": (
            cluster_slices(100),
            _kinded(held_claims(100, 0.9)),
            _claim(
                [{"name": "g", "exactly": _exact(4)}],
                [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            ),
        ),
        "9 GPUs on 100 8-GPU nodes (never fits)": (
            hgx(100),
            [],
            _claim([{"name": "g", "exactly": _exact(9)}]),
        ),
        "MIG 3g.71gb, 100 H200 nodes": (mig_nodes(100), [], mig_claim),
    }


def picks(allocation: Wire | None) -> Any:
    if allocation is None:
        return None
    node = allocation.get("nodeSelector")
    return json.dumps(node, sort_keys=True), [
        (r["request"], r["pool"], r["device"]) for r in allocation["devices"]["results"]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    binary = build.build()
    classes_wire = nvidia.device_classes()
    print(
        "| world | upstream cold | ours first-fit cold | ours topology cold "
        "| first-fit / upstream |"
    )
    print("|---|---|---|---|---|")
    for name, (slices_wire, held_wire, claim) in worlds().items():
        nodes = nodes_of(slices_wire)
        objects = [*classes_wire, *slices_wire, *nodes, *held_wire, claim]
        done = subprocess.run(
            [str(binary), "--time", "--repeat", str(args.repeat)],
            input=json.dumps({"objects": objects}) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
        answer = json.loads(done.stdout)
        go_ms = answer["ns"] / 1e6
        theirs = picks(answer["items"][0]["status"]["allocation"]) if answer["exit"] == 0 else None
        slices = parse_many(slices_wire, parse_resource_slice, ResourceSlice)
        classes = parse_many(classes_wire, parse_device_class, DeviceClass)
        held = parse_many(held_wire, parse_resource_claim, ResourceClaim)
        [parsed] = parse_many([claim], parse_resource_claim, ResourceClaim)
        node_objects = parse_many(nodes, parse_node, Node)
        ours: dict[str, float] = {}
        mine: Any = None
        for strategy in ("first-fit", "topology"):
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                allocator = Allocator(slices, classes, held, strategy, nodes=node_objects)
                found = allocator.allocate([parsed])
                times.append((time.perf_counter() - start) * 1000)
                if strategy == "first-fit":
                    mine = picks(found[0].to_dict()) if found is not None else None
            ours[strategy] = statistics.median(times)
        same = "" if mine == theirs else " (answers differ!)"
        print(
            f"| {name} | {go_ms:.2f} | {ours['first-fit']:.2f} | {ours['topology']:.2f} | "
            f"{ours['first-fit'] / go_ms:.2f}{same} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

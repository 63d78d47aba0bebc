"""``make demo`` for the foundation: claims of several shapes on a simulated 8x H200 node.

Each claim is allocated in turn by the embedded allocator, on top of what the earlier
ones hold, and what it got (or why it cannot be served) is printed.
"""

from __future__ import annotations

from typing import Any, TextIO

from dra_jupyter.allocator import Allocator
from dra_jupyter.inventory import nvidia

NODE = "gpu-node-1"
GPU = "gpu.nvidia.com"


def _request(name: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _claim(name: str, requests: list[dict[str, Any]], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"devices": {"requests": requests, **devices}},
    }


def demo_claims() -> list[tuple[str, dict[str, Any]]]:
    big = f"device.capacity['{GPU}'].memory.compareTo(quantity('100Gi')) >= 0"
    huge = f"device.capacity['{GPU}'].memory.compareTo(quantity('200Gi')) >= 0"
    hopper = f"device.attributes['{GPU}'].architecture == 'Hopper'"
    same_root = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    same_numa = [{"matchAttribute": "resource.kubernetes.io/numaNode"}]
    return [
        ("one GPU", _claim("nb-1", [_request("gpu")])),
        ("two GPUs on one PCIe root", _claim("nb-2", [_request("gpu", 2)], constraints=same_root)),
        (
            "four Hopper GPUs with >= 100Gi on one NUMA node",
            _claim("train-4", [_request("gpu", 4, hopper, big)], constraints=same_numa),
        ),
        (
            "eight GPUs, else one (firstAvailable)",
            _claim(
                "sweep",
                [
                    {
                        "name": "gpus",
                        "firstAvailable": [
                            {"name": "eight", "deviceClassName": GPU, "count": 8},
                            {"name": "one", "deviceClassName": GPU, "count": 1},
                        ],
                    }
                ],
            ),
        ),
        ("one GPU with >= 200Gi (none exists)", _claim("too-big", [_request("gpu", 1, huge)])),
    ]


def run_demo(out: TextIO) -> int:
    slices = [nvidia.hgx_node(NODE)]
    classes = nvidia.device_classes()
    held: list[dict[str, Any]] = []
    out.write(
        f"Simulated inventory: node {NODE}, 8x NVIDIA H200 (143771Mi each), "
        "2 NUMA nodes, 4 PCIe roots.\n\n"
    )
    for title, claim in demo_claims():
        allocator = Allocator(slices, classes, held)
        name = claim["metadata"]["name"]
        results = allocator.allocate([claim])
        if results is None:
            out.write(f"claim {name} ({title}): cannot be allocated\n")
            for line in allocator.explain([claim]).summary().splitlines():
                out.write(f"    {line}\n")
            continue
        result = results[0]
        devices = ", ".join(f"{r.device.device} ({r.request})" for r in result.results)
        out.write(f"claim {name} ({title}): {devices}\n")
        held.append({**claim, "status": {"allocation": result.to_dict()}})
    out.write("\nRun 'dra-jupyter explain -f FILE' on your own objects to see the full analysis.\n")
    return 0

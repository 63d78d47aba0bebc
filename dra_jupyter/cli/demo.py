"""``make demo``: the main job on the embedded default.

The inventory is what ``auto`` finds: real GPUs through NVML, else a simulated 8x H200
node (and the output says it is simulated). Claims of several shapes are requested in
turn through the local backend, on a throw-away ledger, each on top of what the earlier
ones hold; then a request that can never be met is explained, and everything is
released.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, TextIO

from dra_jupyter.api import Session
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.errors import AllocationError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.settings import Settings

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
    """Claims of several shapes, as ResourceClaims (the schema tests validate them)."""
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


def run_demo(out: TextIO, inventory: Inventory | None = None) -> int:
    inventory = inventory or resolve_inventory(Settings.from_env().inventory)
    kind = "SIMULATED inventory" if inventory.simulated else "inventory found through NVML"
    out.write(f"{kind}: {inventory.description}\n")
    for warning in inventory.warnings:
        out.write(f"  note: {warning}\n")
    with tempfile.TemporaryDirectory(prefix="dra-demo-") as tmp:
        settings = Settings(ledger=Path(tmp) / "ledger.sqlite", inventory=inventory.name)
        session = Session(settings, inventory=inventory)
        out.write(f"\n{session.devices()}\n\n")
        for title, claim in demo_claims():
            name = claim["metadata"]["name"]
            try:
                record = session.backend.allocate(claim)
            except AllocationError as err:
                out.write(f"claim {name} ({title}): cannot be allocated\n")
                out.writelines(f"    {line}\n" for line in str(err).splitlines()[1:])
                continue
            results = record.allocation["devices"]["results"]
            devices = ", ".join(f"{r['device']} ({r['request']})" for r in results)
            out.write(f"claim {name} ({title}): {devices}\n")
        out.write(f"\n{session.claims(all_users=True)}\n")
        session.backend.release("nb-1")
        c = session.request(gpu=1, apply_env=False)
        out.write(f"\nreleased nb-1; dra.request(gpu=1) -> {c.name} on {c.devices[0].device}:\n")
        out.writelines(f"    {k}={v}\n" for k, v in c.env.items())
        released = [r.name for r in session.backend.claims(all_users=True)]
        for name in released:
            session.backend.release(name)
        out.write(f"\nreleased {', '.join(released)}; the ledger was {settings.ledger}\n")
    out.write(
        "\nNext: 'dra-jupyter explain -f FILE' on your own objects, or in Python:\n"
        "    import dra_jupyter as dra; c = dra.request(gpu=2, same='pcieRoot'); c.env\n"
    )
    return 0


def add_commands(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="allocate claims of a few shapes on a bundled 8x H200 node")
    p.add_argument(
        "--service",
        action="store_true",
        help="instead: start the shared-machine service in a temporary folder and show it "
        "serving several users (as root: two temporary Unix users; else this one)",
    )


def run_demo_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.service:
        from dra_jupyter.cli.demo_service import run_service_demo  # noqa: PLC0415  # on use

        return run_service_demo(out)
    return run_demo(out)


COMMANDS: dict[str, Runner] = {"demo": run_demo_command}

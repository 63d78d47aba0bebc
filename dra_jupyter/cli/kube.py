"""``dra-jupyter publish-slices``: the commands that talk to a Kubernetes cluster.

The ``kubernetes`` client is imported only when such a command runs (the optional extra
``dra-jupyter[kubernetes]``).
"""

from __future__ import annotations

import argparse
from typing import TextIO

from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.errors import ClusterError


def add_commands(sub: Subparsers) -> None:
    helptext = (
        "act as the DRA driver of simulated nodes: create the Node objects (no kubelet) and "
        "publish an inventory's ResourceSlices and DeviceClasses, idempotently"
    )
    p = sub.add_parser("publish-slices", help=helptext, description=helptext)
    p.add_argument(
        "--inventory",
        required=True,
        help="a bundled simulated inventory (e.g. h200-8x) or a YAML file of ResourceSlices",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="how many nodes get the inventory's node (gpu-node-1, gpu-node-2, ...; default 1)",
    )
    p.add_argument(
        "--kubeconfig",
        help="credentials (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )


def run_publish_slices(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dra_jupyter.inventory.resolve import resolve_inventory  # noqa: PLC0415

    if args.inventory in ("auto", "nvml"):
        from dra_jupyter.errors import InvalidInputError  # noqa: PLC0415

        raise InvalidInputError(
            "publish-slices --inventory: give a simulated inventory or a file; real GPUs are "
            "published by their vendor's DRA driver"
        )
    inventory = resolve_inventory(args.inventory)
    from dra_jupyter.kube.simulate import simulate  # noqa: PLC0415

    cluster = simulate(inventory, args.nodes)
    try:
        from dra_jupyter.kube.connect import api_client  # noqa: PLC0415
        from dra_jupyter.kube.publish import Publisher  # noqa: PLC0415
    except ImportError as error:
        raise ClusterError(
            "publish-slices needs the Kubernetes client: pip install 'dra-jupyter[kubernetes]'"
        ) from error
    with api_client(args.kubeconfig) as api:
        changes = Publisher(api).publish(cluster)
    for change in changes:
        out.write(f"{change}\n")
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.action] = counts.get(change.action, 0) + 1
    summary = ", ".join(f"{n} {action}" for action, n in sorted(counts.items()))
    out.write(
        f"published inventory {inventory.name} on {len(cluster.nodes)} simulated node(s) "
        f"({', '.join(cluster.node_names)}): {summary}\n"
    )
    return 0


COMMANDS: dict[str, Runner] = {"publish-slices": run_publish_slices}

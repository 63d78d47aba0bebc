"""``dra-jupyter service``: run the shared-machine daemon (:mod:`dra_jupyter.service`),
imported only when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from dra_jupyter.cli.command import Runner, Subparsers


def add_commands(sub: Subparsers) -> None:
    p = sub.add_parser(
        "service",
        help="run the shared-machine allocator service (one per machine, as root)",
        description="Own this machine's devices and ledger; serve every user over a Unix "
        "socket, identified by the kernel (SO_PEERCRED). SIGHUP reloads the config.",
    )
    p.add_argument(
        "--config", metavar="FILE.toml", help="the policy (every knob: deploy/service.toml)"
    )
    p.add_argument(
        "--socket", metavar="PATH", help="the Unix socket (default /run/dra-jupyter/socket)"
    )
    p.add_argument(
        "--import-ledger",
        metavar="LEDGER",
        help="take over the live claims of an embedded ledger file at start",
    )


def run_service_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dra_jupyter.service.daemon import run_service  # noqa: PLC0415  # on use

    return run_service(
        Path(args.config) if args.config else None,
        Path(args.socket) if args.socket else None,
        Path(args.import_ledger) if args.import_ledger else None,
    )


COMMANDS: dict[str, Runner] = {"service": run_service_command}

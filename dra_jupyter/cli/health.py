"""``dra-jupyter health``: the record of the GPUs the health watcher took out of service
(when, what NVML said, its meaning, the taint, the claims that held the GPU then), as a
table or JSON; ``health --watch`` runs the machine's watcher for the embedded ledger
(:mod:`dra_jupyter.local.watcher`; the service runs its own)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from typing import Any, TextIO

from dra_jupyter.api import Session
from dra_jupyter.backends import ledger_backend
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.cli.local import _session
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.local.watcher import HealthWatcher, lock_for
from dra_jupyter.types import HealthEvent

POLL = 5.0  # seconds between readings of the ECC counters, by default


def add_commands(sub: Subparsers) -> None:
    p = sub.add_parser(
        "health",
        help="the GPUs taken out of service (XID errors, ECC, a GPU lost) and the claims hit",
        description="The record of the devices' health: each GPU the health watcher took "
        "out (an XID error, uncorrectable ECC errors, remapped rows, a GPU lost), when, "
        "what it means, its taint, and the claims that held it then. dra-jupyter untaint "
        "puts a GPU back once it is repaired or reset. --watch runs the watcher for the "
        "embedded ledger (the service runs its own).",
    )
    p.add_argument("device", nargs="?", metavar="DEVICE", help="one GPU's record (gpu-3)")
    p.add_argument("--watch", action="store_true", help="run the machine's health watcher")
    p.add_argument(
        "--grace",
        type=float,
        help="with --watch: seconds a claim keeps a GPU taken out NoExecute before it is "
        "released (default DRA_JUPYTER_HEALTH_GRACE, 300; a GPU lost: none)",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=POLL,
        help="with --watch: seconds between readings of the ECC counters (default 5)",
    )
    p.add_argument("--inventory", help="auto, nvml, a bundled name, or a YAML file of slices")
    p.add_argument("--ledger", help="the ledger file (default: per user)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def run_health(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.watch and args.grace is not None:
        raise InvalidInputError("health --grace: goes with --watch (health --watch --grace 300)")
    if not args.watch and args.poll != POLL:
        raise InvalidInputError("health --poll: goes with --watch (health --watch --poll 5)")
    session = _session(args)
    if args.watch:
        if args.device:
            raise InvalidInputError("health --watch: watches every GPU; takes no DEVICE")
        return _watch(args, session, out)
    events = session.health_record("health").health_events(device=args.device)
    if args.output == "json":
        out.write(json.dumps([e.to_dict() for e in events], indent=2) + "\n")
        return 0
    if not events:
        what = f"{args.device}: nothing" if args.device else "no GPU was taken out of service"
        out.write(f"{what} in the health record\n")
        return 0
    head = ["time", "device", "taint", "effect", "meaning", "claims"]
    rows = [head] + [_row(e) for e in events]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out.writelines(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )
    return 0


def _row(e: HealthEvent) -> list[str]:
    claims = ", ".join(f"{n} ({u})" for n, u in e.claims) or "-"
    return [_when(e.time), e.device, f"{e.key}={e.value}", e.effect, e.meaning, claims]


def _watch(args: argparse.Namespace, session: Session, out: TextIO) -> int:
    backend = ledger_backend(session.backend)
    if backend is None:
        raise InvalidInputError(
            f"health --watch: {session.backend.capabilities.where} watches its devices itself (the "
            "service runs the machine's watcher); --watch is for the embedded ledger "
            "(DRA_JUPYTER_BACKEND=local)"
        )
    if backend.devices.source != "nvml":
        raise InvalidInputError(
            f"health --watch: the devices are {backend.devices.description}, not read "
            "through NVML: nothing to watch; use --inventory nvml on a machine with GPUs"
        )
    grace = args.grace if args.grace is not None else session.settings.health_grace
    if grace < 0 or args.poll <= 0:
        raise InvalidInputError("health --watch: --grace must be 0 or more, --poll more than 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s dra-jupyter health: %(message)s")
    stop = threading.Event()

    def stopping(_signum: int, _frame: Any) -> None:
        stop.set()

    with lock_for(session.settings.ledger):
        watcher = HealthWatcher(backend, grace=grace, poll_interval=args.poll)
        watcher.start()
        previous = {s: signal.signal(s, stopping) for s in (signal.SIGTERM, signal.SIGINT)}
        gpus = len(watcher.nvml.gpus) if watcher.nvml is not None else 0
        out.write(f"watching {gpus} GPUs for {session.settings.ledger} (grace {grace:g}s)\n")
        out.flush()
        try:
            while not stop.wait(1.0):
                for record, reason in watcher.enforce():
                    out.write(f"released {record.name} ({record.owner.user}): {reason}\n")
                    out.flush()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            watcher.stop()
    return 0


COMMANDS: dict[str, Runner] = {"health": run_health}

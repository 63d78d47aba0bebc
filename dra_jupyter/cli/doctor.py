"""``dra-jupyter doctor``: which backend this user's sessions get and why, where their
claims are kept, which devices they see, and whether other users share the machine's GPUs
outside them: what to check first when two people seem to hold the same GPU.

One line per finding, a problem's line saying what to do; ``-o json`` for a program. It
changes nothing, and exits 0 whatever it finds (3 only where it cannot look at all).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TextIO

from dra_jupyter.api import Session
from dra_jupyter.backends import in_pod, resolve_backend, service_answers
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.metrics import source_for
from dra_jupyter.metrics.processes import read_process
from dra_jupyter.settings import BACKEND_ENV, Settings, service_installed

SHARED_MACHINE = "docs/shared-machine.md"


@dataclass(frozen=True)
class Finding:
    topic: str  # backend, service, ledger, devices, gpu-processes
    text: str  # one line
    problem: bool = False  # the user should act on it (the line says how)


def add_commands(sub: Subparsers) -> None:
    p = sub.add_parser(
        "doctor",
        help="which backend and ledger your sessions use, and who else uses the GPUs",
        description="Say which backend this user's sessions get and why, where their claims "
        "are kept, which devices they see, and whether other users' processes use the "
        "GPUs outside them. Changes nothing.",
    )
    p.add_argument("--inventory", help="auto, nvml, a bundled name, or a YAML file of slices")
    p.add_argument("--ledger", help="the ledger file, as for the other commands")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")


def findings(
    settings: Settings,
    *,
    uid: int | None = None,
    inventory: Inventory | None = None,
    nvml: ModuleType | None = None,
) -> list[Finding]:
    """What ``doctor`` says, for a user (``uid``: this process's) with ``settings`` (its
    ``inventory``, and the NVML module to read, where given: a test's)."""
    uid = os.getuid() if uid is None else uid
    out: list[Finding] = []
    backend = resolve_backend(settings)
    chosen = os.environ.get(BACKEND_ENV)
    installed = service_installed(settings.socket, settings.service_config)
    if chosen and chosen != "auto":
        why = f"{BACKEND_ENV}={chosen}"
    elif in_pod():
        why = "a pod with a service account"
    elif installed:
        why = f"the service is installed here ({settings.socket} or {settings.service_config})"
    else:
        why = "no service is installed here, so the embedded one"
    out.append(Finding("backend", f"backend: {backend} ({why})"))
    if backend == "service" or installed:
        answers = service_answers(settings.socket)
        state = "answers" if answers else "does not answer: is it running? (systemctl status)"
        out.append(Finding("service", f"service: {settings.socket} {state}", not answers))
        if installed and backend == "local":
            out.append(
                Finding(
                    "service",
                    "service: installed, but this session uses its own ledger "
                    f"({BACKEND_ENV}=local): other users' claims are not seen; unset it",
                    True,
                )
            )
    if backend == "local":
        out.append(
            Finding(
                "ledger",
                f"ledger: {settings.ledger} (your own: other users of this machine have "
                "theirs, and neither sees the other's claims)",
            )
        )
    if backend == "kubernetes":
        return out  # the devices are the cluster's nodes'
    try:
        inventory = Session(settings, inventory=inventory).inventory
    except DraJupyterError as err:  # the service that does not answer, a bad inventory
        out.append(Finding("devices", f"devices: not read: {err}", True))
        return out
    kind = "simulated" if inventory.simulated else inventory.source
    out.append(Finding("devices", f"devices: {inventory.description} ({kind})"))
    out.append(_gpu_processes(inventory, uid, backend, nvml))
    return out


def _gpu_processes(
    inventory: Inventory, uid: int, backend: str, nvml: ModuleType | None
) -> Finding:
    """Other users' processes on the GPUs, as NVML lists them."""
    if inventory.simulated:
        return Finding("gpu-processes", "GPU processes: none to see (a simulated inventory)")
    source = source_for(inventory, nvml)
    try:
        listed = source.processes(time.time())
    finally:
        source.close()
    if listed is None:
        return Finding("gpu-processes", f"GPU processes: not known ({source.problem or 'NVML'})")
    others: Counter[str] = Counter()
    devices: dict[str, set[str]] = {}
    for process in listed:
        info = read_process(process.pid)
        if info is None or info.uid == uid:
            continue
        others[info.user] += 1
        devices.setdefault(info.user, set()).add(process.device.rsplit("/", 1)[-1])
    if not others:
        return Finding("gpu-processes", "GPU processes: none of other users")
    users = "; ".join(
        f"{user}: {n} on {', '.join(sorted(devices[user]))}" for user, n in others.most_common()
    )
    if backend == "service":
        return Finding("gpu-processes", f"GPU processes of other users: {users}")
    return Finding(
        "gpu-processes",
        f"GPU processes of other users: {users}; your ledger does not know their claims, so "
        f"it may hand you a GPU in use: run the shared-machine service ({SHARED_MACHINE})",
        True,
    )


def run_doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    settings = Settings.from_env()
    if args.inventory:
        settings = dataclasses.replace(settings, inventory=args.inventory)
    if args.ledger:
        settings = dataclasses.replace(settings, ledger=Path(args.ledger))
    found = findings(settings)
    if args.output == "json":
        out.write(json.dumps([dataclasses.asdict(f) for f in found], indent=2) + "\n")
    else:
        out.writelines(f"{'! ' if f.problem else ''}{f.text}\n" for f in found)
    return 0


COMMANDS: dict[str, Runner] = {"doctor": run_doctor}

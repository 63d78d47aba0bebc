"""``dra-jupyter taint | untaint``: an admin takes a device out of use by hand (a fan that
fails, a GPU that throws Xid errors) and puts it back, on the configured backend through
the Python API: the local ledger records the taint with who and when; on a cluster it is
a DeviceTaintRule, which kube-scheduler honours. ``taint --list`` shows them."""

from __future__ import annotations

import argparse
import json
import time
from typing import TextIO

from dra_jupyter.api import Session
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.cli.local import _session
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.admintaints import DEFAULT_KEY, EFFECTS, partitions_of
from dra_jupyter.outofservice import means, release_at
from dra_jupyter.types import DeviceTaint

# Who releases the claims on a device tainted NoExecute on this machine without the service
# (which releases them itself): a Jupyter server's checks or ``health --watch``, while one
# runs; none runs in the background for it (a taint made with neither waits for one).
WHO_RELEASES = (
    "by this machine's Jupyter server or dra-jupyter health --watch; with neither running, "
    "when one starts"
)


def add_commands(sub: Subparsers) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--key", default=DEFAULT_KEY, help=f"the taint's key (default {DEFAULT_KEY})"
        )
        p.add_argument("--inventory", help="auto, nvml, a bundled name, or a YAML file of slices")
        p.add_argument("--ledger", help="the ledger file (default: per user)")
        p.add_argument("-o", "--output", choices=("text", "json"), default="text")

    p = sub.add_parser(
        "taint",
        help='keep new claims off a device: taint gpu-3 --effect NoSchedule --reason "fan"',
        description="Taint a device by hand, as a DeviceTaintRule would: no new claim gets "
        "it (NoSchedule: claims that hold it now keep it until moved or released; NoExecute: "
        "on this machine they are released after the grace, DRA_JUPYTER_HEALTH_GRACE, 300 s, "
        "by the service, a Jupyter server or health --watch, or when one starts if none runs; "
        "on a cluster its pods are evicted). Recorded with who and when. --list shows the "
        "taints.",
    )
    p.add_argument("device", nargs="?", metavar="DEVICE", help="as dra-jupyter devices names it")
    p.add_argument("--effect", choices=EFFECTS, help="NoSchedule or NoExecute")
    p.add_argument("--reason", help="why, for other admins and users (free text)")
    p.add_argument("--list", action="store_true", help="list the devices' taints instead")
    p.add_argument("--history", action="store_true", help="with --list: removed taints too")
    common(p)
    p = sub.add_parser(
        "untaint",
        help="put a tainted device back in use",
        description="Take a taint put by dra-jupyter taint off a device (the ledger keeps "
        "who did it and when).",
    )
    p.add_argument("device", metavar="DEVICE", help="as dra-jupyter devices names it")
    common(p)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def taint_text(t: DeviceTaint) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as ``devices`` shows taints."""
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def _partitions(session: Session, device: str) -> list[str]:
    """The MIG partitions a taint of ``device`` covers on this machine's ledger."""
    if session.backend.cluster is not None:  # a DeviceTaintRule selects the device alone
        return []
    return partitions_of(session.inventory.slices, device)


def _covered(parts: list[str]) -> str:
    if not parts:
        return ""
    return f" and its {len(parts)} partition{'s' if len(parts) > 1 else ''}"


def run_taint(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _session(args)
    if args.history and not args.list:
        raise InvalidInputError("taint --history: goes with --list (taint --list --history)")
    if args.list:
        if args.device or args.effect or args.reason:
            raise InvalidInputError("taint --list: takes no DEVICE, --effect or --reason")
        return _list(args, out, session.tainting("taint --list").taints(history=args.history))
    if not args.device or not args.effect or args.reason is None:
        raise InvalidInputError(
            "taint: give DEVICE --effect NoSchedule|NoExecute --reason TEXT (e.g. taint "
            "gpu-3 --effect NoSchedule --reason 'fan'), or --list"
        )
    made = session.tainting("taint").taint(args.device, args.effect, args.reason, args.key)
    parts = _partitions(session, made.device)
    covered = {made.device, *parts}
    holders = [r for r in session.backend.holders() if covered & set(r.device_keys)]
    if args.output == "json":
        data = {"taint": made.to_dict(), "held_by": [r.name for r in holders], "covers": parts}
        out.write(json.dumps(data, indent=2) + "\n")
        return 0
    out.write(
        f"tainted {made.device}{_covered(parts)}: {taint_text(made)} ({made.reason!r}) by "
        f"{made.user}{' at ' + _when(made.added) if made.added is not None else ''} "
        f"(DeviceTaintRule {made.rule}); new claims do not get "
        f"{'them' if parts else 'it'}\n"
    )
    # what the holders read in JupyterLab, the notebook and the server's log, the same words
    capabilities = session.backend.capabilities
    grace = session.settings.health_grace if capabilities.devices_here else None
    at = release_at(made, grace)
    said = means(made, at)
    if at is not None and not capabilities.releases_taken_out:  # nothing here runs for it
        said += f" ({WHO_RELEASES})"
    for r in holders:
        out.write(f"held now by claim {r.name} ({r.owner.user}): {said}\n")
    return 0


def run_untaint(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _session(args)
    gone = session.tainting("untaint").untaint(args.device, args.key)
    parts = _partitions(session, gone.device)
    if args.output == "json":
        out.write(json.dumps({"untainted": gone.to_dict(), "covers": parts}, indent=2) + "\n")
    else:
        removed = f"removed by {gone.removed_by}" if gone.removed_by else "removed"
        out.write(
            f"untainted {gone.device}{_covered(parts)}: {taint_text(gone)} ({gone.reason!r}; "
            f"put by {gone.user}, {removed}); {'they are' if parts else 'it is'} in use again\n"
        )
    return 0


def _list(args: argparse.Namespace, out: TextIO, taints: list[DeviceTaint]) -> int:
    if args.output == "json":
        out.write(json.dumps([t.to_dict() for t in taints], indent=2) + "\n")
        return 0
    if not taints:
        out.write("no device is tainted by hand\n")
        return 0
    head = ["device", "taint", "reason", "by", "added"]
    if args.history:
        head += ["removed_by", "removed"]
    rows = [head]
    for t in taints:
        row = [t.device, taint_text(t), t.reason, t.user, _when(t.added)]
        if args.history:
            row += [t.removed_by or "-", _when(t.removed)]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out.writelines(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )
    return 0


COMMANDS: dict[str, Runner] = {"taint": run_taint, "untaint": run_untaint}

"""``dra-jupyter devices | request | claims | waiting | release | usage``: the configured backend
(this machine's by default) from a shell, through the Python API; and ``explain
KEY=VALUE``."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import time
from typing import Any, TextIO

from dra_jupyter.accounting.book import BY
from dra_jupyter.accounting.frame import VALUES, records
from dra_jupyter.api import Session
from dra_jupyter.claimspec import INTEGER_KEYS
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.durations import parse_lease, parse_timeout
from dra_jupyter.errors import PYTHON_WAIT, BusyError, ClaimNotFoundError, InvalidInputError, shown
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner


def add_commands(sub: Subparsers) -> None:
    def common(p: argparse.ArgumentParser, outputs: tuple[str, ...] = ("text", "json")) -> None:
        p.add_argument("--inventory", help="auto, nvml, a bundled name, or a YAML file of slices")
        p.add_argument(
            "--ledger",
            help="the ledger file (default: per user, $XDG_STATE_HOME/dra-jupyter/ledger.sqlite)",
        )
        p.add_argument("-o", "--output", choices=outputs, default=outputs[0])

    p = sub.add_parser("devices", help="list the devices, their state and holders")
    common(p)
    p = sub.add_parser(
        "request",
        help="hold devices, e.g.: request gpu=2 memory=80Gi same=pcieRoot --lease 2h",
        description="Hold devices until released or the lease ends. Keywords as in "
        "dra.request(): gpu, tpu, mig, count, memory, model, selector, share, same, "
        "distinct, device_class.",
    )
    p.add_argument("spec", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--timeout", default="0", help="wait in line this long (e.g. 5m; at most 24h)")
    p.add_argument(
        "--lease", default="1h", help="release after this long (default 1h; at most 30d)"
    )
    p.add_argument("--name", default="", help="the claim's name (default: <user>-<n>)")
    common(p)
    p = sub.add_parser("claims", help="list live claims")
    p.add_argument("--all", action="store_true", help="every user's claims")
    common(p)
    p = sub.add_parser(
        "waiting",
        help="the requests waiting in line, in the order they are served, and why",
        description="The line: each waiting request's position, who (another user's name "
        "hidden unless the service's visibility shows it), what, since when, and why it "
        "stands there (the service orders it by fair share, then first come first).",
    )
    common(p)
    p = sub.add_parser("release", help="release claims")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument(
        "--all", action="store_true", help="all your claims but your runs' (cancel those runs)"
    )
    common(p)
    p = sub.add_parser(
        "usage",
        help="GPU-hours held, active and idle, by user, group, claim or device",
        description="GPU usage over a window: GPU-equivalent seconds held (a whole GPU 1, a "
        "MIG instance or a share its part of the GPU's memory), active, idle and unknown, "
        "energy and the idle share. The service shows an admin every user, a user their own.",
    )
    p.add_argument("--since", default="7d", help="the window, back from now (default 7d)")
    p.add_argument("--by", choices=tuple(BY), default="user", help="group by (default user)")
    common(p, outputs=("table", "csv", "json"))


def _session(args: argparse.Namespace, *, detached: bool = False) -> Session:
    settings = Settings.from_env()
    if args.inventory:
        settings = dataclasses.replace(settings, inventory=args.inventory)
    if args.ledger:
        from pathlib import Path  # noqa: PLC0415

        settings = dataclasses.replace(settings, ledger=Path(args.ledger))
    owner = Owner.current()
    if detached:  # the command exits at once: its claims live by their lease, not its pid
        owner = dataclasses.replace(owner, pid=0, start_time=None)
    return Session(settings, owner=owner)


def _spec(pairs: list[str], command: str = "request") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"{command}: {shown(pair)} is not KEY=VALUE (e.g. gpu=2)")
        if key in spec:
            raise InvalidInputError(
                f"{command}: {shown(key)} is given twice; give each keyword once (the "
                "last would not silently win)"
            )
        if key in INTEGER_KEYS and value != "all":
            spec[key] = _number(key, value, command)
        else:
            spec[key] = value
    return spec


def _number(key: str, value: str, command: str = "request") -> int:
    """A count of devices: an integer of at most 18 digits (Kubernetes counts are int64)."""
    try:
        if len(value.strip()) > 18:
            raise ValueError(value)
        return int(value)
    except ValueError as err:
        raise InvalidInputError(f"{command}: {key}={shown(value)} is not a number") from err


def _released(session: Session, name: str) -> bool:
    try:
        return session.release(name)
    except ClaimNotFoundError:
        return False


SHELL_WAIT = "pass --timeout 10m to wait in line"


def explain_keywords(args: argparse.Namespace, out: TextIO) -> int:
    """``explain gpu=9``: what ``%dra explain gpu=9`` says, for this machine's devices."""
    from dra_jupyter.api.verdict import explain_request  # noqa: PLC0415

    session = _session(args)
    if args.strategy:
        session = Session(dataclasses.replace(session.settings, strategy=args.strategy))
    verdict = explain_request(
        session, _spec(args.spec, "explain"), verbose=args.verbose, wait_hint=SHELL_WAIT
    )
    return _write(args, out, verdict.to_dict(), verdict)


def run_request(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _session(args, detached=True)
    lease = parse_lease(args.lease, what="--lease")
    if not session.backend.capabilities.leases:
        lease = None  # the default 1h is the local ledger's; a cluster's claims have none
    try:
        claim = session.request(
            timeout=parse_timeout(args.timeout, what="--timeout"),
            lease=lease,
            name=args.name,
            apply_env=False,
            **_spec(args.spec),
        )
    except BusyError as error:  # the API's advice in the shell's words
        text = str(error).replace(PYTHON_WAIT, "pass --timeout 10m")
        raise BusyError(text, error.explanation) from None
    if args.output == "json":
        out.write(json.dumps({"claim": claim.to_dict(), "env": claim.env}, indent=2) + "\n")
    else:
        out.write(f"{claim.devices}\n")
        out.writelines(f"export {k}={v}\n" for k, v in claim.env.items())
    return 0


def _write(args: argparse.Namespace, out: TextIO, data: object, text: object) -> int:
    """``data`` as JSON with ``-o json``, else ``text`` as a person reads it."""
    out.write(json.dumps(data, indent=2) + "\n" if args.output == "json" else f"{text}\n")
    return 0


def _table(args: argparse.Namespace, out: TextIO, table: Any) -> int:
    return _write(args, out, table.to_records(), table)


def run_devices(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _table(args, out, _session(args).devices())


def run_claims(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _session(args)
    code = _table(args, out, session.claims(all_users=args.all))
    _report_strays(session, err)
    _report_notices(session, err)
    return code


def run_waiting(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    waiters = _session(args).backend.waiting()
    rows = [
        {
            "position": w.position or i,
            "user": w.owner.user,
            "what": w.what,
            "since": w.since,
            "why": w.why,
        }
        for i, w in enumerate(waiters, start=1)
    ]
    text = "\n".join(
        f"{r['position']}. {r['user']}: {r['what']}" + (f" ({r['why']})" if r["why"] else "")
        for r in rows
    )
    return _write(args, out, rows, text or "nobody waits")


def _report_notices(session: Session, err: TextIO) -> None:
    """On the service and the embedded ledger: each warning of reclaim under pressure on the
    caller's claims, one line on standard error (someone waits; the claim goes at the
    deadline)."""
    notices = getattr(session.backend, "notices", None)  # the service's and the ledger's
    if notices is None:
        return
    for notice in notices():
        err.write(f"dra-jupyter claims: {notice.message}\n")


def _report_strays(session: Session, err: TextIO) -> None:
    """On the service: the caller's processes on GPUs it does not hold, one line each on
    standard error (the daemon reports them to admins too; its ``[enforce]``)."""
    source = session.backend.metrics_source()  # None where the devices are not a daemon's
    if source is None:
        return
    uid = os.getuid()
    for p in source.processes(time.time()) or ():
        if p.claim != "none" or p.uid != uid:
            continue
        size = f", {p.memory_used / 2**30:.1f} GiB" if p.memory_used is not None else ""
        started = time.strftime(" since %H:%M", time.localtime(p.since)) if p.since else ""
        deadline = (p.enforce or {}).get("deadline")
        then = ""
        if (p.enforce or {}).get("action") == "terminate" and deadline:
            then = time.strftime("; it gets SIGTERM at %H:%M:%S", time.localtime(deadline))
        err.write(
            f"dra-jupyter claims: your process {p.pid} ({p.command or '?'}{size}){started} "
            f"uses {p.device}, which you do not hold; reported to the admins{then}\n"
        )


def run_release(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _session(args)
    if not args.names and not args.all:
        raise InvalidInputError("release: name the claims to release, or pass --all")
    names = session.release_all() if args.all else [n for n in args.names if _released(session, n)]
    missing = sorted(set(args.names) - set(names))
    if names or not missing:
        out.write(f"released: {', '.join(names) or 'nothing'}\n")
    if missing:
        shown_names = ", ".join(shown(n) for n in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise ClaimNotFoundError(f"release: no claim named {shown_names}{more} (already released?)")
    return 0


def run_usage(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    dims, rows = _session(args).usage_report(args.since, args.by)
    found = records(rows, dims)
    if args.output == "json":
        out.write(json.dumps(found, indent=2) + "\n")
    elif args.output == "csv":
        writer = csv.DictWriter(out, fieldnames=[*dims, *VALUES], lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
    else:
        out.write(usage_table(found, dims) + "\n")
    return 0


def usage_table(found: list[dict[str, Any]], dims: tuple[str, ...]) -> str:
    """The report as a person reads it: GPU-hours, each part's share of them, energy."""
    head = [*dims, "gpu_hours", "active", "idle", "unknown", "idle_share", "energy_kj"]
    lines = [head]
    for r in found:
        held = r["gpu_seconds"] or 1.0
        share = r["idle_share"]
        lines.append(
            [
                *(str(r[d]) for d in dims),
                f"{r['gpu_hours']:.2f}",
                f"{r['active_gpu_seconds'] / held:.0%}",
                f"{r['idle_gpu_seconds'] / held:.0%}",
                f"{r['unknown_gpu_seconds'] / held:.0%}",
                "-" if share is None else f"{share:.0%}",
                f"{r['energy_j'] / 1000:.1f}",
            ]
        )
    if len(lines) == 1:
        return "no GPU was held in this window"
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in lines
    )


COMMANDS: dict[str, Runner] = {
    "devices": run_devices,
    "request": run_request,
    "claims": run_claims,
    "release": run_release,
    "usage": run_usage,
    "waiting": run_waiting,
}

"""What ``%dra status``, ``explain``, ``env`` and ``yaml`` show, as values usable in Python.

Each is a plain value (a :class:`~dra_jupyter.tables.Table`, a dict, a string, a small
dataclass) that IPython shows as readable text: ``e = %dra env`` is a dict of the
variables, ``y = %dra yaml gpu=2`` the YAML text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import yaml

from dra_jupyter.api.verdict import Verdict, explain_request
from dra_jupyter.durations import format_duration
from dra_jupyter.kernel.environment import ProcessEnvironment, environment_for
from dra_jupyter.tables import Table
from dra_jupyter.types import ClaimRecord, Waiter, claim_prefix

if TYPE_CHECKING:
    from IPython.lib.pretty import RepresentationPrinter

    from dra_jupyter.api import Session
    from dra_jupyter.types.runs import Run

__all__ = ["Verdict", "explain_request"]  # what %dra explain shows: dra_jupyter.verdicts


def _pretty_text(text: str, printer: RepresentationPrinter) -> None:
    p: Any = printer  # IPython's printer is not typed
    for i, line in enumerate(text.split("\n")):
        if i:
            p.break_()
        p.text(line)


def held_by_this_kernel(session: Session, record: ClaimRecord) -> bool:
    """Made by this kernel: the same Jupyter kernel id, or else the same process."""
    mine, theirs = session.owner, record.owner
    if mine.kernel_id and theirs.kernel_id:
        return mine.kernel_id == theirs.kernel_id
    return (theirs.host, theirs.pid, theirs.start_time) == (mine.host, mine.pid, mine.start_time)


def kernel_claims(session: Session) -> list[ClaimRecord]:
    return [r for r in session.backend.claims() if held_by_this_kernel(session, r)]


# --- %dra status --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusRow:
    claim: str
    devices: str
    state: str
    holder: str  # this kernel, another kernel, a process, or a shell command (lease only)
    lease_left: str  # countdown to the lease's end, where there is one
    idle_release: str  # who releases it when idle


def _holder(session: Session, record: ClaimRecord) -> str:
    if held_by_this_kernel(session, record):
        return "this kernel"
    owner = record.owner
    if owner.kernel_id:
        return f"kernel {owner.kernel_id[:8]}"
    if owner.pid <= 0:
        return "shell (lease)"
    return f"pid {owner.pid} on {owner.host}"


def _idle_release(session: Session, record: ClaimRecord) -> str:
    idle = session.settings.idle_timeout
    if record.owner.kernel_id and held_by_this_kernel(session, record):
        if idle > 0:
            return f"{format_duration(idle)} after the last cell"
        return "when this kernel shuts down"  # no idle release told to this kernel
    if record.owner.kernel_id:
        return "its Jupyter server's idle policy"
    if record.owner.pid <= 0:
        return "lease only"
    return "when its process exits"


def line_notes(session: Session, waiters: Sequence[Waiter], now: float) -> list[str]:
    """What ``%dra status`` says of the line (``dra.waiting()``'s, in its order): each of
    this user's waiting requests with its place and why, then how many of other users wait
    (no more of them: ``dra.waiting()`` shows what this user may see). Nothing when nobody
    waits."""
    user = session.owner.user
    mine = [w for w in waiters if w.owner.user == user]
    others = len(waiters) - len(mine)
    notes = [
        f"you wait in line: #{w.position} for {w.what}, {format_duration(now - w.since)} so far"
        + (f": {w.why}" if w.why else "")
        for w in mine
    ]
    if others:
        whose = "requests of other users wait" if others > 1 else "request of another user waits"
        notes.append(f"{others} {whose}{' too' if mine else ''}; dra.waiting() shows the line")
    elif mine:
        notes.append("no request of another user waits")
    return notes


def status_table(
    session: Session, *, all_users: bool = False, now: float | None = None
) -> Table[StatusRow]:
    """This user's claims (everyone's with ``all_users``), this kernel's first; under them,
    the line (:func:`line_notes`) where anyone waits."""
    now = time.time() if now is None else now
    found = session.backend.claims_with_state(all_users=all_users)  # pending on a cluster
    found.sort(key=lambda rs: (not held_by_this_kernel(session, rs[0]), rs[0].created))
    rows = [
        StatusRow(
            claim=r.name,
            devices=", ".join(
                x["device"] for x in r.allocation.get("devices", {}).get("results", [])
            ),
            state=f"{state} by {', '.join(r.users)}" if r.users else state,
            holder=_holder(session, r) + ("" if not all_users else f" ({r.owner.user})"),
            lease_left=format_duration(r.lease_expires - now) if r.lease_expires else "",
            idle_release=_idle_release(session, r),
        )
        for r, state in found
    ]
    inv = session.inventory
    where = inv.description + (" (SIMULATED)" if inv.simulated else "")
    kernel = session.owner.kernel_id
    managed = (
        f"kernel {kernel[:8]}" if kernel else f"process {session.owner.pid} (no Jupyter server)"
    )
    title = f"{'all claims' if all_users else 'your claims'} on {where}; this is {managed}"
    notes = line_notes(session, session.waiting(), now)
    return Table(rows, list(StatusRow.__dataclass_fields__), title=title, notes=notes)


# --- %dra env -----------------------------------------------------------------------------------


class KernelEnvironment(dict[str, str]):
    """The device environment of this kernel's claims (``CUDA_VISIBLE_DEVICES`` and so on)."""

    claims: list[str]

    def _repr_pretty_(self, p: RepresentationPrinter, cycle: bool) -> None:
        if not self:
            held = ", ".join(self.claims)
            text = (
                f"claims {held} have no device environment (simulated or not-created devices)"
                if held
                else "this kernel holds no claims; %dra request gpu=1 makes one"
            )
            _pretty_text(text, p)
            return
        lines = []
        for key, value in self.items():
            note = "" if os.environ.get(key) == value else "   # not set in this process"
            lines.append(f"{key}={value}{note}")
        lines.append(f"# from claims {', '.join(self.claims)}")
        _pretty_text("\n".join(lines), p)


def kernel_environment(session: Session) -> KernelEnvironment:
    ProcessEnvironment.of_process().sync()  # claims released elsewhere first: what is set now
    records = kernel_claims(session)
    results = [x for r in records for x in r.allocation.get("devices", {}).get("results", [])]
    inventory = session.inventory
    env = KernelEnvironment(
        environment_for(results, inventory.slices, simulated=inventory.simulated).env
    )
    env.claims = [r.name for r in records]
    return env


# --- %dra yaml ----------------------------------------------------------------------------------


class YamlText(str):
    """YAML that IPython shows as YAML (not as a quoted string)."""

    __slots__ = ()

    def _repr_pretty_(self, p: RepresentationPrinter, cycle: bool) -> None:
        _pretty_text(self.rstrip("\n"), p)


def claim_yaml(session: Session, spec: Mapping[str, Any], name: str = "") -> YamlText:
    """The ResourceClaim ``%dra request`` would create; without a name, ``generateName``."""
    claim = session.build(spec, name)
    if not name:
        meta = claim["metadata"]
        claim["metadata"] = {
            "generateName": f"{claim_prefix(session.owner.user)}-",
            **{k: v for k, v in meta.items() if k != "name"},
        }
    return YamlText(yaml.safe_dump(claim, sort_keys=False))


# --- %dra explain: dra_jupyter.verdicts (the command line's explain KEY=VALUE too) ---------------


@dataclass(frozen=True)
class RunLine:
    """One run as ``%dra runs`` lists it."""

    run: str
    phase: str
    devices: str
    started: str
    ended: str
    exit_codes: str
    message: str


def _when(seconds: float | None) -> str:
    return "" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def runs_table(runs: Sequence[Run]) -> Table[RunLine]:
    """``%dra runs``: each run's status now, oldest first."""
    lines = []
    for run in runs:
        s = run.status
        lines.append(
            RunLine(
                run=s.name,
                phase=s.phase,
                devices=", ".join(d.rsplit("/", 1)[-1] for d in s.devices),
                started=_when(s.started),
                ended=_when(s.ended),
                exit_codes=", ".join("-" if c is None else str(c) for c in s.exit_codes),
                message=s.message,
            )
        )
    return Table(lines, [f.name for f in fields(RunLine)], title="runs")

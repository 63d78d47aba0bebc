"""Whose is each process on a device: pid -> claim -> user, from ``/proc`` and the claims.

**The rule.** A process that NVML lists on a device counts as a claim's when that claim
holds the device and either

1. the claim's holder process is the process or one of its ancestors (``/proc``'s parent
   chain: a kernel's subprocesses, DataLoader workers, a ``dra.run`` child), or
2. failing that, the process's owner (its real uid's name) is the claim's user (a claim
   of the CLI, held by its lease, used by that user's job; a notebook's server whose
   claims are held by the server).

Among several claims on one device (a shared GPU), the first rule wins over the second,
and then the oldest claim. Anything else is *nobody's* (``claim`` None): a process on a
device its user does not hold, or one that outlived its claim's release.

:func:`attribute` reads ``/proc`` (a process that is gone by then keeps what NVML said,
with no user or command); the rest is pure.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dra_jupyter.metrics.base import DeviceProcess

PROC = Path("/proc")
MAX_COMMAND = 200  # characters of a command line kept
MAX_DEPTH = 64  # parents followed up the chain


@dataclass(frozen=True)
class ProcessInfo:
    """What ``/proc`` says of a process."""

    pid: int
    ppid: int
    uid: int
    user: str
    command: str
    start: float | None  # seconds since the epoch
    state: str = "R"  # /proc's: R running, S sleeping, Z zombie (exited, not reaped), ...


@dataclass(frozen=True)
class Holder:
    """What the rule reads of a live claim: its name, devices, holder process (0: none,
    a claim of the CLI) and user."""

    name: str
    devices: tuple[str, ...]
    pid: int
    user: str


@dataclass(frozen=True)
class ProcessUse:
    """A process on a device, and whose it is (None where not known)."""

    device: str
    pid: int
    time: float
    user: str | None
    uid: int | None
    command: str | None
    memory_used: int | None  # bytes of device memory
    utilization: float | None  # percent of the device's SMs, lately
    since: float | None  # when the process started (seconds since the epoch)
    claim: str | None  # the claim it counts under; None: nobody's

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Reader = Callable[[int], "ProcessInfo | None"]


def read_process(pid: int, proc: Path = PROC) -> ProcessInfo | None:
    """``/proc/<pid>``'s parent, real uid and its name, command line and start; None when
    it is gone or cannot be read."""
    base = proc / str(pid)
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
        cmdline = (base / "cmdline").read_bytes()[: MAX_COMMAND * 4]
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command, which may hold spaces
    uid = next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), -1
    )
    try:
        ppid, ticks = int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None
    command = " ".join(part.decode(errors="replace") for part in cmdline.split(b"\0") if part)
    if not command:
        command = f"[{stat[stat.find('(') + 1 : stat.rfind(')')]}]"
    return ProcessInfo(
        pid=pid,
        ppid=ppid,
        uid=uid,
        user=_user_name(uid),
        command=command[:MAX_COMMAND],
        start=_boot_time(proc) + ticks / _ticks_per_second() if ticks else None,
        state=fields[0] if fields else "?",
    )


def attribute(
    processes: Sequence[DeviceProcess],
    claims: Iterable[Holder],
    read: Reader = read_process,
) -> list[ProcessUse]:
    """Each process with its user, command, start and claim (the rule above); ``claims``
    oldest first."""
    on_device: dict[str, list[Holder]] = {}
    for holder in claims:
        for key in holder.devices:
            on_device.setdefault(key, []).append(holder)
    known: dict[int, ProcessInfo | None] = {}

    def info(pid: int) -> ProcessInfo | None:
        if pid not in known:
            known[pid] = read(pid)
        return known[pid]

    out = []
    for p in processes:
        me = info(p.pid)
        chain = set(_chain(p.pid, info))
        holders = on_device.get(p.device, [])
        claim = next((h for h in holders if h.pid and h.pid in chain), None)
        if claim is None and me is not None:
            claim = next((h for h in holders if h.user == me.user), None)
        out.append(
            ProcessUse(
                device=p.device,
                pid=p.pid,
                time=p.time,
                user=me.user if me else None,
                uid=me.uid if me else None,
                command=me.command if me else None,
                memory_used=p.memory_used,
                utilization=p.utilization,
                since=me.start if me else None,
                claim=claim.name if claim else None,
            )
        )
    return out


def pids_of(uses: Iterable[ProcessUse], claim: str) -> set[int]:
    return {u.pid for u in uses if u.claim == claim}


def _chain(pid: int, info: Reader) -> list[int]:
    """``pid`` and its ancestors, as far as ``/proc`` tells."""
    chain = [pid]
    current = info(pid)
    while current is not None and current.ppid > 1 and len(chain) < MAX_DEPTH:
        chain.append(current.ppid)
        current = info(current.ppid)
    return chain


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def _boot_time(proc: Path) -> float:
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 100

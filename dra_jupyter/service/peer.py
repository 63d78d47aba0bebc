"""Who is on the other end of a Unix socket, as the kernel says: ``SO_PEERCRED`` (uid, gid,
pid at ``connect``), the pid's start time (``/proc/<pid>/stat``), its groups
(``/proc/<pid>/status``), and a pidfd that says when that process exits.

Nothing here reads what the caller says about itself (no environment, no frame field): a
process cannot forge its uid or its pid, and the start time tells a reused pid apart.
``SO_PEERPIDFD`` (Linux 6.5) gives a pidfd of the very process that connected, so a caller
that exited before its connection was accepted is told apart from a new process that got
its pid; on older kernels the pidfd is opened from the pid, and that window (between
``connect`` and ``accept``, with the pid reused in it) is not closed.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import signal
import socket
import struct
from dataclasses import dataclass

from dra_jupyter.types import process_start_time

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python 3.11 does not name it
HOST = socket.gethostname()  # this machine's name: every peer of a Unix socket is on it


@dataclass(frozen=True)
class Peer:
    """The process that connected: its uid, user name, groups, pid and start time."""

    uid: int
    gid: int
    pid: int
    start_time: int | None
    user: str
    groups: tuple[str, ...]  # names of its primary and supplementary groups

    @property
    def process(self) -> tuple[int, int | None]:
        return self.pid, self.start_time


def user_name(uid: int) -> str:
    """The name of ``uid`` in the user database, else ``uid-<n>`` (a name no user has)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid-{uid}"


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid-{gid}"


def user_groups(user: str) -> tuple[str, ...]:
    """The groups the user database gives ``user`` (for claims whose process is gone)."""
    try:
        entry = pwd.getpwnam(user)
        gids = os.getgrouplist(user, entry.pw_gid)
    except (KeyError, OSError):
        return ()
    return tuple(sorted({group_name(g) for g in gids}))


def _process_groups(pid: int) -> list[int] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:  # noqa: PTH123
            for line in status:
                if line.startswith("Groups:"):
                    return [int(g) for g in line.split()[1:]]
    except (OSError, ValueError):
        return None
    return None


def peer_of(conn: socket.socket) -> tuple[Peer, int | None]:
    """The peer of a connected Unix socket, and a pidfd of its process (None where neither
    ``SO_PEERPIDFD`` nor ``pidfd_open`` gives one: then the process is gone already)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    pidfd: int | None = None
    with contextlib.suppress(OSError):
        pidfd = conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    if pidfd is None:
        pidfd = open_pidfd(pid)
    start = process_start_time(pid)
    if pidfd is not None and not alive(pidfd):
        start = None  # the pid may be someone else's by now: tie nothing to it
    gids = {gid, *(_process_groups(pid) or ())}
    peer = Peer(
        uid=uid,
        gid=gid,
        pid=pid,
        start_time=start,
        user=user_name(uid),
        groups=tuple(sorted(group_name(g) for g in gids)),
    )
    return peer, pidfd


def open_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``, or None when there is no such process."""
    if pid <= 0:
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def alive(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` still runs (signal 0 through the pidfd: it never
    reaches another process that reused the pid)."""
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

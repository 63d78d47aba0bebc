"""Who holds a claim, and whether that holder is still alive."""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (``/proc/<pid>/stat`` field 22).

    Together with the pid it identifies a process even after the pid is reused.
    None where /proc is not available or the process does not exist.
    """
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Owner:
    """The holder of a claim: a user, a process on a host, and a Jupyter kernel if any."""

    user: str
    host: str
    pid: int
    start_time: int | None = None
    kernel_id: str | None = None

    @classmethod
    def current(cls, kernel_id: str | None = None) -> Owner:
        pid = os.getpid()
        return cls(
            user=getpass.getuser(),
            host=socket.gethostname(),
            pid=pid,
            start_time=process_start_time(pid),
            kernel_id=kernel_id,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        return cls(**data)

    def is_alive(self) -> bool:
        """False only when the owner is known to be gone: same host, and its process has
        exited (or the pid now belongs to another process). A holder on another host
        (a ledger on a shared file system) is assumed alive; leases bound its claims."""
        if self.pid <= 0 or self.host != socket.gethostname():
            return True  # not tied to a process (the CLI's claims live by their lease)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, owned by another user
        fields = _stat_fields(self.pid)
        if fields is None:
            return True  # no /proc: trust kill(0)
        if fields[0] in ("Z", "X"):
            return False  # exited, not yet reaped by its parent
        if self.start_time is None:
            return True
        return process_start_time(self.pid) == self.start_time

"""Who holds a claim: the :class:`Owner` (user, kernel, server, process) and the labels every
claim dra-jupyter makes carries."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_jupyter.identity import current_user

# The labels of every claim dra-jupyter makes (a ResourceClaim's, and the ledger's copy).
USER_LABEL = "dra-jupyter/user"  # the owner's user as a label value (label_value)
USER_ANNOTATION = "dra-jupyter/user"  # the owner's user in full (a label keeps 63 characters)
KERNEL_LABEL = "dra-jupyter/kernel"  # the Jupyter kernel that made it, if any
SERVER_LABEL = "dra-jupyter/server"  # the Jupyter server of that kernel (or of its REST API)
RUN_LABEL = "dra-jupyter/run"  # the background run (dra.run on one machine) that holds it

# --- owners --------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


_OWN: list[tuple[int, int | None]] = []  # (pid, start time) of this process, once read


def _own_start_time() -> int | None:
    """This process's start time, read once per process (a forked child reads its own)."""
    pid = os.getpid()
    if not _OWN or _OWN[0][0] != pid:
        _OWN[:] = [(pid, process_start_time(pid))]
    return _OWN[0][1]


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
    """The holder of a claim: a user, a process on a host, and a Jupyter kernel if any.

    ``user`` is decided by :func:`dra_jupyter.identity.current_user` (JupyterHub's user,
    else the OS user) for claims made in a process, by the REST API's identity provider
    for claims made over REST. A Kubernetes claim's owner has no process (``pid`` 0)."""

    user: str
    host: str
    pid: int
    start_time: int | None = None
    kernel_id: str | None = None

    @classmethod
    def current(cls, kernel_id: str | None = None) -> Owner:
        pid = os.getpid()
        return cls(
            user=current_user(),
            host=socket.gethostname(),
            pid=pid,
            start_time=process_start_time(pid),
            kernel_id=kernel_id,
        )

    def to_dict(self) -> dict[str, Any]:
        # by hand: dataclasses.asdict copies deeply, and this runs for every ledger write
        return {
            "user": self.user,
            "host": self.host,
            "pid": self.pid,
            "start_time": self.start_time,
            "kernel_id": self.kernel_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        return cls(**data)

    def is_alive(self) -> bool:
        """False only when the owner is known to be gone: same host, and its process has
        exited (or the pid now belongs to another process). A holder on another host
        (a ledger on a shared file system) is assumed alive; leases bound its claims."""
        if self.pid <= 0 or self.host != socket.gethostname():
            return True  # not tied to a process (the CLI's claims live by their lease)
        if self.pid == os.getpid() and self.start_time in (None, _own_start_time()):
            return True  # this process (a server holding its REST claims): no system call
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
        try:
            return int(fields[19]) == self.start_time
        except (IndexError, ValueError):
            return process_start_time(self.pid) == self.start_time


_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def label_value(text: str) -> str:
    """A Kubernetes label value that stands for ``text``: ``text`` itself when it is one (at
    most 63 characters of letters, digits, ``-_.``, alphanumeric at both ends), else a
    readable cut of it and a hash of the whole (``alice-example.com-5e1f0c9a2b``), so that
    two users never share one (JupyterHub allows ``alice@example.com``)."""
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:52].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


def claim_prefix(user: str) -> str:
    """A DNS-safe name prefix for a user's claims."""
    return re.sub(r"[^a-z0-9-]+", "-", user.lower()).strip("-")[:40] or "user"

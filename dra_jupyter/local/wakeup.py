"""Wake-ups between the processes of one ledger: what frees devices rings, the line wakes.

A request that waits in line (:meth:`~dra_jupyter.local.backend.LocalBackend.allocate`)
tries again every poll interval. Between tries it sleeps on a Unix datagram socket of its
own, bound in a folder beside the ledger (``<ledger>.wake/<pid>-<random>.sock``; the folder
0700, this user's). The ledger rings after each commit of a transaction that freed devices
or moved the line (a release, a reclaim of a gone holder's or an expired lease's claims, a
waiter served or leaving): one byte to every socket in the folder, and each waiter tries
again at once instead of at its next poll. No daemon and no thread: the folder is where
waiters and releasers meet, and a socket left by a process killed with SIGKILL is removed
by the next ring (the kernel refuses datagrams to a socket nobody holds).

Correctness never depends on a ring: the waiter's tries decide, in ledger transactions, as
before; a ring lost, dropped or never sent costs at most one poll interval. Where it cannot
work, waiters poll as before: a folder that cannot be made, or that is not this user's alone
(a ledger shared by several users: another user's releases then reach only by polling), a
socket path longer than ``AF_UNIX`` allows (:data:`SUN_PATH_MAX`), a system without
``AF_UNIX``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import stat
import time
import weakref
from pathlib import Path
from types import TracebackType

WAKE_SUFFIX = ".wake"  # the folder beside the ledger: <ledger>.wake/
SOCKET_SUFFIX = ".sock"
SUN_PATH_MAX = 107  # bytes of a socket's path (sockaddr_un.sun_path, less its NUL)


def wake_folder(ledger: Path) -> Path:
    """The folder of the waiters' sockets of the ledger at ``ledger``."""
    return Path(f"{ledger}{WAKE_SUFFIX}")


class Bell:
    """The wake-ups of one ledger: :meth:`ring` wakes every waiter, :meth:`listen` makes one."""

    def __init__(self, ledger: Path) -> None:
        self.folder = wake_folder(ledger)

    def ring(self) -> int:
        """Wake every waiter of the ledger (one datagram each, never blocking); remove the
        sockets nobody holds any longer. Returns how many were woken. Costs one failed
        ``scandir`` where nobody ever waited."""
        try:
            with os.scandir(self.folder) as entries:
                paths = [e.path for e in entries if e.name.endswith(SOCKET_SUFFIX)]
        except OSError:
            return 0
        if not paths:
            return 0
        try:
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except (OSError, AttributeError):
            return 0
        woken = 0
        with sender:
            sender.setblocking(False)
            for path in paths:
                try:
                    sender.sendto(b"\0", path)
                except BlockingIOError:  # its queue is full of rings: it is woken already
                    pass
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):  # left by a process that is gone
                        Path(path).unlink()
                    continue
                except OSError:  # a path too long, another user's socket: that one polls
                    continue
                woken += 1
        return woken

    def listen(self) -> Listener | None:
        """A socket for one waiter in the folder (made 0700 where missing), or None where
        waiters must poll (see the module docstring)."""
        if not hasattr(socket, "AF_UNIX") or not self._folder_usable():
            return None
        path = self.folder / f"{os.getpid()}-{secrets.token_hex(6)}{SOCKET_SUFFIX}"
        if len(os.fsencode(path)) > SUN_PATH_MAX:
            return None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            return None
        try:
            sock.setblocking(False)
            sock.bind(str(path))
        except OSError:
            sock.close()
            return None
        return Listener(sock, path)

    def _folder_usable(self) -> bool:
        """The folder exists (made here where missing), is a folder and not a link, and
        only this user may open it: nobody else can wake our waiters, or see them."""
        try:
            self.folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
        try:
            info = os.lstat(self.folder)
        except OSError:
            return False
        return (
            stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077
        )


class Listener:
    """One waiter's socket: :meth:`wait` sleeps until a ring or the time is up. Closed and
    removed by :meth:`close` (or the ``with`` block's end), and at the latest when the
    object is collected or the interpreter exits (not in a forked child: the socket is
    its parent's)."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.path = path
        self._sock = sock
        self._poll = select.poll() if hasattr(select, "poll") else None
        if self._poll is not None:
            self._poll.register(sock.fileno(), select.POLLIN)
        self._finalizer = weakref.finalize(self, _remove, sock, path, os.getpid())

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, less where a ring comes first (rings that came
        since the last wait end it at once). True when rung; every pending ring is read."""
        timeout = max(0.0, timeout)
        try:
            if self._poll is not None:
                rung = bool(self._poll.poll(timeout * 1000.0))
            else:
                rung = bool(select.select([self._sock], [], [], timeout)[0])
        except (OSError, ValueError):  # closed meanwhile: as a poll would have slept
            time.sleep(timeout)
            return False
        while rung:
            try:
                self._sock.recv(64)
            except OSError:  # BlockingIOError: none left
                break
        return rung

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Listener:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _remove(sock: socket.socket, path: Path, pid: int) -> None:
    """Close a listener's socket and remove its file (in the process that made it only)."""
    sock.close()
    if os.getpid() == pid:
        with contextlib.suppress(OSError):
            path.unlink()

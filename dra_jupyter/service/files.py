"""The daemon's files: the ledger, in a folder only the daemon may open, and the socket,
which anyone may open (the daemon decides who may do what by the caller's credentials)."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
from pathlib import Path

from dra_jupyter.errors import InvalidInputError, LedgerError, UnavailableError
from dra_jupyter.local.ledger import Ledger


def open_private_ledger(path: Path, synchronous: str = "normal") -> Ledger:
    """The ledger at ``path``, in a folder only this user may open: made 0700 when missing,
    refused when others may open it (the daemon never loosens or tightens a folder it did
    not make); the file (and SQLite's -wal, -shm) 0600."""
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as err:
        raise LedgerError(f"ledger {path}: cannot make its folder: {err.strerror}") from err
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise LedgerError(
            f"ledger {path}: its folder {folder} is mode {stat.S_IMODE(info.st_mode):04o} owned "
            f"by uid {info.st_uid}; the service needs a folder only it may open (0700, owned by "
            f"uid {os.geteuid()}): choose another path ([service] ledger) or chmod 700 it"
        )
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        try:
            fd = os.open(file, os.O_RDWR | os.O_CREAT * (suffix == "") | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise LedgerError(f"ledger {file}: cannot open it: {err.strerror}") from err
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    return DaemonLedger(path, synchronous=synchronous)


class DaemonLedger(Ledger):
    """The ledger as the daemon, its only writer, opens it: ``synchronous`` ``normal`` (the
    default) makes a commit durable against the daemon's own crash or SIGKILL (it is in the
    kernel's page cache when COMMIT returns) but not against a power loss, which may roll
    back the last commits (the processes holding those claims are gone too then); ``full``
    waits for the disk at every commit, as the embedded ledger does (several times slower)."""

    def __init__(self, path: Path, *, synchronous: str = "normal") -> None:
        self.synchronous = "FULL" if synchronous == "full" else "NORMAL"
        super().__init__(path, synchronous=self.synchronous)


def bind_socket(path: Path) -> socket.socket:
    """Listen at ``path`` (mode 0666: the daemon decides, by the caller's credentials), in a
    folder others cannot write (made 0755 when missing). A stale socket file is replaced;
    one where a daemon answers is refused."""
    if len(os.fsencode(path)) > 107:
        raise InvalidInputError(f"socket {path}: over 107 bytes, the limit of a Unix socket path")
    folder = path.parent
    try:
        if not folder.exists():
            folder.mkdir(parents=True)
            folder.chmod(0o755)  # every user reaches the socket (whatever the umask)
        info = folder.stat()
    except OSError as err:
        raise UnavailableError(f"socket {path}: cannot make its folder: {err.strerror}") from err
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise InvalidInputError(
            f"socket {path}: its folder {folder} is mode {stat.S_IMODE(info.st_mode):04o}: "
            "others could put their own socket there; use a folder only the service may "
            "write (0755, as systemd's RuntimeDirectory makes it)"
        )
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise InvalidInputError(f"socket {path}: a file that is not a socket is there")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody answers: a daemon that was killed left it
        else:
            raise UnavailableError(f"socket {path}: another dra-jupyter service answers there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        path.chmod(0o666)
        sock.listen(256)
    except OSError as err:
        sock.close()
        raise UnavailableError(f"socket {path}: cannot listen there: {err.strerror}") from err
    sock.setblocking(False)
    return sock


def keep_open(path: Path) -> sqlite3.Connection:
    """A connection to the ledger that does nothing but stay open (see the daemon)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn

"""Small helpers shared by test modules (and the benchmarks: :func:`running`).

Import-light: the standard library only at import time (scripts/k8s-testenv runs
tests/k8s/testenv.py, which takes :func:`free_port` from here, without dra_jupyter)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dra_jupyter.api import Session
    from dra_jupyter.local.backend import LocalBackend


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (another process may take it
    before the caller binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local(session: Session) -> LocalBackend:
    """The session's local backend (its clock, sleep and ledger are the tests' to set)."""
    from dra_jupyter.local.backend import LocalBackend  # noqa: PLC0415  # import-light

    backend = session.backend
    assert isinstance(backend, LocalBackend), type(backend)
    return backend


class Process:
    """A started process and its log."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]


@contextmanager
def running(
    argv: Sequence[str],
    *,
    log: Path,
    ready: Callable[[], bool],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    wait: float = 60.0,
    what: str = "",
) -> Iterator[Process]:
    """Run ``argv`` (output to ``log``) until the block ends; yields once ``ready()`` is
    true (an OSError from it counts as not yet), at most ``wait`` seconds. ``what`` names
    it in errors (else ``argv[0]``)."""
    what = what or argv[0]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    process = Process(proc, log)
    try:
        deadline = time.monotonic() + wait
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited ({proc.returncode}):\n{process.tail()}")
            try:
                if ready():
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} was not ready in {wait:g} s; see {log}")
            time.sleep(0.05)
        yield process
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

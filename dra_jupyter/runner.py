"""The launcher of a background run on one machine: ``python -m dra_jupyter.runner NAME``.

``dra.run`` records the run in the user's ledger (:mod:`dra_jupyter.local.runs`) and starts
this process in a session of its own, with the session's settings in its environment. It:

1. makes the run's claim itself (``dra.request``'s rules: it waits in line up to the run's
   ``timeout``, saying where it stands in the book), so that this process is the claim's
   holder: the embedded ledger reclaims the claim once it is gone, and under the service
   the daemon knows this pid (SO_PEERCRED) as the holder, so the user's limits and the
   enforcement apply to the run as to any client. The claim carries no kernel id: a
   Jupyter server's idle release and restarts of kernels never touch it;
2. starts the command (an argv, never through a shell) with the claim's device environment
   (``CUDA_VISIBLE_DEVICES`` and friends), its output into the run's log file, in a process
   group of its own, set to be killed when this process dies (Linux's parent-death signal):
   a launcher killed with SIGKILL takes its command with it, and the claim is reclaimed;
3. waits for it: SIGTERM (``run.cancel()``) terminates the command's group, then kills it
   after a grace period; the end of the lease does the same, and so does the end of its
   claim elsewhere (released by its user by name, by an admin, by the health watcher when
   a device failed): the launcher watches its claim (:class:`ClaimWatch`: at each wake-up
   of the ledger, :mod:`dra_jupyter.local.wakeup`, and every :data:`CLAIM_CHECK_S`), since
   a command that kept running on devices no longer held would share them with their next
   claim; the run then ends ``Cancelled`` (its user released it) or ``Failed``, saying why;
4. releases the claim, then records the end (so a run seen ended has its devices released).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.backends import ledger_backend
from dra_jupyter.durations import format_duration, parse_lease
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.runs import GRACE_S, POLL_S, RunBook, RunRow
from dra_jupyter.local.wakeup import Listener
from dra_jupyter.settings import Settings
from dra_jupyter.types import Backend, Owner, Waiting
from dra_jupyter.types.runs import Phase

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
# Seconds between reads of the run's claim where no wake-up says it may be gone: the rings
# of the ledger's releases reach only this user's processes on the embedded ledger.
CLAIM_CHECK_S = 1.0
# Who released a run's claim, by the release's reason (others: "someone else").
RELEASED_BY = {
    "user": "its user",
    "admin": "an admin",
    "device-failed": "its device's NoExecute taint, when the grace ran out",
    "device-moved": "a move off a device taken out of service",
    "fair-share": "the service's fair share, as another user waited while it was idle",
    "expired": "the end of its lease",
    "limit": "the service, over the per-user device limit",
}


class _Cancelled(BaseException):  # control flow, not an error
    """SIGTERM before the command started: stop waiting for devices."""


class ClaimWatch:
    """Whether a run's claim is still held (:meth:`gone`), read again when the ledger rings
    (a release anywhere on this user's embedded ledger) and at least every
    :data:`CLAIM_CHECK_S`; :meth:`pause` sleeps until the next ring or ``POLL_S``."""

    def __init__(self, backend: Backend, claim: str) -> None:
        self.backend = backend
        self.claim = claim
        local = ledger_backend(backend)  # the embedded ledger rings; the service's does not
        self.ledger = local.ledger if local is not None else None
        self.listener: Listener | None = None
        if self.ledger is not None:
            self.listener = self.ledger.bell.listen()
        self.due = 0.0  # when to read the claim again (monotonic)

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a ring makes the next :meth:`gone` read the claim."""
        if self.listener is not None and self.listener.wait(seconds):
            self.due = 0.0

    def gone(self) -> tuple[str, str] | None:
        """None while the claim is held (or cannot be read now: a daemon restarting); once
        it is gone, the release's reason and who, in the user's words (``an admin``)."""
        now = time.monotonic()
        if now < self.due:
            return None
        self.due = now + CLAIM_CHECK_S
        try:
            if self.ledger is not None:
                held = any(r.name == self.claim for r in self.ledger.read_claims())
            else:
                held = self.backend.record(self.claim) is not None
            if held:
                return None
            ended = self.backend.ended(self.claim)
        except (DraJupyterError, OSError):
            return None
        if ended is None:  # a release the backend does not remember
            return ("unknown", "someone else")
        return (ended.reason, RELEASED_BY.get(ended.reason, "someone else"))

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()


def die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child is killed (SIGKILL) when ``parent`` dies; a parent that
    died before the call is seen at once (the child then exits)."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork

    def child() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return child


class Launcher:
    """One run's launcher (see the module docstring)."""

    def __init__(self, book: RunBook, row: RunRow, settings: Settings) -> None:
        self.book = book
        self.row = row
        self.settings = settings
        self.child: subprocess.Popen[bytes] | None = None
        self.cancelled = False
        self.asking = False  # while the claim is asked for: a cancel stops the asking

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.cancelled = True
        if self.asking:
            self.asking = False
            raise _Cancelled

    def _stopped(self) -> bool:
        """Whether a cancel came (set by the signal handler at any moment)."""
        return self.cancelled

    def _waiting(self, waiting: Waiting) -> None:
        place = "next in line" if waiting.position == 1 else f"number {waiting.position} in line"
        self.book.note(
            self.row.name,
            f"waiting for devices: {place} ({format_duration(waiting.waited)} so far)",
        )

    def run(self) -> int:
        name, spec = self.row.name, self.row.spec
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_term)
        # no kernel id: the claim is the run's, labelled so (dra.claims() says "run NAME")
        session = Session(self.settings, owner=Owner.current(), run=name)
        try:
            self.asking = True
            claim = session.request(
                apply_env=False,
                timeout=spec.get("timeout"),
                lease=spec.get("lease"),
                on_wait=self._waiting,
                **spec.get("claim", {}),
            )
            self.asking = False
        except _Cancelled:
            self.book.finish(name, "Cancelled", message=f"run {name}: cancelled before it started")
            return 0
        except DraJupyterError as err:
            self.book.finish(name, "Failed", message=str(err), error=type(err).__name__)
            return 1
        try:
            return self._follow(session.backend, claim.name, claim.env, claim.allocation)
        finally:
            with contextlib.suppress(DraJupyterError):
                claim.release()
            self._end()

    def _follow(
        self, backend: Backend, claim: str, env: dict[str, str], allocation: dict[str, Any]
    ) -> int:
        name, spec = self.row.name, self.row.spec
        results = allocation.get("devices", {}).get("results", [])
        devices = tuple(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results)
        environ = {**os.environ, **env, "DRA_JUPYTER_RUN": name}
        argv = list(spec["argv"])
        if self._stopped():  # between the claim and the start
            self._ending = ("Cancelled", None, f"run {name}: cancelled before it started")
            return 0
        try:
            with self.row.log.open("ab") as log:
                self.child = subprocess.Popen(  # an argv, no shell
                    argv,
                    env=environ,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    preexec_fn=die_with(os.getpid()),  # noqa: PLW1509  # no threads here
                )
        except OSError as err:  # found by dra.run, gone since (or not executable)
            self.book.finish(
                name,
                "Failed",
                message=f"dra.run: cannot start {argv[0]!r}: {err.strerror}; give the path "
                "of a program (or 'python' for this Python)",
                error="InvalidInputError",
            )
            return 1
        self.book.started(name, claim, devices, self.child.pid)
        lease = parse_lease(spec.get("lease"))
        watch = ClaimWatch(backend, claim)
        try:
            code, expired, revoked = self._supervise(watch, lease)
        finally:
            watch.close()
        if revoked and not self._stopped():
            reason, who = revoked
            self._ending = (
                "Cancelled" if reason == "user" else "Failed",  # its user's: as a cancel
                code,
                f"run {name}: its claim {claim} was released by {who} ({reason}); the command "
                "was stopped, as its devices are no longer the run's",
            )
        elif self._stopped():
            self._ending = ("Cancelled", code, f"run {name}: cancelled")
        elif expired:
            self._ending = (
                "Failed",
                code,
                f"run {name}: its lease of {format_duration(float(lease or 0))} ended; the "
                "command was stopped and its devices released",
            )
        elif code == 0:
            self._ending = ("Succeeded", 0, "")
        else:
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            self._ending = ("Failed", code, f"run {name}: {how}")
        return 0 if code == 0 else 1

    def _supervise(
        self, watch: ClaimWatch, lease: float | None
    ) -> tuple[int, bool, tuple[str, str] | None]:
        """Wait for the command; SIGTERM to its group at a cancel, at the end of its
        ``lease`` or once its claim is gone (released elsewhere), SIGKILL after
        :data:`GRACE_S`. Its exit code, whether its lease ended it, and the release's
        reason and who released it, where its claim was released elsewhere."""
        deadline = None if lease is None else time.monotonic() + float(lease)
        stopping: float | None = None  # when SIGTERM went to the command's group
        expired = False
        revoked: tuple[str, str] | None = None
        while True:
            code = self._wait_child(watch)
            if code is not None:
                return code, expired, revoked
            now = time.monotonic()
            if stopping is not None:
                if now - stopping >= GRACE_S:
                    self._kill(signal.SIGKILL)
                continue
            if self._stopped():
                pass  # a cancel: said so by the caller
            elif deadline is not None and now >= deadline:
                expired = True  # its lease, whether or not the ledger reclaimed it first
            elif (revoked := watch.gone()) is None:
                continue
            stopping = now
            self._kill(signal.SIGTERM)

    _ending: tuple[Phase, int | None, str] = ("Failed", None, "")

    def _wait_child(self, watch: ClaimWatch) -> int | None:
        """The command's exit code once it ended, else None after a pause of ``POLL_S`` at
        most (less where the ledger rings: a release that may be this run's claim's)."""
        assert self.child is not None  # started before the loop
        if watch.listener is None:
            try:
                return self.child.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                return None
        watch.pause(POLL_S)
        return self.child.poll()

    def _kill(self, sig: signal.Signals) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, sig)

    def _end(self) -> None:
        phase, code, message = self._ending
        self.book.finish(self.row.name, phase, exit_code=code, message=message)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--detach"]:  # dra.run's start: fork, say the launcher's pid, leave
        args = args[1:]
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        os.dup2(2, 1)  # the launcher's own output goes to the run's log, as its stderr
    if len(args) != 1:
        print("usage: python -m dra_jupyter.runner NAME (started by dra.run)", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    book = RunBook(Ledger(settings.ledger))
    row = book.row(args[0])
    if row is None:
        print(f"dra.run: no run {args[0]} in ledger {settings.ledger}", file=sys.stderr)
        return 2
    return Launcher(book, row, settings).run()


if __name__ == "__main__":
    sys.exit(main())

"""Work off the daemon's loop: a costly request's allocation (:mod:`~dra_jupyter.service.work`)
worked out in a forked child of the daemon, under a CPU budget, while the daemon goes on
serving everyone.

The child starts with the daemon's state as it is (its inventory, what its allocators learnt,
the claims read for it), computes, writes one JSON line to a pipe and exits; it writes
nothing else anywhere (the daemon stays the one writer of the ledger, and commits what the
child found only if the claims it was given are still all that is held). It runs at nice
10, behind the daemon for a core; the kernel bounds its CPU time (``RLIMIT_CPU``: past the
budget it is stopped by ``SIGXCPU``, then ``SIGKILL``) and the daemon its wall time
(:data:`WALL_FACTOR` times the budget, and 10 s), so a request costs at most its budget,
whatever it asks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import resource
import selectors
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dra_jupyter.errors import DraJupyterError, UnavailableError
from dra_jupyter.model.objects import Wire
from dra_jupyter.service import protocol

log = logging.getLogger("dra_jupyter.service")

WALL_FACTOR = 4  # a job's wall time may be this many times its CPU budget (and 10 s more)
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its value (``ok``), the error it raised (as it travels), or
    ``spent``: stopped at its budget."""

    ok: Any = None
    error: Wire | None = None
    spent: bool = False


@dataclass(eq=False)
class Job:
    pid: int
    fd: int
    uid: int
    done: Callable[[Outcome], None]
    deadline: float  # time.monotonic() past which it is killed
    buffer: bytearray = field(default_factory=bytearray)


class Jobs:
    """The jobs of the daemon's ``selector`` (each its pipe, registered with the job)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        self.running: list[Job] = []

    def of(self, uid: int) -> int:
        return sum(1 for job in self.running if job.uid == uid)

    def start(
        self, uid: int, cpu: float, work: Callable[[], Any], done: Callable[[Outcome], None]
    ) -> Job:
        """Run ``work()`` (its value must be JSON) in a child with ``cpu`` seconds of CPU;
        ``done`` gets its :class:`Outcome` on the daemon's loop once it ended."""
        seconds = max(1, math.ceil(cpu))
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError as err:  # EAGAIN, ENOMEM: no process to spare now
            os.close(read_end)
            os.close(write_end)
            raise UnavailableError(
                f"the dra-jupyter service cannot work out a costly request now ({err.strerror})"
                "; try again in a moment"
            ) from err
        if pid == 0:  # the child: never returns into the daemon
            _child(work, read_end, write_end, seconds)
        os.close(write_end)
        os.set_blocking(read_end, False)
        job = Job(pid, read_end, uid, done, time.monotonic() + seconds * WALL_FACTOR + 10)
        self.running.append(job)
        self.selector.register(read_end, selectors.EVENT_READ, job)
        return job

    def read(self, job: Job) -> None:
        """Its pipe is readable: more of its answer, or its end."""
        try:
            chunk = os.read(job.fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk and len(job.buffer) <= protocol.MAX_ANSWER:
            job.buffer += chunk
            return
        self._end(job, self._outcome(job))

    def tick(self) -> None:
        """Kill the jobs past their wall time (blocked, or starved of CPU)."""
        now = time.monotonic()
        for job in [j for j in self.running if now >= j.deadline]:
            log.warning("job %d of uid %d ran out of time; killed", job.pid, job.uid)
            self._end(job, Outcome(spent=True))

    def cancel(self, job: Job) -> None:
        """Stop ``job`` (its asker went away): nobody is told."""
        if job in self.running:
            self._stop(job)

    def close(self) -> None:
        for job in list(self.running):
            self._stop(job)

    def _outcome(self, job: Job) -> Outcome:
        status = self._reap(job)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
            return Outcome(spent=True)
        try:
            answer = json.loads(bytes(job.buffer))
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not ("ok" in answer or "error" in answer):
            return Outcome(
                error={
                    "type": "UnavailableError",
                    "message": "internal error in the dra-jupyter service (a job ended without "
                    "an answer); its log says more",
                }
            )
        return Outcome(ok=answer.get("ok"), error=answer.get("error"))

    def _end(self, job: Job, outcome: Outcome) -> None:
        self._stop(job)
        job.done(outcome)

    def _stop(self, job: Job) -> None:
        self.running.remove(job)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(job.fd)
        os.close(job.fd)
        if job.pid > 0:  # 0: reaped already (never kill(0): that is the process group)
            with contextlib.suppress(ProcessLookupError):
                os.kill(job.pid, signal.SIGKILL)  # nothing if it exited (a zombie till reaped)
            self._reap(job)

    @staticmethod
    def _reap(job: Job) -> int:
        if job.pid <= 0:
            return 0
        try:
            _, status = os.waitpid(job.pid, 0)
        except ChildProcessError:
            status = 0
        job.pid = 0  # never signal a pid that may be another process's by now
        return status


def _child(work: Callable[[], Any], read_end: int, write_end: int, seconds: int) -> None:
    code = 0
    try:
        os.close(read_end)
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        # the daemon's sockets, ledger and pidfds stay the daemon's: a client that closes
        # sees its connection end although this child lives
        os.closerange(3, write_end)
        os.closerange(write_end + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.nice(10)  # behind the daemon and the users' own work for a core
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        try:
            answer: dict[str, Any] = {"ok": work()}
        except DraJupyterError as err:
            answer = {"error": protocol.error_to_wire(err)}
        except Exception as err:  # a bug: its traceback in the daemon's log
            sys.stderr.write(f"job failed: {traceback.format_exc()}")
            answer = {
                "error": {
                    "type": "UnavailableError",
                    "message": f"internal error in the dra-jupyter service "
                    f"({type(err).__name__}); its log has the traceback",
                }
            }
        data = json.dumps(answer, separators=(",", ":")).encode()
        while data:
            data = data[os.write(write_end, data) :]
    except BaseException:
        code = 3
    finally:
        os._exit(code)

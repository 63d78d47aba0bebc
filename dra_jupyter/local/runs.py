"""Background runs on one machine: their book in the ledger (the ``runs`` table, schema 5),
their log files next to it, :class:`LocalRun`, what ``dra.run`` returns there, and
:class:`LocalRuns`, the runs facet of the local backend and of the service: a run is
planned first (its command, :mod:`.runcommand`, its keywords and its claim checked, nothing
made), then recorded and started.

A run is a launcher process, ``python -m dra_jupyter.runner NAME`` (:mod:`dra_jupyter.runner`),
started in a session of its own, so that neither a kernel's restart, its interrupt nor its
shutdown (which signal the kernel's process group) reach it. The launcher makes the claim
itself, so that its pid is the claim's holder: on the embedded ledger a claim is reclaimed
once its holder is gone, and the service knows its clients by their pid (SO_PEERCRED). The
claim is the run's, not the kernel's: it carries no kernel id, so what a Jupyter server
does to a kernel's claims (idle release, a restart, a shutdown) never touches it. The
launcher then starts the command with the claim's device environment, its output into the
run's log file, waits for it, releases the claim and records the end.

The book is the user's ledger file (``DRA_JUPYTER_LEDGER``) on either backend: under the
service, whose daemon keeps only claims, the user's own ledger keeps the user's runs, so
``dra.runs()`` finds them from any process of the user. Every process that reads a run
settles it (:meth:`RunBook.settle`): a run whose launcher is gone without recording an end
(killed with SIGKILL, the machine restarted) is ``Failed`` with that said.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any, Literal, overload

from dra_jupyter.claimspec import RUN
from dra_jupyter.durations import parse_lease, parse_timeout
from dra_jupyter.errors import (
    InvalidInputError,
    LedgerError,
    NotFoundError,
    UnavailableError,
    outcome_of,
    said_by,
    shown,
)
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.runcommand import local_argv
from dra_jupyter.types import Capabilities, Owner, claim_prefix, process_start_time
from dra_jupyter.types.runs import (
    ENDED,
    Phase,
    RunClaims,
    RunProcess,
    RunRequest,
    RunStatus,
    wait_for_end,
)

LOG_DIR = "runs"  # next to the ledger: runs/USER/NAME.log (a folder per user: a ledger
# that several users share has their runs side by side, each folder only its user's)
POLL_S = 0.2  # seconds between reads of a run that is followed or waited for
START_WAIT_S = 60.0  # how long dra.run waits for the launcher to claim or to be in line
GRACE_S = 10.0  # a cancelled command's time to end after SIGTERM, before SIGKILL
RUNNER_MODULE = "dra_jupyter.runner"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")
_COLUMNS = (
    "name, user, host, spec, phase, created, started, ended, pid, start_time, child, "
    "claim, devices, exit_code, message, error, log"
)


@dataclass(frozen=True)
class RunRow:
    """One row of the book: the run as its launcher last recorded it."""

    name: str
    user: str
    host: str
    spec: dict[str, Any]  # argv, claim keywords, timeout, lease, cwd
    phase: Phase
    created: float
    started: float | None
    ended: float | None
    pid: int | None  # the launcher's: the claim's holder
    start_time: int | None
    child: int | None  # the command's
    claim: str | None
    devices: tuple[str, ...]
    exit_code: int | None
    message: str
    error: str | None  # the class of the error that ended it before it started
    log: Path

    def launcher(self) -> Owner | None:
        """The launcher process, as a claim's owner is known (None: not started yet)."""
        if self.pid is None:
            return None
        return Owner(self.user, self.host, self.pid, self.start_time)

    def status(self) -> RunStatus:
        child = f"pid {self.child}" if self.child else ""
        ended = self.phase in ENDED and self.child is not None
        process = RunProcess(
            rank=0,
            name=child,
            node=self.host,
            phase=self.phase,
            devices=self.devices,
            exit_code=self.exit_code,
            reason=self.message,
        )
        return RunStatus(
            name=self.name,
            phase=self.phase,
            created=self.created,
            started=self.started,
            ended=self.ended,
            exit_codes=(self.exit_code,) if ended else (),
            devices=self.devices,
            processes=(process,),
            claims=(self.claim,) if self.claim else (),
            message=self.message,
            where="this machine",
            command=tuple(self.spec.get("argv", ())),
        )


def _row(r: Any) -> RunRow:
    return RunRow(
        name=r["name"],
        user=r["user"],
        host=r["host"],
        spec=json.loads(r["spec"]),
        phase=r["phase"],
        created=r["created"],
        started=r["started"],
        ended=r["ended"],
        pid=r["pid"],
        start_time=r["start_time"],
        child=r["child"],
        claim=r["claim"],
        devices=tuple(json.loads(r["devices"])),
        exit_code=r["exit_code"],
        message=r["message"],
        error=r["error"],
        log=Path(r["log"]),
    )


class RunBook:
    """The ``runs`` table of a ledger: what the caller of ``dra.run`` and the launcher
    write, and what any process of the user reads."""

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock

    @property
    def log_dir(self) -> Path:
        return self.ledger.path.parent / LOG_DIR

    def _log_folder(self, user: str) -> Path:
        """``runs/USER/``, made where missing: ``runs/`` open to every user of the ledger
        (sticky, as /tmp: nobody removes another's folder), ``USER/`` to its user alone."""
        folder = self.log_dir / claim_prefix(user)
        try:
            if not self.log_dir.is_dir():
                self.log_dir.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(PermissionError):  # made by another user meanwhile
                    self.log_dir.chmod(0o1777)
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as err:
            raise LedgerError(
                f"dra.run: cannot make the folder of your runs' logs, {folder} "
                f"({err.strerror}); the folder {self.log_dir} next to the ledger must be "
                "writable by every user of the ledger (chmod 1777 it)"
            ) from None
        return folder

    def create(self, user: str, spec: Mapping[str, Any], name: str = "") -> RunRow:
        """A new ``Pending`` run of ``user`` (named ``USER-run-N`` unless ``name``), with an
        empty log file only its user may read."""
        if name and not _NAME.fullmatch(name):
            raise InvalidInputError(
                f"name={shown(name)} is not a run name; use lower-case letters, "
                "digits, '-' and '.', at most 63, e.g. name='train-1'"
            ).said_by(RUN)
        folder = self._log_folder(user)
        with self.ledger.transaction() as conn:
            taken = {r[0]: r[1] for r in conn.execute("SELECT name, user FROM runs")}
            if name and name in taken:
                whose = (
                    "" if taken[name] == user else ", another user's (run names are the ledger's)"
                )
                raise InvalidInputError(
                    f"a run named {name} exists already{whose}; choose another name "
                    "(dra.runs() lists yours)"
                ).said_by(RUN)
            if not name:
                n = sum(1 for t in taken if t.startswith(f"{claim_prefix(user)}-run-")) + 1
                while f"{claim_prefix(user)}-run-{n}" in taken:
                    n += 1
                name = f"{claim_prefix(user)}-run-{n}"
            log = folder / f"{name}.log"
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            conn.execute(
                "INSERT INTO runs (name, user, host, spec, phase, created, log) "
                "VALUES (?, ?, ?, ?, 'Pending', ?, ?)",
                (name, user, socket.gethostname(), json.dumps(dict(spec)), self.clock(), str(log)),
            )
        found = self.row(name)
        assert found is not None  # written above, in this transaction
        return found

    def _update(self, name: str, sql: str, args: tuple[Any, ...]) -> bool:
        with self.ledger.transaction() as conn:
            cur = conn.execute(
                f"UPDATE runs SET {sql} WHERE name = ? AND ended IS NULL", (*args, name)
            )
            return cur.rowcount > 0

    def launched(self, name: str, pid: int, start_time: int | None) -> None:
        """The launcher is started: its process identifies the run from now on."""
        self._update(name, "pid = ?, start_time = ?", (pid, start_time))

    def note(self, name: str, message: str) -> None:
        """What the run is doing now (``waiting for devices: next in line``)."""
        self._update(name, "message = ?", (message,))

    def started(self, name: str, claim: str, devices: tuple[str, ...], child: int) -> None:
        """The command runs (``child``) with the devices of ``claim``."""
        self._update(
            name,
            "phase = 'Running', started = ?, claim = ?, devices = ?, child = ?, message = ''",
            (self.clock(), claim, json.dumps(list(devices)), child),
        )

    def finish(
        self,
        name: str,
        phase: Phase,
        *,
        exit_code: int | None = None,
        message: str = "",
        error: str | None = None,
    ) -> bool:
        """Record the end (once: False when it was recorded already)."""
        return self._update(
            name,
            "phase = ?, ended = ?, exit_code = ?, message = ?, error = ?",
            (phase, self.clock(), exit_code, message, error),
        )

    def row(self, name: str) -> RunRow | None:
        with self.ledger._reading() as conn:  # the ledger's read connection
            found = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE name = ?", (name,)).fetchone()
        return None if found is None else _row(found)

    def owners(self) -> list[tuple[str, str]]:
        """Every run in the book by name, with its user, oldest first."""
        with self.ledger._reading() as conn:
            found = conn.execute("SELECT name, user FROM runs ORDER BY created, name")
            return [(r[0], r[1]) for r in found]

    def rows(self, user: str) -> list[RunRow]:
        """``user``'s runs, oldest first, each settled."""
        with self.ledger._reading() as conn:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE user = ? ORDER BY created, name", (user,)
            ).fetchall()
        return [self.settle(_row(r)) for r in found]

    def settle(self, row: RunRow) -> RunRow:
        """``row``, or, when its launcher is gone without recording an end, the run marked
        ``Failed`` (its claim is reclaimed as any claim of a gone holder)."""
        launcher = row.launcher()
        if row.phase in ENDED or launcher is None or launcher.is_alive():
            return row
        self.finish(
            row.name,
            "Failed",
            message=(
                f"run {row.name}: its launcher (pid {row.pid}) ended without recording the "
                "end (killed?); its command was stopped with it and its devices released"
            ),
        )
        return self.row(row.name) or row


class LocalRun:
    """A run on this machine (:class:`dra_jupyter.types.runs.Run`), read from its book."""

    def __init__(
        self, book: RunBook, name: str, release: Callable[[str], object], out: IO[str] | None = None
    ) -> None:
        self._book = book
        self._name = name
        self._release = release  # a claim's release by name, for a launcher that is stuck
        self._out = out

    @property
    def name(self) -> str:
        return self._name

    def _row(self) -> RunRow:
        row = self._book.row(self._name)
        if row is None:
            raise NotFoundError(
                f"run {self._name} does not exist (any more); dra.runs() lists yours"
            )
        return self._book.settle(row)

    @property
    def status(self) -> RunStatus:
        return self._row().status()

    @overload
    def logs(self, follow: Literal[False] = False, rank: int | None = None) -> str: ...

    @overload
    def logs(self, follow: Literal[True], rank: int | None = None) -> None: ...

    def logs(self, follow: bool = False, rank: int | None = None) -> str | None:
        if rank not in (None, 0):
            raise InvalidInputError(
                f"run {self._name}: rank={shown(rank)} does not exist; a run on one machine "
                "has one process, rank 0"
            )
        row = self._row()
        if not follow:
            return _read(row.log, 0).decode(errors="replace")
        out = self._out or sys.stdout
        # bytes as they come, decoded across reads: a character split by a read stays whole
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        offset = 0
        while True:
            done = self._row().phase in ENDED  # read before the file: nothing is missed
            chunk = _read(row.log, offset)
            offset += len(chunk)
            text = decoder.decode(chunk, final=done and not chunk)
            if text:
                out.write(text)
                out.flush()
            if done and not chunk:
                return None  # written already: a cell's Out[] must not show it twice
            if not chunk:
                time.sleep(POLL_S)

    def log_tail(self, max_bytes: int) -> tuple[str, bool]:
        """The last ``max_bytes`` of its log at most (a line cut at the start is left out),
        and whether earlier output was left out (:class:`~dra_jupyter.types.runs.TailedRun`)."""
        path = self._row().log
        try:
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - max_bytes))
                data = f.read(max_bytes)
        except FileNotFoundError:
            return "", False
        cut = size > max_bytes
        if cut:
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else data
        return data.decode(errors="replace"), cut

    def cancel(self) -> None:
        row = self._row()
        if row.phase in ENDED:
            return
        launcher = row.launcher()
        if launcher is not None and launcher.is_alive() and launcher.pid is not None:
            _signal(launcher.pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S + 5.0
            while time.monotonic() < deadline and self._row().phase not in ENDED:
                time.sleep(POLL_S)
            if self._row().phase not in ENDED and launcher.is_alive():
                _signal(launcher.pid, signal.SIGKILL)  # its command dies with it
        row = self._row()
        if row.phase not in ENDED:  # never started, or killed above: its end is ours to say
            if row.claim:
                self._release(row.claim)
            self._book.finish(self._name, "Cancelled", message=f"run {self._name}: cancelled")

    def wait(self, timeout: str | float | None = None) -> RunStatus:
        return wait_for_end(lambda: self.status, timeout, POLL_S)

    def __repr__(self) -> str:
        s = self.status
        devices = f": {', '.join(s.devices)}" if s.devices else ""
        why = f" ({s.message})" if s.message and not s.done else ""
        return f"<Run {self._name}{devices} ({s.phase}){why}>"


def plain(name: str) -> str:
    """A run's name as a message shows it: as it is when it could be one, else quoted."""
    return name if re.fullmatch(r"[\w.-]{1,253}", name) else shown(name)


def _read(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@dataclass(frozen=True)
class LocalPlan:
    """A run on this machine, checked (:meth:`LocalRuns.plan`): what its launcher is given
    (``argv``, the claim's keywords, ``timeout``, ``lease``), its name (empty: the next
    ``USER-run-N``), and whether ``dra.run`` follows it until it ends."""

    spec: Mapping[str, Any]
    name: str = ""
    wait: bool = False


class LocalRuns:
    """The runs of one user on this machine (the local backend's, or the service's: a
    launcher process of the user holds each run's claim): plan one, start it, find one,
    list them (:class:`dra_jupyter.types.runs.Runs`)."""

    def __init__(
        self,
        book: Callable[[], RunBook],
        user: str,
        release: Callable[[str], object],
        runner_env: Mapping[str, str],
        capabilities: Capabilities,
    ) -> None:
        self._open_book = book  # on first use: a run refused by its plan opens no ledger
        self.user = user
        self._release = release
        self._env = dict(runner_env)
        self._caps = capabilities

    @cached_property
    def book(self) -> RunBook:
        return self._open_book()

    def plan(self, request: RunRequest, claims: RunClaims) -> LocalPlan:
        """``dra.run`` on one machine: everything is checked (the command, the keywords,
        that the claim could ever be met) before the run is recorded and started."""
        where = self._caps.where
        if request.same_nodes:
            raise request.same_nodes_refused(f"{where} runs one process: leave it out")
        nodes = 1 if request.nodes is None else _nodes(request.nodes)
        if request.retries:
            raise InvalidInputError(
                f"retries= applies to Jobs on Kubernetes; on {where} a run is one process: "
                "leave it out"
            ).said_by(RUN)
        if request.group is not None:
            raise InvalidInputError(
                f"group= asks for devices the pods of nodes=N share on Kubernetes; on {where} "
                "a run is one process: ask for them with its own keywords"
            ).said_by(RUN)
        if request.gang_timeout is not ...:  # any value given: refused
            raise InvalidInputError(
                f"gang_timeout= applies to the pods of nodes=N on Kubernetes; on {where} a "
                "run is one process: leave it out"
            ).said_by(RUN)
        if nodes > 1:
            raise InvalidInputError(
                f"nodes={nodes} spreads a run over several machines, which needs the "
                f"Kubernetes backend; {where} runs one process: use nodes=1"
            ).said_by(RUN)
        pod = {
            "image": request.image,
            "start_timeout": request.start_timeout is not ...,  # any value given: refused
            "node_selector": request.node_selector,
            "queue": request.queue,
        }
        for key, value in pod.items():
            if value:
                raise InvalidInputError(
                    f"{key}= applies to pods on Kubernetes; on {where} the command runs as "
                    "your own process: leave it out"
                ).said_by(RUN)
        with said_by(RUN):
            argv = local_argv(request.command)
        parse_timeout(request.timeout)
        if parse_lease(request.lease) is not None and not self._caps.leases:
            raise InvalidInputError(f"lease= does not apply on {where}").said_by(RUN)
        claims.check(request.claim)
        spec = {
            "argv": argv,
            "claim": dict(request.claim),
            "timeout": request.timeout,
            "lease": request.lease,
        }
        return LocalPlan(spec, request.name or "", request.wait)

    def start(self, plan: LocalPlan) -> LocalRun:
        """Start the planned run (:meth:`launch`); with ``wait``, its log followed until it
        ends."""
        run = self.launch({**plan.spec, "cwd": str(Path.cwd())}, plan.name)
        if plan.wait:
            run.logs(follow=True)
        return run

    def run(self, name: str) -> LocalRun:
        row = self.book.row(name)
        if row is None or row.user != self.user:
            raise NotFoundError(f"no run {plain(name)}; dra.runs() lists yours")
        return LocalRun(self.book, name, self._release)

    def runs(self) -> list[LocalRun]:
        return [LocalRun(self.book, r.name, self._release) for r in self.book.rows(self.user)]

    def every_users(self) -> list[tuple[str, LocalRun]]:
        return [
            (user, LocalRun(self.book, name, self._release)) for name, user in self.book.owners()
        ]

    def launch(self, spec: Mapping[str, Any], name: str = "") -> LocalRun:
        """Record the run, start its launcher, and return once the launcher has its devices
        or waits in line for them (at most :data:`START_WAIT_S`). A request refused at once
        (busy with ``timeout=0``, over a limit) is raised here, as ``dra.request`` raises it;
        the run stays in the book as ``Failed``."""
        row = self.book.create(self.user, spec, name)
        with row.log.open("ab") as log:
            # The launcher forks once more and says its pid: it is nobody's child here, so
            # this process (a kernel that restarts) neither reaps it nor waits for it.
            detach = subprocess.run(  # our own module, by its path
                [sys.executable, "-m", RUNNER_MODULE, "--detach", row.name],
                env=self._env,
                cwd=spec.get("cwd") or None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a kernel's signals to its group do not reach it
                timeout=START_WAIT_S,
                check=False,
            )
        if detach.returncode != 0 or not detach.stdout.strip().isdigit():
            self.book.finish(
                row.name,
                "Failed",
                message=f"run {row.name}: its launcher did not start; see {row.log}",
            )
            raise UnavailableError(
                f"dra.run: the launcher of run {row.name} did not start (exit code "
                f"{detach.returncode}); its log {row.log} says why"
            )
        pid = int(detach.stdout)
        self.book.launched(row.name, pid, process_start_time(pid))
        deadline = time.monotonic() + START_WAIT_S
        run = LocalRun(self.book, row.name, self._release)
        while time.monotonic() < deadline:
            now = run._row()  # settled: a launcher that died says so
            if now.phase == "Failed" and now.error:
                raise outcome_of(now.error)(now.message)
            if now.phase != "Pending" or now.message:
                break
            time.sleep(POLL_S / 2)
        return run


def _nodes(nodes: object) -> int:
    """``nodes=``: a whole number of at least 1 (machines, or pods on a cluster)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InvalidInputError(
            f"nodes={shown(nodes)} is not a number of machines; use a whole number of at "
            "least 1 (nodes=1: one machine)"
        ).said_by(RUN)
    return nodes

"""What ``dra.run`` is on every backend: the request (:class:`RunRequest`), each backend's
runs (:class:`Runs`: a run planned, then started; found and listed), and what it returns,
a :class:`Run` and its :class:`RunStatus`.

One shape for a background run on one machine (:mod:`dra_jupyter.local.runs`: a process of
the user, its claim held by the run's own launcher) and for pods, Jobs and JobSets on a
cluster (:mod:`dra_jupyter.kube.runs`): a notebook, the magics and the lab panel read a run
the same way wherever it runs. A status is a value read at one moment (frozen): ask
``run.status`` again for the state now.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import InvalidInputError, shown

if TYPE_CHECKING:  # annotations only
    from dra_jupyter.allocator import Explanation

# What ``dra.run`` runs: a string under ``sh -c``, a list as it is, a function as ``python
# -c`` (its source, then a call), None: the image's own command.
Command = str | Sequence[str] | Callable[[], Any] | None

START_TIMEOUT = "5m"  # dra.run's start_timeout where not given: a pod's time to start

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Cancelled"]
PHASES: tuple[Phase, ...] = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")
# A run in one of these has ended: its devices are released, its logs are complete.
ENDED: frozenset[str] = frozenset({"Succeeded", "Failed", "Cancelled"})


@dataclass(frozen=True)
class RunProcess:
    """One process of a run (one machine) or one pod (a cluster), by rank.

    ``name``: the pod's name, or ``pid N`` for a process; ``node``: the node or host it
    runs on (empty until placed); ``devices``: ``driver/pool/device`` of what it got;
    ``exit_code``: None until it ended (or when it was killed without one: ``reason``
    says), negative when a signal ended it (``-15``: SIGTERM, as Python's
    ``returncode``); ``restarts``: how often it was started again (a Job's retries; 0 on one
    machine)."""

    rank: int
    name: str
    node: str
    phase: Phase
    devices: tuple[str, ...] = ()
    exit_code: int | None = None
    restarts: int = 0
    reason: str = ""


@dataclass(frozen=True, repr=False)
class RunStatus:
    """A run as it was when read: its phase, when it was made, started and ended (seconds
    since the epoch; None: not yet), the exit code of each process by rank, the devices
    of all of them, a row per process or pod, the claims that held its devices, and
    ``message``: why it is in its phase, in the user's words (waiting in line, cancelled,
    killed, the scheduler's reason), empty when there is nothing to say."""

    name: str
    phase: Phase
    created: float
    started: float | None = None
    ended: float | None = None
    exit_codes: tuple[int | None, ...] = ()
    devices: tuple[str, ...] = ()
    processes: tuple[RunProcess, ...] = ()
    claims: tuple[str, ...] = ()
    message: str = ""
    where: str = ""  # "this machine", "namespace team-a": where the run lives
    launcher: str = ""  # what runs it: "Job", "JobSet", "Indexed Job (JobSet not installed)", "Pod"
    command: tuple[str, ...] = field(default=(), repr=False)  # what it runs (argv)

    @property
    def done(self) -> bool:
        """Whether the run has ended (succeeded, failed or cancelled)."""
        return self.phase in ENDED

    def _said(self, words: str) -> str:
        """``words`` without the run's name in front: the first line names it already."""
        return words.removeprefix(f"run {self.name}: ")

    def __str__(self) -> str:
        """A few lines: the run's phase (what runs it) and why, then a line per process
        (its reason where it says more than the run's own)."""
        launcher = f" ({self.launcher})" if self.launcher else ""
        said = self._said(self.message)
        said = "" if said.lower() == self.phase.lower() else said  # not "Cancelled: cancelled"
        lines = [f"run {self.name}: {self.phase}{launcher}" + (f": {said}" * bool(said))]
        for row in self.processes:
            code = "" if row.exit_code is None else f", {_ended(row.exit_code)}"
            where = f" on {row.node}" if row.node else ""
            devices = f" with {', '.join(_short(d) for d in row.devices)}" if row.devices else ""
            reason = self._said(row.reason)
            repeated = (said, self._said(self.message), f"exit code {row.exit_code}")
            why = f": {reason}" if reason and reason not in repeated else ""
            lines.append(
                f"  rank {row.rank} {row.name}{where}{devices}: {row.phase}"
                f"{code}, {row.restarts} restarts{why}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        """A few lines, as ``%dra runs`` says it (clock times, not epoch seconds): what
        ``run.status`` and ``run.wait()`` show in a notebook or a shell."""
        head = f"<RunStatus {self.name}: {self.phase}"
        if self.devices:
            head += f" on {', '.join(d.rsplit('/', 1)[-1] for d in self.devices)}"
        lines = [head]
        times = [
            f"{what} {_clock(when)}"
            for what, when in (("created", self.created), ("started", self.started))
            if when is not None
        ]
        if self.ended is not None:
            times.append(f"ended {_clock(self.ended)}")
        lines.append(", ".join(times))
        if len(self.exit_codes) == 1 and self.exit_codes[0] is not None:
            lines.append(_ended(self.exit_codes[0]))
        elif self.exit_codes:
            codes = ", ".join("-" if c is None else _code(c) for c in self.exit_codes)
            lines.append(f"exit codes {codes}")
        said = self._said(self.message)
        if said and said != lines[-1] and said.lower() != self.phase.lower():  # said once
            lines.append(said)
        return "\n  ".join(lines) + ">"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's display: the same lines (not the dataclass's fields)."""
        printer.text(repr(self))


def _code(code: int) -> str:
    """An exit code as said: ``3``; a process stopped by a signal (a negative code) by the
    signal's name, ``SIGTERM`` (a cancel), not ``-15``."""
    if code >= 0:
        return str(code)
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _ended(code: int) -> str:
    """``exit code 3``; ``stopped by SIGTERM`` for a process a signal ended."""
    return f"exit code {code}" if code >= 0 else f"stopped by {_code(code)}"


def _short(device: str) -> str:
    """A device as a person names it: ``gpu-node-1/gpu-0`` (its pool and name), without the
    driver in front (``gpu.nvidia.com/``)."""
    return device.split("/", 1)[-1]


def _clock(seconds: float) -> str:
    """``12:03:04`` today, ``2026-12-01 12:03:04`` another day (local time)."""
    when = time.localtime(seconds)
    if time.strftime("%Y-%m-%d", when) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", when)
    return time.strftime("%Y-%m-%d %H:%M:%S", when)


@runtime_checkable
class Run(Protocol):
    """A run started by ``dra.run`` (or found by ``dra.runs()``, also from another kernel).

    Errors are those of :mod:`dra_jupyter.errors`: NotFoundError when the run is gone from
    its backend's records, InvalidInputError for a ``rank`` it does not have."""

    @property
    def name(self) -> str:
        """The run's name: unique among its user's runs on its backend."""

    @property
    def status(self) -> RunStatus:
        """The run now (read again at every access)."""

    @overload
    def logs(self, follow: Literal[False] = False, rank: int | None = None) -> str: ...

    @overload
    def logs(self, follow: Literal[True], rank: int | None = None) -> None: ...

    def logs(self, follow: bool = False, rank: int | None = None) -> str | None:
        """The output of its processes so far, as text (``rank``: one process's; None: all,
        each line prefixed by its rank where there are several). ``follow=True``: write it
        to stdout as it comes, until the run ends, and return None (the text is on the
        screen already: as a cell's last line it is not shown twice)."""

    def cancel(self) -> None:
        """Stop the run (its processes terminated, then killed after a grace period) and
        release its devices; nothing to do when it has ended already."""

    def wait(self, timeout: str | float | None = None) -> RunStatus:
        """Wait until the run ends, or for ``timeout`` at most (a duration as ``dra.run``
        takes it: '5m', '90s', or seconds; None: no limit); returns its status then. When
        the time runs out first, that status is the run's as it is (``Pending`` or
        ``Running``: ``status.done`` is False); the run goes on."""


@dataclass(frozen=True)
class RunRequest:
    """``dra.run``'s keywords, read once whatever the backend
    (:meth:`dra_jupyter.api.runs.Launcher.run`): the command as given, the claim's keywords
    (``gpu=``, ``memory=``, ``same=`` ...: none unknown), ``same=`` split into device
    attributes and node label keys, and the run's own keywords as given, which each
    backend's :meth:`Runs.plan` reads (or refuses) in its own terms.
    ``start_timeout``: ``...`` when not given (:data:`START_TIMEOUT` on a cluster)."""

    command: Command
    claim: Mapping[str, Any] = field(default_factory=dict)
    same_devices: tuple[str, ...] = ()
    same_nodes: tuple[str, ...] = ()
    image: str | None = None
    name: str | None = None
    timeout: str | float | None = "5m"
    start_timeout: str | float | EllipsisType | None = ...
    node_selector: Mapping[str, str] | None = None
    nodes: int | None = None
    queue: str | None = None
    lease: str | float | None = None
    retries: int = 0
    wait: bool = False

    def same_nodes_refused(self, why: str) -> InvalidInputError:
        """The refusal of ``same=`` naming node labels where the run has no pods to keep
        together; ``why``: the backend's words."""
        return InvalidInputError(
            f"same={shown(self.claim['same'])} keeps the pods of a multi-node run on nodes "
            f"that share {', '.join(self.same_nodes)}; {why}"
        ).said_by("dra.run")


class HeldClaim(Protocol):
    """A claim that a run holds, as the run sees it (:class:`dra_jupyter.api.Claim` is one):
    its name and state, why it could not be met, and its release."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    def explain(self) -> Explanation: ...

    def release(self) -> bool: ...


class RunClaims(Protocol):
    """What a backend's runs ask of the session that starts them (its labels, its devices'
    classes, ``dra.request``'s rules): a run's claim checked, built or made."""

    def check(self, spec: Mapping[str, Any]) -> None:
        """Refuse the claim of the keywords ``spec`` now, in one line, where it is wrong or
        could never be met (a run on one machine, whose launcher makes it)."""

    def build(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        """The ``spec`` of the claim of the keywords ``spec``, checked that it could ever be
        met (the template of each pod's claim in a Job)."""

    def request(self, spec: Mapping[str, Any]) -> HeldClaim:
        """The claim of the keywords ``spec``, made now as ``dra.request`` makes it (a bare
        pod's)."""


PlanT = TypeVar("PlanT")


class Runs(Protocol[PlanT]):
    """A backend's runs, its facet for ``dra.run`` (every backend has one, opened by
    :func:`dra_jupyter.backends.open_runs`): a run is planned, which refuses in one line what
    this backend cannot do before anything is made, then started; and the user's runs are
    found and listed (also those started from another kernel)."""

    def plan(self, request: RunRequest, claims: RunClaims) -> PlanT:
        """``request`` checked and made ready to start here (InvalidInputError,
        NeverPossibleError, ... in one line, with nothing made); ``claims``: how its claim is
        checked, built or made."""

    def start(self, plan: PlanT) -> Run:
        """Start the planned run; returned at once, or, where it asked ``wait=True``, followed
        until it ends."""

    def run(self, name: str) -> Run:
        """The user's run ``name`` (NotFoundError when there is none)."""

    def runs(self) -> Sequence[Run]:
        """The user's runs, oldest first."""

    def every_users(self) -> Sequence[tuple[str, Run]]:
        """Every user's runs that this backend shows, each with its user, oldest first (what
        an admin sees in the lab panel; a cluster: the user's own)."""


@runtime_checkable
class TailedRun(Protocol):
    """A run that reads the end of its output without the rest (one machine's: its log
    file)."""

    def log_tail(self, max_bytes: int) -> tuple[str, bool]:
        """The last ``max_bytes`` of its output at most, and whether earlier output was
        left out."""


def log_tail(run: Run, max_bytes: int) -> tuple[str, bool]:
    """The last ``max_bytes`` of ``run``'s output at most (a line cut at the start is left
    out), and whether earlier output was left out: what a panel shows, however long the
    output has grown (read from its end where the run can, else from all of it)."""
    if isinstance(run, TailedRun):
        return run.log_tail(max_bytes)
    data = run.logs().encode()
    if len(data) <= max_bytes:
        return data.decode(errors="replace"), False
    return data[-max_bytes:].decode(errors="replace").partition("\n")[2], True


def wait_for_end(
    read: Callable[[], RunStatus], timeout: str | float | None, poll: float
) -> RunStatus:
    """A run's ``wait``: its status, read every ``poll`` seconds, once it ended or when
    ``timeout`` (a duration; None: no limit) runs out (then as it is: the run goes on)."""
    seconds = parse_duration(timeout, what="run.wait: timeout")
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        status = read()
        if status.done or (deadline is not None and time.monotonic() >= deadline):
            return status
        time.sleep(poll)

"""The caller's background runs (``dra.run``) for the REST API: listed, cancelled, and the
last lines of their output; what the lab's Devices panel shows under the claims.

The same on every backend: a run is a :class:`dra_jupyter.types.runs.Run`, found through a
:class:`~dra_jupyter.api.Session` of the caller (their book in the ledger on one machine,
their Jobs and pods in the namespace on Kubernetes), as ``dra.runs()`` finds them in their
notebook. A caller reaches their own runs only: another user's is not found (404). An admin
(``allow_admin_view``) sees every user's runs of this machine's book too, and neither
cancels them nor reads their logs (403): their processes and log files are their users'.

Every answer is bounded: the newest :data:`MAX_RUNS` runs, :data:`MAX_RUN_DEVICES` devices
of each, a command cut to :data:`MAX_COMMAND` characters, at most :data:`MAX_TAIL` lines
and :data:`MAX_LOG_BYTES` of output. Blocking (SQLite, processes, the Kubernetes API): the
handlers run these on threads.
"""

from __future__ import annotations

import re
import shlex

from dra_jupyter.api import Session
from dra_jupyter.errors import ForbiddenError, InvalidInputError, NotFoundError, shown
from dra_jupyter.server.claims import Caller, ClaimService
from dra_jupyter.server.models import RunLogsResponse, RunModel, RunsResponse
from dra_jupyter.types.runs import Run, RunStatus, log_tail

MAX_NAME = 253  # characters of a run's name (a Job's, a DNS subdomain)
_RUN_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
MAX_SESSIONS = 256  # users whose sessions are kept (a server has a few)
MAX_RUNS = 50  # the newest, in GET runs (a cluster's: a few API calls each)
MAX_RUN_DEVICES = 64  # devices of a run in its row (a Job of many nodes has more)
MAX_COMMAND = 200  # characters of its command
MAX_MESSAGE = 1000  # characters of its message, in one line
DEFAULT_TAIL = 20  # lines of GET runs/{name}/logs
MAX_TAIL = 1000
MAX_LOG_BYTES = 64 * 1024  # of output, the last


def check_run_name(name: str) -> None:
    """A run's name from a path: lower-case letters, digits, '-' and '.', starting and
    ending with a letter or digit, at most 253 (what a run on one machine and a Job or pod
    may be named), else a 400."""
    if not _RUN_NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise InvalidInputError(
            f"run name {shown(name)} is not one a run can have: lower-case letters, digits, "
            "'-' and '.', starting and ending with a letter or digit, at most 253, e.g. "
            "'train-1' (GET /dra/api/runs lists yours)"
        )


def tail_lines(raw: str) -> int:
    """``?tail=`` of GET runs/{name}/logs: a whole number of lines, 1 to :data:`MAX_TAIL`
    (empty: :data:`DEFAULT_TAIL`), else a 400."""
    if not raw:
        return DEFAULT_TAIL
    digits = raw.lstrip("0")
    if (
        not (raw.isascii() and raw.isdigit())
        or len(digits) > 4
        or not 1 <= int(digits or 0) <= MAX_TAIL
    ):
        raise InvalidInputError(
            f"GET runs logs: tail must be a whole number of lines from 1 to {MAX_TAIL}, "
            f"not {shown(raw)}"
        )
    return int(digits)


def _cut(text: str, most: int) -> str:
    """``text``, of at most ``most`` characters."""
    return text if len(text) <= most else text[: most - 1] + "…"


def _line(text: str, most: int) -> str:
    """``text`` as one line (its lines joined by '; ') of at most ``most`` characters."""
    return _cut("; ".join(filter(None, (p.strip() for p in text.splitlines()))), most)


def exit_code(status: RunStatus) -> int | None:
    """The run's exit code: the first of its processes' that is not 0, else 0; None while
    none ended with one."""
    codes = [c for c in status.exit_codes if c is not None]
    return next((c for c in codes if c != 0), 0) if codes else None


def run_model(status: RunStatus, user: str, cancellable: bool) -> RunModel:
    """A run's row of GET runs (bounded: see the module)."""
    return RunModel(
        name=status.name,
        user=user,
        phase=status.phase,
        where=status.where,
        launcher=status.launcher,
        command=_cut(shlex.join(status.command).replace("\n", "\\n"), MAX_COMMAND),
        devices=list(status.devices[:MAX_RUN_DEVICES]),
        device_count=len(status.devices),
        processes=len(status.processes),
        created=status.created,
        started=status.started,
        ended=status.ended,
        exit_code=exit_code(status),
        message=_line(status.message, MAX_MESSAGE),
        cancellable=cancellable and not status.done,
    )


class RunService:
    """The runs of the server's users, on the server's backend (:class:`ClaimService`'s)."""

    def __init__(self, claims: ClaimService) -> None:
        self.claims = claims
        self._sessions: dict[str, Session] = {}

    def session(self, user: str) -> Session:
        """A session of ``user`` on the server's backend: where their runs are found (kept:
        the panel asks every few seconds)."""
        found = self._sessions.get(user)
        if found is None:
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions.clear()
            backend = self.claims.backend_for(user)
            found = self._sessions[user] = Session(self.claims.session.settings, backend=backend)
        return found

    def runs(self, caller: Caller) -> RunsResponse:
        """The caller's runs, oldest first (an admin's: every user's of this machine)."""
        session = self.session(caller.user)
        if caller.admin:
            every = session.every_users_runs()
        else:
            every = [(caller.user, r) for r in session.runs()]
        found: list[tuple[str, RunStatus]] = []
        for user, run in every[-MAX_RUNS:]:
            status = _status(run)
            if status is not None:
                found.append((user, status))
        return RunsResponse(
            runs=[run_model(s, user, user == caller.user) for user, s in found],
            more=max(0, len(every) - MAX_RUNS),
        )

    def run(self, caller: Caller, name: str) -> Run:
        """The caller's run ``name``; for an admin's view of another user's run a 403, for
        none a 404."""
        check_run_name(name)
        session = self.session(caller.user)
        try:
            return session.find_run(name)
        except NotFoundError:
            if caller.admin:
                for user, run in session.every_users_runs():
                    if run.name == name and user != caller.user:
                        raise ForbiddenError(
                            f"run {name} belongs to user {user}; only its user can cancel it "
                            "or read its output (dra.runs() in their notebook)"
                        ) from None
            raise NotFoundError(
                f"no run {name} of yours; GET /dra/api/runs (or dra.runs()) lists yours"
            ) from None

    def cancel(self, caller: Caller, name: str) -> RunModel:
        """Cancel the caller's run ``name`` (nothing to do once it ended); it as it is then."""
        run = self.run(caller, name)
        run.cancel()
        return run_model(run.status, caller.user, True)

    def logs(self, caller: Caller, name: str, tail: int) -> RunLogsResponse:
        """The last ``tail`` lines of the output of the caller's run ``name``."""
        text, cut = log_tail(self.run(caller, name), MAX_LOG_BYTES)
        lines = text.splitlines(keepends=True)
        cut = cut or len(lines) > tail
        lines = lines[-tail:]
        return RunLogsResponse(name=name, text="".join(lines), lines=len(lines), truncated=cut)


def _status(run: Run) -> RunStatus | None:
    """The run's status now; None when it is gone meanwhile (a Job deleted)."""
    try:
        return run.status
    except NotFoundError:
        return None

"""Releases that hold: what the daemon does about a process on a device that is nobody's
claim's (:mod:`~dra_jupyter.metrics.processes`: its user does not hold that device, or it
outlived its claim's release). The policy's ``[enforce]`` table says what:

- ``mode = "report"`` (the default): the process is logged, once, with its pid, user,
  command, device memory and since when, and a dry-run line of what ``terminate`` would
  do; and listed, with that, to its user and admins in the ``metrics`` op's ``processes``
  (``enforce``).
- ``mode = "terminate"``: the same, then, ``grace`` seconds (60) after it was first seen,
  SIGTERM; ``kill_after`` seconds (10) later, if NVML still lists it, SIGKILL. Each signal
  is logged and listed. Never a process of root, of an admin (``admin_groups``) or of a
  user in ``exempt_users``: those are reported only.

A claim's processes that use more device memory than its share of a shared GPU holds
(``share="20Gi"``: the result's consumed ``memory``) are reported the same way, never
signalled (:func:`over_shares`): the driver does not enforce a share's memory, so the
other holders of that GPU may run out of it.

A process is known by its pid and its start time, and each signal goes through a pidfd
opened after checking that start time again: a pid reused by another process is never
signalled. :class:`Enforcer` keeps no state beyond the processes listed now.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_jupyter.metrics.processes import ProcessUse, Reader, read_process

log = logging.getLogger("dra_jupyter.service")

MODES = ("report", "terminate")
GIB = 2**30


@dataclass(frozen=True)
class EnforcePolicy:
    mode: str = "report"
    grace: float = 60.0  # seconds from first seen to SIGTERM
    kill_after: float = 10.0  # seconds from SIGTERM to SIGKILL
    exempt_users: frozenset[str] = frozenset()


@dataclass
class _Stray:
    use: ProcessUse
    first_seen: float
    exempt: bool
    term_sent: float | None = None
    killed: float | None = None


Signaller = Callable[[int, float | None, int], bool]  # (pid, start, signal) -> sent


class Enforcer:
    """See the module docstring. ``send`` signals a process known by pid and start time
    (tests may replace it; the default checks the start time through a pidfd)."""

    def __init__(self, send: Signaller | None = None, read: Reader = read_process) -> None:
        self._strays: dict[tuple[int, float | None], _Stray] = {}
        self._read = read
        self._send = send or self._signal

    def tick(
        self,
        now: float,
        uses: Iterable[ProcessUse],
        policy: EnforcePolicy,
        exempt: Callable[[ProcessUse], bool],
    ) -> None:
        """The processes listed now: report the new strays; in ``terminate`` mode, signal
        those whose grace (or SIGTERM's) ran out."""
        listed: dict[tuple[int, float | None], ProcessUse] = {}
        for use in uses:
            if use.claim is None and use.uid is not None:
                listed.setdefault((use.pid, use.since), use)
        for key in [k for k in self._strays if k not in listed]:
            del self._strays[key]  # gone from the GPU (exited, or its user claimed it)
        for key, use in listed.items():
            stray = self._strays.get(key)
            if stray is None:
                stray = self._strays[key] = _Stray(use, now, exempt(use))
                self._report(stray, policy)
            stray.use = use
            if policy.mode != "terminate" or stray.exempt:
                continue
            if stray.term_sent is None and now - stray.first_seen >= policy.grace:
                if self._send(use.pid, use.since, signal.SIGTERM):
                    log.warning("enforce: SIGTERM to %s (grace %gs over)", _who(use), policy.grace)
                stray.term_sent = now
            elif (
                stray.term_sent is not None
                and stray.killed is None
                and now - stray.term_sent >= policy.kill_after
            ):
                if self._send(use.pid, use.since, signal.SIGKILL):
                    log.warning(
                        "enforce: SIGKILL to %s (alive %gs after SIGTERM)",
                        _who(use),
                        policy.kill_after,
                    )
                stray.killed = now

    def status(self, pid: int, since: float | None, policy: EnforcePolicy) -> dict[str, Any] | None:
        """What the ``metrics`` op lists of a stray process (None: not one)."""
        stray = self._strays.get((pid, since))
        if stray is None:
            return None
        action = "report" if policy.mode != "terminate" or stray.exempt else "terminate"
        return {
            "action": action,
            "seen": stray.first_seen,
            "deadline": stray.first_seen + policy.grace if action == "terminate" else None,
            "sigterm": stray.term_sent,
            "sigkill": stray.killed,
            "reason": "a process on a device its user does not hold",
        }

    def _report(self, stray: _Stray, policy: EnforcePolicy) -> None:
        use = stray.use
        log.warning("enforce: %s uses %s, which its user does not hold", _who(use), use.device)
        if stray.exempt:
            log.info("enforce: dry run: %s is exempt (root, an admin or exempt_users)", _who(use))
        elif policy.mode == "terminate":
            log.info(
                "enforce: SIGTERM to pid %d in %gs, SIGKILL %gs later, unless it leaves the GPU",
                use.pid,
                policy.grace,
                policy.kill_after,
            )
        else:
            log.info(
                "enforce: dry run: with mode terminate, pid %d would get SIGTERM in %gs",
                use.pid,
                policy.grace,
            )

    def _signal(self, pid: int, since: float | None, signum: int) -> bool:
        """Send ``signum`` to the process ``pid`` started at ``since``, never to another
        that took its pid: its start is checked after its pidfd is opened."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False  # gone
        try:
            info = self._read(pid)
            if info is None or since is None or info.start is None or abs(info.start - since) > 1:
                return False  # another process has its pid by now
            if info.state in ("Z", "X"):
                return False  # it has exited already
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signum)
                return True
            return False
        finally:
            os.close(fd)


@dataclass(frozen=True)
class OverShare:
    """A claim whose processes use more memory of a device than its share of it."""

    claim: str
    device: str
    used: int  # bytes its processes hold on the device
    share: int  # bytes its share is

    def words(self) -> str:
        return (
            f"over its share: its processes use {self.used / GIB:.1f} GiB of "
            f"{self.device}, its claim {self.claim} holds {self.share / GIB:.1f} GiB of it"
        )


def over_shares(
    shares: Mapping[tuple[str, str], int], uses: Iterable[ProcessUse]
) -> list[OverShare]:
    """The claims' shares (``(claim, device) -> bytes``) that their processes exceed."""
    used: dict[tuple[str, str], int] = {}
    for use in uses:
        key = (use.claim or "", use.device)
        if key in shares and use.memory_used:
            used[key] = used.get(key, 0) + use.memory_used
    return [
        OverShare(claim, device, used[claim, device], share)
        for (claim, device), share in shares.items()
        if used.get((claim, device), 0) > share
    ]


def _who(use: ProcessUse) -> str:
    memory = f", {use.memory_used / GIB:.1f} GiB" if use.memory_used is not None else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(use.since)) if use.since else "?"
    return f"pid {use.pid} of {use.user} ({use.command or '?'}{memory}, since {since})"

"""Reclaim under pressure, as a Jupyter server on the shared-machine service takes part in
it (:mod:`dra_jupyter.service.pressure` decides; this tells it and tells the user). On the
embedded ledger the same calls go to the ledger (:mod:`dra_jupyter.local.pressure`): the
activity is recorded there, and each read of the warnings takes a turn of the policy.

**Activity.** The service judges a holder idle by what it hears of it: its claim's
creation, a Keep, its GPU. A kernel busy on its CPU (or on a machine without NVML) would
look idle, and be released while a cell runs. So the server reports its kernels' cells
with the service's ``activity`` op (never a Keep: none of those allowed under pressure is
used): when a cell starts (busy), when it ends, and while it runs every :data:`RENEW`
seconds (the service holds a busy report for ``BUSY_HOLD``, longer, so that a server that
died stops counting; :data:`SOON` after a report that found no claim of the kernel, for
the claim its cell makes). Not per message: a cell that prints a million lines costs a report
at its start, one at its end and one each :data:`RENEW` seconds. Reports go one at a
time, in order, so that a cell's end never overtakes its start.

**Warnings.** Every ``reclaim_interval`` the server reads the service's ``notices`` (one
small op; the claims only when there is a new one) and emits ``reclaim_warning`` on its
event bus for those of its kernels' claims, once per warning (claim, and when it was
warned); a warning withdrawn emits nothing; a later one of the same claim is told again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.types import ClaimRecord, Reclaiming, ReclaimNotice

Read = Callable[[Callable[[], Any]], Awaitable[Any]]  # runs a blocking call off the loop

RENEW = 30.0  # seconds between reports that a kernel still runs a cell
# seconds to the next report of a running cell when the last found no claim of its kernel:
# a cell that makes its claim and then works (``dra.request(...); train()``) is busy soon
SOON = 5.0


def warning_event(notice: ReclaimNotice, record: ClaimRecord, now: float) -> dict[str, Any]:
    """The ``reclaim_warning`` event of ``notice`` on ``record``, a claim of a kernel."""
    return {
        "claim": record.name,
        "user": record.owner.user,
        "kernel_id": record.owner.kernel_id,
        "devices": record.device_keys,
        "waiter": notice.waiter,
        "what": notice.what,
        "deadline": notice.deadline,
        "seconds_left": notice.deadline - now,
        "keeps_left": notice.keeps_left,
        "message": notice.message,
    }


class Told:
    """Which warnings (claim, when warned) were read already: each is told once while it is
    in force; forgotten when it is no longer listed (withdrawn, or the claim released)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, float]] = set()

    def new(self, notices: Sequence[ReclaimNotice]) -> list[ReclaimNotice]:
        listed = {(n.claim, n.warned) for n in notices}
        fresh = [n for n in notices if (n.claim, n.warned) not in self.seen]
        self.seen = listed
        return fresh

    def forget(self, notices: Iterable[ReclaimNotice]) -> None:
        """``notices`` were not told after all (the claims could not be read)."""
        self.seen -= {(n.claim, n.warned) for n in notices}


class BusyReports:
    """When a kernel's running cell is reported again: :data:`RENEW` after the last report."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}  # kernel -> when it was last reported busy

    def started(self, kernel_id: str, now: float, *, claims: int = 1) -> None:
        """A report that ``kernel_id`` is busy was sent at ``now``; it found ``claims``
        (none: the next is due :data:`SOON`, for a claim the cell makes)."""
        self.sent[kernel_id] = now if claims else now - RENEW + SOON

    def ended(self, kernel_id: str) -> None:
        self.sent.pop(kernel_id, None)

    def due(self, busy: Iterable[str], now: float) -> list[str]:
        """Those of the ``busy`` kernels whose last report is :data:`RENEW` old (or none was
        sent: a cell that ran before the server watched it); marked as reported now. Kernels
        not busy are forgotten."""
        busy = set(busy)
        self.sent = {k: t for k, t in self.sent.items() if k in busy}
        due = [k for k in sorted(busy) if now - self.sent.get(k, -RENEW) >= RENEW]
        for kernel_id in due:
            self.sent[kernel_id] = now
        return due


class Reclaims:
    """A server's part in reclaim under pressure on ``backend`` (the service's client:
    :func:`~dra_jupyter.types.reclaiming_of`; module docstring).
    ``read`` runs blocking calls off the loop; ``claims`` gives the live claims;
    ``busy_kernels`` the kernels running a cell now; ``emit`` puts an event on the bus."""

    def __init__(
        self,
        backend: Reclaiming,
        *,
        read: Read,
        claims: Callable[[], Awaitable[list[ClaimRecord]]],
        live_kernels: Callable[[], Iterable[str]],
        busy_kernels: Callable[[], Iterable[str]],
        emit: Callable[[dict[str, Any]], None],
        clock: Callable[[], float],
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.backend = backend
        self._read = read
        self._claims = claims
        self._live = live_kernels
        self._busy = busy_kernels
        self._emit = emit
        self._clock = clock
        self._log = log
        self.reports = BusyReports()
        self.told = Told()
        self._order = asyncio.Lock()  # one report at a time, in the order they were asked
        self._problem = ""

    async def report(self, kernel_id: str, *, busy: bool) -> None:
        """Tell the service that ``kernel_id``'s claims are active now (``busy``: a cell
        runs). A failure is logged (once while it lasts), never raised: the claims are
        judged by what the service knows, as without this report."""
        if busy:
            self.reports.started(kernel_id, self._clock())
        else:
            self.reports.ended(kernel_id)
        await self._send(kernel_id, busy=busy)

    async def _send(self, kernel_id: str, *, busy: bool) -> None:
        async with self._order:
            try:
                claims = await self._read(
                    partial(self.backend.activity, kernel_id=kernel_id, busy=busy)
                )
            except DraJupyterError as err:
                self._logged(f"reporting kernel {kernel_id}'s activity to the service: {err}")
                return
        if busy and not claims and kernel_id in self.reports.sent:
            self.reports.started(kernel_id, self.reports.sent[kernel_id], claims=0)

    async def active(self, name: str) -> bool:
        """The claim ``name`` (the server's own, made at start) was active now; False when
        it is gone. Not a Keep, as a kernel's report."""
        async with self._order:
            done: int = await self._read(partial(self.backend.activity, name=name))
        return done > 0

    async def tick(self) -> None:
        """Report the cells still running (each :data:`RENEW` s), then tell the holders of
        the kernels' claims of the warnings not told yet."""
        now = self._clock()
        for kernel_id in self.reports.due(self._busy(), now):
            await self._send(kernel_id, busy=True)
        fresh: list[ReclaimNotice] = []
        try:
            fresh = self.told.new(await self._read(self.backend.notices))
            if not fresh:
                return
            live = set(self._live())
            records = {r.name: r for r in await self._claims() if r.owner.kernel_id in live}
        except DraJupyterError as err:
            self.told.forget(fresh)  # told at the next tick instead
            self._logged(f"reading the service's reclaim warnings: {err}")
            return
        self._problem = ""
        now = self._clock()
        for notice in fresh:
            record = records.get(notice.claim)
            if record is None:
                continue  # not a claim of this server's kernels (a shell's, another server's)
            self._log.warning("dra_jupyter: kernel %s: %s", record.owner.kernel_id, notice.message)
            self._emit(warning_event(notice, record, now))

    def _logged(self, problem: str) -> None:
        if problem != self._problem:
            self._problem = problem
            self._log.warning("dra_jupyter: %s", problem)

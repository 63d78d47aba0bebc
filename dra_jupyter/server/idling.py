"""Idle release of this server's kernels' claims: :class:`IdlePolicy` (pure, in
:mod:`dra_jupyter.server.idle`) applied to what the server knows of each kernel (its cells,
from :class:`~dra_jupyter.server.kernels.ExecutionWatcher`) and of each claim's GPU (its
activity, from :class:`~dra_jupyter.server.sampling.MetricsSampler`).

The server's check of its claims (:meth:`Checks.check <dra_jupyter.server.checks.Checks>`)
asks it which claims go and why (:meth:`Idling.idle_or`), which warnings go out
(:meth:`Idling.maybe_warn`) and when the next is due (:meth:`Idling.moments`); the REST API
what to show of a claim's idle release (:meth:`Idling.idle_state`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from dra_jupyter.metrics.activity import Activity, GpuState
from dra_jupyter.server.claim_events import ClaimEvents
from dra_jupyter.server.idle import Decision, IdlePolicy
from dra_jupyter.server.kernels import Execution, ExecutionWatcher
from dra_jupyter.server.sampling import MetricsSampler
from dra_jupyter.types import ClaimRecord


class IdleSettings(Protocol):
    """The settings of idle release read at each use, as the app's traits are now (they may
    change while the server runs)."""

    @property
    def idle_warning(self) -> float: ...

    @property
    def gpu_idle_timeout(self) -> float: ...

    @property
    def release_gpu_idle(self) -> bool: ...


class Idling:
    """When the claims of this server's kernels go for being idle, the warnings before, and
    what the REST API says of it. With ``release_gpu_idle`` a claim whose GPU is idle for
    ``gpu_idle_timeout`` goes too (reason ``gpu-idle``), even while a cell runs."""

    def __init__(
        self,
        policy: IdlePolicy,
        settings: IdleSettings,
        *,
        watcher: ExecutionWatcher,
        metrics: MetricsSampler,
        claim_events: ClaimEvents,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.policy = policy
        self.settings = settings
        self.watcher = watcher
        self.metrics = metrics
        self.claim_events = claim_events
        self.log = log
        self._gpu_idle_said: set[str] = set()  # claims whose GPU-idle state was logged

    def _execution(self, record: ClaimRecord) -> Execution | None:
        """What the watcher knows of the claim's kernel's cells (None: no kernel watched)."""
        kernel_id = record.owner.kernel_id
        return self.watcher.execution(kernel_id) if kernel_id else None

    def idle_deadline(self, record: ClaimRecord) -> float | None:
        """When the claim goes if its kernel executes nothing: ``idle_timeout`` after the
        later of its last execution, its last activity and the last time its GPU was
        active."""
        execution = self._execution(record)
        if execution is None:
            return None
        gpu = self.metrics.gpu.tracker.last_active(record.name) or 0.0
        return self.policy.deadline(max(execution.last_execute, gpu), record.last_activity)

    def gpu_activity(self, record: ClaimRecord, now: float | None = None) -> Activity:
        """The claim's GPU activity (:mod:`dra_jupyter.metrics.activity`)."""
        return self.metrics.gpu.activity(record.name, time.time() if now is None else now)

    def gpu_idle_deadline(self, record: ClaimRecord, now: float) -> float | None:
        """With release_gpu_idle: when a kernel's claim goes for its GPU not being used (its
        GPU quiet since when, plus gpu_idle_timeout); None otherwise."""
        if not self.settings.release_gpu_idle or self._execution(record) is None:
            return None
        activity = self.gpu_activity(record, now)
        if activity.state not in (GpuState.INACTIVE, GpuState.IDLE) or activity.since is None:
            return None
        return activity.since + self.settings.gpu_idle_timeout

    def idle_state(
        self, record: ClaimRecord, now: float | None = None
    ) -> tuple[float | None, bool]:
        """What the REST API says of the claim's idle release: the deadline as shown
        (:meth:`IdlePolicy.reported`: paused while a cell runs or its GPU is active, never
        in the past; the GPU-idle deadline if that comes first), and whether a cell of its
        kernel is running."""
        execution = self._execution(record)
        busy = execution is not None and execution.busy
        now = time.time() if now is None else now
        working = busy or self.gpu_activity(record, now).state is GpuState.ACTIVE
        deadline = self.policy.reported(self.idle_deadline(record), now=now, busy=working)
        gpu = self.gpu_idle_deadline(record, now)
        if gpu is not None:
            deadline = max(now, gpu) if deadline is None else min(deadline, max(now, gpu))
        return deadline, busy

    def idle_or(
        self, select: Callable[[ClaimRecord], str | None], now: float
    ) -> Callable[[ClaimRecord], str | None]:
        """``select``, plus: release the claims of live kernels whose idle deadline passed
        (``idle``: nothing executed and the GPU not active), and, with release_gpu_idle,
        those whose GPU is idle (``gpu-idle``)."""

        def combined(record: ClaimRecord) -> str | None:
            reason = select(record)
            if reason is not None:
                return reason
            execution = self._execution(record)
            if execution is None:
                return None
            gpu = self.gpu_activity(record, now)
            decision = self.policy.decide(
                now=now,
                busy=execution.busy or gpu.state is GpuState.ACTIVE,
                deadline=self.idle_deadline(record),
                warned_for=self.claim_events.warned.get(record.name),
            )
            if decision is Decision.RELEASE:
                return "idle"
            if self.settings.release_gpu_idle and gpu.state is GpuState.IDLE:
                return "gpu-idle"
            return None

        return combined

    def moments(self, record: ClaimRecord, now: float) -> list[float]:
        """When something is next due for the claim, if nothing changes meanwhile: its idle
        warning and its idle release (and the GPU-idle ones); none while a cell runs or
        its GPU works (the deadline is paused)."""
        execution = self._execution(record)
        if execution is None or execution.busy:
            return []
        moments = []
        if self.gpu_activity(record, now).state is not GpuState.ACTIVE:
            deadline = self.idle_deadline(record)
            if deadline is not None:
                moments += [deadline - self.settings.idle_warning, deadline]
        gpu = self.gpu_idle_deadline(record, now)
        if gpu is not None:
            moments += [gpu - self.settings.idle_warning, gpu]
        return moments

    def maybe_warn(self, record: ClaimRecord, now: float) -> None:
        """The idle warning event, once per deadline, ``idle_warning`` before it (the GPU-idle
        deadline's too); a claim whose GPU became idle is logged once."""
        execution = self._execution(record)
        if execution is None:
            return
        gpu = self.gpu_activity(record, now)
        deadline = self.idle_deadline(record)
        decision = self.policy.decide(
            now=now,
            busy=execution.busy or gpu.state is GpuState.ACTIVE,
            deadline=deadline,
            warned_for=self.claim_events.warned.get(record.name),
        )
        if decision is Decision.WARN and deadline is not None:
            self.claim_events.emit_idle_warning(record, deadline, now)
        gpu_deadline = self.gpu_idle_deadline(record, now)
        if (
            gpu_deadline is not None
            and now >= gpu_deadline - self.settings.idle_warning
            and self.claim_events.gpu_warned.get(record.name) != gpu_deadline
        ):
            self.claim_events.emit_idle_warning(record, gpu_deadline, now, gpu=True)
        if gpu.state is GpuState.IDLE and record.name not in self._gpu_idle_said:
            self._gpu_idle_said.add(record.name)
            self.log.warning(
                "dra_jupyter: claim %s of %s (kernel %s): %s%s",
                record.name,
                record.owner.user,
                record.owner.kernel_id,
                gpu.text(now),
                "" if self.settings.release_gpu_idle else " (kept: release_gpu_idle is off)",
            )
        elif gpu.state is not GpuState.IDLE:
            self._gpu_idle_said.discard(record.name)

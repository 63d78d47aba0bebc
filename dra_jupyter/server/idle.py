"""Idle release: the policy (pure); :mod:`dra_jupyter.server.idling` applies it to the
server's kernels at each check.

A kernel's claim is idle when the kernel has executed nothing for ``timeout`` seconds
(see :mod:`dra_jupyter.server.kernels` for what counts) and no cell is running. Its
deadline is ``timeout`` after the later of the kernel's last execution and the claim's
own last activity (its creation, or a "keep" that touched it). ``warning`` seconds before
the deadline the warning event goes out, once per deadline; at the deadline the claim is
released with reason ``idle``.

What the REST API reports (:meth:`IdlePolicy.reported`) is never in the past and pauses
while a cell runs: a running cell is never idle, so the countdown starts again, from the
full ``timeout``, when it ends.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    KEEP = "keep"
    WARN = "warn"
    RELEASE = "release"


@dataclass(frozen=True)
class IdlePolicy:
    timeout: float  # seconds without execution; 0 turns idle release off
    warning: float  # seconds before the deadline

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def deadline(self, last_execute: float, claim_activity: float) -> float | None:
        if not self.enabled:
            return None
        return max(last_execute, claim_activity) + self.timeout

    def reported(self, deadline: float | None, *, now: float, busy: bool) -> float | None:
        """The deadline a user is shown: while a cell runs, ``timeout`` from now (the
        countdown is paused, and starts again when the cell ends); otherwise the deadline,
        or now when it has passed (the claim goes at the next check)."""
        if deadline is None:
            return None
        if busy:
            return max(deadline, now + self.timeout)
        return max(deadline, now)

    def decide(
        self, *, now: float, busy: bool, deadline: float | None, warned_for: float | None
    ) -> Decision:
        if deadline is None or busy:
            return Decision.KEEP
        if now >= deadline:
            return Decision.RELEASE
        if now >= deadline - self.warning and warned_for != deadline:
            return Decision.WARN
        return Decision.KEEP

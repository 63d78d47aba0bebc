"""The deadline scheduler: a check of the claims at the next deadline (an idle warning goes,
or a claim is released, then, not at the next periodic check up to ``check_interval``
later), and one soon after a cell ends (its claims' deadlines start then, and a claim it
made is new). One timer at a time, on the server's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from tornado.ioloop import IOLoop

DUE_SLACK = 0.05  # seconds after a deadline its check runs: past it, whatever the clock
CELL_SETTLE = 0.2  # seconds after a cell ends that a check looks at its claims


class Deadlines:
    """The timer of the next check: ``at`` a deadline, or ``soon`` after a cell ended."""

    def __init__(self, check: Callable[[], Awaitable[None]]) -> None:
        self._check = check
        self._due: tuple[float, object] | None = None  # the next check's timer: (when, handle)
        self._stopped = False

    def at(self, when: float | None) -> None:
        """A check at ``when`` instead of the one due; None: no timer."""
        loop = IOLoop.current()
        if self._due is not None:
            if when is not None and self._due[0] == when:
                return
            loop.remove_timeout(self._due[1])
            self._due = None
        if when is None or self._stopped:
            return
        handle = loop.call_later(max(0.0, when - time.time()) + DUE_SLACK, self._on_due)
        self._due = (when, handle)

    def soon(self) -> None:
        """A check shortly (``CELL_SETTLE``), unless one is due before."""
        soon = time.time() + CELL_SETTLE
        if self._due is None or self._due[0] > soon:
            self.at(soon)

    def stop(self) -> None:
        """No timer from now on."""
        self._stopped = True
        self.at(None)

    def _on_due(self) -> None:
        self._due = None
        IOLoop.current().spawn_callback(self._check)

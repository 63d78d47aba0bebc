"""The processes that hold claims: a pidfd each in the daemon's selector, readable when that
process exits, when its claims are released at once (a reused pid never fools it: the
process's start time is part of who holds a claim).
"""

from __future__ import annotations

import logging
import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass

from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.service.peer import HOST, alive, open_pidfd
from dra_jupyter.types import ClaimRecord, Owner, process_start_time

log = logging.getLogger("dra_jupyter.service")


@dataclass
class Watch:
    """A pidfd of a process that holds claims."""

    pid: int
    start_time: int | None
    fd: int


class Watches:
    """A :class:`Watch` per living process of this host that holds claims of ``local``;
    ``released`` is called after claims were released (devices are free: serve the line)."""

    def __init__(
        self,
        selector: selectors.BaseSelector,
        local: LocalBackend,
        released: Callable[[], None],
    ) -> None:
        self.selector = selector
        self.local = local
        self._released = released
        self.watches: dict[tuple[int, int | None], Watch] = {}

    def watch(self, owner: Owner) -> None:
        """Watch the process of ``owner`` (nothing for a detached claim or another host's);
        one that is gone already has its claims released now."""
        if owner.pid <= 0 or owner.host != HOST:
            return
        key = (owner.pid, owner.start_time)
        if key in self.watches:
            return
        fd = open_pidfd(owner.pid)
        if fd is not None and (process_start_time(owner.pid) != owner.start_time or not alive(fd)):
            os.close(fd)  # the pid is another process's now
            fd = None
        if fd is None:
            self.reclaim(owner.pid, owner.start_time)
            return
        watch = Watch(owner.pid, owner.start_time, fd)
        self.watches[key] = watch
        self.selector.register(fd, selectors.EVENT_READ, watch)

    def exited(self, watch: Watch) -> None:
        """The process of ``watch`` exited: forget it, release its claims."""
        self.selector.unregister(watch.fd)
        os.close(watch.fd)
        self.watches.pop((watch.pid, watch.start_time), None)
        self.reclaim(watch.pid, watch.start_time)

    def reclaim(self, pid: int, start_time: int | None) -> None:
        """Release the claims the process ``pid`` (started at ``start_time``) held."""

        def select(record: ClaimRecord) -> str | None:
            o = record.owner
            if o.host == HOST and o.pid == pid and o.start_time == start_time:
                return "kernel-shutdown" if o.kernel_id else "reclaimed"
            return None

        swept = self.local.sweep(select, time.time(), ())
        for record, reason in swept.released:
            log.info("claim %s of %s released: %s", record.name, record.owner.user, reason)
        if swept.released:
            self._released()

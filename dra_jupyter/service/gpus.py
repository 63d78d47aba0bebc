"""The daemon's GPU sampler: one per machine, for every user.

Every ``gpu_sample_interval`` seconds (the policy's; 1 by default) it reads, through the
metrics source the ``metrics`` op shares (NVML, once for every client), the processes on
each device, and maps each to a claim and a user
(:mod:`~dra_jupyter.metrics.processes`: the claim's holder process or a descendant of it,
else a process of the claim's user; else nobody's). From that, each claim's GPU activity
(:mod:`~dra_jupyter.metrics.activity`, with the policy's ``gpu_active_threshold``,
``gpu_window`` and ``gpu_idle_timeout``):

- a claim whose GPU is active counts as active: its last activity is recorded (at most once
  a ``gpu_window``), so the ``idle`` limit does not release a claim whose GPU works;
- with ``release_gpu_idle``, a claim held by a process (not the CLI's, which live by their
  lease) whose GPU has been idle for ``gpu_idle_timeout`` is released (reason
  ``gpu-idle``, in words "GPU not used for 1 h");
- the processes are shown in the ``metrics`` op's answer (``processes``: what the caller
  may see) and so in every Jupyter server's views;
- a process that is nobody's claim's is reported, or terminated, as the policy's
  ``[enforce]`` says (:mod:`~dra_jupyter.service.enforce`);
- a claim of a share of a shared GPU whose processes use more of its memory than the
  share is reported (logged once, and listed with its processes), never signalled.

Without a GPU signal (a simulated inventory, no NVML) nothing of this changes anything.
Each tick's GPU activity of every claim goes to the ledger's usage book
(:meth:`~dra_jupyter.local.ledger.Ledger.add_activities`), in one transaction per tick.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dra_jupyter.errors import DraJupyterError, LedgerError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.metrics import MetricsSource, source_for
from dra_jupyter.metrics.activity import ActivitySettings, GpuState
from dra_jupyter.metrics.processes import Holder, ProcessUse
from dra_jupyter.metrics.watch import GpuWatch
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.service.access import Access
from dra_jupyter.service.args import duration_text
from dra_jupyter.service.enforce import Enforcer, OverShare, over_shares
from dra_jupyter.service.peer import HOST, Peer, user_groups
from dra_jupyter.types import ClaimRecord

log = logging.getLogger("dra_jupyter.service")

ANOTHER_USER = "another user"


class GpuSampler:
    """See the module docstring. :meth:`tick` runs on the daemon's loop."""

    def __init__(
        self, access: Access, devices: Inventory, ledger: Ledger, local: LocalBackend
    ) -> None:
        self.access = access
        self.devices = devices
        self.ledger = ledger
        self.local = local
        self._source: MetricsSource | None = None
        self.watch = GpuWatch(self._settings())
        self.enforcer = Enforcer()
        self.ticks = 0
        self._over: dict[tuple[str, str], OverShare] = {}  # shares exceeded now
        self._over_since: dict[tuple[str, str], float] = {}

    def _write_book(self) -> None:
        """The tick's GPU activity of every claim, into the usage book in one write."""
        reports = self.watch.take_reports()
        if reports:
            try:
                self.ledger.add_activities(reports)
            except LedgerError as err:  # the book misses a tick; the service goes on
                log.warning("usage book: a tick's GPU activity not written: %s", err)

    def _settings(self) -> ActivitySettings:
        p = self.access.policy
        return ActivitySettings(p.gpu_active_threshold, p.gpu_window, p.gpu_idle_timeout)

    def source(self) -> MetricsSource:
        """The machine's metrics source, made on first use (shared with the ``metrics`` op)."""
        if self._source is None:
            self._source = source_for(self.devices)
        return self._source

    def close(self) -> None:
        if self._source is not None:
            self._source.close()

    def reload(self) -> None:
        """The policy changed: the definition's knobs with it (the books are kept)."""
        self.watch.tracker.settings = self._settings()

    def tick(self, now: float) -> list[tuple[ClaimRecord, str]]:
        """One sampling: read, map, track; record GPU activity; release GPU-idle claims
        where the policy says so. Returns what it released."""
        self.ticks += 1
        records = sorted(self.ledger.read_claims(), key=lambda r: (r.created, r.name))
        holders = [
            Holder(
                r.name,
                tuple(r.device_keys),
                r.owner.pid if r.owner.host == HOST else 0,
                r.owner.user,
            )
            for r in records
        ]
        source = self.source()
        held = {d for r in records for d in r.device_keys}
        samples = source.sample(held, now)
        self.watch.feed(now, self.watch.read(source, holders, samples, now))
        self._write_book()
        policy = self.access.policy
        self.enforcer.tick(now, self.watch.uses, policy.enforce, self._exempt)
        self._check_shares(records, now)
        for record in records:
            activity = self.watch.activity(record.name, now)
            if (
                activity.state is GpuState.ACTIVE
                and now - record.last_activity >= policy.gpu_window
            ):
                self.local.touch(record.name, now)  # what the idle limit measures
        if not policy.release_gpu_idle:
            return []

        def gpu_idle(record: ClaimRecord) -> str | None:
            if record.owner.pid <= 0:
                return None  # a detached claim lives by its lease
            state = self.watch.activity(record.name, now).state
            return "gpu-idle" if state is GpuState.IDLE else None

        def words(record: ClaimRecord, reason: str) -> str | None:
            if reason != "gpu-idle":
                return None
            return f"GPU not used for {duration_text(policy.gpu_idle_timeout)}"

        try:
            swept = self.local.sweep(gpu_idle, now, (), message=words)
        except LedgerError as err:
            log.error("%s", err)
            return []
        released = [(r, why) for r, why in swept.released if why == "gpu-idle"]
        for record, _ in released:
            log.info(
                "claim %s of %s released: its GPU was not used for %s (release_gpu_idle)",
                record.name,
                record.owner.user,
                duration_text(policy.gpu_idle_timeout),
            )
        return released

    def _check_shares(self, records: list[ClaimRecord], now: float) -> None:
        """Claims whose processes use more memory than their shares hold: said once each
        (while it lasts), and listed with their processes (:meth:`processes`)."""
        shares = {
            (r.name, f"{res['driver']}/{res['pool']}/{res['device']}"): memory
            for r in records
            for res in r.allocation.get("devices", {}).get("results", [])
            if res.get("shareID") and (memory := _share_memory(res)) is not None
        }
        over = {(o.claim, o.device): o for o in over_shares(shares, self.watch.uses)}
        for key, found in over.items():
            if key not in self._over:
                log.warning("enforce: claim %s is %s", found.claim, found.words())
                self._over_since[key] = now
        self._over = over
        self._over_since = {k: t for k, t in self._over_since.items() if k in over}

    def _share_status(self, use: ProcessUse) -> dict[str, Any] | None:
        found = self._over.get((use.claim or "", use.device))
        if found is None:
            return None
        return {
            "action": "report",
            "seen": self._over_since.get((found.claim, found.device)),
            "deadline": None,
            "sigterm": None,
            "sigkill": None,
            "reason": found.words(),
        }

    def _exempt(self, use: ProcessUse) -> bool:
        """Never terminated: root's, an admin's, an exempt user's."""
        policy = self.access.policy
        if use.uid == 0 or use.user in policy.enforce.exempt_users:
            return True
        return (
            use.uid is not None
            and use.user is not None
            and policy.is_admin(use.uid, user_groups(use.user))
        )

    def processes(self, peer: Peer) -> list[dict[str, Any]] | None:
        """The processes on the devices at the last tick as ``peer`` may see them: its own
        and those of its claims in full; others' (unless the caller is an admin, or the
        policy's visibility is ``all``) without pid, user, command or claim. None: no GPU
        signal (a simulated inventory, NVML not answering)."""
        if not self.watch.signal:
            return None
        everyone = self.access.policy.visibility == "all" or self.access.admin(peer)
        mine = {r.name for r in self.ledger.read_claims() if r.owner.user == peer.user}
        enforce = self.access.policy.enforce
        return [
            _row(u, self.enforcer.status(u.pid, u.since, enforce) or self._share_status(u))
            if everyone or u.uid == peer.uid or u.claim in mine
            else _hidden(u)
            for u in self.watch.uses
        ]


def _share_memory(result: Mapping[str, Any]) -> int | None:
    """The bytes of memory a share holds (its result's consumed ``memory``)."""
    amount = (result.get("consumedCapacity") or {}).get("memory")
    if amount is None:
        return None
    try:
        return int(Quantity.parse(amount).value)
    except (DraJupyterError, TypeError, ValueError):
        return None


def _row(use: ProcessUse, enforce: dict[str, Any] | None = None) -> dict[str, Any]:
    row = use.to_dict()
    row["claim"] = use.claim or "none"
    row["enforce"] = enforce
    return row


def _hidden(use: ProcessUse) -> dict[str, Any]:
    return {
        **_row(use),
        "pid": 0,
        "uid": None,
        "user": ANOTHER_USER,
        "command": None,
        "claim": "another user's" if use.claim else "none",
    }

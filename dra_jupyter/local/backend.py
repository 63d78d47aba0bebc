"""The local backend: claims on this machine, allocated by the embedded allocator and
kept in the ledger.

``allocate`` runs one ledger transaction per attempt: reclaim what dead owners and
expired leases hold, read every live claim, allocate on top of them, write the new
claim. A request that cannot be met now either fails at once or waits in a FIFO queue
per request shape (:mod:`~dra_jupyter.local.waits`); a request that could not be met even
on an idle machine fails at once with the allocator's explanation. While it waits it takes
turns of reclaim under pressure (:mod:`~dra_jupyter.local.pressure`, where the backend has
its settings). A Jupyter server's sweeps and adoptions of claims are
:mod:`~dra_jupyter.local.sweeps`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from dra_jupyter import outofservice
from dra_jupyter.accounting.book import Book, admin_words, releaser
from dra_jupyter.accounting.weights import Weights
from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.allocator.core import DEFAULT_MAX_STEPS
from dra_jupyter.errors import ForbiddenError, InvalidInputError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_device
from dra_jupyter.local import notices as _notices
from dra_jupyter.local import pressure, sweeps, waits
from dra_jupyter.local import taints as _taints
from dra_jupyter.local.ledger import Ledger, LedgerBusyError
from dra_jupyter.local.shapes import shape_classes, shape_of, shape_words
from dra_jupyter.model.admintaints import check_key, check_taint
from dra_jupyter.model.objects import Wire
from dra_jupyter.sharing.reclaim import ReclaimSettings
from dra_jupyter.types import (
    Capabilities,
    ClaimRecord,
    DeviceTaint,
    Ended,
    HealthEvent,
    OnWait,
    Owner,
    ReclaimNotice,
    Select,
    Sweep,
    Waiter,
)

TAKEN_OUT = outofservice.RELEASED  # the reason of a release off a device taken out

if TYPE_CHECKING:  # annotations only: importing the API loads no metrics module
    from dra_jupyter.metrics.activity import GpuReport

CAPABILITIES = Capabilities(
    where="this machine",
    devices_here=True,
    waits=True,
    leases=True,
    allocates_later=False,
    claim_states=False,
    every_user=False,  # the ledger's users only: by default one user's own
)

_POSSIBLE_MOST = 1024  # shapes remembered as possible
Clock = Callable[[], float]
Sleep = Callable[[float], None]


class LocalBackend:
    """Claims of one owner on this machine's devices (see the module docstring)."""

    capabilities = CAPABILITIES
    cluster: None = None  # one machine's devices: no reserve, no pods

    def __init__(
        self,
        inventory: Inventory,
        ledger: Ledger,
        owner: Owner,
        *,
        strategy: Strategy = "topology",
        poll_interval: float = 0.5,
        namespace: str = "default",
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
        wakeup: bool = True,
        reclaim: ReclaimSettings | None = None,
    ) -> None:
        self.devices = inventory
        self.namespace = namespace or "default"
        self.ledger = ledger
        self.owner = owner
        self.strategy: Strategy = strategy
        self.poll_interval = poll_interval
        self.clock = clock
        self.sleep = sleep
        # Waits sleep on a wake-up socket (woken by releases of any process on the ledger),
        # except with an injected ``sleep``: a test's fake time is its own clock.
        self.wakeup = wakeup and sleep is time.sleep
        # reclaim under pressure (None: off): the settings of the turns this process takes
        self.reclaim = reclaim
        # What the allocator learns of the inventory (which never changes here) is kept
        # across calls: on the claims held (``_cache``, which also keeps the parsed held
        # claims while they are the same objects: ``_wires``) and on idle devices
        # (``_idle``, for check_possible, which would otherwise replace the held claims').
        self._cache = AllocatorCache()
        self._idle = AllocatorCache()
        self._wires: dict[int, tuple[ClaimRecord, Wire]] = {}
        # the shapes (shape_of) found possible on the idle machine: the inventory is fixed
        self._possible: set[str] = set()
        self._weights: Weights | None = None  # the devices' GPU-equivalents, on first use
        # The devices with the ledger's taints as DeviceTaintRules, kept while the rules are
        # the same (so that its patched slices are the same objects: the caches hold)
        self._tainted: Inventory = inventory
        self._pid = os.getpid()  # the process whose ledger this is (not a forked child's)

    def inventory(self, *, refresh: bool = False) -> Inventory:
        """This machine's devices (found once), with the taints the ledger holds now as
        DeviceTaintRules (read at every call: another process may have tainted a device)."""
        if os.getpid() != self._pid:
            # a forked child (the service's costly requests) has no ledger: it closed every
            # file; it works from what its parent knew when it forked
            return self._tainted
        rules = _taints.rules(self.ledger.taints(), self.devices.slices)
        if rules != self._tainted.taint_rules:
            self._tainted = replace(self.devices, taint_rules=rules)
            self._possible.clear()  # what was possible may not be now, or the other way
        return self._tainted

    # --- taints an admin puts by hand --------------------------------------------------------

    def taint(
        self, device: str, effect: str, reason: str, key: str, *, by: str | None = None
    ) -> DeviceTaint:
        """Taint ``device`` (``driver/pool/device``, or its name) in the ledger: no new
        claim gets it (``NoSchedule``, ``NoExecute``); who (``by``, else this process's
        user) and when are recorded. Claims that hold it now keep it (``NoSchedule``), or
        until the grace of ``NoExecute`` is over (:meth:`release_taken_out`)."""
        check_taint("taint", effect, key, reason)
        full = self._device(device, "taint")
        return self.ledger.taint(full, key, effect, reason, self.clock(), by=by)

    def untaint(self, device: str, key: str, *, by: str | None = None) -> DeviceTaint:
        """Take the taint ``key`` off ``device``; the ledger keeps who did it and when."""
        check_key("untaint", key)
        full = self._device(device, "untaint")
        return self.ledger.untaint(full, key, self.clock(), by=by)

    def taints(self, *, history: bool = False) -> list[DeviceTaint]:
        """The taints admins put by hand (``history``: and took off), oldest first."""
        return self.ledger.taints(history=history)

    def release_taken_out(
        self, grace: float, now: float | None = None
    ) -> list[tuple[ClaimRecord, str]]:
        """Release the claims on devices tainted ``NoExecute`` ``grace`` seconds ago or more,
        whoever tainted them (:func:`~dra_jupyter.outofservice.due`), in one sweep: reason
        ``device-failed``, with words that name the device and the taint."""
        now = self.clock() if now is None else now
        due = outofservice.due(self.ledger.taints(), grace, now)
        if not due:
            return []

        def select(record: ClaimRecord) -> str | None:
            return TAKEN_OUT if due.keys() & set(record.device_keys) else None

        def message(record: ClaimRecord, reason: str) -> str | None:
            if reason != TAKEN_OUT:
                return None
            return outofservice.released_words(next(due[k] for k in record.device_keys if k in due))

        swept = sweeps.sweep(self.ledger, select, now, message=message)
        return [(r, why) for r, why in swept.released if why == TAKEN_OUT]

    # --- health -------------------------------------------------------------------------------

    def health_events(self, *, device: str | None = None) -> list[HealthEvent]:
        """The record of GPUs the health watcher took out (``device``: one GPU's, named as
        ``dra-jupyter devices`` names it), oldest first."""
        full = self._device(device, "health") if device is not None else None
        return self.ledger.health_events(full)

    def _device(self, device: str, command: str) -> str:
        return resolve_device(self.devices, device, what=command)

    def with_owner(self, owner: Owner) -> LocalBackend:
        """The same devices, ledger and settings for another owner (the server's users)."""
        twin = LocalBackend(
            self.devices,
            self.ledger,
            owner,
            strategy=self.strategy,
            poll_interval=self.poll_interval,
            namespace=self.namespace,
            clock=self.clock,
            sleep=self.sleep,
            wakeup=self.wakeup,
            reclaim=self.reclaim,
        )
        # the inventory is the same: so is what was learnt of it
        twin._cache, twin._idle, twin._wires = self._cache, self._idle, self._wires
        twin._possible = self._possible
        twin._weights = self.weights
        return twin

    @property
    def weights(self) -> Weights:
        """The GPU-equivalents of this inventory's devices
        (:mod:`~dra_jupyter.accounting.weights`)."""
        if self._weights is None:
            self._weights = Weights(self.devices)
        return self._weights

    # --- the usage book ----------------------------------------------------------------------

    def usage_book(self, last: float, *, user: str | None = None) -> Book:
        """Every interval of the ledger's usage book that overlaps the last ``last``
        seconds, by this backend's clock (``user``'s only, where named): the ledger is the
        machine's, and every user of it can read it."""
        now = self.clock()
        since = now - last
        intervals = self.ledger.usage(since, now, user=user, weigh=self.weights.of_key)
        return Book(tuple(intervals), since, now)

    def add_activity(
        self,
        claim: str,
        active_s: float,
        idle_s: float,
        unknown_s: float = 0.0,
        energy_j: float | None = None,
    ) -> bool:
        """A sampler's report of a claim's GPU use since its last one (seconds active, idle,
        unknown; joules), added to its interval in the book; False when it has none."""
        return self.ledger.add_activity(claim, active_s, idle_s, unknown_s, energy_j)

    def add_activities(self, reports: Sequence[GpuReport]) -> list[bool]:
        """One sampling tick's reports (see :meth:`add_activity`), in one transaction."""
        return self.ledger.add_activities(reports)

    def allocator(
        self,
        held: list[ClaimRecord],
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        kind: type[Allocator] = Allocator,
    ) -> Allocator:
        """An allocator (of class ``kind``) on the devices with ``held`` allocated, whose
        search gives up after ``max_steps``."""
        return kind(
            self.inventory().patched_slices,
            self.devices.device_classes,
            self._objects(held) if held else [],
            self.strategy,
            cache=self._cache if held else self._idle,
            max_steps=max_steps,
        )

    def _objects(self, held: list[ClaimRecord]) -> list[Wire]:
        """The wire objects of ``held``: the same object for the same record (the ledger
        gives the same record for an unchanged row), so the allocator's cache, which
        compares claims by identity, parses each held claim once."""
        fresh: dict[int, tuple[ClaimRecord, Wire]] = {}
        for record in held:
            kept = self._wires.get(id(record))
            if kept is None or kept[0] is not record:
                kept = (record, record.to_object())
            fresh[id(record)] = kept
        # only the claims held now, their records kept alive (so that no id is reused)
        self._wires.clear()
        self._wires.update(fresh)
        return [fresh[id(r)][1] for r in held]

    def check_possible(
        self,
        claim: Wire,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        kind: type[Allocator] = Allocator,
        explain: bool = True,
    ) -> None:
        """Raise NeverPossibleError when the claim could not be met even on an idle
        machine (why, with ``explain``). A shape found possible once is not tried again (the
        devices here do not change). ``max_steps`` and ``kind``: those of the allocator that
        tries."""
        shape = shape_of(claim)
        if shape in self._possible:
            return
        idle = self.allocator([], max_steps=max_steps, kind=kind)
        where = self.devices.description
        idle.check_idle(claim, where, explain=explain, bare_namespace=self.namespace)
        if len(self._possible) >= _POSSIBLE_MOST:
            self._possible.clear()
        self._possible.add(shape)

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: OnWait | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        """Allocate ``claim`` (its name may be empty: the ledger names it).

        ``timeout``: 0 fails at once when the devices are busy, None waits without limit.
        A waiting request keeps its place in the FIFO queue of its shape and tries again
        when woken (a release of any process on the ledger), at the latest every
        ``poll_interval`` or when the first lease held runs out
        (:func:`~dra_jupyter.local.waits.allocate`).
        """
        if not checked:
            self.check_possible(claim)
        return waits.allocate(self, claim, timeout=timeout, lease=lease, on_wait=on_wait)

    def release(
        self, name: str, reason: str = "user", *, any_owner: bool = False, by: str | None = None
    ) -> bool:
        """Release a claim; False if it did not exist. Only the owner's user may release it
        unless ``any_owner``; ``by``: who releases it, where not this backend's user."""
        with self.ledger.transaction() as conn:
            for record in Ledger.claims(conn):
                if record.name != name:
                    continue
                if not any_owner and record.owner.user != self.owner.user:
                    raise ForbiddenError(
                        f"claim {name} belongs to user {record.owner.user}; "
                        "only its owner can release it"
                    )
                who = releaser(reason, by or self.owner.user)
                message = admin_words(reason, by)
                Ledger.delete(conn, record, reason, self.clock(), message, by=who)
                return True
        return False

    def state(self, name: str) -> str:
        """``allocated`` while the ledger holds the claim, else ``released``."""
        alive = any(r.name == name for r in self.claims(all_users=True))
        return "allocated" if alive else "released"

    def claims(self, *, all_users: bool = False) -> list[ClaimRecord]:
        with self.ledger.transaction() as conn:
            Ledger.reclaim(conn, self.clock())
            held = Ledger.claims(conn)
        if all_users:
            return held
        return [r for r in held if r.owner.user == self.owner.user]

    def claims_with_state(self, *, all_users: bool = False) -> list[tuple[ClaimRecord, str]]:
        return [(r, "allocated") for r in self.claims(all_users=all_users)]

    def holders(self) -> list[ClaimRecord]:
        """Every live claim of the machine (the ledger is the whole machine's)."""
        return self.claims(all_users=True)

    def record(self, name: str) -> ClaimRecord | None:
        return next((r for r in self.claims(all_users=True) if r.name == name), None)

    def waiting(self) -> list[Waiter]:
        """The line, oldest first: each request in the user's words, its place in the
        queue of its shape and why there. The ledger serves each request shape first come
        first served (a request of another shape does not wait behind it)."""
        out: list[Waiter] = []
        ahead: dict[str, list[tuple[Owner, str]]] = {}
        for shape, owner, since in self.ledger.waiters():
            what = shape_words(shape)
            before = ahead.setdefault(shape, [])
            if before:
                who, _ = before[-1]
                more = f", and {len(before) - 1} more before it" if len(before) > 1 else ""
                why = f"behind {who.user}'s same request, made earlier{more}"
            else:
                why = "first in line for this request: it waits for devices to be released"
            place = len(before) + 1
            out.append(Waiter(owner, what, since, place, why, shape_classes(shape)))
            before.append((owner, what))
        return out

    def released_at(self, name: str) -> float | None:
        gone = self.ledger.released(name)
        return None if gone is None else gone.time

    def ended(self, name: str) -> Ended | None:
        gone = self.ledger.released(name)
        if gone is None or gone.record is None:  # a release of a version-1 ledger
            return None
        return Ended(gone.record, gone.reason, gone.time, gone.message)

    def metrics_source(self) -> None:
        """None: the caller reads the inventory's own source."""

    def touch(self, name: str, now: float) -> bool:
        """A Keep: activity on the claim (its idle countdown starts again). A claim warned
        under pressure is postponed instead, ``keeps_under_pressure`` times; then LimitError
        in one line (:func:`~dra_jupyter.local.pressure.keep`)."""
        with self.ledger.transaction() as conn:
            if pressure.keep(conn, name, self.reclaim or ReclaimSettings(), now):
                return True
            cur = conn.execute("UPDATE claims SET last_activity = ? WHERE name = ?", (now, name))
            return cur.rowcount > 0

    # --- reclaim under pressure (a Jupyter server's part: dra_jupyter.server.reclaims) -------

    def activity(
        self, *, kernel_id: str | None = None, name: str | None = None, busy: bool = False
    ) -> int:
        """This user's claims of ``kernel_id`` (or the claim ``name``) were active now, and a
        cell runs (``busy``): the ledger keeps it for reclaim under pressure, which takes only
        claims whose activity is reported. Not a Keep. How many claims it recorded. A Jupyter
        server's backend (no user: it acts for its users) records any user's claims."""
        if (kernel_id is None) == (name is None):
            raise InvalidInputError("activity: name one claim (name) or one kernel (kernel_id)")
        with self.ledger.transaction() as conn:
            if name is not None:
                records = [r for r in Ledger.claims(conn) if r.name == name]
                for record in records:
                    if not self._mine(record):
                        raise ForbiddenError(
                            f"claim {name} belongs to user {record.owner.user}; "
                            "only its owner can record activity on it"
                        )
            else:
                records = [
                    r
                    for r in Ledger.claims(conn)
                    if r.owner.kernel_id == kernel_id and self._mine(r)
                ]
            names = [r.name for r in records]
            return _notices.record_activity(conn, names, self.clock(), busy=busy)

    def _mine(self, record: ClaimRecord) -> bool:
        return not self.owner.user or record.owner.user == self.owner.user

    def notices(self) -> list[ReclaimNotice]:
        """The warnings of reclaim under pressure in force on this user's claims (a Jupyter
        server's backend: every user's), after a turn (:func:`~dra_jupyter.local.pressure.turn`:
        a read where nobody waits; none where another process holds the ledger's lock now:
        its turn, or the next, does it)."""
        settings = self.reclaim or ReclaimSettings()
        now = self.clock()
        if self.reclaim is not None:
            with contextlib.suppress(LedgerBusyError):
                pressure.turn(self, self.reclaim, now, wait=False)
        shown = pressure.shown(self.ledger.reclaim_notices(), settings, now)
        return [n for n, holder in shown if not self.owner.user or holder == self.owner.user]

    # --- what a Jupyter server does -----------------------------------------------------

    def sweep(
        self,
        select: Select | None,
        now: float,
        live_kernels: Collection[str],
        *,
        wait: bool = True,
        message: Callable[[ClaimRecord, str], str | None] | None = None,
    ) -> Sweep:
        """Every live claim of the ledger, after one transaction that releases those for
        which ``select`` names a reason, and those the ledger would reclaim
        (:func:`~dra_jupyter.local.sweeps.sweep`). ``live_kernels`` is not needed: the
        ledger is shared with other servers of the machine, whose kernels this one does not
        know; their processes tell."""
        return sweeps.sweep(self.ledger, select, now, wait=wait, message=message)

    def where(self) -> str:
        return f"the ledger {self.ledger.path} ({self.devices.description})"

    def close(self) -> None:
        """Nothing to let go of: no view is kept running."""

    def batch(self) -> AbstractContextManager[None]:
        """One ledger transaction for every write of this thread inside (:meth:`Ledger.batch`)."""
        return self.ledger.batch()

    def adopt(self, kernel_id: str, holder: Owner, now: float) -> Sweep:
        """Make ``holder`` hold every claim of ``kernel_id``, in one ledger transaction
        (:func:`~dra_jupyter.local.sweeps.adopt`)."""
        return sweeps.adopt(self.ledger, kernel_id, holder, now)

"""The local backend: claims on this machine, allocated by the embedded allocator and
kept in the ledger.

``allocate`` runs one ledger transaction per attempt: reclaim what dead owners and
expired leases hold, read every live claim, allocate on top of them, write the new
claim. A request that cannot be met now either fails at once or waits in a FIFO queue
per request shape; a request that could not be met even on an idle machine fails at
once with the allocator's explanation.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.errors import AllocationError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.local.ledger import ClaimRecord, Ledger
from dra_jupyter.local.owners import Owner

Wire = dict[str, Any]
Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Waiting:
    """Progress of a request that waits for devices."""

    position: int  # 1 = next of its shape
    waited: float  # seconds so far
    timeout: float | None


def claim_prefix(user: str) -> str:
    """A DNS-safe name prefix for a user's claims."""
    return re.sub(r"[^a-z0-9-]+", "-", user.lower()).strip("-")[:40] or "user"


def shape_of(claim: Wire) -> str:
    """Requests of the same shape wait in one FIFO queue: the claim's spec, canonically."""
    return json.dumps(claim.get("spec", {}), sort_keys=True, separators=(",", ":"))


class LocalBackend:
    def __init__(
        self,
        inventory: Inventory,
        ledger: Ledger,
        owner: Owner,
        *,
        strategy: Strategy = "topology",
        poll_interval: float = 0.5,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.inventory = inventory
        self.ledger = ledger
        self.owner = owner
        self.strategy: Strategy = strategy
        self.poll_interval = poll_interval
        self.clock = clock
        self.sleep = sleep
        # What the allocator learns of the inventory (which never changes here) is kept
        # across calls.
        self._cache = AllocatorCache()

    def allocator(self, held: list[ClaimRecord]) -> Allocator:
        return Allocator(
            self.inventory.slices,
            self.inventory.device_classes,
            [r.to_object() for r in held],
            self.strategy,
            cache=self._cache,
        )

    def check_possible(self, claim: Wire) -> None:
        """Raise AllocationError when the claim could not be met even on an idle machine."""
        idle = self.allocator([])
        name = claim["metadata"].get("name") or "new-request"
        probe = {**claim, "metadata": {**claim["metadata"], "name": name}}
        if idle.allocate([probe]) is None:
            explanation = idle.explain([probe])
            raise AllocationError(
                f"the request can never be met on {self.inventory.description}:\n"
                + explanation.summary(),
                explanation,
            )

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: Callable[[Waiting], None] | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        """Allocate ``claim`` (its name may be empty: the ledger names it).

        ``timeout``: 0 fails at once when the devices are busy, None waits without limit.
        """
        if not checked:
            self.check_possible(claim)
        shape = shape_of(claim)
        start = self.clock()
        waiter: int | None = None
        try:
            while True:
                record, position = self._attempt(claim, shape, waiter, lease)
                if record is not None:
                    waiter = None  # dequeued in the same transaction
                    return record
                now = self.clock()
                waited = now - start
                if timeout is not None and waited >= timeout:
                    raise self._busy(claim, position, waited)
                if waiter is None:
                    with self.ledger.transaction() as conn:
                        waiter = Ledger.enqueue(conn, shape, self.owner, now)
                        position = Ledger.position(conn, shape, waiter)
                if on_wait is not None:
                    on_wait(Waiting(position, waited, timeout))
                self.sleep(self.poll_interval)
        finally:
            if waiter is not None:
                with self.ledger.transaction() as conn:
                    Ledger.dequeue(conn, waiter)

    def _attempt(
        self, claim: Wire, shape: str, waiter: int | None, lease: float | None
    ) -> tuple[ClaimRecord | None, int]:
        with self.ledger.transaction() as conn:
            now = self.clock()
            Ledger.reclaim(conn, now)
            position = Ledger.position(conn, shape, waiter)
            if position > 1:
                return None, position  # earlier requests of the same shape go first
            held = Ledger.claims(conn)
            meta = dict(claim["metadata"])
            if meta.get("name") and any(r.name == meta["name"] for r in held):
                raise AllocationError(
                    f"claim {meta['name']} exists already; release it first or use another name"
                )
            probe = {**claim, "metadata": {**meta, "name": meta.get("name") or "new-request"}}
            results = self.allocator(held).allocate([probe])
            if results is None:
                return None, position
            if not meta.get("name"):  # named only once it is allocated
                meta["name"] = Ledger.next_name(conn, claim_prefix(self.owner.user))
            named = {**claim, "metadata": meta}
            record = ClaimRecord(
                name=meta["name"],
                namespace=meta.get("namespace", "default"),
                owner=self.owner,
                spec=named,
                allocation=results[0].to_dict(),
                created=now,
                last_activity=now,
                lease_expires=now + lease if lease is not None else None,
            )
            Ledger.insert(conn, record)
            if waiter is not None:
                Ledger.dequeue(conn, waiter)
            return record, position

    def _busy(self, claim: Wire, position: int, waited: float) -> AllocationError:
        held = self.ledger.read_claims()
        name = claim["metadata"].get("name") or "new-request"
        probe = {**claim, "metadata": {**claim["metadata"], "name": name}}
        explanation = self.allocator(held).explain([probe])
        waited_text = f" after waiting {waited:.0f}s" if waited >= 1 else ""
        place = f" (number {position} in the queue)" if position > 1 else ""
        holders = ", ".join(f"{r.name} ({r.owner.user})" for r in held) or "nobody"
        return AllocationError(
            f"the devices are busy{waited_text}{place}; pass timeout='10m' to wait in line, "
            "or release claims you no longer need:\n"
            + explanation.summary()
            + f"\nclaims held now: {holders}",
            explanation,
        )

    def release(self, name: str, reason: str = "user", *, any_owner: bool = False) -> bool:
        """Release a claim; False if it did not exist. Only the owner's user may release it
        unless ``any_owner``."""
        with self.ledger.transaction() as conn:
            for record in Ledger.claims(conn):
                if record.name != name:
                    continue
                if not any_owner and record.owner.user != self.owner.user:
                    raise AllocationError(
                        f"claim {name} belongs to user {record.owner.user}; "
                        "only its owner can release it"
                    )
                Ledger.delete(conn, record, reason, self.clock())
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

"""The daemon's fair share: the policy's shares, the usage book decayed, the line's order.

The sums are :mod:`dra_jupyter.sharing.fairshare`'s; this reads what they need: the shares
of ``[users.<name>]`` and ``[groups.<name>]`` (``share``), the usage book of the ledger
(over :data:`HALF_LIVES` half-lives back: older use counts for almost nothing), and the
groups of the users that count (a waiter's from its connection, a holder's from the user
database, only where a group sets a share). The decayed usage is read again at most every
:data:`USAGE_MAX_AGE` seconds: it changes slowly, and the line is served often.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence

from dra_jupyter.accounting.book import MAX_SINCE
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.service.access import Access
from dra_jupyter.service.peer import user_groups
from dra_jupyter.sharing.fairshare import (
    Arrival,
    Place,
    Standing,
    decayed_usage,
    order_line,
    share_of,
    standings,
)

HALF_LIVES = 10  # the usage book is read this many half-lives back (2^-10: 0.1 %)
USAGE_MAX_AGE = 5.0  # seconds a read of the decayed usage serves


class Fairness:
    """Standings and the line's order under the policy of ``access``, from the book of
    ``local``."""

    def __init__(self, access: Access, local: LocalBackend) -> None:
        self.access = access
        self.local = local
        self._used: dict[str, float] = {}
        self._read_at = -math.inf  # time.monotonic() of the last read

    def used(self) -> dict[str, float]:
        """GPU-equivalent seconds per user, decayed (read at most every
        :data:`USAGE_MAX_AGE` seconds)."""
        if time.monotonic() - self._read_at >= USAGE_MAX_AGE:
            half_life = self.access.policy.share_half_life
            book = self.local.usage_book(min(HALF_LIVES * half_life, MAX_SINCE))
            self._used = decayed_usage(book.intervals, book.now, half_life)
            self._read_at = time.monotonic()
        return self._used

    def forget(self) -> None:
        """Read the usage again at the next need (a claim was released, the policy changed)."""
        self._read_at = -math.inf

    def standings(
        self, users: Iterable[str], groups: Mapping[str, tuple[str, ...] | None]
    ) -> dict[str, Standing]:
        """The standing of each of ``users`` (those that count now); ``groups``: the groups
        known of some (the others are looked up where a group sets a share)."""
        policy = self.access.policy
        shares = {}
        for user in set(users):
            known = groups.get(user)
            if known is None:
                known = user_groups(user) if policy.group_shares else ()
            shares[user] = share_of(user, known, policy.user_shares, policy.group_shares)
        return standings(shares, self.used())

    def order(
        self,
        arrivals: Sequence[Arrival],
        holders: Iterable[str],
        groups: Mapping[str, tuple[str, ...] | None],
    ) -> tuple[list[Place], dict[str, Standing]]:
        """The line in fair-share order (each with why), and the standings it used: of the
        waiters' users and of ``holders``."""
        table = self.standings([a.user for a in arrivals] + list(holders), groups)
        return order_line(arrivals, table, self.access.policy.share_half_life), table

"""Fair share: who has used less of their share lately, and so goes first in line.

Pure (no I/O): the caller reads the usage book and the policy, this module does the sums.

- A user's **share** is their own (``[users.<name>] share``), else the largest of their
  groups' that set one, else :data:`DEFAULT_SHARE` (1): equal shares by default. Shares
  are weights; only their ratios count.
- A user's **usage** is the GPU-equivalent seconds their claims held
  (:class:`~dra_jupyter.accounting.book.Interval`: a whole GPU is 1, a MIG instance or a
  share its part of the GPU), each second counted less the longer ago it was: halved
  every ``half_life`` seconds (:func:`decayed_usage`; Slurm's and Kueue's way), so a week
  of heavy use is forgiven in a few days, not never.
- A user's **standing** compares the two among the users that count now (those that
  wait, hold or used): the part of the machine their share is worth, and the part of the
  decayed usage that was theirs. Their difference is the **deficit**: above 0, the user
  has used less than their share.
- The line is ordered by deficit (largest first), then by arrival (first come first
  among equals, :data:`EQUAL` apart at most), each waiter with why it stands where it
  does (:func:`order_line`). The service's per-user limits are checked before any of
  this (a request over a limit is refused, it never waits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dra_jupyter.accounting.book import Interval

DEFAULT_SHARE = 1.0
DEFAULT_HALF_LIFE = 86400.0  # seconds: usage counts half after a day, a quarter after two
EQUAL = 0.01  # deficits closer than this (1 % of the machine) are equal: first come first


def share_of(
    user: str,
    groups: Iterable[str],
    users: Mapping[str, float],
    group_shares: Mapping[str, float],
) -> float:
    """``user``'s share: their own, else the largest of their ``groups`` that set one, else
    :data:`DEFAULT_SHARE`."""
    if user in users:
        return users[user]
    found = [group_shares[g] for g in groups if g in group_shares]
    return max(found) if found else DEFAULT_SHARE


def decayed_usage(
    intervals: Iterable[Interval], now: float, half_life: float = DEFAULT_HALF_LIFE
) -> dict[str, float]:
    """GPU-equivalent seconds per user, each second at ``t`` weighted ``2^-((now-t)/half_life)``
    (an interval still held counts up to ``now``)."""
    rate = math.log(2) / half_life
    used: dict[str, float] = {}
    for interval in intervals:
        end = now if interval.end is None else min(interval.end, now)
        start = min(interval.start, end)
        # the integral of e^(-rate (now - t)) dt from start to end
        weight = (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate
        if weight > 0 and interval.gpus > 0:
            used[interval.user] = used.get(interval.user, 0.0) + weight * interval.gpus
    return used


@dataclass(frozen=True)
class Standing:
    """A user's place in the fair share: ``share`` (the part of the machine their share is
    worth, 0-1), ``usage`` (their part of everyone's decayed usage, 0-1) and ``used`` (their
    decayed GPU-equivalent seconds)."""

    user: str
    share: float
    usage: float
    used: float

    @property
    def deficit(self) -> float:
        """Share less usage: above 0, the user has used less than their share."""
        return self.share - self.usage

    @property
    def over(self) -> bool:
        """Over their fair share: used more than it is worth, by more than :data:`EQUAL`."""
        return self.usage - self.share > EQUAL


def standings(shares: Mapping[str, float], used: Mapping[str, float]) -> dict[str, Standing]:
    """Each user of ``shares`` (those that count now, with their shares) and their part of
    the decayed usage ``used`` (users not in ``shares`` count in the total: they used the
    machine too)."""
    total_share = sum(max(s, 0.0) for s in shares.values())
    total_used = sum(used.values())
    return {
        user: Standing(
            user,
            share=max(share, 0.0) / total_share if total_share > 0 else 0.0,
            usage=used.get(user, 0.0) / total_used if total_used > 0 else 0.0,
            used=used.get(user, 0.0),
        )
        for user, share in shares.items()
    }


@dataclass(frozen=True)
class Arrival:
    """A request in line, as fair share sees it: its user, when it arrived (any clock, the
    same for all) and a key of the caller's to find it again."""

    key: object
    user: str
    since: float


@dataclass(frozen=True)
class Place:
    """A waiter's place: ``position`` (1 first) and why, in words."""

    arrival: Arrival
    position: int
    why: str


def order_line(
    arrivals: Sequence[Arrival], standing: Mapping[str, Standing], half_life: float
) -> list[Place]:
    """The line in fair-share order: largest deficit first, then first come first among
    equals (deficits :data:`EQUAL` apart at most are one step); a user without a standing
    has none of the machine's usage (deficit = nothing used). Each place says why."""

    def deficit(arrival: Arrival) -> float:
        found = standing.get(arrival.user)
        return found.deficit if found is not None else 0.0

    def key(indexed: tuple[int, Arrival]) -> tuple[int, float, int]:
        index, arrival = indexed
        return (-round(deficit(arrival) / EQUAL), arrival.since, index)

    ordered = [a for _, a in sorted(enumerate(arrivals), key=key)]
    places = []
    for position, arrival in enumerate(ordered, start=1):
        if position == 1:
            why = "first in line"
        else:
            ahead = ordered[position - 2]
            if ahead.user == arrival.user:
                why = "behind your own earlier request"
            elif round(deficit(ahead) / EQUAL) > round(deficit(arrival) / EQUAL):
                why = (
                    f"behind {ahead.user}, who has used less of their share "
                    f"({_used_text(standing, ahead.user)} against your "
                    f"{_used_text(standing, arrival.user)}, {_half_life_text(half_life)})"
                )
            else:
                why = f"behind {ahead.user}, who asked first (your shares are used alike)"
        places.append(Place(arrival, position, why))
    return places


def _used_text(standing: Mapping[str, Standing], user: str) -> str:
    """Decayed GPU-equivalent seconds in the largest unit that is not below 1."""
    found = standing.get(user)
    used = found.used if found is not None else 0.0
    if used >= 3600:
        return f"{used / 3600:.1f} GPU-h"
    if used >= 60:
        return f"{used / 60:.0f} GPU-min"
    return f"{used:.0f} GPU-s"


def _half_life_text(half_life: float) -> str:
    hours = half_life / 3600
    return f"halved every {hours:g} h"

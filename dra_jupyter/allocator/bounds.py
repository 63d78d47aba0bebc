"""The counters' bound of the search: how many more devices the counters left could hold.

Devices that draw on shared counters (MIG slices of one GPU, partitions of one chip) can be
listed by the dozen while only a few fit at once. A claim asking for more of them than fit
is searched combination by combination upstream, and here without this bound: 20 MIG
requests on one H200 took seconds of CPU to fail. The bound gives each counting device to
one counter it draws on, and counts, per counter, how many of its devices fit in what is
left (smallest first: no larger set of them fits); devices that draw on no counter count
once each; and it counts the same for each counter alone (H200 MIG slices each take one of
seven decoders). Either is an upper bound of the devices that could still be added, so a
branch it rules out has no solution: it cuts only branches that fail, and never changes
which solution is found first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from fractions import Fraction

from dra_jupyter.allocator.pools import Pool
from dra_jupyter.model.objects import Device, DeviceID, PoolID

Totals = dict[str, dict[str, Fraction | int]]
Key = tuple[PoolID, str, str]


def room(
    devices: Iterable[tuple[DeviceID, Device, Pool]],
    available: Callable[[Pool], Totals],
    consumed: dict[PoolID, Totals],
) -> int:
    """How many of ``devices`` (distinct, not in use) could at most be added together,
    given each pool's counters ``available`` less those ``consumed`` by this search.

    Two bounds, the smaller wins: each counter alone (the devices that draw on it, as many
    as fit smallest first, and all the others), and each device given to the one counter
    that holds the fewest like it (the sum over the counters of those that fit)."""
    total = 0
    left: dict[Key, Fraction | int] = {}
    draws: dict[Key, list[Fraction | int]] = {}  # every draw on each counter
    given: dict[Key, list[Fraction | int]] = {}  # each device's draw on its tightest one
    unbound = 0
    for _, device, pool in devices:
        total += 1
        uses = _draws(device, pool, available(pool), consumed.get(pool.id, {}), left)
        for key, amount in uses:
            draws.setdefault(key, []).append(amount)
        if not uses:
            unbound += 1
            continue
        key, amount = min(uses, key=lambda use: Fraction(left[use[0]]) / Fraction(use[1]))
        given.setdefault(key, []).append(amount)
    best = unbound + sum(_fitting(left[key], amounts) for key, amounts in given.items())
    for key, amounts in draws.items():
        best = min(best, total - len(amounts) + _fitting(left[key], amounts))
    return best


def _fitting(budget: Fraction | int, amounts: list[Fraction | int]) -> int:
    """How many of ``amounts`` fit in ``budget`` together, at most (smallest first)."""
    count = 0
    for amount in sorted(amounts):
        if amount > budget:
            break
        budget -= amount
        count += 1
    return count


def _draws(
    device: Device,
    pool: Pool,
    available: Totals,
    consumed: Totals,
    left: dict[Key, Fraction | int],
) -> list[tuple[Key, Fraction | int]]:
    """The counters ``device`` draws a positive amount of, among those its pool defines (as
    the search checks them), with that amount; ``left`` learns what each has left."""
    uses: dict[Key, Fraction | int] = {}
    for use in device.consumes_counters:
        counters = available.get(use.counter_set)
        if counters is None:
            continue
        used = consumed.get(use.counter_set, {})
        for name, q in use.counters.items():
            amount = q.whole
            if name not in counters or amount <= 0:
                continue
            key = (pool.id, use.counter_set, name)
            if key not in left:
                left[key] = counters[name] - used.get(name, 0)
            uses[key] = uses.get(key, 0) + amount  # two uses of one counter add up
    return list(uses.items())

"""The ``topology`` strategy: the same search, tried in a better order.

First-fit takes the first devices that fit, which scatters multi-device claims over
PCIe roots and NUMA nodes and carves MIG slices out of whole GPUs. ``topology`` keeps
every rule of the search and changes only the order in which it tries things, so it
finds a valid allocation whenever first-fit does, in the same bounded time:

* nodes: best fit first — the node with the fewest free devices that still has as many
  as the claims need, keeping emptier nodes whole for large claims (ties by name); the
  count needs no selector, so ordering costs little and the search still stops at the
  first node that fits;
* devices of a request for ``count`` devices: grouped by ``pcieRoot`` when some root has
  ``count`` eligible devices, else by ``numaNode``; the smallest group that fits comes
  first (best fit), so the devices of one request share a root or NUMA node whenever
  possible, without the user writing a constraint;
* partitionable devices (MIG): the placement that blocks the fewest other currently
  possible placements first, so small slices go where they keep the large placements
  (a 3g at start 0 or 4 on an H200) open, and slices pack onto GPUs already in use;
* shared devices: the one with the most capacity already consumed first (packing).

Ties keep upstream's order, so the result is deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction

from dra_jupyter.allocator.search import Candidate, RequestData
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.model.objects import DeviceID

LOCALITY_ATTRIBUTES = ("resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode")


def _group_ranks(
    candidates: Sequence[Candidate], attribute: str, count: int
) -> dict[int, int] | None:
    """Rank of each candidate's group (best fit first), or None if no group holds ``count``."""
    groups: dict[object, list[int]] = defaultdict(list)
    for i, cand in enumerate(candidates):
        groups[cand.device.attributes.get(attribute)].append(i)
    if not any(key is not None and len(members) >= count for key, members in groups.items()):
        return None
    order = sorted(
        groups.items(),
        key=lambda kv: (
            kv[0] is None,  # devices without the attribute last
            len(kv[1]) < count,  # groups that can hold the request first
            len(kv[1]) if len(kv[1]) >= count else -len(kv[1]),  # best fit, else biggest
            kv[1][0],  # upstream order
        ),
    )
    return {i: rank for rank, (_key, members) in enumerate(order) for i in members}


def _available(cand: Candidate, state: AllocatedState) -> dict[tuple[str, str], Fraction]:
    """The counters of the candidate's pool, less what allocated devices consume."""
    pool = cand.pool
    left = {
        (cs.name, name): q.value
        for cs in pool.counter_sets.values()
        for name, q in cs.counters.items()
    }
    for slice_ in (*pool.slices, *pool.other_slices):
        for device in slice_.devices:
            if state.consumes_counters(DeviceID(slice_.driver, slice_.pool, device.name)):
                for use in device.consumes_counters:
                    for name, q in use.counters.items():
                        key = (use.counter_set, name)
                        if key in left:
                            left[key] -= q.value
    return left


def _needs(cand: Candidate) -> dict[tuple[str, str], Fraction]:
    return {
        (use.counter_set, name): q.value
        for use in cand.device.consumes_counters
        for name, q in use.counters.items()
    }


def _blocking(candidates: Sequence[Candidate], state: AllocatedState) -> dict[int, int]:
    """For each partitionable candidate: how many other candidates that fit now would no
    longer fit once it is taken (0 for devices without counters)."""
    out = dict.fromkeys(range(len(candidates)), 0)
    available: dict[object, dict[tuple[str, str], Fraction]] = {}
    needs = [_needs(c) for c in candidates]
    for i, cand in enumerate(candidates):
        if not needs[i]:
            continue
        left = available.get(cand.pool.id)
        if left is None:
            left = available[cand.pool.id] = _available(cand, state)
        after = dict(left)
        for key, value in needs[i].items():
            after[key] = after.get(key, Fraction(0)) - value
        for j, other in enumerate(candidates):
            if j == i or other.pool.id != cand.pool.id or not needs[j]:
                continue
            fits_now = all(left.get(k, Fraction(0)) >= v for k, v in needs[j].items())
            fits_after = all(after.get(k, Fraction(0)) >= v for k, v in needs[j].items())
            if fits_now and not fits_after:
                out[i] += 1
    return out


def order_candidates(rd: RequestData, state: AllocatedState) -> list[Candidate]:
    candidates = rd.candidates
    if len(candidates) < 2:
        return candidates
    count = max(rd.num_devices, 1)
    ranks: dict[int, int] = {}
    for attribute in LOCALITY_ATTRIBUTES:
        found = _group_ranks(candidates, attribute, count)
        if found is not None:
            ranks = found
            break
    blocking = _blocking(candidates, state)
    consumed = {
        i: -sum(float(q.value) for q in state.capacity.get(c.id, {}).values())
        for i, c in enumerate(candidates)
    }
    order = sorted(
        range(len(candidates)),
        key=lambda i: (ranks.get(i, 0), blocking[i], consumed[i], i),
    )
    return [candidates[i] for i in order]


def node_order(free: dict[str | None, tuple[bool, int]]) -> list[str | None]:
    """Nodes that can hold every request first, fewest eligible free devices first, then by name."""
    return sorted(free, key=lambda n: (not free[n][0], free[n][1], n or ""))

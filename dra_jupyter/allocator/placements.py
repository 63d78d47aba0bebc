"""What partitionable devices (MIG placements) take of their counter sets, and which other
placements taking one would stop: the counts ``topology`` ranks a MIG claim's candidates by
(:func:`dra_jupyter.allocator.topology.order_candidates`). Pure; floats, as this only
orders candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter

from dra_jupyter.allocator.pools import Pool
from dra_jupyter.allocator.state import AllocatedState
from dra_jupyter.model.objects import Device, DeviceID
from dra_jupyter.model.quantity import Quantity

CounterKey = tuple[str, str]  # (counter set, counter)


class Counters:
    """A pool's counters in one pass: totals, what the devices in use leave, and what each
    of the node's devices needs, by counter set (floats: this only orders candidates).

    Counter sets of one shape share their candidates' blocking counts: two sets with the
    same counters left whose devices draw only on them and take the same of them, in the
    same order (the GPUs of one model, used alike), block the same for a device that takes
    the same of either, so the devices of only one of them are weighed
    (:meth:`blocking`)."""

    def __init__(self, pool: Pool, state: AllocatedState) -> None:
        self.pool = pool
        self._needs: dict[int, dict[CounterKey, float]] = {}  # by id of a device of the pool
        self.totals: dict[CounterKey, float] = {}
        self._keys: dict[str, list[CounterKey]] = {}  # each set's counters, in order
        for cs in pool.counter_sets.values():
            keys = self._keys.setdefault(cs.name, [])
            for name, q in cs.counters.items():
                key = (cs.name, name)
                if key not in self.totals:
                    keys.append(key)
                self.totals[key] = float(q.whole)
        self.left = dict(self.totals)
        if _held_in(pool, state):
            for slice_ in (*pool.slices, *pool.other_slices):
                for device in slice_.devices:
                    if device.consumes_counters and state.consumes_counters(
                        DeviceID(slice_.driver, slice_.pool, device.name)
                    ):
                        for key, value in self.needs(device).items():
                            if key in self.left:
                                self.left[key] -= value
        self._members: dict[str, list[Device]] | None = None
        self._fitting: dict[str, list[dict[CounterKey, float]]] = {}
        self._untouched: dict[str, bool] = {}
        self._shapes: dict[str, int | None] = {}  # by set: the number of its shape
        self._taken: dict[str, list[Mapping[str, Quantity]]] = {}
        self._place: dict[int, int] = {}
        self._mixed: set[str] = set()
        self._known: dict[object, list[tuple[list[Mapping[str, Quantity]], int]]] = {}
        self._blocked: dict[tuple[int, int], int] = {}  # by shape and place in the set

    def needs(self, device: Device) -> dict[CounterKey, float]:
        """What the device needs of each counter, worked out once per device of the pool."""
        found = self._needs.get(id(device))
        if found is None:
            found = self._needs[id(device)] = _needs(device)
        return found

    @property
    def members(self) -> dict[str, list[Device]]:
        """The node's devices that need something of each counter set, in upstream's order."""
        if self._members is None:
            self._index()
            assert self._members is not None
        return self._members

    def _index(self) -> None:
        """:attr:`members` in one pass, with what each member of a set takes of it (as
        published) and its place there, for :meth:`_shape`."""
        members: dict[str, list[Device]] = {}
        taken: dict[str, list[Mapping[str, Quantity]]] = {}
        place: dict[int, int] = {}  # by id of a device drawing on one set: its index there
        mixed: set[str] = set()  # sets with a member that draws on several uses
        for slice_ in self.pool.slices:
            for device in slice_.devices:
                uses = device.consumes_counters
                if len(uses) == 1:
                    use = uses[0]
                    if use.counters:
                        on = members.get(use.counter_set)
                        if on is None:
                            on = members[use.counter_set] = []
                            taken[use.counter_set] = []
                        place[id(device)] = len(on)
                        on.append(device)
                        taken[use.counter_set].append(use.counters)
                elif uses:
                    for set_name in dict.fromkeys(u.counter_set for u in uses if u.counters):
                        members.setdefault(set_name, []).append(device)
                        taken.setdefault(set_name, [])
                        mixed.add(set_name)
        self._members, self._taken, self._place = members, taken, place
        self._mixed = mixed

    def untouched(self, set_name: str) -> bool:
        found = self._untouched.get(set_name)
        if found is None:
            left, totals = self.left, self.totals
            found = self._untouched[set_name] = all(
                left[k] == totals[k] for k in self._keys.get(set_name, ())
            )
        return found

    def whole_free(self) -> Iterable[Device]:
        """Devices that take all of an unused counter set (a whole MIG-capable GPU), one per
        set: the GPU and its 7g placement are one GPU. Only devices drawing on one set, on
        each of its counters above zero, are weighed."""
        full: dict[str, dict[CounterKey, float]] = {}
        for key, value in self.totals.items():
            full.setdefault(key[0], {})[key] = value
        positive = {
            name: {k[1] for k, v in counters.items() if v > 0} for name, counters in full.items()
        }
        unused: dict[str, bool] = {}
        for slice_ in self.pool.slices:
            for device in slice_.devices:
                uses = [use for use in device.consumes_counters if use.counters]
                if not uses or any(use.counter_set != uses[0].counter_set for use in uses):
                    continue
                set_name = uses[0].counter_set
                if not positive.get(set_name, set()).issubset(
                    name for use in uses for name in use.counters
                ):
                    continue
                free = unused.get(set_name)
                if free is None:
                    free = unused[set_name] = self.untouched(set_name)
                if not free:
                    continue
                needs = self.needs(device)
                if all(needs.get(k, 0.0) >= v for k, v in full.get(set_name, {}).items()):
                    unused[set_name] = False  # counted: its other whole devices are not
                    yield device

    def fitting(self, set_name: str) -> list[dict[CounterKey, float]]:
        """What each device of the set that fits now needs."""
        found = self._fitting.get(set_name)
        if found is None:
            left, needs = self.left, self.needs
            found = self._fitting[set_name] = [
                wanted
                for wanted in map(needs, self.members.get(set_name, ()))
                if all(left.get(k, 0.0) >= v for k, v in wanted.items())
            ]
        return found

    def blocking(self, device: Device) -> int:
        """How many devices of the device's counter sets that fit now would no longer fit
        once it is taken (0 for devices without counters), counted once per shape of set
        and place of the device in its set."""
        uses = device.consumes_counters
        shape = self._shape(uses[0].counter_set) if len(uses) == 1 else None
        if shape is None:
            return blocked_by(self.needs(device), self)
        place = self._place.get(id(device))
        if place is None:  # takes nothing of its set
            return blocked_by(self.needs(device), self)
        key = (shape, place)
        found = self._blocked.get(key)
        if found is None:
            found = self._blocked[key] = blocked_by(self.needs(device), self)
        return found

    def _shape(self, set_name: str) -> int | None:
        """The number of the set's shape (:class:`Counters`), the same for sets that block
        alike: the same counters left, and members that draw on it alone and take the same
        of it, in the same order; None when a member has several uses."""
        if set_name in self._shapes:
            return self._shapes[set_name]
        members = self.members
        if set_name in self._mixed or set_name not in members:
            self._shapes[set_name] = None
            return None
        taken = self._taken[set_name]
        keys = self._keys.get(set_name, ())
        left = self.left
        head = (*[k[1] for k in keys], *[left[k] for k in keys])  # names, then what is left
        known = self._known.setdefault(head, [])
        # lists of dicts compared in C: the parser shares equal quantities, so equal shapes
        # compare by identity
        number = next((n for other, n in known if other == taken), None)
        if number is None:
            number = len(self._shapes)
            known.append((taken, number))
        self._shapes[set_name] = number
        return number


def _held_in(pool: Pool, state: AllocatedState) -> bool:
    """Whether a device of the pool may be in use (held whole or shared)."""
    if not state.dedicated and not state.shared:
        return False
    driver, name = pool.id
    return any(d.pool == name and d.driver == driver for d in (*state.dedicated, *state.shared))


def _needs(device: Device) -> dict[CounterKey, float]:
    return {
        (use.counter_set, name): float(q.whole)  # as Fraction.__float__ has it
        for use in device.consumes_counters
        for name, q in use.counters.items()
    }


def blocked_by(needs: dict[CounterKey, float], counters: Counters) -> int:
    """How many devices of the counter sets in ``needs`` that fit now would no longer fit
    once a device that needs them is taken (0 for a device without counters)."""
    left = counters.left
    # what is left once it is taken, of the counters it takes (of another, a device that
    # fits now still does), the scarcest first: where a device is most likely stopped
    after = sorted(
        ((key, left.get(key, 0.0) - need) for key, need in needs.items() if need > 0),
        key=itemgetter(1),
    )
    blocked = 0
    for set_name in {k[0] for k in needs}:
        for other in counters.fitting(set_name):
            for key, rest in after:
                value = other.get(key)
                if value is not None and rest < value:
                    blocked += 1
                    break
    return blocked

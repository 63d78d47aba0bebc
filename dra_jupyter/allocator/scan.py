"""One pass over every device of the inventory, for a bound on what any node could give.

Listing a node's devices for a request (``Allocator._listed``) gathers the node's pools and
checks selectors, capacity and taints device by device; when many nodes turn out to have too
few devices, one pass over all slices is cheaper: :func:`scan` keeps, per pool, the devices
whose class and request selectors hold or fail with a CEL error, sharing results between
devices that publish the same values of what a selector reads. A node lists no more devices
for the request than its pools hold here, so a node (or the whole inventory) whose pools hold
fewer free ones than a request needs cannot serve it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dra_jupyter.allocator.cache import read_values
from dra_jupyter.model.objects import Device, DeviceID, PoolID, ResourceSlice
from dra_jupyter.selectors.fastpath import Reads

Result = bool | str  # a selector's result, or the problem of its CEL runtime error
Test = Callable[[Device, str, str], Result]  # device, driver, pool


@dataclass(frozen=True)
class Inventory:
    """Per pool, the devices whose selectors hold or fail with a CEL error (``errors``)."""

    matching: dict[PoolID, list[DeviceID]]
    errors: bool
    _ids: list[frozenset[DeviceID]] = field(default_factory=list, compare=False, repr=False)

    def ids(self) -> frozenset[DeviceID]:
        """Every device of ``matching`` (made once)."""
        if not self._ids:
            self._ids.append(frozenset(itertools.chain.from_iterable(self.matching.values())))
        return self._ids[0]


def shared_by_values(reads: Reads | None, test: Test) -> Test:
    """``test``, asked once per driver and values of what the selector reads (``reads``;
    every device when the selector has no fast path)."""
    if reads is None:
        return test
    known: dict[tuple[object, ...], Result] = {}
    names = reads.attributes
    plain = not reads.capacity and not reads.allow

    def shared(device: Device, driver: str, pool: str) -> Result:
        if plain:  # what read_values gives, in short: attributes only, none a tuple
            values = tuple(map(device.attributes.get, names))
            kinds = tuple(map(type, values))
            key: tuple[object, ...] = (
                (driver, *values, *kinds)  # flat: hashed faster; a string first, not True
                if tuple not in kinds
                else (True, *read_values(reads, driver, device))
            )
        else:
            key = (True, *read_values(reads, driver, device))
        found = known.get(key)
        if found is None:
            found = known[key] = test(device, driver, pool)
        return found

    return shared


def scan(slices: Sequence[ResourceSlice], tests: Sequence[Test]) -> Inventory:
    """The devices of every device slice for which each of ``tests`` holds, in turn (a
    device stops at its first test that does not hold; a CEL error counts and is noted)."""
    matching: dict[PoolID, list[DeviceID]] = {}
    errors = False
    for slice_ in slices:
        if slice_.shared_counters:
            continue
        driver, pool = slice_.driver, slice_.pool
        found = matching.setdefault(slice_.pool_id, [])
        for device in slice_.devices:
            result: Result = True
            for test in tests:
                result = test(device, driver, pool)
                if result is not True:
                    break
            if result is False:
                continue
            if result is not True:
                errors = True
            found.append(DeviceID(driver, pool, device.name))
    return Inventory(matching, errors)

"""Counting a request's devices pool by pool, for a bound on what any node could give.

Listing a node's devices for a request (``Allocator.listed``) gathers the node's pools and
checks selectors, capacity and taints device by device; when many nodes turn out to have too
few devices, counting pool by pool is cheaper: a :class:`PoolScans` keeps, per pool, the
devices whose class and request selectors hold or fail with a CEL error, sharing results
between devices that publish the same values of what a selector reads. A node lists no more
devices for the request than its pools hold here, so a node (or the whole inventory) whose
pools hold fewer free ones than a request needs cannot serve it.

A pool is scanned only when it is first asked about, so a question about one node reads the
devices of that node's pools only, and a question about the whole inventory can stop as soon
as enough devices are counted (:meth:`PoolScans.pools` gives the pools in a fixed order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from dra_jupyter.allocator.reads import read_values
from dra_jupyter.model.objects import Device, DeviceID, PoolID, ResourceSlice
from dra_jupyter.selectors.fastpath import Reads

Result = bool | str  # a selector's result, or the problem of its CEL runtime error
Test = Callable[[Device, str, str], Result]  # device, driver, pool


@dataclass(frozen=True)
class Scanned:
    """One pool's devices whose selectors hold or fail with a CEL error (``errors``)."""

    pool: PoolID
    ids: frozenset[DeviceID]
    devices: tuple[tuple[DeviceID, Device], ...]
    errors: bool


class PoolScans:
    """Per pool, the devices of one request shape's scan, made pool by pool as pools are
    asked about (:meth:`pool`). ``by_pool``: the device slices of each pool (slices of
    shared counters left out). It keeps results, not the tests that make them: the caller
    gives those (see :class:`Scan`). Safe to share between threads (a pool scanned twice at
    once gives the same answer twice)."""

    def __init__(self, by_pool: Mapping[PoolID, Sequence[ResourceSlice]]) -> None:
        self._by_pool = by_pool
        self._found: dict[PoolID, Scanned] = {}

    def pools(self) -> Iterator[PoolID]:
        """Every pool with device slices, in the order of the slices given."""
        return iter(self._by_pool)

    @property
    def complete(self) -> bool:
        """Whether every pool has been scanned."""
        return len(self._found) >= len(self._by_pool)

    def known(self, pool: PoolID) -> Scanned | None:
        """The pool's scan if it was made, without making it."""
        return self._found.get(pool)

    def pool(self, pool: PoolID, tests: Sequence[Test]) -> Scanned:
        """The devices of the pool for which each of ``tests`` holds, in turn (a device
        stops at its first test that does not hold; a CEL error counts and is noted);
        scanned on first use."""
        found = self._found.get(pool)
        if found is None:
            slices = self._by_pool.get(pool)
            if slices is None:
                return Scanned(pool, frozenset(), (), False)  # no device slices: not kept
            found = self._found[pool] = _scan(pool, slices, tests)
        return found


@dataclass(frozen=True)
class Scan:
    """A :class:`PoolScans` with the tests of one request, and what is free per pool
    (kept by the caller; ``None``: all pools together), counted with the pools' counters
    (``free``) and without them (``rough``)."""

    pool_scans: PoolScans
    tests: tuple[Test, ...]
    free: dict[PoolID | None, int]
    rough: dict[PoolID | None, int]

    def pools(self) -> Iterator[PoolID]:
        return self.pool_scans.pools()

    @property
    def complete(self) -> bool:
        return self.pool_scans.complete

    def pool(self, pool: PoolID) -> Scanned:
        return self.pool_scans.pool(pool, self.tests)


def _scan(pool_id: PoolID, slices: Sequence[ResourceSlice], given: Sequence[Test]) -> Scanned:
    devices: list[tuple[DeviceID, Device]] = []
    errors = False
    for slice_ in slices:
        driver, pool = slice_.driver, slice_.pool
        tests, whole = slice_tests(slice_, given)
        if whole is False:
            continue
        ids, pairs = slice_.device_ids()
        if not tests:  # every device holds: the slice's own IDs, made once per slice
            if len(slices) == 1:
                return Scanned(pool_id, ids, pairs, False)
            devices.extend(pairs)
            continue
        for pair in pairs:
            device = pair[1]
            result: Result = True
            for test in tests:
                result = test(device, driver, pool)
                if result is not True:
                    break
            if result is False:
                continue
            if result is not True:
                errors = True
            devices.append(pair)
    return Scanned(pool_id, frozenset(d for d, _ in devices), tuple(devices), errors)


def slice_tests(slice_: ResourceSlice, given: Sequence[Test]) -> tuple[list[Test], Result]:
    """The tests to ask each device of the slice, in turn, and ``False`` when every device
    of it stops at the first (else ``True``): a test that gives every device of the slice
    one result is asked once (:meth:`SharedTest.for_slice`), and none after it when that
    result is not true."""
    tests: list[Test] = []
    whole: Result = True
    for test in given:
        once = test.for_slice(slice_) if isinstance(test, SharedTest) else None
        if once is None:
            tests.append(test)
        elif once is not True:
            tests.append(_constant(once))
            if len(tests) == 1:
                whole = once  # every device stops here
            break
    return tests, whole


def _constant(result: Result) -> Test:
    def test(device: Device, driver: str, pool: str) -> Result:
        return result

    return test


class SharedTest:
    """``test``, asked once per driver and values of what the selector reads (``reads``;
    every device when the selector has no fast path), and once per slice whose devices all
    publish the same values of the attributes it reads (:meth:`for_slice`)."""

    def __init__(self, reads: Reads | None, test: Test) -> None:
        self._reads = reads
        self._test = test
        self._known: dict[tuple[object, ...], Result] = {}
        self._names = reads.attributes if reads is not None else ()
        self._plain = reads is not None and not reads.capacity and not reads.allow
        self._one = self._names[0] if self._plain and len(self._names) == 1 else None

    def __call__(self, device: Device, driver: str, pool: str) -> Result:
        reads = self._reads
        if reads is None:
            return self._test(device, driver, pool)
        if self._one is not None:  # one attribute, not a tuple: the key below, in short
            value = device.attributes.get(self._one)
            kind = type(value)
            key: tuple[object, ...] = (
                (driver, value, kind)
                if kind is not tuple
                else (True, *read_values(reads, driver, device))
            )
        elif self._plain:  # what read_values gives, in short: attributes only, none a tuple
            values = tuple(map(device.attributes.get, self._names))
            kinds = tuple(map(type, values))
            key = (
                (driver, *values, *kinds)  # flat: hashed faster; a string first, not True
                if tuple not in kinds
                else (True, *read_values(reads, driver, device))
            )
        else:
            key = (True, *read_values(reads, driver, device))
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = self._test(device, driver, pool)
        return found

    def for_slice(self, slice_: ResourceSlice) -> Result | None:
        """The result every device of the slice gets, when the selector reads attributes
        only and the devices agree on all of them (then one device is asked for all); else
        None: ask device by device."""
        devices = slice_.devices
        if not self._plain or not devices:
            return None
        alike, published = slice_.uniform_attributes()  # kept by the slice: computed once
        for name in self._names:
            value = alike.get(name)
            if value is None:
                if name in published:
                    return None  # some devices publish it, not all alike
            elif type(value) is tuple:
                return None
        return self(devices[0], slice_.driver, slice_.pool)


def shared_by_values(reads: Reads | None, test: Test) -> SharedTest:
    """See :class:`SharedTest`."""
    return SharedTest(reads, test)

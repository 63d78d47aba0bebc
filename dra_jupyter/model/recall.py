"""What the parser remembers between objects, so that an inventory's repeated parts are
checked once: names found valid, values parsed from wire dicts seen before
(:class:`Recall`), and the quantities, versions and plain capacities parsed from a text.
Bounded; pure (no I/O). The parser (:mod:`dra_jupyter.model.parse` and its fast path,
:mod:`dra_jupyter.model.parse_fast`) keeps one of each per kind of value."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeGuard, TypeVar

from dra_jupyter.model.attributes import Version
from dra_jupyter.model.objects import DeviceCapacity
from dra_jupyter.model.quantity import Quantity

T = TypeVar("T")

MAX_REMEMBERED = 4096  # names of each rule: the set is emptied when full


# Parsed values, shared: an inventory repeats a few quantities, versions and capacities on
# every device (the counters of 20,000 MIG placements on 1,000 nodes are about 350,000
# quantities of a few dozen values). One immutable object per text keeps memory down and
# the collector's full passes short (they visit every object a process holds). ``typed``:
# the integer 1 and the text "1" are kept apart, and True is never taken for 1.
@functools.lru_cache(maxsize=4096, typed=True)
def quantity(value: str | int) -> Quantity:
    """The quantity written ``value``, one object per text; ValueError if it is none."""
    return Quantity.parse(value)


@functools.lru_cache(maxsize=4096)
def version(text: str) -> Version:
    """The semantic version written ``text``, one object per text; ValueError if it is none."""
    return Version(text)


@functools.lru_cache(maxsize=4096, typed=True)
def plain_capacity(value: str | int) -> DeviceCapacity:
    """A capacity of the quantity ``value`` and no request policy, one object per text."""
    return DeviceCapacity(value=quantity(value))


def remembered_valid(
    name: object, good: set[str], check: Callable[[str], str | None]
) -> TypeGuard[str]:
    """Whether ``name`` is a string that ``check`` finds no problem with; remembered in ``good``."""
    if type(name) is not str:
        return False
    if name in good:
        return True
    if check(name) is not None:
        return False
    if len(good) >= MAX_REMEMBERED:
        good.clear()
    good.add(name)
    return True


_Leaf = type[str] | type[int] | type[bool]
_Entry = tuple[dict[str, dict[str, Any]], tuple[tuple[str, str, _Leaf], ...], T]


class Shelf(Generic[T]):
    """The entries of a :class:`Recall` for one tuple of names, the last found or kept
    first."""

    __slots__ = ("entries", "looking", "misses")

    def __init__(self) -> None:
        self.entries: list[_Entry[T]] = []
        self.misses = 0  # since the last hit
        self.looking = True  # whether to look up the next wire and keep it


REST = 64  # see Recall


class Recall(Generic[T]):
    """Values parsed from wire dicts seen before, found again by comparing the dicts.

    An inventory repeats its capacities, its counters and most attributes on many devices
    (the placements of a MIG profile, the same placement on every GPU). Comparing a wire
    dict with one seen before (``==``, which runs in C) is several times faster than
    checking it field by field, and the value found is shared, which keeps memory and the
    collector's work down (the values are never changed: the objects are frozen).

    A kept wire is a copy, made when it was checked, of a dict of names to ``{kind: leaf}``
    (``{"memory": {"value": "80Gi"}}``, ``{"numa": {"int": 0}}``) whose leaves are str, int
    or bool. A dict equal to it has the same names and kinds, and leaves equal to its
    leaves: a leaf equal to a str is a str, but ``True == 1 == 1.0``, so the types of the
    other leaves are compared too. Entries are found by the names in order, so a value found
    has them in the wire's order. At most ``per_names`` entries a tuple of names and
    ``max_names`` tuples (then all are dropped). Where the wires of some names are all
    different (a GPU's attributes name its UUID), comparing and copying each is wasted:
    after ``per_names`` misses in a row, only every ``REST``-th is looked up and kept.
    """

    def __init__(self, per_names: int = 8, max_names: int = 128) -> None:
        self._per_names = per_names
        self._max_names = max_names
        self._shelves: dict[tuple[str, ...], Shelf[T]] = {}

    def find(self, raw: dict[str, Any]) -> T | None:
        """The value kept for a wire dict equal to ``raw`` (a dict), or None."""
        shelf = self._shelves.get(tuple(raw))
        if shelf is not None and shelf.looking:
            for i, (wire, typed, parsed) in enumerate(shelf.entries):
                if wire == raw and (not typed or _same_types(raw, typed)):
                    shelf.misses = 0
                    if i:  # to the front: the next device is most likely the same again
                        entries = shelf.entries
                        shelf.entries = [entries[i], *entries[:i], *entries[i + 1 :]]
                    return parsed
        return None

    def keep(self, raw: dict[str, dict[str, Any]], parsed: T) -> None:
        """Remember ``parsed`` for ``raw``, which ``find`` did not know and the caller has
        just checked: each value a dict of one str, int or bool leaf."""
        names = tuple(raw)
        shelf = self._shelves.get(names)
        if shelf is None:
            if len(self._shelves) >= self._max_names:
                self._shelves.clear()
            shelf = self._shelves[names] = Shelf()
        shelf.misses += 1
        shelf.looking = shelf.misses <= self._per_names or shelf.misses % REST == 0
        if not shelf.looking:
            return
        wire = {name: dict(wrapped) for name, wrapped in raw.items()}
        typed = tuple(
            (name, kind, type(leaf))
            for name, wrapped in wire.items()
            for kind, leaf in wrapped.items()
            if type(leaf) is not str
        )
        shelf.entries = [(wire, typed, parsed), *shelf.entries[: self._per_names - 1]]


def _same_types(raw: dict[str, Any], typed: tuple[tuple[str, str, _Leaf], ...]) -> bool:
    """Whether the leaves of ``raw`` named in ``typed`` have exactly the types given there."""
    # a loop, not all() of a generator, which costs twice as much here
    for name, kind, leaf_type in typed:  # noqa: SIM110
        if type(raw[name][kind]) is not leaf_type:
            return False
    return True

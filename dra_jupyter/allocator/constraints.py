"""Claim constraints: ``matchAttribute`` and ``distinctAttribute``.

Values compare with their type (a string "1" never equals an int 1, a version
compares by its canonical text, as upstream). A list attribute: with DRAListTypeAttributes
off (the 1.37 default) as upstream's incubating allocator compares it: the first device of
a constraint is taken whatever its value, then ``matchAttribute`` takes no list (and nothing
after one) and ``distinctAttribute`` no list after the first device (a scalar after a list
is distinct from it); with the gate on, a list acts as a set: ``matchAttribute`` keeps the
running intersection non-empty, and ``distinctAttribute`` wants the sets pairwise disjoint.
Unlike upstream 1.36, which keys ``distinctAttribute``'s memory by request name, every
device of a request is remembered, so ``count: 2`` with a distinct constraint really gets
two distinct values.
"""

from __future__ import annotations

from dra_jupyter.model import features
from dra_jupyter.model.attributes import AttributeValue, Version
from dra_jupyter.model.objects import Constraint, Device, DeviceID

Typed = tuple[str, object]
"""An attribute value tagged with its type: ``("string", "pci0000:00")``."""


def _tag(value: bool | int | str | Version) -> Typed:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, Version):
        return ("version", value.text)
    return ("string", value)


def typed_values(value: AttributeValue) -> frozenset[Typed]:
    if isinstance(value, tuple):
        if not features.current().dra_list_type_attributes:
            return frozenset(((LIST, tuple(map(_tag, value))),))  # one value, a list
        return frozenset(_tag(v) for v in value)
    return frozenset((_tag(value),))


LIST = "list"
"""The type of a list value, with DRAListTypeAttributes off: one value that no other equals."""


def _is_list(values: frozenset[Typed]) -> bool:
    return any(kind == LIST for kind, _ in values)


def lookup_attribute(device: Device, device_id: DeviceID, name: str) -> AttributeValue | None:
    """Upstream ``lookupAttribute``: the qualified name, else the bare name of the driver's."""
    value = device.attributes.get(name)
    if value is not None:
        return value
    domain, sep, ident = name.partition("/")
    if not sep or domain != device_id.driver:
        return None
    return device.attributes.get(ident)


class ConstraintState:
    """One constraint of one claim while the search runs; ``add``/``remove`` nest like a stack."""

    __slots__ = ("_stack", "constraint", "current")

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        # match: the running intersection (None before the first device);
        # distinct: the union of the values seen so far.
        self.current: frozenset[Typed] | None = None
        self._stack: list[frozenset[Typed] | None] = []

    def applies(self, request: str, subrequest: str) -> bool:
        names = self.constraint.requests
        if not names:
            return True
        return request in names or (bool(subrequest) and f"{request}/{subrequest}" in names)

    def add(self, values: frozenset[Typed] | None) -> bool:
        """Record a device with these values, or refuse it (``None``: attribute missing)."""
        if values is None or not values:
            return False
        current = self.current
        if current is not None and _is_list(values):
            return False  # gate off: after the first device, no list matches or is distinct
        if self.constraint.match_attribute is not None:
            if current is not None and _is_list(current):
                return False  # gate off: nothing matches a list
            new = values if current is None else current & values
            if not new:
                return False
        else:
            if current is not None and current & values:
                return False
            new = values if current is None else current | values
        self._stack.append(current)
        self.current = new
        return True

    def remove(self) -> None:
        self.current = self._stack.pop()

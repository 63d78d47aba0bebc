"""What a fast selector reads of a device (:class:`~dra_jupyter.selectors.fastpath.Reads`),
as a key: devices with equal keys give a selector the same answer, so its result is
remembered per key (:mod:`.cache`, :mod:`.scan`) instead of per device."""

from __future__ import annotations

from dra_jupyter.model.objects import Device
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors.fastpath import Reads


def _tagged(value: object) -> object:
    """A value with its type, so that ``True`` and ``1`` (equal in Python) stay apart."""
    if isinstance(value, tuple):
        return (tuple, tuple(_tagged(v) for v in value))
    return (type(value), value)


def read_values(reads: Reads, driver: str, device: Device) -> tuple[object, ...]:
    """What a fast selector reads of the device (see :class:`~.fastpath.Reads`)."""
    values: tuple[object, ...] = tuple(map(device.attributes.get, reads.attributes))
    kinds = tuple(map(type, values))
    if tuple in kinds:
        values = tuple(map(_tagged, values))
    capacity = device.capacity
    return (
        driver,
        device.allow_multiple_allocations if reads.allow else None,
        values,
        kinds,
        tuple(_exact(capacity[k].value) if k in capacity else None for k in reads.capacity)
        if reads.capacity
        else (),
    )


def _exact(quantity: Quantity) -> tuple[int, int]:
    """A quantity as its lowest terms: equal exactly when the quantities are equal, and
    hashed many times faster than the quantity (whose hash is its ``Fraction``'s)."""
    value = quantity.value
    return (value.numerator, value.denominator)

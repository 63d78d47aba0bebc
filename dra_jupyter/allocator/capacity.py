"""Consumable capacity (KEP-5075): how much of a device's capacity a request consumes.

A port of upstream ``consumable_capacity.go`` (1.37): a request names amounts per
capacity; an amount left out takes the policy's default or, without one, the whole
capacity; ``validRange`` rounds up to ``min + n*step`` and ``validValues`` to the first
value at least as large; an amount outside the policy makes the device ineligible.
Two amounts are errors that stop the whole allocation instead (:class:`CapacityProblem`),
as upstream's ``errNegativeCapacity`` and ``errCapacityRequestNotRepresentable``: a
negative amount (a request of ``-5`` would add capacity for everyone else), and a request
that a ``validRange`` with a step cannot round within int64 (above 2^63-1, or rounded up
past it), so that an unrepresentable request is refused rather than tried device by device.

Steps are counted as upstream does with the gate ``DRAFractionalCapacityRange``: off (the
1.37 default), on whole numbers (``Quantity.Value()``, which rounds up); on, on
milli-units (:mod:`dra_jupyter.model.features`). A rounded amount prints in the step's
format, as upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from dra_jupyter.model import features
from dra_jupyter.model.limits import INT64_MAX, INT64_MIN
from dra_jupyter.model.objects import Device, DeviceCapacity, RequestPolicy, ValidRange
from dra_jupyter.model.quantity import Quantity

Consumed = dict[str, Quantity]


class CapacityProblem(Exception):  # noqa: N818  # a problem of the input, not a failure
    """A request that stops the allocation wherever the search meets a device with the
    capacity (upstream aborts there): the message says what, the caller names the claim,
    request and device."""


def _consumed_one(name: str, requested: Quantity | None, cap: DeviceCapacity) -> Quantity:
    policy = cap.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return cap.value
    if policy is None:
        return requested
    if policy.valid_range is not None:
        rng = policy.valid_range
        if requested < rng.min:
            return rng.min
        if rng.step is None:
            return requested
        milli = _milli(rng)
        if milli:
            if not _in_milli_range(requested):
                what = f"request {requested} is not a representable milli value"
                raise _unrepresentable(name, what)
        elif requested.value > INT64_MAX:
            raise _unrepresentable(name, f"request {requested} exceeds MaxInt64")
        step, low, want = (_units(q, milli) for q in (rng.step, rng.min, requested))
        n = -(-(want - low) // step) if step else 0
        if step and (milli or low >= 0) and n > _go_quotient(_go_int64(INT64_MAX - low), step):
            passes = "the milli-value range" if milli else "MaxInt64"
            raise _unrepresentable(
                name, f"rounding request {requested} up to the next step passes {passes}"
            )
        total = low + step * n
        return Quantity.from_value(Fraction(total, 1000) if milli else total, rng.step.format)
    for valid in policy.valid_values:
        if requested <= valid:
            return valid
    return requested


def _unrepresentable(name: str, what: str) -> CapacityProblem:
    return CapacityProblem(
        f"capacity {name!r}: the request cannot be represented in the device's range "
        f"arithmetic: {what}"
    )


def _go_int64(value: int) -> int:
    """``value`` as Go's int64 arithmetic leaves it (wrapped)."""
    return (value - INT64_MIN) % 2**64 + INT64_MIN


def _go_quotient(a: int, b: int) -> int:
    """Go's integer division: truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _in_milli_range(q: Quantity) -> bool:
    """Upstream ``safeMilliValue`` succeeds: a whole number of milli-units within int64."""
    milli = q.value * 1000
    return milli.denominator == 1 and INT64_MIN <= milli <= INT64_MAX


def _milli(rng: ValidRange) -> bool:
    """Upstream ``useMilli``: the gate is on and min, max and step are whole milli-units
    within int64 (the step at least 1m)."""
    if not features.current().dra_fractional_capacity_range:
        return False
    for q in (rng.min, rng.max, rng.step):
        if q is not None and not _in_milli_range(q):
            return False
    return rng.step is None or rng.step.value * 1000 >= 1


def _units(q: Quantity, milli: bool) -> int:
    """``MilliValue()`` or ``Value()``: rounded up (away from zero)."""
    return int(Quantity.from_value(q.value * 1000)) if milli else int(q)


def _violates(amount: Quantity, policy: RequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.valid_range is not None:
        rng = policy.valid_range
        if rng.max is not None and amount > rng.max:
            return True
        if rng.step is None:
            return False
        milli = _milli(rng)
        if milli and (amount.value * 1000).denominator != 1:
            return True
        step = _units(rng.step, milli)
        return bool(step) and (_units(amount, milli) - _units(rng.min, milli)) % step != 0
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumed_capacity(requests: Mapping[str, Quantity], device: Device) -> Consumed | None:
    """What the request would consume of each of the device's capacities.

    ``None`` when the device can never serve the request: it lacks a requested
    capacity, an amount breaks the request policy, or exceeds the capacity alone.
    Raises :class:`CapacityProblem` (upstream aborts) for an amount that is negative or
    that a range cannot round within int64, checked for every capacity before any of
    the checks that only rule the device out, as upstream's ``CmpRequestOverCapacity``.
    """
    if any(name not in device.capacity for name in requests):
        return None
    out: Consumed = {}
    for name, cap in device.capacity.items():
        amount = _consumed_one(name, requests.get(name), cap)
        if amount.value < 0:
            raise CapacityProblem(f"capacity {name!r}: capacity value is negative ({amount})")
        out[name] = amount
    for name, cap in device.capacity.items():
        amount = out[name]
        if _violates(amount, cap.request_policy) or amount > cap.value:
            return None
    return out


def fits(device: Device, consumed: Consumed, *in_use: Mapping[str, Quantity] | None) -> bool:
    """Whether ``consumed`` plus everything ``in_use`` stays within each capacity."""
    for name, amount in consumed.items():
        total = amount.value
        for used in in_use:
            if used and name in used:
                total += used[name].value
        if total > device.capacity[name].value.value:
            return False
    return True

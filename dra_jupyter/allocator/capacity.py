"""Consumable capacity (KEP-5075): how much of a device's capacity a request consumes.

A port of upstream ``consumable_capacity.go`` (1.37): a request names amounts per
capacity; an amount left out takes the policy's default or, without one, the whole
capacity; ``validRange`` rounds up to ``min + n*step`` and ``validValues`` to the first
value at least as large; an amount outside the policy makes the device ineligible.

Steps are counted as upstream does with the gate ``DRAFractionalCapacityRange``: off (the
1.37 default), on whole numbers (``Quantity.Value()``, which rounds up); on, on
milli-units (:mod:`dra_jupyter.model.features`). A rounded amount prints in the step's
format, as upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from dra_jupyter.model import features
from dra_jupyter.model.objects import Device, DeviceCapacity, RequestPolicy, ValidRange
from dra_jupyter.model.quantity import Quantity

Consumed = dict[str, Quantity]


def _consumed_one(requested: Quantity | None, cap: DeviceCapacity) -> Quantity:
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
        step, low, want = (_units(q, milli) for q in (rng.step, rng.min, requested))
        n = -(-(want - low) // step) if step else 0
        total = low + step * n
        return Quantity.from_value(Fraction(total, 1000) if milli else total, rng.step.format)
    for valid in policy.valid_values:
        if requested <= valid:
            return valid
    return requested


def _milli(rng: ValidRange) -> bool:
    """Upstream ``useMilli``: the gate is on and min, max and step are whole milli-units
    (the step at least 1m)."""
    if not features.current().dra_fractional_capacity_range:
        return False
    for q in (rng.min, rng.max, rng.step):
        if q is not None and (q.value * 1000).denominator != 1:
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
    """
    if any(name not in device.capacity for name in requests):
        return None
    out: Consumed = {}
    for name, cap in device.capacity.items():
        amount = _consumed_one(requests.get(name), cap)
        if _violates(amount, cap.request_policy) or amount > cap.value:
            return None
        out[name] = amount
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

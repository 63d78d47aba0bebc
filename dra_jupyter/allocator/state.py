"""What allocated claims already hold: upstream's ``AllocatedState``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dra_jupyter.model.objects import DeviceID, ResourceClaim
from dra_jupyter.model.quantity import Quantity


@dataclass
class AllocatedState:
    """Devices held exclusively, and capacity consumed on shared devices.

    Results with ``adminAccess`` hold nothing; results with a ``shareID`` hold only
    their ``consumedCapacity`` of a device that allows multiple allocations.
    """

    dedicated: set[DeviceID] = field(default_factory=set)
    shared: set[DeviceID] = field(default_factory=set)  # devices with at least one share
    capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)
    holders: dict[DeviceID, list[str]] = field(default_factory=dict)  # claim keys, for messages

    def consumes_counters(self, device: DeviceID) -> bool:
        """Whether the device's counters are taken: held whole, or through any share
        (kubernetes/kubernetes#139034, fixed upstream in 1.37)."""
        return device in self.dedicated or device in self.shared

    @classmethod
    def from_claims(cls, claims: Iterable[ResourceClaim]) -> AllocatedState:
        state = cls()
        holders, dedicated = state.holders, state.dedicated
        for claim in claims:
            if claim.allocation is None:
                continue
            key = claim.key
            for result in claim.allocation.results:
                if result.admin_access:
                    continue
                device = result.device
                held = holders.get(device)
                if held is None:
                    holders[device] = [key]
                else:
                    held.append(key)
                if result.share_id is None:
                    dedicated.add(device)
                    continue
                state.shared.add(device)
                if not result.consumed_capacity:
                    continue
                totals = state.capacity.setdefault(device, {})
                for name, q in result.consumed_capacity.items():
                    totals[name] = totals[name] + q if name in totals else q
        return state

"""Metrics for simulated inventories: made up, deterministic, and labelled ``simulated``.

A value is a function of the device, the time and whether the device is held, so two
processes (the server and a kernel) compute the same numbers. A free device idles as the
captured H200 did (35 °C, 0 %, 0.43 % of its memory used by the driver); a held one
works: utilisation 30 to 90 % and memory 30 to 80 % in slow waves, warmer with load.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection

from dra_jupyter.inventory.base import Inventory
from dra_jupyter.metrics.base import DeviceProcess, Sample, device_key
from dra_jupyter.model.quantity import Quantity

# The captured H200 at rest (tests/fixtures/nvidia-h200/nvml.json): 644939776 of
# 150754820096 bytes used, 35 degrees.
IDLE_MEMORY_FRACTION = 644939776 / 150754820096
IDLE_TEMPERATURE = 35.0
UTILIZATION_PERIOD = 47.0  # seconds
MEMORY_PERIOD = 131.0  # seconds


def _phase(device: str) -> float:
    return (zlib.crc32(device.encode()) % 3600) / 3600 * 2 * math.pi


def simulated_sample(device: str, total: int | None, held: bool, now: float) -> Sample:
    """The simulated values of one device at ``now``."""
    phase = _phase(device)
    if held:
        utilization = 60 + 30 * math.sin(2 * math.pi * now / UTILIZATION_PERIOD + phase)
        memory = 0.55 + 0.25 * math.sin(2 * math.pi * now / MEMORY_PERIOD + phase)
        temperature = IDLE_TEMPERATURE + 0.3 * utilization
    else:
        utilization, memory, temperature = 0.0, IDLE_MEMORY_FRACTION, IDLE_TEMPERATURE
    return Sample(
        device=device,
        time=now,
        memory_used=int(total * memory) if total is not None else None,
        memory_total=total,
        utilization=round(utilization, 1),
        temperature=round(temperature, 1),
        simulated=True,
    )


class SimulatedSource:
    """Simulated metrics for every device of a (simulated) inventory."""

    name = "simulated"
    simulated = True
    problem = ""

    def __init__(self, inventory: Inventory) -> None:
        self.totals: dict[str, int | None] = {}
        for s in inventory.slices:
            spec = s.get("spec", {})
            for d in spec.get("devices") or ():
                memory = ((d.get("capacity") or {}).get("memory") or {}).get("value")
                key = device_key(spec["driver"], spec["pool"]["name"], d["name"])
                self.totals[key] = int(Quantity.parse(memory).value) if memory else None

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        return [
            simulated_sample(device, total, device in held, now)
            for device, total in self.totals.items()
        ]

    def processes(self, now: float, since: float = 0.0) -> list[DeviceProcess] | None:
        return None  # no processes are simulated: no GPU signal

    def energy(self) -> dict[str, float] | None:
        return None

    def close(self) -> None:
        pass

"""Which metrics source an inventory gets: :func:`source_for`; :class:`NoSource` where the
devices are not this machine's."""

from __future__ import annotations

from collections.abc import Collection
from types import ModuleType
from typing import TYPE_CHECKING

from dra_jupyter.metrics.base import DeviceProcess, MetricsSource, Sample

if TYPE_CHECKING:
    from dra_jupyter.inventory.base import Inventory


def source_for(inventory: Inventory, nvml: ModuleType | None = None) -> MetricsSource:
    """NVML for an inventory read through NVML, the simulated source for anything else."""
    if inventory.source == "nvml":
        from dra_jupyter.metrics.nvml import NvmlSource  # noqa: PLC0415  # NVML only when asked

        return NvmlSource(inventory, nvml)
    from dra_jupyter.metrics.simulated import SimulatedSource  # noqa: PLC0415

    return SimulatedSource(inventory)


class NoSource:
    """No metrics, and ``problem`` says why: the devices are elsewhere (a cluster's nodes),
    so reading this machine's would pretend."""

    name = "none"
    simulated = False

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        return []

    def processes(self, now: float, since: float = 0.0) -> list[DeviceProcess] | None:
        return None

    def energy(self) -> dict[str, float] | None:
        return None

    def close(self) -> None:
        return None

"""Which metrics source an inventory gets: :func:`source_for`."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from dra_jupyter.metrics.base import MetricsSource

if TYPE_CHECKING:
    from dra_jupyter.inventory.base import Inventory


def source_for(inventory: Inventory, nvml: ModuleType | None = None) -> MetricsSource:
    """NVML for an inventory read through NVML, the simulated source for anything else."""
    if inventory.source == "nvml":
        from dra_jupyter.metrics.nvml import NvmlSource  # noqa: PLC0415  # NVML only when asked

        return NvmlSource(inventory, nvml)
    from dra_jupyter.metrics.simulated import SimulatedSource  # noqa: PLC0415

    return SimulatedSource(inventory)

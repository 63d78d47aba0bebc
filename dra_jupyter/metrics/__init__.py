"""Live device metrics: memory used/total, utilisation and temperature per device.

Two sources with one interface (:class:`~dra_jupyter.metrics.base.MetricsSource`):
:class:`~dra_jupyter.metrics.nvml.NvmlSource` reads NVML on a machine with NVIDIA GPUs,
:class:`~dra_jupyter.metrics.simulated.SimulatedSource` computes values for simulated
inventories (a deterministic function of time and of whether the device is held; every
sample says ``simulated``). :class:`~dra_jupyter.metrics.history.MetricsHistory` keeps
the last samples of each device in a bounded ring buffer;
:class:`~dra_jupyter.metrics.sources.NoSource` reads nothing, where the devices are not
this machine's (the Kubernetes backend). Nothing here runs at import.
"""

from __future__ import annotations

from dra_jupyter.metrics.base import MetricsSource, Sample
from dra_jupyter.metrics.history import MetricsHistory
from dra_jupyter.metrics.sources import NoSource, source_for

__all__ = ["MetricsHistory", "MetricsSource", "NoSource", "Sample", "source_for"]

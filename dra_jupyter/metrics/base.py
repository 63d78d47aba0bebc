"""A metrics sample and the interface of a metrics source."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Sample:
    """What one device reported at one time; ``None`` where the source does not know."""

    device: str  # driver/pool/device, as in dra.devices()
    time: float  # seconds since the epoch
    memory_used: int | None = None  # bytes
    memory_total: int | None = None  # bytes
    utilization: float | None = None  # percent of time a kernel ran (NVML's GPU utilisation)
    temperature: float | None = None  # degrees Celsius
    simulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeviceProcess:
    """A process that holds a context on a device (a GPU, or a MIG device), as the driver
    lists it at one time; ``None`` where the source does not know."""

    device: str  # driver/pool/device, as in dra.devices()
    pid: int  # in the driver's pid namespace (the host's, outside a container)
    time: float  # seconds since the epoch
    kinds: tuple[str, ...] = ("compute",)  # "compute", "graphics", or both
    memory_used: int | None = None  # bytes of device memory it holds
    utilization: float | None = None  # percent of the device's SMs it used, lately
    # what the service's daemon adds (None from NVML itself): whose it is and what is done
    user: str | None = None
    uid: int | None = None
    command: str | None = None
    since: float | None = None  # when the process started, seconds since the epoch
    claim: str | None = None  # the claim it counts under; "none": nobody's
    enforce: dict[str, Any] | None = None  # the daemon's [enforce] about it, if nobody's

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MetricsSource(Protocol):
    """Samples every device it knows; never raises for a device that cannot be read."""

    name: str  # "nvml", "simulated" or "none"
    simulated: bool
    problem: str  # why nothing could be read (empty when fine)

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        """One sample per device it can read. ``held``: the devices held now (keys)."""
        ...

    def processes(self, now: float, since: float = 0.0) -> list[DeviceProcess] | None:
        """The processes on each device, with their memory and utilisation in samples newer
        than ``since``; None where the source cannot tell (simulated, none)."""
        ...

    def energy(self) -> dict[str, float] | None:
        """Each whole GPU's total energy counter, joules; None where not known."""
        ...

    def close(self) -> None: ...


def device_key(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"

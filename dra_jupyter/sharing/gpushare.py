"""One GPU shared by several processes (or pods) on a cluster, in the user's words and in
the driver's, pure (no I/O): ``dra.request(gpu=1, share="mps", threads=25)`` becomes the
opaque config NVIDIA's DRA driver decodes for the claim's request (``GpuConfig``, or
``MigDeviceConfig`` for a MIG partition, ``resource.nvidia.com/v1beta1``; see
``dra-drivers.md`` §1.6 of the reference):

=========================  ==================================================================
keyword                    the driver's field
=========================  ==================================================================
``share="time-slicing"``   ``sharing.strategy: TimeSlicing``: processes take turns on the
                           whole GPU (not on a MIG partition)
``interval="short"``       ``sharing.timeSlicingConfig.interval``: how long each turn is,
                           ``default``, ``short``, ``medium`` or ``long``
``share="mps"``            ``sharing.strategy: MPS``: processes run at the same time through
                           CUDA's Multi-Process Service
``threads=25``             ``sharing.mpsConfig.defaultActiveThreadPercentage``: the percent
                           of the device's compute threads (SMs) each process may use, 1-100
``pinned_memory="10Gi"``   ``sharing.mpsConfig.defaultPinnedDeviceMemoryLimit``: the device
                           memory each process may pin, at most the device's memory
=========================  ==================================================================

``share="20Gi"`` (a quantity) is a different thing: a share of the capacity of a device that
allows several allocations (``capacity.requests`` and the selector :data:`SHAREABLE`, see
:mod:`dra_jupyter.claimspec`).

The driver decodes strictly (a field it does not know fails the node's prepare), so only the
fields above are ever written. Every refusal is one line that names the keyword and what is
allowed; the caller says whose it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_jupyter.errors import InvalidInputError, shown
from dra_jupyter.model.objects import Wire
from dra_jupyter.model.quantity import Quantity

API_VERSION = "resource.nvidia.com/v1beta1"  # NVIDIA's opaque config API
NVIDIA_DRIVER = "gpu.nvidia.com"  # the one driver we write sharing config for
CONFIG_DRIVERS = (NVIDIA_DRIVER,)
GPU_KIND, MIG_KIND = "GpuConfig", "MigDeviceConfig"  # the config of a full GPU, a MIG device

# Our names of the strategies (as written, lowercase) and the driver's.
STRATEGIES = {"time-slicing": "TimeSlicing", "mps": "MPS"}
_SPELLINGS = {"timeslicing": "time-slicing", "timeslice": "time-slicing", "mps": "mps"}
# Our names of time-slice lengths, and the driver's (which it turns into 0, 1, 2, 3).
INTERVALS = {"default": "Default", "short": "Short", "medium": "Medium", "long": "Long"}
SHARING_KEYS = ("interval", "threads", "pinned_memory")  # the limits of a strategy
MEBIBYTE = 2**20  # the driver sets pinned limits in whole MiB, at least one
# CEL (upstream's environment, DRAConsumableCapacity on): a device several claims may hold at
# once; false where a device does not say so. ``share="20Gi"`` carries it, so that a share is
# never given a whole ordinary GPU (a capacity request alone filters, it does not share).
SHAREABLE = "device.allowMultipleAllocations"


@dataclass(frozen=True)
class GpuSharing:
    """How one request's devices are shared: ``strategy`` in our words (``mps``,
    ``time-slicing``) and its limits; ``mig``: the devices are MIG partitions."""

    strategy: str
    mig: bool = False
    interval: str | None = None  # our word: default, short, medium, long
    threads: int | None = None  # percent of the compute threads, 1-100
    pinned_memory: str | None = None  # a canonical quantity ("10Gi")

    @property
    def pinned_bytes(self) -> int | None:
        return None if self.pinned_memory is None else int(Quantity.parse(self.pinned_memory))

    def parameters(self) -> Wire:
        """The opaque parameters, exactly as the driver decodes them."""
        sharing: Wire = {"strategy": STRATEGIES[self.strategy]}
        if self.interval is not None:
            sharing["timeSlicingConfig"] = {"interval": INTERVALS[self.interval]}
        mps: Wire = {}
        if self.threads is not None:
            mps["defaultActiveThreadPercentage"] = self.threads
        if self.pinned_memory is not None:
            mps["defaultPinnedDeviceMemoryLimit"] = self.pinned_memory
        if mps:
            sharing["mpsConfig"] = mps
        return {
            "apiVersion": API_VERSION,
            "kind": MIG_KIND if self.mig else GPU_KIND,
            "sharing": sharing,
        }

    def config(self, requests: list[str]) -> Wire:
        """The claim's ``spec.devices.config`` entry for ``requests`` (names, or
        ``request/subrequest`` of an alternative)."""
        return {
            "requests": list(requests),
            "opaque": {"driver": NVIDIA_DRIVER, "parameters": self.parameters()},
        }


def strategy_name(value: object) -> str | None:
    """Our name of the strategy ``value`` names (``"MPS"``, ``"time_slicing"``,
    ``"TimeSlicing"``), or None where it names none (a quantity, say)."""
    if not isinstance(value, str):
        return None
    word = "".join(c for c in value.lower() if c not in "-_ ")
    return _SPELLINGS.get(word)


def names_a_strategy(value: object) -> bool:
    """Whether ``share=value`` was meant as a way to share rather than a quantity: a word
    (it begins with a letter), right or wrong."""
    return isinstance(value, str) and value.strip()[:1].isalpha()


def _refused(at: str, text: str) -> InvalidInputError:
    return InvalidInputError(f"{at}: {text}" if at else text)


def unknown_strategy(value: object, at: str = "") -> InvalidInputError:
    """``share=`` that is neither a strategy nor a quantity, in one line."""
    return _refused(
        at,
        f"share={shown(value)} is not a way to share a GPU; use share='time-slicing' or "
        "share='mps' (NVIDIA's TimeSlicing, MPS), or a quantity such as share='20Gi' (a part "
        "of a device that allows several allocations)",
    )


def parse_sharing(
    spec: Mapping[str, Any], *, device_class: str, mig: bool, at: str = ""
) -> GpuSharing | None:
    """The sharing of one request's devices (``share=`` a strategy, and its limits), or None
    when it asks for none; InvalidInputError in one line when a keyword does not apply or is
    out of range. ``device_class``: the request's (its driver must be one we write config
    for); ``mig``: its devices are MIG partitions; ``at``: where in the call
    (``alternatives[1]``)."""
    share = spec.get("share")
    strategy = strategy_name(share)
    limits = [k for k in SHARING_KEYS if spec.get(k) is not None]
    if strategy is None:
        if share is not None and names_a_strategy(share):
            raise unknown_strategy(share, at)
        if limits:
            key = limits[0]
            want = "time-slicing" if key == "interval" else "mps"
            raise _refused(
                at,
                f"{key}={shown(spec[key])} is a limit of a shared GPU; give share='{want}' "
                f"with it (now share={shown(share)})",
            )
        return None
    driver = "gpu.nvidia.com" if device_class == "mig.nvidia.com" else device_class
    if driver not in CONFIG_DRIVERS:
        raise _refused(
            at,
            f"share={shown(share)}: sharing config is known only for the driver "
            f"{', '.join(CONFIG_DRIVERS)} (gpu= or mig= on NVIDIA GPUs), not for device class "
            f"{shown(device_class)}; leave share= out, or use a quantity such as share='20Gi'",
        )
    if strategy == "time-slicing" and mig:
        raise _refused(
            at,
            f"share={shown(share)} does not apply to a MIG partition (NVIDIA's driver "
            "time-slices only whole GPUs); use share='mps' with mig=, or gpu=1",
        )
    if strategy == "time-slicing":
        for key in ("threads", "pinned_memory"):
            if spec.get(key) is not None:
                raise _refused(
                    at,
                    f"{key}= is a limit of share='mps', not of share='time-slicing' (whose "
                    "limit is interval=default, short, medium or long)",
                )
        return GpuSharing(strategy, mig, interval=_interval(spec.get("interval"), at))
    if spec.get("interval") is not None:
        raise _refused(
            at,
            "interval= is a limit of share='time-slicing', not of share='mps' (whose "
            "limits are threads=1-100 and pinned_memory=)",
        )
    return GpuSharing(
        strategy,
        mig,
        threads=_threads(spec.get("threads"), at),
        pinned_memory=_pinned(spec.get("pinned_memory"), at),
    )


def _interval(value: object, at: str) -> str | None:
    if value is None:
        return None
    word = value.lower().strip() if isinstance(value, str) else None
    if word not in INTERVALS:
        raise _refused(
            at,
            f"interval={shown(value)} is not a time-slice length; use "
            f"{', '.join(INTERVALS)} (NVIDIA's {', '.join(INTERVALS.values())})",
        )
    return word


def _threads(value: object, at: str) -> int | None:
    """A percentage: 25, "25" or "25%"."""
    if value is None:
        return None
    number: object = value
    if isinstance(value, str):
        text = value.strip().removesuffix("%").strip()
        number = int(text) if text.isdigit() else value
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 100:
        raise _refused(
            at,
            f"threads={shown(value)} must be a whole percentage of the GPU's compute threads "
            "from 1 to 100 (e.g. threads=25)",
        )
    return number


def _pinned(value: object, at: str) -> str | None:
    if value is None:
        return None
    try:
        quantity = Quantity.parse(value) if isinstance(value, str | int) else None
    except (ValueError, TypeError):
        quantity = None
    if quantity is None or isinstance(value, bool | float) or quantity.value < MEBIBYTE:
        raise _refused(
            at,
            f"pinned_memory={shown(value)} must be an amount of device memory of at least "
            "1Mi, such as '10Gi'",
        )
    return str(quantity)


def pinned_memory_problem(sharing: GpuSharing, largest: int, devices: str) -> str | None:
    """Why ``sharing``'s pinned memory limit can never be met by a device whose memory is at
    most ``largest`` bytes (``devices``: which devices, in words), or None."""
    wanted = sharing.pinned_bytes
    if wanted is None or wanted <= largest:
        return None
    most = Quantity.from_value(largest, "BinarySI")
    return (
        f"pinned_memory={shown(sharing.pinned_memory)} is more than the memory of any "
        f"{devices} ({most} at most); give at most {most}"
    )

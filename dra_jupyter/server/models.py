"""The wire contract of the REST API under ``/dra/api/``, typed once.

``specification/dra-rest-api.yml`` is the contract; these are its component schemas, one
TypedDict each, for the server's code. ``tests/server/test_wire_contract.py`` checks them
against the spec field by field (names, required or not, types and enums), and the
server's answers against the spec's schemas; the tests also check that every route of the
extension is described there.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

DeviceState = Literal["free", "held", "shared", "blocked"]
DeviceCount = int | Literal["all"]  # a number of devices, or every device that matches


class DeviceModel(TypedDict):
    """One device of the inventory and who holds it (``GET devices``)."""

    device: str  # driver/pool/device
    kind: str  # gpu, mig, tpu, amdgpu, ...
    model: str
    memory: str  # human units, e.g. 140.4Gi
    mig_profile: str
    node: str
    numa_node: str  # resource.kubernetes.io/numaNode, empty when not published
    pcie_root: str  # resource.kubernetes.io/pcieRoot, empty when not published
    state: DeviceState  # shared: held in shares; blocked: a partition or its whole GPU is held
    holder: str  # "claim (user)", empty when free


class WaiterModel(TypedDict):
    """A request waiting in line for devices (``GET devices``): who, for what, since when."""

    user: str
    kernel_id: str | None
    what: str  # the request in short, e.g. "8 gpu.nvidia.com"
    since: float  # seconds since the epoch


class DevicesResponse(TypedDict):
    inventory: str  # the inventory's description
    simulated: bool
    devices: list[DeviceModel]
    waiting: list[WaiterModel]  # the queue, oldest first (none on Kubernetes)


class ReleasedModel(TypedDict):
    """Why and when a claim was released (``GET claims/{name}`` of a claim released lately)."""

    reason: str  # idle, kernel-shutdown, user, expired, reclaimed, server-stop, limit
    time: float  # seconds since the epoch
    message: str  # the reason in a user's words, e.g. "idle for 40 min"


class ClaimModel(TypedDict):
    """A claim: live (``GET claims``, ``POST claims``), or, for ``GET claims/{name}``, one
    this server released lately (``released``)."""

    name: str
    namespace: str
    user: str
    kernel_id: str | None
    devices: list[str]  # driver/pool/device; none while a Kubernetes claim is pending
    env: dict[str, str]  # CUDA_VISIBLE_DEVICES and friends, for here (Kubernetes: none)
    created: float  # seconds since the epoch
    last_activity: float  # seconds since the epoch
    lease_expires: float | None  # seconds since the epoch
    idle_deadline: float | None  # seconds since the epoch; None: not subject to idle release
    busy: bool  # a cell of its kernel is running: the idle countdown is paused
    released: ReleasedModel | None  # None: live


class ClaimsResponse(TypedDict):
    claims: list[ClaimModel]


class RestartResponse(TypedDict):
    """The answer of ``POST kernels/{id}/restart-with-claims``."""

    kernel_id: str
    env: dict[str, str]  # what the restarted kernel's environment got from its claims
    claims: list[ClaimModel]  # the kernel's claims, now held by the server for it


class ClaimRequest(TypedDict, total=False):
    """The body of ``POST claims``: the keywords of ``dra.request``, plus ``kernel_id``
    (the claim belongs to that kernel of this server) and ``timeout`` (only 0 for now)."""

    gpu: DeviceCount
    tpu: DeviceCount
    mig: str
    count: DeviceCount
    memory: str
    model: str
    selector: str
    share: str
    device_class: str
    same: str
    distinct: str
    alternatives: list[dict[str, object]]
    name: str
    lease: str | float
    timeout: str | float
    kernel_id: str


class ErrorModel(TypedDict):
    """Every 4xx answer (written by jupyter_server's ``APIHandler.write_error``)."""

    message: str
    reason: NotRequired[str | None]


class SampleModel(TypedDict):
    """A device's metrics at one time; null where the source does not know."""

    time: float  # seconds since the epoch
    memory_used: int | None  # bytes
    memory_total: int | None  # bytes
    utilization: float | None  # percent
    temperature: float | None  # degrees Celsius


class HistoryModel(TypedDict):
    """A device's recent samples as columns, oldest first."""

    time: list[float]
    memory_used: list[int | None]
    utilization: list[float | None]
    temperature: list[float | None]


class DeviceMetricsModel(TypedDict):
    device: str  # driver/pool/device
    current: SampleModel | None
    history: HistoryModel


class MetricsResponse(TypedDict):
    """``GET metrics``: current values and a bounded history of every device."""

    source: str  # "nvml", "simulated", or "none" (Kubernetes: the devices are the nodes')
    simulated: bool  # True: the values are made up (a simulated inventory)
    problem: str  # why the source could not be read; empty when fine
    interval: float  # seconds between history samples (0: no history)
    length: int  # most history samples kept per device
    idle_timeout: float  # the server's idle policy, for countdowns
    idle_warning: float
    devices: list[DeviceMetricsModel]

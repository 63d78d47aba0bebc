"""The wire contract of the REST API under ``/dra/api/``, typed once.

``specification/dra-rest-api.yml`` is the contract; these are its component schemas, one
TypedDict each, for the server's code. ``tests/server/test_wire_contract.py`` checks them
against the spec field by field (names, required or not, types and enums), and the
server's answers against the spec's schemas; the tests also check that every route of the
extension is described there.
"""

from __future__ import annotations

import codecs
import json
import sys
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, cast

from dra_jupyter.errors import InvalidInputError, shown
from dra_jupyter.model.limits import MAX_ATTRIBUTE_STRING_LENGTH, MAX_SUBREQUESTS
from dra_jupyter.selectors import MAX_EXPRESSION_LENGTH
from dra_jupyter.types.runs import Phase
from dra_jupyter.types.shapes import ShapeCount

DeviceState = Literal["free", "held", "shared", "blocked", "tainted"]
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
    taints: str  # "key=value:Effect, ...": what took it out of service; empty when none


class WaiterModel(TypedDict):
    """A request waiting in line for devices (``GET devices``): who, for what, since when."""

    user: str
    kernel_id: str | None
    what: str  # the request in short, e.g. "8 gpu.nvidia.com"
    since: float  # seconds since the epoch
    position: int  # its place in the line, 1 first (0: the backend does not say)
    why: str  # why there ("" where the backend does not say)
    holders: list[str]  # the live claims holding devices of the drivers it asks for


# the cluster's devices of one shape, by state (``GET devices`` from a hub's shared view)
ShapeCountModel = ShapeCount


class ClusterCountsModel(TypedDict):
    """What a hub's shared view says of the whole cluster (``GET devices`` where the server
    reads one): its devices counted per shape, or why not."""

    source: str  # the shared view's URL
    shapes: list[ShapeCountModel]
    problem: str  # "": counted; else one line: "cluster device counts unavailable: ..."


class DevicesResponse(TypedDict):
    inventory: str  # the inventory's description
    simulated: bool
    devices: list[DeviceModel]
    waiting: list[WaiterModel]  # the queue, oldest first (none on Kubernetes)
    # from a hub's shared view only: then ``devices`` are those the user's claims hold
    cluster: NotRequired[ClusterCountsModel]


class ReleasedModel(TypedDict):
    """Why and when a claim was released (``GET claims/{name}`` of a claim released lately)."""

    # idle, gpu-idle, kernel-shutdown, user, expired, reclaimed, server-stop, limit, moved
    reason: str
    time: float  # seconds since the epoch
    message: str  # the reason in a user's words, e.g. "idle for 40 min"


class GpuActivityModel(TypedDict):
    """A claim's GPU activity (one definition: dra_jupyter.metrics.activity)."""

    state: Literal["active", "inactive", "idle", "unknown"]  # unknown: no GPU signal
    utilization: float | None  # percent, the highest of the last gpu_window; None: unknown
    since: float | None  # seconds since the epoch: last active (active), quiet since (else)
    text: str  # "GPU busy: 93%", "GPU quiet: 0%", "GPU idle for 12 min", "no GPU signal"


class ClaimModel(TypedDict):
    """A claim: live (``GET claims``, ``POST claims``), or, for ``GET claims/{name}``, one
    this server released lately (``released``)."""

    name: str
    namespace: str
    user: str
    kernel_id: str | None
    run: str | None  # the background run (dra.run on one machine) whose launcher holds it
    devices: list[str]  # driver/pool/device; none while a Kubernetes claim is pending
    env: dict[str, str]  # CUDA_VISIBLE_DEVICES and friends, for here (Kubernetes: none)
    created: float  # seconds since the epoch
    last_activity: float  # seconds since the epoch
    lease_expires: float | None  # seconds since the epoch
    idle_deadline: float | None  # seconds since the epoch; None: not subject to idle release
    busy: bool  # a cell of its kernel is running: the idle countdown is paused
    gpu: GpuActivityModel  # its GPU's activity; state unknown where there is no GPU signal
    released: ReleasedModel | None  # None: live
    in_kernel_env: bool  # its kernel has the devices in its environment (made or restarted)
    used_by: list[str]  # the pods that use it now (Kubernetes: its reservedFor); none here


class JoinedModel(TypedDict):
    """A claim that a kernel of this server joined (``dra.request(join=...)``)."""

    kernel_id: str
    claim: str  # its name, in the server's namespace
    user: str  # who made it; "" where it is gone or not readable
    devices: list[str]  # driver/pool/device; none while it is pending
    used_by: list[str]  # the pods that use it now (its reservedFor), the kernel's among them


class ClaimsResponse(TypedDict):
    claims: list[ClaimModel]
    joined: list[JoinedModel]  # the claims this server's kernels joined: not the caller's
    pushed: bool  # changes come as `changed` events (server/pushes.py): poll slowly


class RestartResponse(TypedDict):
    """The answer of ``POST kernels/{id}/restart-with-claims``."""

    kernel_id: str
    env: dict[str, str]  # what the restarted kernel's environment got from its claims
    claims: list[ClaimModel]  # the kernel's claims, now held by the server for it


RunPhase = Phase  # runstatus.PHASES


class RunModel(TypedDict):
    """A background run as it was when read (``GET runs``): the same on every backend."""

    name: str
    user: str
    phase: RunPhase
    where: str  # "this machine", "namespace team-a"
    launcher: str  # "Job", "Pod", ...; empty on one machine
    command: str  # what it runs, as a shell would say it, cut
    devices: list[str]  # driver/pool/device, the first MAX_RUN_DEVICES
    device_count: int
    processes: int  # processes (one machine) or pods (a Job)
    created: float
    started: float | None
    ended: float | None
    exit_code: int | None  # the first that is not 0, else 0; None while none ended with one
    message: str  # one line: why it is in its phase
    cancellable: bool  # the caller's, and not ended


class RunsResponse(TypedDict):
    runs: list[RunModel]  # oldest first, the newest MAX_RUNS
    more: int  # older runs left out


class RunLogsResponse(TypedDict):
    """``GET runs/{name}/logs``: the last lines of a run's output."""

    name: str
    text: str
    lines: int
    truncated: bool  # earlier output is left out


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


class KernelAsk(TypedDict, total=False):
    """What a kernel of this server asks (``POST kernel-asks/possible``,
    :mod:`dra_jupyter.server.kernelasks`): ``dra.request``'s keywords and the claim's name."""

    request: dict[str, Any]
    name: str


class PossibleModel(TypedDict):
    """The answer to a kernel's ask: ``classes`` (the cluster's DeviceClasses) where it is
    possible; ``never`` where it could never be met."""

    possible: bool
    classes: NotRequired[list[str]]
    never: NotRequired[str]  # why it could never be met, in one line


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


class UsageResponse(TypedDict):
    """``GET usage``: the caller's GPU usage over the window (the lab panel's Usage)."""

    user: str
    since: float  # seconds back from now
    gpu_hours: float
    gpu_seconds: float
    active_gpu_seconds: float
    idle_gpu_seconds: float
    unknown_gpu_seconds: float
    energy_j: float
    idle_share: float | None  # idle over active + idle; None where neither is known
    daily_gpu_hours: list[float]  # each of the window's last days, oldest first (at most 31)


# --- request bodies: types and sizes, checked before any work ------------------------------------

MAX_BODY_BYTES = 256 * 1024  # a request body under /dra/api/ (413 beyond)
MAX_NAME_LENGTH = 253  # a Kubernetes object name (DNS subdomain), a kernel id, a class

# The string fields of a ClaimRequest (and of each of its alternatives), with the most
# characters each may have and why; the selector's limit is in bytes of UTF-8.
STRING_FIELDS: dict[str, tuple[int, str]] = {
    "mig": (MAX_ATTRIBUTE_STRING_LENGTH, "a device attribute's string is at most that"),
    "memory": (64, "a quantity such as '80Gi'"),
    "share": (64, "a quantity such as '20Gi'"),
    "model": (MAX_ATTRIBUTE_STRING_LENGTH, "a device attribute's string is at most that"),
    "selector": (MAX_EXPRESSION_LENGTH, "Kubernetes' limit of a CEL expression"),
    "device_class": (MAX_NAME_LENGTH, "a DeviceClass name"),
    "same": (MAX_NAME_LENGTH, "an attribute name"),
    "distinct": (MAX_NAME_LENGTH, "an attribute name"),
    "name": (MAX_NAME_LENGTH, "a Kubernetes object name"),
    "kernel_id": (MAX_NAME_LENGTH, "a kernel id"),
}
# The other fields are checked by the code that reads them: counts (a number or "all") by
# the claim builder, lease and timeout by dra_jupyter.durations, alternatives here.


_WIDE_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",  # before UTF-16's: it starts with the same two bytes
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


def parse_json_body(raw: bytes, what: str = "") -> object:
    """A request body as JSON (RFC 8259) in UTF-8 (a byte-order mark is skipped), or one
    line of :class:`~dra_jupyter.errors.InvalidInputError` saying what is wrong with it.
    ``NaN``, ``Infinity`` and numbers beyond a 64-bit float (``1e400``) are read as the
    floats they name, so that the field that has one refuses it by name: no field takes a
    number that is not finite (:func:`check_claim_request`, the durations, the counts).
    ``what``: where, before the message (none: the request's body is where)."""
    at = f"{what}: " if what else ""
    remedy = 'send a JSON object in UTF-8, e.g. {"gpu": 1}'
    for bom, encoding in _WIDE_BOMS.items():
        if raw.startswith(bom):
            raise InvalidInputError(
                f"{at}the body is not UTF-8 (it starts with a byte-order mark of "
                f"{encoding}); {remedy}"
            )
    if b"\x00" in raw:  # JSON text has no NUL byte: UTF-16 or UTF-32 without a BOM
        raise InvalidInputError(
            f"{at}the body is not UTF-8 (it has NUL bytes, as UTF-16 or UTF-32 have); {remedy}"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidInputError(
            f"{at}the body is not UTF-8 (byte {err.start} is {raw[err.start]:#04x}); {remedy}"
        ) from None
    if not text.strip():
        raise InvalidInputError(f"{at}the body is empty; {remedy}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        problem = f"{err.msg} at line {err.lineno} column {err.colno}"
    except RecursionError:
        problem = "it nests too deeply"
    except ValueError:  # an integer of more digits than Python converts
        problem = f"a number has more than {sys.get_int_max_str_digits()} digits"
    raise InvalidInputError(f"{at}the body is not JSON ({problem}); {remedy}")


def json_shown(value: object) -> str:
    """A value as its JSON reads (null, true, false), cut as :func:`shown` cuts it."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    return shown(value)


def _check_fields(body: Mapping[str, object], where: str) -> None:
    for key, value in body.items():
        if key not in STRING_FIELDS:
            continue  # unknown keys are refused by the claim builder, by name
        most, why = STRING_FIELDS[key]
        if not isinstance(value, str):
            raise InvalidInputError(f"{where}{key}: expected a string, not {json_shown(value)}")
        size = len(value.encode("utf-8", "surrogatepass")) if key == "selector" else len(value)
        if size > most:
            unit = "bytes" if key == "selector" else "characters"
            raise InvalidInputError(
                f"{where}{key}: at most {most} {unit} ({why}), not {shown(value)}"
            )


def check_claim_request(body: object, what: str = "") -> ClaimRequest:
    """``body`` as a :class:`ClaimRequest` whose fields have the right JSON types and
    bounded sizes, or :class:`~dra_jupyter.errors.InvalidInputError` naming the field:
    cheap checks that come before any work (the claim builder, durations and the allocator
    check the values themselves). ``what``: where, before each message (none: the
    request is where, and a field's name says the rest)."""
    at = f"{what}: " if what else ""
    if not isinstance(body, dict):
        raise InvalidInputError(
            f"{at}the body must be a JSON object of dra.request keywords, "
            f'e.g. {{"gpu": 1}}, not {json_shown(body)}'
        )
    _check_fields(body, at)
    alternatives = body.get("alternatives")
    if "alternatives" in body:
        if not isinstance(alternatives, list):
            raise InvalidInputError(
                f"{at}alternatives: expected a list of objects such as "
                f'[{{"gpu": 2}}, {{"gpu": 1}}], not {json_shown(alternatives)}'
            )
        if len(alternatives) > MAX_SUBREQUESTS:
            raise InvalidInputError(
                f"{at}alternatives: at most {MAX_SUBREQUESTS} (a DRA limit), "
                f"not {len(alternatives)}"
            )
        for i, alternative in enumerate(alternatives):
            if not isinstance(alternative, dict):
                raise InvalidInputError(
                    f"{at}alternatives[{i}]: expected an object such as "
                    f'{{"gpu": 1}}, not {json_shown(alternative)}'
                )
            _check_fields(alternative, f"{at}alternatives[{i}].")
    return cast("ClaimRequest", body)

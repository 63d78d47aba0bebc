"""The service's wire protocol: one JSON object per line, each way (``specification/
service-protocol.md``, ``specification/service-protocol.schema.json``).

A request::

    {"v": 1, "id": 7, "op": "request", "args": {"claim": {...}, "timeout": 0, "lease": 3600}}

its answer, ``ok`` with a ``result`` or not with an ``error`` (the class of
:mod:`dra_jupyter.errors` and a one-line message); a request that waits in line gets
``waiting`` frames of the same ``id`` before its answer::

    {"v": 1, "id": 7, "waiting": {"position": 2, "waited": 1.5, "timeout": 60}}
    {"v": 1, "id": 7, "ok": true, "result": {...}}
    {"v": 1, "id": 8, "ok": false, "error": {"type": "LimitError", "message": "user bob: ..."}}

Both sides bound a frame before reading more of it: :data:`MAX_FRAME` for a request,
:data:`MAX_ANSWER` for an answer. Who the caller is never travels in a frame: the daemon
asks the kernel (``SO_PEERCRED``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from dra_jupyter import errors
from dra_jupyter.errors import DraJupyterError, InvalidInputError, UnavailableError, shown
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import ClaimRecord, DeviceTaint, HealthEvent, Owner

VERSION = 1
MAX_FRAME = 1 << 20  # bytes of one request line, its newline included
MAX_ANSWER = 64 << 20  # bytes of one answer line (every claim of a busy machine)
MAX_ID = 64  # characters of a string request id
OPS = (
    "hello",  # who the daemon says the caller is, and the policy that applies to them
    "inventory",  # the machine's devices
    "request",  # allocate a claim (or wait in line for it)
    "release",  # give a claim back
    "keep",  # record activity on a claim (its idle countdown starts again)
    "activity",  # a kernel's claims were active now, or are busy (a Jupyter server reports)
    "list",  # live claims (the caller's, or every visible one)
    "holders",  # every claim that holds devices (others' hidden unless visible)
    "waiting",  # the requests waiting in line (others' names hidden unless visible)
    "record",  # one live claim, and when a released one ended
    "explain",  # why a claim could or could not be allocated now
    "adopt",  # the caller's process holds a kernel's claims from now on
    "metrics",  # the devices' metrics, sampled by the daemon once for every client
    "usage",  # the usage book's intervals the caller may see
    "notices",  # warnings of reclaim under pressure on the caller's claims
    "health",  # the record of the GPUs the health watcher took out
    "taints",  # the devices' taints (an admin's, the health watcher's)
    "taint",  # an admin takes a device out of use
    "untaint",  # an admin puts it back
)
REASON_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz-")
MAX_REASON = 32

RequestId = int | str | None  # a frame's id (None: the frame's could not be read)


class ProtocolError(InvalidInputError):
    """A frame that breaks this protocol (not JSON, too long, an unknown version, op or
    field): its message starts ``service protocol:``, ``request_id`` is the frame's id where
    one could be read. It travels as an :class:`~dra_jupyter.errors.InvalidInputError`,
    the public class every client knows (:func:`error_to_wire`)."""

    def __init__(self, request_id: RequestId, problem: str) -> None:
        self.request_id = request_id
        super().__init__(f"service protocol: {problem}")


def encode(frame: Wire) -> bytes:
    """One frame: compact JSON and a newline (JSON escapes every newline inside)."""
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


def request_frame(request_id: int, op: str, args: Wire) -> bytes:
    return encode({"v": VERSION, "id": request_id, "op": op, "args": args})


def answer(request_id: RequestId, result: Any) -> bytes:
    return encode({"v": VERSION, "id": request_id, "ok": True, "result": result})


def refusal(request_id: RequestId, error: DraJupyterError) -> bytes:
    return encode({"v": VERSION, "id": request_id, "ok": False, "error": error_to_wire(error)})


def waiting(request_id: RequestId, position: int, waited: float, timeout: float | None) -> bytes:
    return encode(
        {
            "v": VERSION,
            "id": request_id,
            "waiting": {"position": position, "waited": waited, "timeout": timeout},
        }
    )


def parse_request(line: bytes) -> tuple[RequestId, str, Wire]:
    """``(id, op, args)`` of one request line, or :class:`ProtocolError` in one line."""
    try:
        frame = json.loads(line)
    except (ValueError, RecursionError) as err:  # not UTF-8, not JSON, nested too deep
        raise ProtocolError(None, f"the frame is not JSON ({type(err).__name__})") from None
    if not isinstance(frame, dict):
        raise ProtocolError(None, f"the frame is a JSON {type(frame).__name__}, not an object")
    request_id = frame.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        raise ProtocolError(None, f"id is {shown(request_id)}; use an integer or a string")
    if isinstance(request_id, str) and len(request_id) > MAX_ID:
        raise ProtocolError(None, f"id is {shown(request_id)}; use at most {MAX_ID} characters")
    if isinstance(request_id, int) and not -(2**63) <= request_id < 2**63:
        raise ProtocolError(None, "id is out of the 64-bit range")
    version = frame.get("v")
    if version != VERSION or isinstance(version, bool):
        raise ProtocolError(
            request_id, f"protocol version {shown(version)} is not spoken here; use v={VERSION}"
        )
    op = frame.get("op")
    if op not in OPS:
        raise ProtocolError(request_id, f"op {shown(op)} is not known; use one of {', '.join(OPS)}")
    args = frame.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(request_id, f"args is a JSON {type(args).__name__}, not an object")
    extra = frame.keys() - {"v", "id", "op", "args"}
    if extra:
        names = ", ".join(shown(k, 20) for k in sorted(extra)[:3])
        raise ProtocolError(request_id, f"the frame has unknown fields {names}")
    return request_id, op, args


# --- what travels in frames ------------------------------------------------------------------


def record_to_wire(record: ClaimRecord) -> Wire:
    return {
        "name": record.name,
        "namespace": record.namespace,
        "owner": record.owner.to_dict(),
        "spec": record.spec,
        "allocation": record.allocation,
        "created": record.created,
        "last_activity": record.last_activity,
        "lease_expires": record.lease_expires,
    }


def record_from_wire(data: Any) -> ClaimRecord:
    """A claim as the daemon sent it (UnavailableError if it is not one: a daemon of another
    version, or a bug)."""
    try:
        return ClaimRecord(
            name=str(data["name"]),
            namespace=str(data["namespace"]),
            owner=Owner.from_dict(dict(data["owner"])),
            spec=dict(data["spec"]),
            allocation=dict(data["allocation"]),
            created=float(data["created"]),
            last_activity=float(data["last_activity"]),
            lease_expires=None if data["lease_expires"] is None else float(data["lease_expires"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UnavailableError(
            f"service protocol: the daemon sent a claim that is not one ({type(err).__name__}: "
            f"{shown(str(err))}); is it another version of dra-jupyter?"
        ) from err


def inventory_to_wire(inventory: Inventory) -> Wire:
    return asdict(inventory)


def inventory_from_wire(data: Any) -> Inventory:
    try:
        return Inventory(
            name=str(data["name"]),
            description=str(data["description"]),
            slices=tuple(data["slices"]),
            device_classes=tuple(data["device_classes"]),
            simulated=bool(data["simulated"]),
            source=str(data["source"]),
            warnings=tuple(str(w) for w in data.get("warnings", ())),
            taint_rules=tuple(data.get("taint_rules", ())),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UnavailableError(
            f"service protocol: the daemon sent an inventory that is not one ({err!r})"
        ) from err


def health_event_from_wire(data: Any) -> HealthEvent:
    try:
        claims = tuple((str(c["name"]), str(c["user"])) for c in data["claims"])
        fields = ("device", "source", "what", "key", "value", "effect", "meaning")
        text = {f: str(data[f]) for f in fields}
        return HealthEvent(time=float(data["time"]), claims=claims, **text)
    except (KeyError, TypeError, ValueError) as err:
        raise UnavailableError(
            f"service protocol: the daemon sent a health event that is not one ({err!r})"
        ) from err


def taint_from_wire(data: Any) -> DeviceTaint:
    try:
        known = DeviceTaint.__dataclass_fields__
        return DeviceTaint(**{k: v for k, v in data.items() if k in known})
    except (AttributeError, TypeError) as err:
        raise UnavailableError(
            f"service protocol: the daemon sent a taint that is not one ({err!r})"
        ) from err


def error_to_wire(error: DraJupyterError) -> Wire:
    kind = InvalidInputError if isinstance(error, ProtocolError) else type(error)
    return {"type": kind.__name__, "message": str(error)}


def error_from_wire(data: Any) -> DraJupyterError:
    """The error the daemon refused with, as its own class of :mod:`dra_jupyter.errors`."""
    kind = data.get("type") if isinstance(data, dict) else None
    message = data.get("message") if isinstance(data, dict) else None
    text = message if isinstance(message, str) else f"the daemon refused: {shown(data)}"
    cls = errors.outcome_of(kind) if isinstance(kind, str) else UnavailableError
    if cls in (errors.ObjectError, errors.SelectorError):
        cls = InvalidInputError  # their constructors take parts; the message is whole here
    if cls is errors.ClusterError:
        cls = UnavailableError
    return cls(text)

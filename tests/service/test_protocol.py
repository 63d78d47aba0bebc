"""The service's frames: what is accepted, what is refused (one line, the frame's id kept
where it could be read), and what travels in them, both ways."""

from __future__ import annotations

import json

import pytest

from dra_jupyter import errors
from dra_jupyter.inventory import simulated
from dra_jupyter.service import protocol
from dra_jupyter.types import ClaimRecord, Owner


def test_a_request_frame_is_read_back() -> None:
    frame = protocol.request_frame(7, "release", {"name": "alice-1"})
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert protocol.parse_request(frame[:-1]) == (7, "release", {"name": "alice-1"})
    assert protocol.parse_request(b'{"v": 1, "id": "a", "op": "hello"}') == ("a", "hello", {})


@pytest.mark.parametrize(
    ("line", "request_id", "problem"),
    [
        (b"\xff\xfe garbage", None, "the frame is not JSON"),
        (b'{"v": 1, "id": 1, "op": "hel', None, "the frame is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, None, "the frame is not JSON"),
        (b'"hello"', None, "a JSON str, not an object"),
        (b'{"v": 1, "op": "hello"}', None, "id is None"),
        (b'{"v": 1, "id": true, "op": "hello"}', None, "id is True"),
        (b'{"v": 1, "id": 99999999999999999999, "op": "hello"}', None, "64-bit"),
        (b'{"v": 1, "id": "' + b"x" * 65 + b'", "op": "hello"}', None, "at most 64"),
        (b'{"v": 2, "id": 3, "op": "hello"}', 3, "protocol version 2 is not spoken here"),
        (b'{"id": 3, "op": "hello"}', 3, "protocol version None"),
        (b'{"v": 1, "id": 4, "op": "drop"}', 4, "op 'drop' is not known"),
        (b'{"v": 1, "id": 5, "op": "list", "args": []}', 5, "args is a JSON list"),
        (b'{"v": 1, "id": 6, "op": "list", "user": "root"}', 6, "unknown fields 'user'"),
    ],
)
def test_a_bad_frame_is_refused_in_one_line(
    line: bytes, request_id: int | None, problem: str
) -> None:
    with pytest.raises(errors.InvalidInputError) as caught:
        protocol.parse_request(line)
    message = str(caught.value)
    assert message.startswith("service protocol: ") and problem in message
    assert "\n" not in message and len(message) < 300
    assert getattr(caught.value, "request_id") == request_id  # noqa: B009


def test_a_bad_frame_is_a_protocol_error_that_travels_as_invalid_input() -> None:
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.parse_request(b'{"v": 1, "id": 4, "op": "drop"}')
    assert isinstance(caught.value, errors.InvalidInputError)
    assert caught.value.request_id == 4
    wire = json.loads(protocol.refusal(4, caught.value))["error"]
    assert wire == {"type": "InvalidInputError", "message": str(caught.value)}
    assert type(protocol.error_from_wire(wire)) is errors.InvalidInputError


@pytest.mark.parametrize(
    "error",
    [
        errors.LimitError("user bob: limit 2 GPUs (group students), holds 2"),
        errors.ForbiddenError("claim a belongs to another user"),
        errors.BusyError("the devices are busy"),
        errors.NeverPossibleError("never"),
        errors.ClaimNotFoundError("no claim"),
        errors.LedgerError("ledger: full"),
    ],
)
def test_an_error_keeps_its_class_and_message(error: errors.DraJupyterError) -> None:
    refusal = json.loads(protocol.refusal(3, error))
    back = protocol.error_from_wire(refusal["error"])
    assert type(back) is type(error) and str(back) == str(error)


def test_an_error_of_parts_or_of_no_known_class_is_still_one_of_ours() -> None:
    made = errors.ObjectError("ResourceClaim a", "spec", "bad")
    assert type(protocol.error_from_wire(protocol.error_to_wire(made))) is errors.InvalidInputError
    for wire in ({"type": "SystemExit", "message": "x"}, {"type": 3}, "nonsense", None):
        assert isinstance(protocol.error_from_wire(wire), errors.UnavailableError)


def test_records_and_inventories_travel_whole() -> None:
    record = ClaimRecord(
        name="alice-1",
        namespace="default",
        owner=Owner(user="alice", host="box", pid=42, start_time=7, kernel_id="k"),
        spec={"metadata": {"name": "alice-1"}, "spec": {}},
        allocation={"devices": {"results": []}},
        created=1.0,
        last_activity=2.0,
        lease_expires=None,
    )
    wire = json.loads(protocol.answer(1, protocol.record_to_wire(record)))["result"]
    assert protocol.record_from_wire(wire) == record
    inventory = simulated.load("h200-mig")
    wire = json.loads(protocol.encode({"r": protocol.inventory_to_wire(inventory)}))["r"]
    assert protocol.inventory_from_wire(wire) == inventory
    with pytest.raises(errors.UnavailableError, match="a claim that is not one"):
        protocol.record_from_wire({"name": "x"})

"""The claim card in a real kernel: shown while request() waits, then allocated, released."""

from __future__ import annotations

from typing import Any

import pytest

from dra_jupyter.api import Session
from tests.widgets.conftest import WIDGET_MIME, Kernel


def opened(kernel: Kernel, model: str) -> list[dict[str, Any]]:
    return [
        m
        for m in kernel.iopub
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_anywidget_id", "").endswith(model)
    ]


def test_request_shows_a_card_while_waiting_then_allocated(
    kernel: Kernel, session: Session
) -> None:
    everything = session.request(gpu=8, apply_env=False)  # this process holds every GPU
    msg_id = kernel.send("c = dra.request(gpu=1, timeout='10m')")

    def card_shown(m: dict[str, Any]) -> bool:
        return m["msg_type"] == "display_data" and WIDGET_MIME in m["content"]["data"]

    shown = kernel.read_until(card_shown)["content"]["data"][WIDGET_MIME]["model_id"]
    (card_open,) = [m for m in opened(kernel, "ClaimCard") if m["content"]["comm_id"] == shown]
    state = card_open["content"]["data"]["state"]
    assert state["what"] == "gpu=1"
    assert state["timeout"] == 600.0
    assert state["simulated"] is True
    waiting = [{**state, **u} for u in kernel.updates(shown)] or [state]
    assert waiting[-1]["state"] == "waiting"
    assert waiting[-1]["position"] == 1

    everything.release()
    assert kernel.wait(msg_id)["status"] == "ok"
    last = kernel.updates(shown)[-1]
    assert last["state"] == "allocated"
    assert last["name"] == kernel.value("c.name")
    assert [d["device"] for d in last["devices"]] == kernel.value("c._record.device_keys")
    # the claim shows the same card again when displayed
    assert kernel.value("c.card().model_id") == shown
    bundle = kernel.run("c")
    (result,) = [m for m in bundle if m["msg_type"] == "execute_result"]
    assert result["content"]["data"][WIDGET_MIME]["model_id"] == shown
    assert result["content"]["data"]["text/plain"].startswith("<Claim ")


def test_a_wait_that_times_out_leaves_a_failed_card(kernel: Kernel, session: Session) -> None:
    held = session.request(gpu=8, apply_env=False)
    msg_id = kernel.send("dra.request(gpu=1, timeout='1s')")
    reply = kernel.wait(msg_id)
    held.release()
    assert reply["status"] == "error"
    assert reply["ename"] == "BusyError"  # an AllocationError: the devices are held
    (card_open,) = opened(kernel, "ClaimCard")
    updates = kernel.updates(card_open["content"]["comm_id"])
    assert updates[-1]["state"] == "failed"
    assert updates[-1]["message"]


def test_card_states_allocated_then_released_by_message_and_elsewhere(kernel: Kernel) -> None:
    kernel.run("c = dra.request(gpu=1); d = dra.request(gpu=1)")
    assert kernel.value("[c.card().state, d.card().state]") == ["allocated", "allocated"]
    assert kernel.value("c.card().devices[0]['model']") == "NVIDIA H200"
    keep = kernel.value("c.card().model_id")
    other = kernel.value("d.card().model_id")

    kernel.custom(keep, {"type": "release"})  # the Release button without a server
    assert kernel.value("[c.state, c.card().state]") == ["released", "released"]

    kernel.run("dra.release(d.name)")  # released elsewhere: the card learns it on refresh
    assert kernel.value("d.view.card.state") == "allocated"
    kernel.custom(other, {"type": "refresh"})
    assert kernel.value("d.view.card.state") == "released"
    last = kernel.updates(other)[-1]
    assert last["state"] == "released"
    assert set(last) == {"state", "revision"}  # one update: the state and the answer


def test_releasing_a_claim_in_code_updates_its_card_at_once(kernel: Kernel) -> None:
    kernel.run("c = dra.request(gpu=1); card = c.card()")
    comm_id = kernel.value("card.model_id")
    kernel.run("with dra.request(gpu=1) as d:\n    d.card()")  # a context manager's claim
    kernel.run("c.release()")
    assert kernel.updates(comm_id)[-1]["state"] == "released"
    assert kernel.value("d.view.card.state") == "released"


@pytest.mark.pure  # no kernel: that is what it tests
def test_a_claim_outside_a_kernel_is_text(session: Session) -> None:
    claim = session.request(gpu=1, apply_env=False)
    try:
        assert claim._repr_mimebundle_() == {"text/plain": repr(claim)}
        assert claim.view is None  # no widget made outside a kernel
    finally:
        claim.release()


def test_a_request_from_another_thread_shows_no_card(kernel: Kernel, session: Session) -> None:
    held = session.request(gpu=8, apply_env=False)
    try:
        kernel.run(
            "import threading\n"
            "errors = []\n"
            "def wait():\n"
            "    try:\n"
            "        dra.request(gpu=1, timeout='1s')\n"
            "    except dra.AllocationError as err:\n"
            "        errors.append(type(err).__name__)\n"
            "t = threading.Thread(target=wait); t.start(); t.join()"
        )
        assert kernel.value("errors") == ["BusyError"]
        assert opened(kernel, "ClaimCard") == []
    finally:
        held.release()


def test_a_claim_that_waited_in_its_cell_shows_its_card_once(
    kernel: Kernel, session: Session
) -> None:
    """``dra.request(..., timeout=...)`` as a cell's last line (not assigned): the card shown
    while it waited is the claim's card, so the cell's result is text, not a second card;
    displayed from another cell, the claim shows its card again."""
    everything = session.request(gpu=8, apply_env=False)
    msg_id = kernel.send("dra.request(gpu=1, timeout='10m', name='once')")
    kernel.read_until(
        lambda m: m["msg_type"] == "display_data" and WIDGET_MIME in m["content"]["data"]
    )
    start = len(kernel.iopub)
    everything.release()
    assert kernel.wait(msg_id)["status"] == "ok"
    mine = [m for m in kernel.iopub if m["parent_header"].get("msg_id") == msg_id]
    outputs = [m for m in mine if m["msg_type"] in ("display_data", "execute_result")]
    cards = [m for m in outputs if WIDGET_MIME in m["content"]["data"]]
    assert len(cards) == 1 and cards[0]["msg_type"] == "display_data"
    (result,) = [m for m in kernel.iopub[start:] if m["msg_type"] == "execute_result"]
    assert set(result["content"]["data"]) == {"text/plain"}
    assert result["content"]["data"]["text/plain"].startswith("<Claim once")
    again = kernel.run("_")  # the claim, the last cell's result, displayed from this one
    (shown,) = [m for m in again if m["msg_type"] == "execute_result"]
    assert (
        shown["content"]["data"][WIDGET_MIME]["model_id"]
        == cards[0]["content"]["data"][WIDGET_MIME]["model_id"]
    )

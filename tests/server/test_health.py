"""A device of a kernel's claim taken out of service, with a real jupyter_server, a real
kernel and the real ledger: the holder is told once (the ``device_unhealthy`` event, the
server's log), and Move gives the kernel an equivalent device, releases the old claim
(``moved``) and restarts the kernel with the new one's environment."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.outofservice import Told, clock, unhealthy_events
from dra_jupyter.settings import Settings
from dra_jupyter.types import ClaimRecord, DeviceTaint, Owner
from tests.server.conftest import Fetch, eventually, start_extensions
from tests.server.test_kernels import REQUEST, started_kernel
from tests.server.test_rest import extension

KEY = "health.example.com/xid"
REASON = "XID 79: the GPU fell off the bus"
SCHEMA = "https://events.dra-jupyter.dev/dra_jupyter/device_unhealthy/v1"
RELEASED = "https://events.dra-jupyter.dev/dra_jupyter/claim_released/v1"


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"idle_timeout": 3600.0, "check_interval": 0.2, "health_interval": 0.2}


def told(jp_serverapp: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=SCHEMA, listener=listen)
    return seen


async def test_the_holder_is_told_once_and_move_restarts_the_kernel_on_another_device(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    seen = told(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (claim,) = ledger.read_claims()
        [device] = claim.device_keys
        name = device.rsplit("/", 1)[-1]
        ledger.taint(device, KEY, "NoSchedule", REASON, time.time())
        await eventually(lambda: len(seen) == 1)
        [event] = seen
        assert event["message"] == (
            f"{name} of claim {claim.name} was taken out of service by "
            f"{event['tainted_by']}: {REASON} (taint {KEY}, NoSchedule); work on it may "
            "fail, and no new claim gets it; the claim keeps it until moved or released. "
            "Move asks for an equivalent device and "
            "restarts the kernel on it (its variables go); Release gives the claim back"
        )
        assert (event["claim"], event["kernel_id"], event["device"]) == (
            claim.name,
            kernel.id,
            device,
        )
        await app.check_health()
        await app.check_health()
        assert len(seen) == 1  # once

        r = await jp_fetch("dra", "api", "claims", claim.name, "move", method="POST", body="")
        answer = json.loads(r.body)
        assert answer["kernel_id"] == kernel.id
        (moved,) = answer["claims"]
        assert moved["name"] != claim.name
        assert len(moved["devices"]) == 1
        assert moved["devices"] != [device]  # driver/pool/device
        assert [r.reason for r in ledger.releases() if r.name == claim.name] == ["device-moved"]
        cuda = answer["env"]["CUDA_VISIBLE_DEVICES"]
        assert cuda
        await kernel.run_on_shell(
            f"import os; assert os.environ['CUDA_VISIBLE_DEVICES'] == {cuda!r}"
        )


async def test_noexecute_on_simulated_devices_says_when_and_releases_after_the_grace(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    """No NVML, so no health watcher: the toast's event and the server's log give the clock
    time of the release, and the server releases the claim once the grace is over."""
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    seen = told(jp_serverapp)
    gone: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        gone.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=RELEASED, listener=listen)
    assert app.checks.health_watcher is None
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (claim,) = ledger.read_claims()
        [device] = claim.device_keys
        ledger.taint(device, KEY, "NoExecute", "test", time.time())
        await eventually(lambda: len(seen) == 1)
        [event] = seen
        [taint] = ledger.taints()
        assert taint.added is not None
        grace = Settings.from_env().health_grace
        assert event["release_at"] == taint.added + grace
        assert f"the claim will be released at {clock(taint.added + grace)}." in (event["message"])
        assert [c.name for c in ledger.read_claims()] == [claim.name]  # within the grace
        app.checks.grace = 0.0  # the grace is over
        await app.check_health()
        assert ledger.read_claims() == []
        [ended] = [r for r in ledger.releases() if r.name == claim.name]
        assert ended.reason == "device-failed"
        await eventually(lambda: [g["claim"] for g in gone] == [claim.name])
        assert gone[0]["reason"] == "device-failed"


async def printed(kernel: Any, code: str) -> str:
    """What ``code`` prints in the kernel, on stdout."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = await kernel.client.execute_interactive(code, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


async def test_the_kernel_says_it_once_before_its_next_cell(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (claim,) = ledger.read_claims()
        [device] = claim.device_keys
        name = device.rsplit("/", 1)[-1]
        assert await printed(kernel, "print('before')") == "before\n"
        ledger.taint(device, KEY, "NoExecute", REASON, time.time())
        said = await printed(kernel, "print('after')")
        [taint] = ledger.taints()
        assert taint.added is not None
        at = clock(taint.added + Settings.from_env().health_grace)
        assert said == (
            f"dra: {name} of claim {claim.name} was taken out of service by "
            f"{taint.user}: {REASON} (taint {KEY}, NoExecute); it cannot be "
            f"used: save what you can now, the claim will be released at {at}. In "
            "JupyterLab: Move "
            "(an equivalent device, the kernel restarted on it); here: "
            f"dra.release('{claim.name}') and request again\n"
            "after\n"
        )
        assert await printed(kernel, "print('again')") == "again\n"  # once


async def test_move_with_no_equivalent_device_free_changes_nothing(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run("import dra_jupyter as dra; c = dra.request(gpu=8)")
        (claim,) = ledger.read_claims()
        ledger.taint(claim.device_keys[0], KEY, "NoExecute", REASON, time.time())
        with pytest.raises(HTTPClientError) as raised:
            await jp_fetch("dra", "api", "claims", claim.name, "move", method="POST", body="")
        assert raised.value.code == 409
        message = error_message(raised.value)
        assert message.startswith(f"claim {claim.name}: no equivalent device is free now (")
        assert message.endswith("it keeps its devices: release it, or Move again later")
        assert [c.name for c in ledger.read_claims()] == [claim.name]


async def test_move_of_a_claim_of_no_kernel_says_what_to_do(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    r = await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1}))
    name = json.loads(r.body)["name"]
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("dra", "api", "claims", name, "move", method="POST", body="")
    assert raised.value.code == 400
    assert error_message(raised.value) == (
        f"claim {name}: it belongs to no kernel of this server, so none can restart on "
        "another device; release it and request again"
    )


def error_message(error: HTTPClientError) -> str:
    assert error.response is not None
    message: str = json.loads(error.response.body)["message"]
    return message


def record(name: str, *devices: str) -> ClaimRecord:
    results = [dict(zip(("driver", "pool", "device"), d.split("/"), strict=True)) for d in devices]
    return ClaimRecord(
        name=name,
        namespace="default",
        owner=Owner(user="alice", host="h", pid=1, kernel_id="k1"),
        spec={},
        allocation={"devices": {"results": results}},
        created=0.0,
        last_activity=0.0,
    )


def taint(device: str, effect: str, removed: float | None = None) -> DeviceTaint:
    return DeviceTaint(
        device=device, key=KEY, effect=effect, reason="fan", user="bob", added=1.0, removed=removed
    )


def test_only_live_taints_that_take_a_device_out_and_each_once_while_it_lasts() -> None:
    held = [record("c1", "d/p/gpu-0", "d/p/gpu-1"), record("c2", "d/p/gpu-2")]
    taints = [
        taint("d/p/gpu-1", "NoExecute"),
        taint("d/p/gpu-2", "None"),  # marks, takes nothing out
        taint("d/p/gpu-0", "NoSchedule", removed=5.0),  # taken off
        taint("d/p/gpu-9", "NoSchedule"),  # no claim holds it
    ]
    events = unhealthy_events(held, taints, 300.0)
    assert [(e["claim"], e["device"], e["effect"], e["release_at"]) for e in events] == [
        ("c1", "d/p/gpu-1", "NoExecute", 301.0)
    ]
    assert events[0]["message"].startswith(
        "gpu-1 of claim c1 was taken out of service by bob: fan (taint "
        f"{KEY}, NoExecute); it cannot be used: save what you can now, the claim will be "
        f"released at {clock(301.0)}."
    )
    # on a cluster (no grace of ours) the words say what the cluster does
    [cluster] = unhealthy_events(held, taints)
    assert cluster["release_at"] is None
    assert "the cluster evicts the pods that use it." in cluster["message"]
    notices = Told()
    assert notices.new(events) == events
    assert notices.new(events) == []
    assert notices.new([]) == []
    assert notices.new(events) == events  # the taint went and came back: told again


async def test_the_devices_say_at_once_which_are_taken_out(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    """GET devices reads the ledger's taints at every call (another process may have
    tainted a device): a free device taken out reads tainted, a held one keeps its holder
    and says its taint."""
    await start_extensions(jp_serverapp)

    async def rows() -> dict[str, dict[str, Any]]:
        r = await jp_fetch("dra", "api", "devices")
        return {d["device"]: d for d in json.loads(r.body)["devices"]}

    r = await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1}))
    [held] = json.loads(r.body)["devices"]
    before = await rows()
    free = next(k for k, d in before.items() if d["state"] == "free")
    assert (before[held]["taints"], before[free]["taints"]) == ("", "")
    now = time.time()
    ledger.taint(held, KEY, "NoExecute", REASON, now)
    ledger.taint(free, KEY, "NoSchedule", "fan", now)
    after = await rows()
    assert (after[held]["state"], after[held]["taints"]) == ("held", f"{KEY}:NoExecute")
    assert (after[free]["state"], after[free]["taints"]) == ("tainted", f"{KEY}=fan:NoSchedule")

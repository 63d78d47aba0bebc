"""Real ipykernel kernels started by the server's kernel manager own the claims they make."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from dra_jupyter.local.ledger import Ledger
from tests.server.conftest import (
    Events,
    Fetch,
    eventually,
    release_announced,
    start_extensions,
)
from tests.server.test_rest import extension

REQUEST = "import dra_jupyter as dra; c = dra.request(gpu=1)"


@dataclass
class Kernel:
    id: str
    client: Any

    async def run(self, code: str) -> dict[str, Any]:
        reply: dict[str, Any] = await self.client.execute_interactive(
            code, timeout=120, output_hook=lambda msg: None
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return reply

    async def run_on_shell(self, code: str) -> None:
        """Run ``code`` and check its reply on the shell channel only. After a restart the
        client's IOPub subscription may miss the new kernel's first messages (a late
        joiner), which ``run`` waits for; the shell channel queues until reconnected."""
        msg_id = self.client.execute(code)
        for _ in range(100):  # bounded: replies to other requests are skipped
            reply: dict[str, Any] = await self.client.get_shell_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == msg_id:
                assert reply["content"]["status"] == "ok", reply["content"]
                return
        raise AssertionError(f"no reply to {code!r}")


@asynccontextmanager
async def started_kernel(jp_serverapp: Any) -> AsyncIterator[Kernel]:
    """A real ipykernel started through the server's kernel manager (no async fixtures:
    pytest-jupyter runs async tests itself, without pytest-asyncio)."""
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3")
    client = km.get_kernel(kernel_id).client()
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    try:
        yield Kernel(kernel_id, client)
    finally:
        client.stop_channels()
        if kernel_id in km:
            await km.shutdown_kernel(kernel_id, now=True)


async def iopub_of(kernel: Kernel, msg_id: str) -> list[dict[str, Any]]:
    """The IOPub messages the kernel has sent for ``msg_id`` (those queued, drained now)."""
    said: list[dict[str, Any]] = []
    while True:
        try:
            msg = await kernel.client.get_iopub_msg(timeout=1)
        except queue.Empty:
            return said
        if msg["parent_header"].get("msg_id") == msg_id:
            said.append(msg)


async def kernel_claims(jp_fetch: Fetch, kernel_id: str) -> list[dict[str, Any]]:
    r = await jp_fetch("dra", "api", "kernels", kernel_id, "claims")
    claims: list[dict[str, Any]] = json.loads(r.body)["claims"]
    return claims


async def test_a_kernels_claim_belongs_to_it_and_goes_with_it(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel_made_claim_goes_with_it(jp_serverapp, jp_fetch, kernel, ledger, events)


async def kernel_made_claim_goes_with_it(
    jp_serverapp: Any, jp_fetch: Fetch, kernel: Kernel, ledger: Ledger, events: Events
) -> None:
    await kernel.run(REQUEST + "; print(c.name)")
    claims = await kernel_claims(jp_fetch, kernel.id)
    assert len(claims) == 1
    assert claims[0]["kernel_id"] == kernel.id
    assert claims[0]["idle_deadline"] is not None
    name = claims[0]["name"]
    listed = json.loads((await jp_fetch("dra", "api", "claims")).body)["claims"]
    assert [c["name"] for c in listed] == [name]
    # the kernel saw the server's ledger and inventory
    await kernel.run(
        "import os; assert os.environ['DRA_JUPYTER_KERNEL_ID'] == "
        f"{kernel.id!r}; assert os.environ['DRA_JUPYTER_INVENTORY'] == 'h200-8x'; "
        "assert os.environ['DRA_JUPYTER_BACKEND'] == 'local'; "
        "assert os.environ['DRA_JUPYTER_SERVER_ID']; "
        "assert float(os.environ['DRA_JUPYTER_IDLE_TIMEOUT']) == 3600.0"
    )
    await eventually(lambda: any(kind == "claim_allocated" for kind, _ in events))

    kernel.client.stop_channels()
    await jp_serverapp.kernel_manager.shutdown_kernel(kernel.id, now=True)

    def released() -> bool:
        """the claim is released with reason kernel-shutdown, and that is announced"""
        return any(r.name == name for r in ledger.releases()) and release_announced(events, name)

    await eventually(released)
    assert [r.reason for r in ledger.releases() if r.name == name] == ["kernel-shutdown"]
    assert ("claim_released", "kernel-shutdown") in [(k, d.get("reason")) for k, d in events]
    assert ledger.read_claims() == []


async def test_a_check_pass_that_read_a_claim_before_its_release_does_not_announce_it_again(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events, monkeypatch: Any
) -> None:
    """Check passes overlap (the timer's, a cell's end, a deadline's): one read the live
    claims, then the claim was released and that announced, before the pass went on. It
    must not announce the claim again (CI saw claim_allocated and idle_warning after
    claim_released: a notification of a claim that is gone)."""
    app = extension(jp_serverapp)
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        name = record.name
        await eventually(lambda: any(d.get("claim") == name for _, d in events))
        real_call = app.call
        stale: list[Any] = []

        async def released_meanwhile(fn: Any, *args: Any) -> Any:
            result = await real_call(fn, *args)
            if fn == app.service.live_claims and not stale:  # this pass read it live
                stale.append(result)
                await jp_fetch("dra", "api", "claims", name, method="DELETE")
                app.claim_events.emit_releases()
                await eventually(lambda: release_announced(events, name))
            return result

        monkeypatch.setattr(app, "call", released_meanwhile)
        await app.checks.check()
        monkeypatch.setattr(app, "call", real_call)
        assert stale, "the pass read the live claims"
        for _ in range(20):  # the event listeners run as tasks of the loop: let them run
            await asyncio.sleep(0)
        assert [k for k, d in events if d.get("claim") == name] == [
            "claim_allocated",
            "claim_released",
        ]


async def test_a_rest_claim_for_a_kernel_is_released_with_it(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    async with started_kernel(jp_serverapp) as kernel:
        await rest_claim_goes_with_kernel(jp_serverapp, jp_fetch, kernel, ledger)


async def rest_claim_goes_with_kernel(
    jp_serverapp: Any, jp_fetch: Fetch, kernel: Kernel, ledger: Ledger
) -> None:
    r = await jp_fetch(
        "dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1, "kernel_id": kernel.id})
    )
    name = json.loads(r.body)["name"]
    assert [c["name"] for c in await kernel_claims(jp_fetch, kernel.id)] == [name]
    kernel.client.stop_channels()
    await jp_serverapp.kernel_manager.shutdown_kernel(kernel.id, now=True)
    await eventually(lambda: any(r.name == name for r in ledger.releases()))
    assert [r.reason for r in ledger.releases() if r.name == name] == ["kernel-shutdown"]


async def test_restart_with_claims_keeps_them_and_gives_their_environment(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        # CUDA "initialised" before the request: the variable was unset when it started
        await kernel.run("import os; assert 'CUDA_VISIBLE_DEVICES' not in os.environ")
        await kernel.run(REQUEST)
        (before,) = ledger.read_claims()
        assert before.owner.pid != os.getpid()  # held by the kernel's process

        r = await jp_fetch(
            "dra", "api", "kernels", kernel.id, "restart-with-claims", method="POST", body=""
        )
        answer = json.loads(r.body)
        assert answer["kernel_id"] == kernel.id
        (claim,) = answer["claims"]
        assert claim["name"] == before.name
        assert claim["kernel_id"] == kernel.id
        assert answer["env"] == claim["env"]
        assert claim["env"]["CUDA_VISIBLE_DEVICES"]

        # the old process is gone; the restart event and a check pass keep the claim
        await eventually(lambda: app.keeping.get(kernel.id) == 0)
        await app.check()
        (after,) = ledger.read_claims()
        assert after.name == before.name
        assert after.owner.kernel_id == kernel.id
        assert after.owner.pid == os.getpid()  # held by the server for the kernel
        assert not any(r.name == before.name for r in ledger.releases())
        assert [c["name"] for c in await kernel_claims(jp_fetch, kernel.id)] == [before.name]

        # the restarted kernel has the claim's environment from its start
        cuda = claim["env"]["CUDA_VISIBLE_DEVICES"]
        await kernel.run_on_shell(
            f"import os; assert os.environ['CUDA_VISIBLE_DEVICES'] == {cuda!r}"
        )
        # and holds it: a new request adds its devices, its release gives back only its own,
        # and the kept claim's release unsets the variable it came with
        await kernel.run_on_shell(
            "import dra_jupyter as dra; c2 = dra.request(gpu=1); "
            f"assert os.environ['CUDA_VISIBLE_DEVICES'] == {cuda!r} + ',' + "
            "c2.env['CUDA_VISIBLE_DEVICES']; c2.release(); "
            f"assert os.environ['CUDA_VISIBLE_DEVICES'] == {cuda!r}"
        )

        # the kept claim still goes with its kernel
        kernel.client.stop_channels()
        await jp_serverapp.kernel_manager.shutdown_kernel(kernel.id, now=True)
        await eventually(lambda: any(r.name == before.name for r in ledger.releases()))
        assert [r.reason for r in ledger.releases() if r.name == before.name] == ["kernel-shutdown"]


async def test_restart_true_restarts_the_kernel_with_its_new_claims_environment(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    """``dra.request(gpu=1, restart=True)`` in a kernel: the claim is made, then the kernel
    asks its server (on its own IOPub channel) to restart it with its claims, as the
    card's button does: the next cell has the device in its environment from the start."""
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        msg_id = kernel.client.execute(
            "import dra_jupyter as dra; dra.request(gpu=1, name='r1', restart=True)\nprint('never')"
        )
        await eventually(lambda: app.keeping.get(kernel.id) == 0 and bool(ledger.read_claims()))
        (claim,) = ledger.read_claims()
        assert (claim.name, claim.owner.kernel_id) == ("r1", kernel.id)
        assert claim.owner.pid == os.getpid()  # held by the server for the restarted kernel
        await kernel.run_on_shell("import os; assert os.environ['CUDA_VISIBLE_DEVICES']")
        # the asking cell said the kernel restarts, then ended with its kernel: no red
        # KeyboardInterrupt (the restart interrupts it first), no line after the request
        said = await iopub_of(kernel, msg_id)
        assert [m["msg_type"] for m in said if m["msg_type"] in ("error", "stream")] == []
        assert any(m["msg_type"] == "display_data" for m in said), said


async def test_restart_with_claims_of_an_unknown_kernel_is_404(jp_fetch: Fetch) -> None:
    r = await jp_fetch(
        "dra",
        "api",
        "kernels",
        "no-such-kernel",
        "restart-with-claims",
        method="POST",
        body="",
        raise_error=False,
    )
    assert r.code == 404
    assert "not running" in json.loads(r.body)["message"]


async def test_a_plain_restart_releases_the_kernels_claims(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        r = await jp_fetch(
            "dra",
            "api",
            "claims",
            method="POST",
            body=json.dumps({"gpu": 1, "kernel_id": kernel.id}),
        )
        name = json.loads(r.body)["name"]  # held by the server for the kernel
        await (await jp_serverapp.kernel_manager.restart_kernel(kernel.id))
        await eventually(lambda: any(r.name == name for r in ledger.releases()))
        assert [r.reason for r in ledger.releases() if r.name == name] == ["kernel-shutdown"]


async def test_kill_9_of_a_kernel_releases_its_claims(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        assert record.owner.kernel_id == kernel.id
        assert record.owner.pid != os.getpid()
        os.kill(record.owner.pid, signal.SIGKILL)

        def released() -> bool:
            """the killed kernel's claim is released, and that is announced"""
            released = any(r.name == record.name for r in ledger.releases())
            return released and release_announced(events, record.name)

        await eventually(released)
        reasons = [r.reason for r in ledger.releases() if r.name == record.name]
        assert reasons in (["kernel-shutdown"], ["reclaimed"])
        assert ledger.read_claims() == []
        listed = json.loads((await jp_fetch("dra", "api", "claims")).body)["claims"]
        assert listed == []
        assert (("claim_released", reasons[0])) in [(k, d.get("reason")) for k, d in events]

"""Real ipykernel kernels started by the server's kernel manager own the claims they make."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from dra_jupyter.local.ledger import Ledger
from tests.server.conftest import Events, Fetch, eventually, start_extensions

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
        f"{kernel.id!r}; assert os.environ['DRA_JUPYTER_INVENTORY'] == 'h200-8x'"
    )
    await eventually(lambda: any(kind == "claim_allocated" for kind, _ in events))

    kernel.client.stop_channels()
    await jp_serverapp.kernel_manager.shutdown_kernel(kernel.id, now=True)

    def released() -> bool:
        """the claim is released with reason kernel-shutdown"""
        return any(r.name == name for r in ledger.releases())

    await eventually(released)
    assert [r.reason for r in ledger.releases() if r.name == name] == ["kernel-shutdown"]
    assert ("claim_released", "kernel-shutdown") in [(k, d.get("reason")) for k, d in events]
    assert ledger.read_claims() == []


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

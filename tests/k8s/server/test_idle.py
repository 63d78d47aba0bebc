"""Idle release on the Kubernetes backend, with a real kernel: the claim its ``dra.request``
makes is deleted from the cluster once the kernel has executed nothing for idle_timeout,
with an Event on the claim saying so; a cell that runs longer than the timeout keeps it.
Assertions are on the cluster's objects and the server's events, never on durations."""

from __future__ import annotations

import getpass
import json
import os
from typing import Any

import pytest
from kubernetes import client

from tests.k8s.objects import deleted_because, events_of, holder
from tests.k8s.server.conftest import WAIT_TRIES
from tests.server.conftest import Events, eventually, release_announced, start_extensions
from tests.server.test_kernels import REQUEST, Kernel, started_kernel


@pytest.fixture
def dra_config() -> dict[str, Any]:
    # the warning window is the whole timeout: the first pass after the cell warns
    return {"idle_timeout": 2.0, "idle_warning": 2.0, "check_interval": 0.2}


async def printed(kernel: Kernel, code: str) -> str:
    """What ``code`` prints, run in the kernel (it must succeed)."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["header"]["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out.append(msg["content"]["text"])

    reply = await kernel.client.execute_interactive(code, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


async def test_an_idle_kernels_claim_is_deleted_and_a_running_cell_keeps_it(
    jp_serverapp: Any, api: client.ApiClient, namespace: str, server_id: str, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        # One cell makes the claim, runs longer than idle_timeout and checks that the claim
        # is still there, while it runs: a kernel running a cell is busy, never idle.
        meta = json.loads(
            await printed(
                kernel,
                f"{REQUEST}; import json, time; time.sleep(3); "
                "assert c.state == 'pending', c.state; print(json.dumps(c.to_dict()['metadata']))",
            )
        )
        claim = {"metadata": meta}
        name = meta["name"]
        assert meta["labels"] == {
            "dra-jupyter/user": getpass.getuser(),
            "dra-jupyter/kernel": kernel.id,
            "dra-jupyter/server": server_id,
        }
        kernel_pid = jp_serverapp.kernel_manager.get_kernel(kernel.id).provisioner.pid
        assert holder(claim)["pid"] == kernel_pid != os.getpid()

        def deleted() -> bool:
            """the claim is deleted for idleness, and that is announced"""
            return deleted_because(api, namespace, claim, "DraJupyterIdle") and (
                release_announced(events, name)
            )

        await eventually(deleted, tries=WAIT_TRIES)
        (event,) = events_of(api, namespace, name)
        assert event["involvedObject"]["kind"] == "ResourceClaim"
        assert event["source"]["component"] == event["reportingComponent"] == "dra-jupyter"
        assert event["reportingInstance"] == server_id
        assert event["message"] == (
            f"dra-jupyter server {server_id} deleted claim {name}: its kernel {kernel.id} "
            "executed nothing for the idle timeout"
        )
        kinds = [(kind, data.get("reason")) for kind, data in events if data["claim"] == name]
        assert kinds == [
            ("claim_allocated", None),
            ("idle_warning", None),
            ("claim_released", "idle"),
        ]
        await kernel.run("assert c.state == 'released', c.state")

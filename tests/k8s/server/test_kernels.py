"""Real kernels of a server on the Kubernetes backend: the claims they make are deleted
from the cluster when the kernel is killed (SIGKILL) or shut down, each with an Event on
the claim saying why; another user's claim is refused to them."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_jupyter.server.claims import Caller
from tests.k8s.objects import claims_in, deleted_because, holder, names
from tests.k8s.server.conftest import WAIT_TRIES
from tests.server.conftest import Events, eventually, release_announced, start_extensions
from tests.server.test_kernels import REQUEST, started_kernel
from tests.server.test_rest import extension

REFUSED = """
from dra_jupyter.errors import ForbiddenError
try:
    dra.release({name!r})
except ForbiddenError as error:
    refused = str(error)
else:
    raise AssertionError("another user's claim was released")
"""


async def test_a_killed_kernels_claim_is_deleted(
    jp_serverapp: Any, api: client.ApiClient, namespace: str, events: Events
) -> None:
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (claim,) = claims_in(api, namespace)
        name = claim["metadata"]["name"]
        pid = holder(claim)["pid"]
        assert pid == jp_serverapp.kernel_manager.get_kernel(kernel.id).provisioner.pid
        os.kill(pid, signal.SIGKILL)  # jupyter_server's restarter starts it again, same id

        def deleted() -> bool:
            """the killed kernel's claim is deleted, and that is announced"""
            gone = deleted_because(api, namespace, claim, "DraJupyterKernelGone")
            return gone and release_announced(events, name)

        await eventually(deleted, tries=WAIT_TRIES)
        reasons = [d.get("reason") for k, d in events if k == "claim_released"]
        assert reasons == ["kernel-shutdown"]


async def test_a_kernel_may_not_release_another_users_claim_and_its_own_goes_with_it(
    jp_serverapp: Any,
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    server_id: str,
    events: Events,
) -> None:
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})
    async with started_kernel(jp_serverapp) as kernel:
        expected = {
            "DRA_JUPYTER_BACKEND": "kubernetes",
            "DRA_JUPYTER_NAMESPACE": namespace,
            "DRA_JUPYTER_KUBECONFIG": str(kubeconfig),
            "DRA_JUPYTER_SERVER_ID": server_id,
            "DRA_JUPYTER_KERNEL_ID": kernel.id,
        }
        await kernel.run(
            f"import os; assert {{k: os.environ[k] for k in {sorted(expected)}}} == {expected}"
        )
        await kernel.run(REQUEST + "; print(c.name)")
        await kernel.run(REFUSED.format(name=theirs.name))
        await kernel.run(
            f"assert refused == 'claim {theirs.name} belongs to user someone-else; only its "
            "owner can release it', refused"
        )
        (mine,) = [c for c in claims_in(api, namespace) if c["metadata"]["name"] != theirs.name]
        assert mine["metadata"]["labels"]["dra-jupyter/kernel"] == kernel.id

        kernel.client.stop_channels()
        await jp_serverapp.kernel_manager.shutdown_kernel(kernel.id, now=True)

        def deleted() -> bool:
            """the kernel's claim is deleted with it, and that is announced"""
            gone = deleted_because(api, namespace, mine, "DraJupyterKernelGone")
            return gone and release_announced(events, mine["metadata"]["name"])

        await eventually(deleted, tries=WAIT_TRIES)
        assert names(api, namespace) == [theirs.name]  # no kernel's: the server holds it

"""A real ``jupyter server`` on the Kubernetes backend pushes what its watched views hear
to JupyterLab (issue #38, item 5): a claim made or released where the server did not make
it (a kernel's ``dra.request``, the command line, a teammate) comes as a ``changed`` event
on jupyter_server's event stream, the one the lab extension listens to, with no read of
the REST API in between; ``GET /claims`` says ``pushed``, so that the lab polls only
slowly. An event names topics, never a claim."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.server.claim_events import CHANGED
from tests import kernelws
from tests.k8s import testenv
from tests.k8s.kernelserver import DEADLINE, Server, running_server
from tests.k8s.test_backend import session


async def changed(ws: Any, topic: str) -> dict[str, Any]:
    """The next ``changed`` event that names ``topic`` (other events are skipped)."""
    while True:
        raw = await asyncio.wait_for(ws.read_message(), DEADLINE)
        assert raw is not None, "the event stream closed"
        event: dict[str, Any] = json.loads(raw)
        if event.get("schema_id") == CHANGED and topic in event["topics"]:
            return event


async def pushed_changes(server: Server, kubeconfig: Path, namespace: str) -> list[dict[str, Any]]:
    url = server.url.replace("http://", "ws://") + "/api/events/subscribe"
    ws = await kernelws.connect(url, server.token, DEADLINE)
    try:
        other = session(kubeconfig, namespace)  # not through the server: as a kernel would
        await asyncio.to_thread(other.request, gpu=1, name="made-elsewhere")
        made = await changed(ws, "claims")
        await asyncio.to_thread(other.release, "made-elsewhere")
        released = await changed(ws, "claims")
    finally:
        ws.close()
    return [made, released]


def test_a_claim_made_and_released_elsewhere_is_pushed_as_a_changed_event(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    published: SimulatedCluster,
) -> None:
    with running_server(
        cluster, api, namespace, tmp_path, None, idle_timeout=0, check_interval=3600
    ) as server:
        assert server.call("GET", "/dra/api/claims")["pushed"] is True
        events = asyncio.run(pushed_changes(server, kubeconfig, namespace))
        for event in events:
            assert set(event) >= {"schema_id", "topics"}
            assert set(event["topics"]) <= {"claims", "runs", "devices"}
            assert "made-elsewhere" not in json.dumps(event)  # topics only, never a claim

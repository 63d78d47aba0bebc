"""The server's watched views (:mod:`dra_jupyter.kube.views`) stop as it stops: its
extension's shutdown closes its backend (``Backend.close``), and no read after that starts
a view again."""

from __future__ import annotations

import threading
from typing import Any

from dra_jupyter.kube import watching
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.views import CLAIMS
from tests.k8s.fixtures import wait_for
from tests.server.conftest import Fetch
from tests.server.test_rest import body, extension, post


def watch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("watch ")]


async def test_the_server_stops_its_views_as_it_stops(
    jp_fetch: Fetch, jp_serverapp: Any, namespace: str
) -> None:
    made = body(await post(jp_fetch, {"gpu": 1}))
    assert [c["name"] for c in body(await jp_fetch("dra", "api", "claims"))["claims"]] == [
        made["name"]
    ]
    app = extension(jp_serverapp)
    backend = app.service.backend
    assert isinstance(backend, KubernetesBackend)
    assert backend.views.running(CLAIMS) is not None
    assert f"watch resourceclaims in namespace {namespace} (dra-jupyter/user)" in watch_threads()

    await app.stop_extension()  # releases the server's claims, then closes the backend

    assert backend.views.running(CLAIMS) is None
    wait_for("the views' threads to end", lambda: not any(namespace in n for n in watch_threads()))
    assert backend.claims() == []  # listed: no view starts again
    assert watching.running(backend.api, CLAIMS, namespace=namespace) is None
    assert not any(namespace in name for name in watch_threads())

"""What a kernel asks its server (:mod:`dra_jupyter.server.kernelasks`), on a real server
with the simulated inventory: whether a request could be met, answered only to the holder of
the kernels' secret; and where a kernel reaches the server. The kernel's side, on a cluster,
is tests/k8s/test_kernel_requests.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from dra_jupyter.kernel.asking import POSSIBLE_PATH, SECRET_ENV, SECRET_HEADER, SERVER_URL_ENV
from dra_jupyter.server.kernelasks import kernel_ask_env, server_url
from tests.server.conftest import Fetch
from tests.server.test_rest import extension


async def ask(jp_fetch: Fetch, payload: Any, secret: str) -> Any:
    return await jp_fetch(
        *POSSIBLE_PATH.split("/"),
        method="POST",
        body=json.dumps(payload),
        headers={SECRET_HEADER: secret},
        raise_error=False,
    )


async def test_the_server_says_what_is_possible_and_nothing_else(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    secret = extension(jp_serverapp).kernel_secret
    r = await ask(jp_fetch, {"request": {"gpu": 1}, "name": ""}, secret)
    assert r.code == 200, r.body
    said = json.loads(r.body)
    assert said["possible"] is True
    assert said["classes"] and all(isinstance(c, str) for c in said["classes"])
    # never possible, a keyword that is wrong, a body that is no question: "ask yourself"
    payloads: list[Any] = [{"request": {"gpu": 999}}, {"request": {"gpus": 1}}, {"request": 1}, []]
    for payload in payloads:
        r = await ask(jp_fetch, payload, secret)
        assert (r.code, json.loads(r.body)) == (200, {"possible": False}), payload


async def test_only_the_kernels_secret_is_answered(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    """jp_fetch sends the server's token too: that is not enough."""
    for secret in ("", "guessed", extension(jp_serverapp).kernel_secret[:-1]):
        r = await ask(jp_fetch, {"request": {"gpu": 1}}, secret)
        assert r.code == 403, secret


def test_a_kernel_reaches_the_server_on_loopback_where_it_listens_everywhere() -> None:
    def app(**traits: Any) -> Any:
        return SimpleNamespace(
            **{"sock": "", "ip": "", "port": 8888, "base_url": "/", "certfile": "", **traits}
        )

    assert server_url(app(ip="0.0.0.0", base_url="/user/alice/")) == (
        "http://127.0.0.1:8888/user/alice/"
    )
    assert server_url(app(ip="localhost")) == "http://127.0.0.1:8888/"
    assert server_url(app(ip="::1", certfile="c.pem")) == "https://[::1]:8888/"
    assert server_url(app(sock="/run/jupyter.sock")) == ""
    assert kernel_ask_env("", "s") == {}
    assert kernel_ask_env("http://x/", "s") == {SERVER_URL_ENV: "http://x/", SECRET_ENV: "s"}

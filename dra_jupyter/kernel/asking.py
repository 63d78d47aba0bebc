"""A kernel asks its Jupyter server whether a request could be met, instead of reading the
cluster itself: on Kubernetes ``dra.request(gpu=1)`` would otherwise list every
ResourceSlice of the cluster (5 MB at 1,000 nodes) to check a claim that kube-scheduler
allocates later anyway, while the server keeps a watched view of them already
(:mod:`dra_jupyter.kube.views`).

The server (:mod:`dra_jupyter.server.kernelasks`) puts its address and a secret of its own
in the environment of the kernels it starts (:data:`SERVER_URL_ENV`, :data:`SECRET_ENV`):
the secret lets a kernel ask this one question and nothing else, so a notebook that shows
its environment gives away no more than that (the server's token never goes to kernels).

The answer is "possible, with the cluster's DeviceClass names" (the kernel builds and makes
the claim without reading the cluster), "never, because ..." (one line: the kernel refuses
the request with it; a server under a hub's shared view can say so although neither it nor
its kernels may read the cluster's devices), or anything else: no server to ask, no answer,
"cannot say". Then the kernel checks the request itself as it always did, so that a refusal
says why in the same words, from the slices it reads then.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

__all__ = [
    "POSSIBLE_PATH",
    "SECRET_ENV",
    "SECRET_HEADER",
    "SERVER_URL_ENV",
    "ask_server",
]

SERVER_URL_ENV = "DRA_JUPYTER_SERVER_URL"  # the server's own address, with its base URL
SECRET_ENV = "DRA_JUPYTER_ASK_SECRET"  # what the server accepts from its kernels
SECRET_HEADER = "X-DRA-Jupyter-Ask"
POSSIBLE_PATH = "dra/api/kernel-asks/possible"  # relative to the server's base URL
TIMEOUT_S = 20.0  # the server may wait for its first list of the cluster (10 s at most)


NOT_SAID: tuple[list[str] | None, str] = (None, "")
MAX_NEVER = 2000  # characters of a "never" line kept


def ask_server(
    spec: Mapping[str, Any], name: str = "", env: Mapping[str, str] | None = None
) -> tuple[list[str] | None, str]:
    """``(classes, never)``: the cluster's DeviceClass names when this kernel's server says
    the request ``spec`` (``dra.request``'s keywords, named ``name``) could be met on the
    cluster's idle devices; else None and the one line that says why it could never be
    met where the server says so, else "" (see the module: the caller checks it itself)."""
    env = os.environ if env is None else env
    url, secret = env.get(SERVER_URL_ENV, ""), env.get(SECRET_ENV, "")
    if not url.startswith(("http://", "https://")) or not secret:
        return NOT_SAID
    try:
        body = json.dumps({"request": dict(spec), "name": name}, allow_nan=False).encode()
    except (TypeError, ValueError):  # a keyword no JSON can carry: the kernel checks it
        return NOT_SAID
    request = urllib.request.Request(
        url.rstrip("/") + "/" + POSSIBLE_PATH,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", SECRET_HEADER: secret},
    )
    # the server is this machine's: no proxy of the environment stands between
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=TIMEOUT_S) as answer:
            said = json.loads(answer.read())
    except (OSError, ValueError, urllib.error.HTTPError):
        return NOT_SAID
    if not isinstance(said, dict):
        return NOT_SAID
    if said.get("possible") is not True:
        never = said.get("never")
        line = " ".join(never.split())[:MAX_NEVER] if isinstance(never, str) else ""
        return None, line
    classes = said.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return NOT_SAID
    return classes, ""

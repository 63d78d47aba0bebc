"""A kernel asks its Jupyter server whether a request could be met, instead of reading the
cluster itself: on Kubernetes ``dra.request(gpu=1)`` would otherwise list every
ResourceSlice of the cluster (5 MB at 1,000 nodes) to check a claim that kube-scheduler
allocates later anyway, while the server keeps a watched view of them already
(:mod:`dra_jupyter.kube.views`).

The server (:mod:`dra_jupyter.server.kernelasks`) puts its address and a secret of its own
in the environment of the kernels it starts (:data:`SERVER_URL_ENV`, :data:`SECRET_ENV`):
the secret lets a kernel ask this one question and nothing else, so a notebook that shows
its environment gives away no more than that (the server's token never goes to kernels).

The answer is one bit and the cluster's DeviceClass names: "possible, with these classes"
(the kernel builds and makes the claim without reading the cluster), or anything else: no
server to ask, no answer, "not possible", "cannot say". Then the kernel checks the
request itself as it always did, so that a refusal says why in the same words, from the
slices it reads then: the cluster is read only where a request is refused.
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
    "classes_if_possible",
]

SERVER_URL_ENV = "DRA_JUPYTER_SERVER_URL"  # the server's own address, with its base URL
SECRET_ENV = "DRA_JUPYTER_ASK_SECRET"  # what the server accepts from its kernels
SECRET_HEADER = "X-DRA-Jupyter-Ask"
POSSIBLE_PATH = "dra/api/kernel-asks/possible"  # relative to the server's base URL
TIMEOUT_S = 20.0  # the server may wait for its first list of the cluster (10 s at most)


def classes_if_possible(
    spec: Mapping[str, Any], name: str = "", env: Mapping[str, str] | None = None
) -> list[str] | None:
    """The cluster's DeviceClass names when this kernel's server says the request ``spec``
    (``dra.request``'s keywords, named ``name``) could be met on the cluster's idle
    devices; None in every other case (see the module): the caller checks it itself."""
    env = os.environ if env is None else env
    url, secret = env.get(SERVER_URL_ENV, ""), env.get(SECRET_ENV, "")
    if not url.startswith(("http://", "https://")) or not secret:
        return None
    try:
        body = json.dumps({"request": dict(spec), "name": name}, allow_nan=False).encode()
    except (TypeError, ValueError):  # a keyword no JSON can carry: the kernel checks it
        return None
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
        return None
    if not isinstance(said, dict) or said.get("possible") is not True:
        return None
    classes = said.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return None
    return classes

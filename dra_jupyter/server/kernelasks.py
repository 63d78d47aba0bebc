"""What this server's kernels ask it (:mod:`dra_jupyter.kernel.asking`): whether a request
could be met on the cluster's idle devices, answered from the server's watched views of the
cluster (:mod:`dra_jupyter.kube.views`), so that a kernel's ``dra.request`` on Kubernetes
reads no ResourceSlice where the request is possible.

``POST /dra/api/kernel-asks/possible`` (``specification/dra-rest-api.yml``) with
``{"request": {...}, "name": "..."}``
(``dra.request``'s keywords) answers ``{"possible": true, "classes": [...]}`` (the cluster's
DeviceClass names, which the kernel builds the claim with), ``{"possible": false, "never":
"..."}`` where it could never be met (the one line that says why: the kernel refuses the
request with it), or ``{"possible": false}`` for every other case (a keyword that is wrong,
the cluster not readable): the kernel then checks the request itself. A server under a
hub's shared view asks the view (it reads none of the cluster's devices itself). It
answers only a request that carries the secret the server gave its kernels
(:data:`~dra_jupyter.kernel.asking.SECRET_HEADER`; anything else is a 403) and changes
nothing: no claim is made or read.

Only the Kubernetes backend's kernels are told of it (:func:`kernel_ask_env`): elsewhere a
request is allocated at once by the backend itself, which checks it then.
"""

from __future__ import annotations

import hmac
import json
import secrets
from typing import Any, cast

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from dra_jupyter.kernel.asking import POSSIBLE_PATH, SECRET_ENV, SECRET_HEADER, SERVER_URL_ENV
from dra_jupyter.server.models import MAX_BODY_BYTES, PossibleModel

__all__ = ["PossibleHandler", "kernel_ask_env", "new_secret", "server_url"]

ROUTE = "/" + POSSIBLE_PATH
WILDCARD = ("", "0.0.0.0", "::", "*", "localhost")  # what the server listens on


def new_secret() -> str:
    """A secret for this server's kernels (one per server process)."""
    return secrets.token_urlsafe(32)


def server_url(serverapp: Any) -> str:
    """Where a kernel on this machine reaches the server: its port and base URL on the
    loopback address where it listens on every address (or on localhost); "" where it
    listens on a Unix socket."""
    if getattr(serverapp, "sock", ""):
        return ""
    ip = str(serverapp.ip or "")
    host = "127.0.0.1" if ip in WILDCARD else (f"[{ip}]" if ":" in ip else ip)
    scheme = "https" if getattr(serverapp, "certfile", "") else "http"
    base = str(serverapp.base_url or "/")
    return f"{scheme}://{host}:{serverapp.port}{base}"


def kernel_ask_env(url: str, secret: str) -> dict[str, str]:
    """What a kernel needs to ask (none where the server has no address to give)."""
    return {SERVER_URL_ENV: url, SECRET_ENV: secret} if url else {}


class PossibleHandler(ExtensionHandlerMixin, APIHandler):
    """``POST`` the question (see the module). Authenticated by the kernels' secret, not by
    jupyter_server's identity: the kernel has no token of the server's."""

    def check_xsrf_cookie(self) -> None:
        """No cookie: the secret in a header of our own (which no form of another site can
        send) is the proof, checked in :meth:`post` before anything."""

    @allow_unauthenticated
    async def post(self) -> None:
        given = self.request.headers.get(SECRET_HEADER, "")
        secret = str(getattr(self.extensionapp, "kernel_secret", ""))
        if not secret or not hmac.compare_digest(given.encode(), secret.encode()):
            raise web.HTTPError(403, "not a kernel of this server")
        if len(self.request.body) > MAX_BODY_BYTES:
            raise web.HTTPError(413, reason="body too large")
        try:
            body = json.loads(self.request.body)
        except ValueError:
            body = None
        request = body.get("request") if isinstance(body, dict) else None
        name = body.get("name", "") if isinstance(body, dict) else None
        if not isinstance(request, dict) or not isinstance(name, str):
            self.finish(json.dumps(PossibleModel(possible=False)))
            return
        app = cast(Any, self.extensionapp)
        classes, never = await app.read(app.service.possible, request, name)
        if classes is not None:
            answer = PossibleModel(possible=True, classes=list(classes))
        else:
            answer = (
                PossibleModel(possible=False, never=never)
                if never
                else PossibleModel(possible=False)
            )
        self.finish(json.dumps(answer))

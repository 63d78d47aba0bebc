"""The hub's one view of the cluster's devices, as a JupyterHub service: ``python -m
dra_jupyter.hub.sharedview``, started and stopped by the hub (a hub-managed service:
:func:`shared_view_service` makes its entry of ``c.JupyterHub.services``).

It keeps the cluster's ResourceSlices, DeviceClasses, DeviceTaintRules and every
namespace's claims by watching them (:class:`~dra_jupyter.kube.sharedview.ClusterCounts`,
on the hub's service account: the cluster-wide reads of deploy/hub-rbac.yaml) and answers
``GET <prefix>api/devices`` with, for the caller, the cluster's devices counted per shape
(free, held, shared, blocked, tainted) and the rows of the devices the caller's claims hold,
``POST <prefix>api/possible`` (a kernel's question, passed on by its server: whether a
request could be met on the cluster's idle devices, :func:`dra_jupyter.api.asked.asked`),
and ``GET <prefix>api/choices?namespace=...`` (the hub's spawn form: every choice counted
with our allocator, :func:`dra_jupyter.hub.choices.choices`, and the users of the
namespace's shared claims; :mod:`dra_jupyter.hub.formview` reads it), each made again only
when a watch saw a change, and ``POST <prefix>api/explain`` (why a spawn's claim waits, as
:func:`dra_jupyter.kube.spawn.explain_on` says it, on the watched state: the hub's spawner
asks it instead of listing the cluster). The endpoints: specification/shared-view-api.yml.

Who calls is the hub's word, never the caller's: each request carries a hub API token
(``Authorization: token ...``; a user's server presents its own ``$JUPYTERHUB_API_TOKEN``),
which the service asks the hub to identify (``GET $JUPYTERHUB_API_URL/user``, as
``jupyterhub.services.auth.HubAuth`` does; the answer kept :data:`AUTH_CACHE_S`). A token
the hub does not know, or of no user, is refused (403); no token, 401. ``api/choices`` and
``api/explain`` also take the service's own token (``$JUPYTERHUB_API_TOKEN``, the
``api_token`` of its entry in ``c.JupyterHub.services``): the hub's spawner presents it, no
user being at hand.

One process per hub: its memory is the cluster's slices once, whatever the number of users;
a user's server that reads it (``c.DRAExtensionApp.shared_view_url``) holds none of them.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.api.asked import asked
from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub.choices import Choice, ChoiceCache, choices
from dra_jupyter.hub.form import service_world
from dra_jupyter.hub.formwire import (
    CHOICES_PATH,
    EXPLAIN_PATH,
    Explained,
    SharedChoices,
    choices_answer,
    explain_asked,
)
from dra_jupyter.kube.sharedview import DEVICES_PATH, POSSIBLE_PATH, ClusterCounts
from dra_jupyter.kube.spawn import explain_on
from dra_jupyter.sharing.joins import SHARED_PREFIX

__all__ = [
    "AUTH_CACHE_S",
    "SERVICE_NAME",
    "THE_HUB",
    "Choosing",
    "HubIdentity",
    "explaining",
    "main",
    "make_server",
    "shared_view_service",
]

log = logging.getLogger("dra_jupyter")

SERVICE_NAME = "dra-devices"  # the service's name in c.JupyterHub.services, by default
AUTH_CACHE_S = 60.0  # how long the hub's answer for a token is kept
AUTH_CACHE_MAX = 10_000  # tokens kept at most (the oldest go first)
HUB_TIMEOUT_S = 10.0
# what the hub passes on to the service's process for the Kubernetes client (a hub-managed
# service gets only the hub's env_keep and these): in a pod, in-cluster credentials
KUBE_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")

Identify = Callable[[str], "str | None"]  # a token -> its user's name, None: not a user's
# a kernel's question: (its request's keywords, the claim's name) -> (classes, never)
Ask = Callable[[Mapping[str, Any], str], "tuple[list[str] | None, str]"]
Choose = Callable[[str], SharedChoices]  # the spawn form's choices, for a namespace
# why a spawn waits: (namespace, its claim, its dra.request keywords or None) -> the text
Explain = Callable[[str, Mapping[str, Any], "Mapping[str, Any] | None"], str]
THE_HUB = "(the hub)"  # the caller that presented the service's own token
MAX_ASK_BYTES = 64 * 1024  # a question's body at most


class HubIdentity:
    """Who a hub API token is of, as the hub at ``api_url`` says (``GET /user``); None where
    the hub does not know it or it is not a user's (a service's). Kept
    :data:`AUTH_CACHE_S` per token (by its hash), failures included."""

    def __init__(self, api_url: str, *, timeout: float = HUB_TIMEOUT_S) -> None:
        self.api_url = api_url.rstrip("/") + "/"
        self.timeout = timeout
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, str | None]] = {}

    def __call__(self, token: str) -> str | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            found = self._known.get(key)
        if found is not None and now - found[0] < AUTH_CACHE_S:
            return found[1]
        user = self._ask(token)
        with self._lock:
            if len(self._known) >= AUTH_CACHE_MAX:
                self._known.pop(next(iter(self._known)))
            self._known[key] = (now, user)
        return user

    def _ask(self, token: str) -> str | None:
        request = urllib.request.Request(
            urllib.parse.urljoin(self.api_url, "user"),
            headers={"Authorization": f"token {token}", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                model = json.loads(answer.read())
        except urllib.error.HTTPError as error:
            error.close()
            if error.code in (401, 403):
                return None
            raise UnavailableError(f"the hub at {self.api_url} answered {error.code}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise UnavailableError(
                f"the hub at {self.api_url} cannot be reached: {error}"
            ) from error
        if not isinstance(model, dict) or model.get("kind", "user") != "user":
            return None
        name = model.get("name")
        return name if isinstance(name, str) and name else None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _path(self) -> str:
        path = urllib.parse.urlsplit(self.path).path
        prefix = self.server.prefix
        return "/" + path[len(prefix) :] if path.startswith(prefix) else path

    def _user(self, *, the_hub: bool = False, only_the_hub: bool = False) -> str | None:
        """The caller, as the hub says (None: refused here, with 401 or 403); with
        ``the_hub``, :data:`THE_HUB` for the service's own token; with ``only_the_hub``, no
        one else (an explanation names other users' holdings: the hub shows it to the one
        whose spawn waits, a user's token may not ask it of any claim)."""
        token = _token_of(self.headers.get("Authorization") or "")
        if not token:
            self._reply(401, {"message": "a hub API token is needed (Authorization: token ...)"})
            return None
        own = self.server.own_token
        if (the_hub or only_the_hub) and own and hmac.compare_digest(token.encode(), own.encode()):
            return THE_HUB
        if only_the_hub:
            self._reply(403, {"message": "only the hub asks this (with the service's own token)"})
            return None
        user = self.server.identify(token)
        if user is None:
            self._reply(403, {"message": "the hub knows this token as no user's"})
        return user

    def do_GET(self) -> None:
        path = self._path()
        if path.rstrip("/") in ("", "/health"):
            self._reply(200, {"ok": True})
            return
        if path not in ("/" + DEVICES_PATH, "/" + CHOICES_PATH):
            self._reply(404, {"message": f"no such path: {self.path[:100]}"})
            return
        try:
            if path == "/" + CHOICES_PATH:
                if self._user(the_hub=True) is not None:
                    query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                    namespace = (query.get("namespace") or [""])[0][:253]
                    self._reply(200, dict(self.server.choose(namespace)))
                return
            user = self._user()
            if user is not None:
                self._reply(200, dict(self.server.counts.answer(user)))
        except UnavailableError as error:
            self._reply(503, {"message": error.message})

    def do_POST(self) -> None:
        path = self._path()
        if path not in ("/" + POSSIBLE_PATH, "/" + EXPLAIN_PATH):
            self._reply(404, {"message": f"no such path: {self.path[:100]}"})
            return
        try:
            if self._user(only_the_hub=path == "/" + EXPLAIN_PATH) is None:
                return
            read, body = self._body()
            if not read:
                return
            if path == "/" + EXPLAIN_PATH:
                self._explain(body)
                return
            spec = body.get("request") if isinstance(body, dict) else None
            name = body.get("name", "") if isinstance(body, dict) else None
            if not isinstance(spec, dict) or not isinstance(name, str):
                self._reply(400, {"message": 'expected {"request": {...}, "name": "..."}'})
                return
            classes, never = self.server.ask(spec, name)
        except UnavailableError as error:
            self._reply(503, {"message": error.message})
            return
        answer: dict[str, Any] = {"possible": classes is not None}
        if classes is not None:
            answer["classes"] = classes
        elif never:
            answer["never"] = never
        self._reply(200, answer)

    def _body(self) -> tuple[bool, object]:
        """Whether the body was read (False: refused here, none or over
        :data:`MAX_ASK_BYTES`), and its JSON (None for one that is not JSON)."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_ASK_BYTES:
            self._reply(413 if length else 400, {"message": "a question of 1 B to 64 KiB"})
            return False, None
        try:
            return True, json.loads(self.rfile.read(length))
        except ValueError:
            return True, None

    def _explain(self, body: object) -> None:
        """Why a spawn's claim waits, on the view's watched state (``api/explain``)."""
        try:
            namespace, claim, request = explain_asked(body)
        except ValueError as error:
            self._reply(400, {"message": str(error)})
            return
        self._reply(200, Explained(explanation=self.server.explain(namespace, claim, request)))

    def _reply(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dra_jupyter.hub.sharedview: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        counts: ClusterCounts,
        identify: Identify,
        prefix: str,
        ask: Ask,
        choose: Choose,
        own_token: str,
        explain: Explain,
    ) -> None:
        super().__init__(address, _Handler)
        self.counts = counts
        self.identify = identify
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.ask = ask
        self.choose = choose
        self.own_token = own_token
        self.explain = explain


def _token_of(header: str) -> str:
    kind, _, value = header.strip().partition(" ")
    return value.strip() if kind.lower() in ("token", "bearer") else ""


def make_server(
    address: tuple[str, int],
    counts: ClusterCounts,
    identify: Identify,
    prefix: str = "/",
    ask: Ask | None = None,
    *,
    choose: Choose | None = None,
    own_token: str = "",
    explain: Explain | None = None,
) -> ThreadingHTTPServer:
    """The service's HTTP server on ``address``, answering under ``prefix`` (the hub's
    ``$JUPYTERHUB_SERVICE_PREFIX``: the proxy passes the whole path) and at the root;
    ``ask``: how a kernel's question is answered, ``choose``: what the spawn form is offered,
    ``explain``: why a spawn waits (by default, all on the views of ``counts``);
    ``own_token``: the service's own hub API token, which ``api/choices`` and
    ``api/explain`` take as the hub's."""
    return _Server(
        address,
        counts,
        identify,
        prefix,
        ask or asking(counts),
        choose or Choosing(counts),
        own_token,
        explain or explaining(counts),
    )


def asking(counts: ClusterCounts) -> Ask:
    """A kernel's question answered on the views of ``counts`` (the service's reader)."""

    def ask(spec: Mapping[str, Any], name: str) -> tuple[list[str] | None, str]:
        reader = counts.reader
        return asked(Session(reader.settings, backend=reader), spec, name)

    return ask


def explaining(counts: ClusterCounts) -> Explain:
    """Why a spawn waits, explained on the views of ``counts`` (synced, else
    :class:`UnavailableError`): no request of the API server."""

    def explain(namespace: str, claim: Mapping[str, Any], request: Mapping[str, Any] | None) -> str:
        counts.synced()
        return explain_on(counts.reader, namespace, dict(claim), request)

    return explain


class Choosing:
    """The spawn form's choices counted on the views of ``counts`` (:data:`Choose`), made
    again only when a view changed (one at a time: the counting keeps its cache)."""

    def __init__(self, counts: ClusterCounts) -> None:
        self.counts = counts
        self._lock = threading.Lock()
        self._cache = ChoiceCache()
        self._made: tuple[tuple[object, ...], list[Choice], list[tuple[str, str, int]]] | None
        self._made = None

    def __call__(self, namespace: str) -> SharedChoices:
        versions, inventory = self.counts.synced()
        with self._lock:
            made = self._made
            if made is None or made[0] != versions:
                holders = self.counts.reader.holders()
                offered = choices(service_world(inventory, holders), cache=self._cache)
                shared = [
                    (h.namespace, h.name, len(h.users))
                    for h in holders
                    if h.name.startswith(SHARED_PREFIX)
                ]
                made = self._made = (versions, offered, shared)
        sharing = {name: n for ns, name, n in made[2] if ns == namespace}
        return choices_answer(inventory.description, made[1], sharing)


def shared_view_service(
    url: str = "http://127.0.0.1:8181",
    *,
    name: str = SERVICE_NAME,
    environ: Mapping[str, str] | None = None,
    api_token: str = "",
) -> dict[str, Any]:
    """The entry of ``c.JupyterHub.services`` that runs the shared view as a hub-managed
    service at ``url`` (where it listens, and where the proxy sends
    ``/services/<name>/``), on the hub's own Kubernetes credentials (its kubeconfig or
    in-cluster service account, from ``environ``: the hub's environment). Its ``api_token``
    (by default a new random one, each time the hub reads its config) is how the hub's
    spawner asks it for the spawn form's choices (:mod:`dra_jupyter.hub.formview`)."""
    env = os.environ if environ is None else environ
    return {
        "name": name,
        "url": url,
        "api_token": api_token or secrets.token_hex(32),
        "command": [sys.executable, "-m", "dra_jupyter.hub.sharedview"],
        "environment": {k: env[k] for k in KUBE_ENV if env.get(k)},
    }


def _bind_host(url: str) -> str:
    """Where to listen for ``url``: its host where that is an address of this machine's
    (an IP, ``localhost``), else every interface (a Service's name such as ``hub``)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "0.0.0.0"
    return host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dra_jupyter.hub.sharedview",
        description="The hub's one view of the cluster's devices (a JupyterHub service).",
    )
    env = os.environ
    parser.add_argument("--url", default=env.get("JUPYTERHUB_SERVICE_URL", ""))
    parser.add_argument("--ip", default="", help="the address to listen on (default: the URL's)")
    parser.add_argument("--prefix", default=env.get("JUPYTERHUB_SERVICE_PREFIX", "/"))
    parser.add_argument("--hub-api-url", default=env.get("JUPYTERHUB_API_URL", ""))
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s] %(message)s")
    if not args.url or not args.hub_api_url:
        parser.error("the service's URL and the hub's API URL are needed (the hub sets them)")
    port = urllib.parse.urlsplit(args.url).port or 80
    counts = ClusterCounts.of_kubeconfig(args.kubeconfig)
    # start the watches now: the first user's read then finds them synced
    threading.Thread(target=_warm, args=(counts,), daemon=True).start()
    server = make_server(
        (args.ip or _bind_host(args.url), port),
        counts,
        HubIdentity(args.hub_api_url),
        args.prefix,
        own_token=env.get("JUPYTERHUB_API_TOKEN", ""),
    )
    log.info("dra_jupyter: the shared view of the cluster's devices listens at %s", args.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        counts.close()
    return 0


def _warm(counts: ClusterCounts) -> None:
    try:
        counts.answer("")
    except UnavailableError as error:
        log.warning("dra_jupyter: the shared view: %s", error.message)


if __name__ == "__main__":
    sys.exit(main())

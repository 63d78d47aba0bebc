"""Thin REST handlers under ``/dra/api/``: authenticate, authorize, translate HTTP to
:class:`~dra_jupyter.server.claims.ClaimService` calls and domain errors to 4xx.

Reads (GET) do not count as user activity: a sidebar polling them must not keep a hub
from culling an idle server (``_track_activity``, jupyter_server ``base/handlers.py``).

Bad input never makes a 5xx or a page that is not JSON. Every handler authenticates first
(jupyter_server's ``prepare``), then bounds the body before reading it
(:data:`~dra_jupyter.server.models.MAX_BODY_BYTES`: a larger Content-Length is a 413 at
once, a chunked body is counted as it arrives), parses it as strict JSON, and checks each
field's type and size before any work. The route patterns take any path segment, so that
a bad claim name is refused in words; any other path under ``/dra/api/`` is a JSON 404
(:class:`NoSuchEndpointHandler`, the last route). Answers are strict JSON: no NaN or
Infinity (a browser's ``JSON.parse`` refuses them), a value that is not finite is null.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.client import responses
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import IdentityProvider
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import ensure_async
from tornado import web

from dra_jupyter.errors import (
    DraJupyterError,
    InvalidInputError,
    shown,
)
from dra_jupyter.identity import request_user
from dra_jupyter.metrics import Sample
from dra_jupyter.model.limits import dns_subdomain_problem
from dra_jupyter.server.claim_events import ClaimEvents
from dra_jupyter.server.claims import Caller, ClaimService, Released, release_message
from dra_jupyter.server.idling import Idling
from dra_jupyter.server.kernelactions import KernelActions
from dra_jupyter.server.models import (
    MAX_BODY_BYTES,
    ClaimModel,
    ClaimsResponse,
    DeviceMetricsModel,
    ErrorModel,
    GpuActivityModel,
    HistoryModel,
    JoinedModel,
    MetricsResponse,
    ReleasedModel,
    RestartResponse,
    SampleModel,
    check_claim_request,
    parse_json_body,
)
from dra_jupyter.server.pushes import Pushes
from dra_jupyter.server.runs import RunService, check_run_name, tail_lines
from dra_jupyter.server.sampling import MetricsSampler

T = TypeVar("T")


class DRAApp(Protocol):
    """What the handlers read of the extension app that serves them
    (:class:`~dra_jupyter.server.app.DRAExtensionApp`, which app.py checks against this)."""

    @property
    def service(self) -> ClaimService: ...

    @property
    def runs(self) -> RunService: ...

    @property
    def metrics(self) -> MetricsSampler: ...

    @property
    def claim_events(self) -> ClaimEvents: ...

    @property
    def pushes(self) -> Pushes: ...

    @property
    def allow_admin_view(self) -> bool: ...

    @property
    def idle_timeout(self) -> float: ...

    @property
    def idle_warning(self) -> float: ...

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def read(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def wait(self, fn: Callable[..., T], *args: Any) -> T: ...

    @property
    def kernel_actions(self) -> KernelActions: ...

    @property
    def idling(self) -> Idling: ...

    @property
    def gpu_idle_timeout(self) -> float: ...


AUTH_RESOURCE = "dra"
ADMIN_RESOURCE = "dra-admin"

# Any one path segment: a claim name or kernel id that cannot exist is refused in words
_NAME = r"(?P<name>[^/]+)"
_KERNEL = r"(?P<kernel_id>[^/]+)"
# A body that is too large is counted up to this many bytes, then answered at once (and the
# connection closed): beyond MAX_BODY_BYTES its bytes are dropped as they arrive
DISCARD_BYTES = 16 * MAX_BODY_BYTES
TOO_LARGE = (
    f"the body has more than {MAX_BODY_BYTES // 1024} KiB, the most a request under /dra/api/ "
    'may have; send only the fields of the request, e.g. {"gpu": 1}'
)
ENDPOINTS = (
    "devices, metrics, metrics/prometheus, usage, claims, claims/NAME, claims/NAME/keep, "
    "kernels/ID/claims, kernels/ID/restart-with-claims, runs, runs/NAME/cancel, runs/NAME/logs"
)
MAX_MESSAGE = 1000  # characters of an error's message: one line, values in it already cut


def _exc_info(err: BaseException) -> tuple[type[BaseException], BaseException, None]:
    return type(err), err, None


def one_line(text: str) -> str:
    """An error message as one line of at most :data:`MAX_MESSAGE` characters (an
    explanation of many lines, e.g. per node, is joined with '; ', or a space after a ':')."""
    line = ""
    for part in filter(None, (p.strip() for p in text.splitlines())):
        line += ("" if not line else " " if line.endswith(":") else "; ") + part
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


@contextmanager
def _handle_error() -> Iterator[None]:
    """Translate a domain error into an HTTP error with its message, in one line, without
    the Python API's name in front (``dra.request``: not what a form's user called; the
    lab's forms show the message to their users); anything else is a bug and stays a 500
    with a logged traceback."""
    try:
        yield
    except DraJupyterError as err:  # its class says the status (dra_jupyter.errors)
        raise web.HTTPError(err.http_status, one_line(err.message), reason=err.reason) from err


def check_claim_name(name: str) -> None:
    """A claim name from a path: a DNS subdomain, as every claim's is, else a 400."""
    problem = dns_subdomain_problem(name)
    if problem is not None:
        raise InvalidInputError(
            f"claim name {problem}; claim names are DNS subdomains, e.g. 'alice-1' "
            "(GET /dra/api/claims lists yours)"
        )


def _finite(value: float | None) -> float | None:
    """A number for a JSON answer: null where it is not finite (no NaN, no Infinity)."""
    return value if value is None or math.isfinite(value) else None


@web.stream_request_body
class _DRAHandler(ExtensionHandlerMixin, APIHandler):
    """The base of every handler under /dra/api/: authentication first, a bounded body,
    strict JSON in and out (the module's doc)."""

    auth_resource = AUTH_RESOURCE
    _body: list[bytes]
    _received: int

    async def prepare(self) -> None:  # type: ignore[override]  # as APIHandler.prepare
        self._body, self._received = [], 0
        await super().prepare()  # authentication: 403 without a user, before anything
        if self.current_user is None:  # allow_unauthenticated_access: still no body unread
            raise web.HTTPError(403)
        length = self.request.headers.get("Content-Length", "")
        if length.isdigit() and (len(length) > 12 or int(length) > MAX_BODY_BYTES):
            raise web.HTTPError(413, TOO_LARGE, reason="body too large")

    def data_received(self, chunk: bytes) -> None:
        """Parts of the body as they arrive: kept up to MAX_BODY_BYTES, counted beyond."""
        self._received += len(chunk)
        if self._received <= MAX_BODY_BYTES:
            self._body.append(chunk)
        elif self._received > DISCARD_BYTES and not self._finished:
            too_large = web.HTTPError(413, TOO_LARGE, reason="body too large")
            self.send_error(413, exc_info=_exc_info(too_large))
        else:
            self._body.clear()

    def body(self) -> bytes:
        """The request's body (all of it: a larger one is refused)."""
        if self._received > MAX_BODY_BYTES:
            raise web.HTTPError(413, TOO_LARGE, reason="body too large")
        return b"".join(self._body)

    def json_body(self, what: str) -> object:
        """The body as strict JSON, or a 400 (or 413) that says what is wrong with it."""
        raw = self.body()
        with _handle_error():
            return parse_json_body(raw, what)

    def log_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """A 4xx is an answer, not a fault of the server: its message at debug level (the
        access log has its line, a warning); anything else as tornado logs it."""
        if isinstance(value, web.HTTPError) and value.status_code < 500:
            self.log.debug(
                "%d %s: %s", value.status_code, self._request_summary(), value.get_message()
            )
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A 4xx as jupyter_server's ``APIHandler.write_error`` writes it (``message`` and
        ``reason``, :class:`~dra_jupyter.server.models.ErrorModel`), without its second
        warning per answer; anything else as it does."""
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if status_code >= 500 or not isinstance(error, web.HTTPError):
            super().write_error(status_code, **kwargs)
            return
        message = error.log_message or responses.get(status_code, "Unknown HTTP Error")
        self.finish(json.dumps(ErrorModel(message=message, reason=error.reason)))

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path segments and query values as text: bytes that are not UTF-8 become U+FFFD,
        refused in words by the handler, after authentication (tornado would answer 400
        before it)."""
        return value.decode("utf-8", "replace")

    def _not_allowed(self, *args: str, **kwargs: str) -> None:
        """A method the endpoint does not have: 405, saying which it has."""
        allowed = [
            m.upper()
            for m in ("get", "post", "delete")
            if getattr(type(self), m) is not getattr(_DRAHandler, m)
        ]
        self.set_header("Allow", ", ".join(allowed))
        raise web.HTTPError(
            405,
            f"{self.request.method} {shown(self.request.path, 200)}: this endpoint answers "
            f"{' and '.join(allowed)} only (specification/dra-rest-api.yml)",
            reason="method not allowed",
        )

    get: Callable[..., Awaitable[None] | None] = _not_allowed
    post: Callable[..., Awaitable[None] | None] = _not_allowed
    put: Callable[..., Awaitable[None] | None] = _not_allowed
    patch: Callable[..., Awaitable[None] | None] = _not_allowed
    delete: Callable[..., Awaitable[None] | None] = _not_allowed

    def update_api_activity(self) -> None:
        """GETs are polling, not activity (``_track_activity``, per verb); a write is."""
        if self.request.method not in ("GET", "HEAD"):
            super().update_api_activity()

    @property
    def dra(self) -> DRAApp:
        return cast(DRAApp, self.extensionapp)  # routes() serve only that app

    def claim_user(self) -> str:
        """Who owns the claims of this request (:mod:`dra_jupyter.identity`, rule 2).
        jupyter_server's own identity providers make an anonymous user per browser (or per
        token request): everyone they let in is the server's owner, so claims belong to the
        server's user, as do those its kernels make. Other providers (JupyterHub's) name
        real users: their names are used."""
        if type(self.identity_provider).__module__ == IdentityProvider.__module__:
            return request_user(None)
        return request_user(str(self.current_user.username))

    async def caller(self) -> Caller:
        user = self.current_user
        admin = False
        if self.dra.allow_admin_view:
            admin = bool(
                await ensure_async(
                    self.authorizer.is_authorized(self, user, "read", ADMIN_RESOURCE)
                )
            )
        return Caller(user=self.claim_user(), admin=admin)

    def claim_model(self, record: Any, gone: Released | None = None) -> ClaimModel:
        if gone is not None:
            message = gone.message or release_message(
                gone.reason, self.dra.idle_timeout, self.dra.gpu_idle_timeout
            )
            released = ReleasedModel(reason=gone.reason, time=gone.time, message=message)
            model = self.dra.service.to_model(record, released=released)
        else:
            now = time.time()
            deadline, busy = self.dra.idling.idle_state(record, now)
            gpu = self.dra.idling.gpu_activity(record, now).to_dict(now)
            model = self.dra.service.to_model(
                record, deadline, busy=busy, gpu=cast(GpuActivityModel, gpu)
            )
        model["lease_expires"] = _finite(model["lease_expires"])  # an older ledger's endless one
        model["idle_deadline"] = _finite(model["idle_deadline"])
        return model

    async def joined(self, kernel_id: str | None = None) -> list[JoinedModel]:
        """The claims this server's kernels (or that one) joined, each as the cluster has
        it now (:meth:`KernelActions.joiners`)."""
        found = []
        for kernel, devices in sorted(self.dra.kernel_actions.joiners().items()):
            if kernel_id is not None and kernel != kernel_id:
                continue
            record = await self.dra.read(self.dra.service.backend.record, devices.join)
            found.append(
                JoinedModel(
                    kernel_id=kernel,
                    claim=devices.join,
                    user=record.owner.user if record is not None else "",
                    devices=list(record.device_keys) if record is not None else [],
                    used_by=list(record.users) if record is not None else [],
                )
            )
        return found

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(body, allow_nan=False))  # strict JSON, or a bug (a 500)


class DevicesHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        with _handle_error():
            self.reply(await self.dra.read(self.dra.service.devices))


class ClaimsHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        caller = await self.caller()
        with _handle_error():
            records = await self.dra.read(self.dra.service.claims, caller)
            self.reply(
                ClaimsResponse(
                    claims=[self.claim_model(r) for r in records],
                    joined=await self.joined(),
                    pushed=self.dra.pushes.pushing,
                )
            )

    @web.authenticated
    @authorized
    async def post(self) -> None:
        caller = await self.caller()
        body = self.json_body("")
        with _handle_error():
            check_claim_request(body)  # on the loop: a bad body waits for no ledger call
            record = await self.dra.call(self.dra.service.create, caller, body)
            self.dra.claim_events.emit_allocated(record, "rest")
            self.set_header("Location", self.request.path.rstrip("/") + "/" + record.name)
            self.reply(self.claim_model(record), status=201)


class ClaimHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        caller = await self.caller()
        with _handle_error():
            check_claim_name(name)
            found = await self.dra.read(self.dra.service.claim_or_released, caller, name)
            self.reply(self.claim_model(*found))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        caller = await self.caller()
        with _handle_error():
            check_claim_name(name)
            await self.dra.call(self.dra.service.release, caller, name)
            self.set_status(204)
            self.finish()


class KeepHandler(_DRAHandler):
    """The "keep" action of the idle warning: the claim's idle countdown starts again."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        caller = await self.caller()
        self.body()  # none is needed; a large one is refused all the same
        with _handle_error():
            check_claim_name(name)
            record = await self.dra.call(self.dra.service.keep, caller, name)
            self.reply(self.claim_model(record))


class KernelClaimsHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        caller = await self.caller()
        with _handle_error():
            records = await self.dra.read(self.dra.service.kernel_claims, caller, kernel_id)
            self.reply(
                ClaimsResponse(
                    claims=[self.claim_model(r) for r in records],
                    joined=await self.joined(kernel_id),
                    pushed=self.dra.pushes.pushing,
                )
            )


class RestartWithClaimsHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        # a restart is a write on the kernel too: the authorizer must allow both
        if not await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "write", "kernels")
        ):
            raise web.HTTPError(403, "restarting kernels is not allowed for this user")
        self.body()  # none is needed; a large one is refused all the same
        with _handle_error():
            records, env = await self.dra.kernel_actions.restart_with_claims(kernel_id)
            self.reply(
                RestartResponse(
                    kernel_id=kernel_id, env=env, claims=[self.claim_model(r) for r in records]
                )
            )


class MoveHandler(_DRAHandler):
    """The Move of a device taken out of service (:mod:`dra_jupyter.outofservice`): the
    same again on an equivalent device, the old claim released, the kernel restarted."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        if not await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "write", "kernels")
        ):
            raise web.HTTPError(403, "restarting kernels is not allowed for this user")
        caller = await self.caller()
        self.body()  # none is needed; a large one is refused all the same
        with _handle_error():
            check_claim_name(name)
            kernel_id, records, env = await self.dra.kernel_actions.move_claim(caller, name)
            self.reply(
                RestartResponse(
                    kernel_id=kernel_id, env=env, claims=[self.claim_model(r) for r in records]
                )
            )


class RunsHandler(_DRAHandler):
    """The caller's background runs (``dra.run``): the lab panel's Runs."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        caller = await self.caller()
        with _handle_error():
            self.reply(await self.dra.read(self.dra.runs.runs, caller))


class RunCancelHandler(_DRAHandler):
    """Cancel one of the caller's runs; answers once it ended (seconds, on its own thread)."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        caller = await self.caller()
        self.body()  # none is needed; a large one is refused all the same
        with _handle_error():
            check_run_name(name)
            self.reply(await self.dra.wait(self.dra.runs.cancel, caller, name))


class RunLogsHandler(_DRAHandler):
    """The last lines of one of the caller's runs' output (``?tail=N``)."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        caller = await self.caller()
        raw = self.get_argument("tail", "")
        with _handle_error():
            check_run_name(name)
            tail = tail_lines(raw)
            self.reply(await self.dra.read(self.dra.runs.logs, caller, name, tail))


def _sample_model(s: Sample) -> SampleModel:
    return SampleModel(
        time=s.time,
        memory_used=s.memory_used,
        memory_total=s.memory_total,
        utilization=_finite(s.utilization),
        temperature=_finite(s.temperature),
    )


def _history_model(samples: list[Sample]) -> HistoryModel:
    return HistoryModel(
        time=[s.time for s in samples],
        memory_used=[s.memory_used for s in samples],
        utilization=[_finite(s.utilization) for s in samples],
        temperature=[_finite(s.temperature) for s in samples],
    )


# more digits than this: more samples than any history keeps (int() refuses 4,300)
_HISTORY_DIGITS = 9


class MetricsHandler(_DRAHandler):
    """Current metrics of every device and their recent history (``?history=N``: the
    last N samples per device; ``?device=KEY``: that device only)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        app = self.dra
        raw = self.get_argument("history", "")
        only = self.get_argument("device", "")
        with _handle_error():
            if raw and not (raw.isascii() and raw.isdigit()):
                raise InvalidInputError(
                    f"GET metrics: history must be a whole number of samples, not {shown(raw)}"
                )
            if len(raw.lstrip("0")) > _HISTORY_DIGITS:
                last = app.metrics.history.length  # more than are kept: all that are kept
            else:
                last = int(raw) if raw else app.metrics.history.length
            current = {s.device: s for s in await app.metrics.current()}
            source = app.metrics.source()
        keys = list(dict.fromkeys([*current, *app.metrics.history.devices()]))
        devices = [
            DeviceMetricsModel(
                device=key,
                current=_sample_model(current[key]) if key in current else None,
                history=_history_model(app.metrics.history.series(key, last)),
            )
            for key in keys
            if not only or key == only
        ]
        self.reply(
            MetricsResponse(
                source=source.name,
                simulated=source.simulated,
                problem=source.problem,
                # an endless setting (inf) reads as 0, "off", which is what it does
                interval=_finite(app.metrics.interval) or 0.0,
                length=app.metrics.history.length,
                idle_timeout=_finite(app.idle_timeout) or 0.0,
                idle_warning=_finite(app.idle_warning) or 0.0,
                devices=devices,
            )
        )


class UsageHandler(_DRAHandler):
    """The caller's GPU usage over ``?since=`` (default 7d): the lab panel's Usage."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        caller = await self.caller()
        since = self.get_argument("since", "7d")
        with _handle_error():
            self.reply(await self.dra.read(self.dra.service.usage, caller, since))


class PrometheusHandler(_DRAHandler):
    """The usage book's counters and the devices' and waiters' gauges in Prometheus's text
    format (:mod:`dra_jupyter.accounting.prometheus`), as the server's backend shows them to
    the server's user: a Prometheus that scrapes it sends the server's token."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        from dra_jupyter.accounting.prometheus import CONTENT_TYPE, exposition  # noqa: PLC0415

        with _handle_error():
            text = await self.dra.read(exposition, self.dra.service.session.usage_snapshot)
        self.set_status(200)
        self.finish(text, set_content_type=CONTENT_TYPE)


class NoSuchEndpointHandler(_DRAHandler):
    """Any other path under /dra/api/, for every method: a JSON 404 (after authentication
    and authorization, as every route), not jupyter_server's HTML page."""

    def _refuse(self, *args: str) -> None:
        raise web.HTTPError(
            404,
            f"no such endpoint: {self.request.method} {shown(self.request.path, 200)}; the "
            f"REST API under /dra/api/ has {ENDPOINTS} (specification/dra-rest-api.yml)",
            reason="no such endpoint",
        )

    @web.authenticated
    @authorized
    async def get(self, *args: str) -> None:
        self._refuse()

    @web.authenticated
    @authorized
    async def post(self, *args: str) -> None:
        self._refuse()

    @web.authenticated
    @authorized
    async def put(self, *args: str) -> None:
        self._refuse()

    @web.authenticated
    @authorized
    async def patch(self, *args: str) -> None:
        self._refuse()

    @web.authenticated
    @authorized
    async def delete(self, *args: str) -> None:
        self._refuse()


# Every path under the prefix that no route takes: it must stay the last route.
FALLBACK = (r"/dra/api(?:/.*)?", NoSuchEndpointHandler)


def routes() -> list[tuple[str, type[_DRAHandler]]]:
    """The REST routes, relative to the server's base URL, and last :data:`FALLBACK` (a
    route added after it would never be reached)."""
    return [
        (r"/dra/api/devices", DevicesHandler),
        (r"/dra/api/metrics", MetricsHandler),
        (r"/dra/api/metrics/prometheus", PrometheusHandler),
        (r"/dra/api/usage", UsageHandler),
        (r"/dra/api/claims", ClaimsHandler),
        (rf"/dra/api/claims/{_NAME}", ClaimHandler),
        (rf"/dra/api/claims/{_NAME}/keep", KeepHandler),
        (rf"/dra/api/claims/{_NAME}/move", MoveHandler),
        (rf"/dra/api/kernels/{_KERNEL}/claims", KernelClaimsHandler),
        (rf"/dra/api/kernels/{_KERNEL}/restart-with-claims", RestartWithClaimsHandler),
        (r"/dra/api/runs", RunsHandler),
        (rf"/dra/api/runs/{_NAME}/cancel", RunCancelHandler),
        (rf"/dra/api/runs/{_NAME}/logs", RunLogsHandler),
        FALLBACK,
    ]

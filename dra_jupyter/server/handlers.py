"""Thin REST handlers under ``/dra/api/``: authenticate, authorize, translate HTTP to
:class:`~dra_jupyter.server.service.ClaimService` calls and domain errors to 4xx.

Reads (GET) do not count as user activity: a sidebar polling them must not keep a hub
from culling an idle server (``_track_activity``, jupyter_server ``base/handlers.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import IdentityProvider
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import ensure_async
from tornado import web

from dra_jupyter.errors import (
    AllocationError,
    DraJupyterError,
    ForbiddenError,
    InvalidInputError,
    LimitError,
    NeverPossibleError,
    NotFoundError,
)
from dra_jupyter.identity import request_user
from dra_jupyter.metrics import Sample
from dra_jupyter.server.models import (
    ClaimModel,
    ClaimsResponse,
    DeviceMetricsModel,
    HistoryModel,
    MetricsResponse,
    RestartResponse,
    SampleModel,
)
from dra_jupyter.server.service import Caller

if TYPE_CHECKING:
    from dra_jupyter.server.app import DRAExtensionApp

AUTH_RESOURCE = "dra"
ADMIN_RESOURCE = "dra-admin"

_NAME = r"(?P<name>[a-z0-9][a-z0-9.-]{0,252})"
_KERNEL = r"(?P<kernel_id>[\w-]+)"


@contextmanager
def _handle_error() -> Iterator[None]:
    """Translate a domain error into an HTTP error with its message; anything else is a
    bug and stays a 500 with a logged traceback."""
    try:
        yield
    except InvalidInputError as err:
        raise web.HTTPError(400, str(err), reason="invalid input") from err
    except NotFoundError as err:
        raise web.HTTPError(404, str(err), reason="not found") from err
    except ForbiddenError as err:
        raise web.HTTPError(403, str(err), reason="another user's claim") from err
    except NeverPossibleError as err:
        raise web.HTTPError(422, str(err), reason="can never be met") from err
    except LimitError as err:
        raise web.HTTPError(409, str(err), reason="over the per-user limit") from err
    except AllocationError as err:
        raise web.HTTPError(409, str(err), reason="busy") from err
    except DraJupyterError as err:  # e.g. the ledger cannot be opened
        raise web.HTTPError(503, str(err), reason="dra-jupyter unavailable") from err


class _DRAHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    def update_api_activity(self) -> None:
        """GETs are polling, not activity (``_track_activity``, per verb); a write is."""
        if self.request.method not in ("GET", "HEAD"):
            super().update_api_activity()

    @property
    def dra(self) -> DRAExtensionApp:
        return cast("DRAExtensionApp", self.extensionapp)  # routes() serve only that app

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

    def claim_model(self, record: Any) -> ClaimModel:
        return self.dra.service.to_model(record, self.dra.idle_deadline(record))

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(body))


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
            self.reply(ClaimsResponse(claims=[self.claim_model(r) for r in records]))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        caller = await self.caller()
        body = self.get_json_body()  # a 400 if the body is not JSON
        with _handle_error():
            record = await self.dra.call(self.dra.service.create, caller, body)
            self.dra.emit_allocated(record, "rest")
            self.set_header("Location", self.request.path.rstrip("/") + "/" + record.name)
            self.reply(self.claim_model(record), status=201)


class ClaimHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        caller = await self.caller()
        with _handle_error():
            self.reply(self.claim_model(await self.dra.read(self.dra.service.claim, caller, name)))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        caller = await self.caller()
        with _handle_error():
            await self.dra.call(self.dra.service.release, caller, name)
            self.set_status(204)
            self.finish()


class KeepHandler(_DRAHandler):
    """The "keep" action of the idle warning: the claim's idle countdown starts again."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        caller = await self.caller()
        with _handle_error():
            record = await self.dra.call(self.dra.service.keep, caller, name)
            self.reply(self.claim_model(record))


class KernelClaimsHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        caller = await self.caller()
        with _handle_error():
            records = await self.dra.read(self.dra.service.kernel_claims, caller, kernel_id)
            self.reply(ClaimsResponse(claims=[self.claim_model(r) for r in records]))


class RestartWithClaimsHandler(_DRAHandler):
    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        # a restart is a write on the kernel too: the authorizer must allow both
        if not await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "write", "kernels")
        ):
            raise web.HTTPError(403, "restarting kernels is not allowed for this user")
        with _handle_error():
            records, env = await self.dra.restart_with_claims(kernel_id)
            self.reply(
                RestartResponse(
                    kernel_id=kernel_id, env=env, claims=[self.claim_model(r) for r in records]
                )
            )


def _sample_model(s: Sample) -> SampleModel:
    return SampleModel(
        time=s.time,
        memory_used=s.memory_used,
        memory_total=s.memory_total,
        utilization=s.utilization,
        temperature=s.temperature,
    )


def _history_model(samples: list[Sample]) -> HistoryModel:
    return HistoryModel(
        time=[s.time for s in samples],
        memory_used=[s.memory_used for s in samples],
        utilization=[s.utilization for s in samples],
        temperature=[s.temperature for s in samples],
    )


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
            if raw and not raw.isdecimal():
                raise InvalidInputError(
                    f"GET metrics: history must be a whole number of samples, not {raw!r}"
                )
            last = int(raw) if raw else app.metrics.length
            current = {s.device: s for s in await app.current_metrics()}
            source = app.metrics_source()
        keys = list(dict.fromkeys([*current, *app.metrics.devices()]))
        devices = [
            DeviceMetricsModel(
                device=key,
                current=_sample_model(current[key]) if key in current else None,
                history=_history_model(app.metrics.series(key, last)),
            )
            for key in keys
            if not only or key == only
        ]
        self.reply(
            MetricsResponse(
                source=source.name,
                simulated=source.simulated,
                problem=source.problem,
                interval=app.metrics_interval,
                length=app.metrics.length,
                idle_timeout=app.idle_timeout,
                idle_warning=app.idle_warning,
                devices=devices,
            )
        )


def routes() -> list[tuple[str, type[_DRAHandler]]]:
    """The REST routes, relative to the server's base URL."""
    return [
        (r"/dra/api/devices", DevicesHandler),
        (r"/dra/api/metrics", MetricsHandler),
        (r"/dra/api/claims", ClaimsHandler),
        (rf"/dra/api/claims/{_NAME}", ClaimHandler),
        (rf"/dra/api/claims/{_NAME}/keep", KeepHandler),
        (rf"/dra/api/kernels/{_KERNEL}/claims", KernelClaimsHandler),
        (rf"/dra/api/kernels/{_KERNEL}/restart-with-claims", RestartWithClaimsHandler),
    ]

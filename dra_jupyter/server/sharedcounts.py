"""``GET /dra/api/devices`` from a hub's shared view of the cluster's devices
(``c.DRAExtensionApp.shared_view_url``; :mod:`dra_jupyter.kube.sharedview`): the cluster's
counts per device shape and the rows of the devices the user's claims hold, asked of the
view with this server's own hub API token; the server itself watches only its namespace.

Where the view does not answer, the answer has no counts and says so in one line
(``cluster.problem``), and the server's log says it once (and once when it answers again);
the user's claims are still served (``GET /dra/api/claims`` reads the namespace's view)."""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, cast

from dra_jupyter.errors import UnavailableError
from dra_jupyter.server.models import (
    ClusterCountsModel,
    DeviceModel,
    DevicesResponse,
    ShapeCountModel,
)

log = logging.getLogger("dra_jupyter")

TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # the server's own token, which the hub gave it
UNAVAILABLE = "cluster device counts unavailable"
# the service's path under its URL (dra_jupyter.kube.sharedview.DEVICES_PATH: the server
# reaches the backends only through the API, so it does not import it)
DEVICES_PATH = "api/devices"
POSSIBLE_PATH = "api/possible"  # a kernel's question (kernelasks), asked of the view
MAX_ASK_BYTES = 64 * 1024  # a question larger than this is not sent (the kernel checks it)
CLIENT_TIMEOUT_S = 5.0  # a read of the shared view: never longer


class SharedCounts:
    """The shared view at ``url``, as this server reads it (its token: ``token``, else
    ``$JUPYTERHUB_API_TOKEN``)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.client = SharedViewClient(url, token if token is not None else _token())
        self._lock = threading.Lock()
        self._failing: str | None = None  # the last problem logged, until it answers again

    def devices(self) -> DevicesResponse:
        """The answer of ``GET /dra/api/devices``: the user's held devices and the cluster's
        counts, or no counts and one line that says why."""
        try:
            answer = self.client.devices()
            held = [_row(row) for row in answer["held"]]
            shapes = [_shape(shape) for shape in answer["shapes"]]
        except UnavailableError as error:
            problem = f"{UNAVAILABLE}: {error.message}"
            self._said(problem)
            return DevicesResponse(
                inventory=f"the cluster (the hub's shared view at {self.url})",
                simulated=False,
                devices=[],
                waiting=[],
                cluster=ClusterCountsModel(source=self.url, shapes=[], problem=problem),
            )
        self._said(None)
        return DevicesResponse(
            inventory=str(answer.get("inventory") or "the cluster"),
            simulated=False,
            devices=held,
            waiting=[],
            cluster=ClusterCountsModel(source=self.url, shapes=shapes, problem=""),
        )

    def possible(self, spec: dict[str, Any], name: str) -> tuple[list[str] | None, str]:
        """A kernel's question (:func:`dra_jupyter.api.asked.asked`) asked of the shared
        view; ``(None, "")`` where it does not answer (the kernel checks it itself)."""
        try:
            said = self.client.possible(spec, name)
        except UnavailableError as error:
            self._said(f"{UNAVAILABLE}: {error.message}")
            return None, ""
        classes, never = said.get("classes"), said.get("never")
        if said.get("possible") is True and isinstance(classes, list):
            return [str(c) for c in classes], ""
        return None, never if isinstance(never, str) else ""

    def _said(self, problem: str | None) -> None:
        """One log line when the view stops answering (or says another problem), one when
        it answers again."""
        with self._lock:
            before, self._failing = self._failing, problem
        if problem is not None and problem != before:
            log.warning("dra_jupyter: %s", problem)
        elif problem is None and before is not None:
            log.info("dra_jupyter: the hub's shared view at %s answers again", self.url)


_ROW_KEYS = tuple(DeviceModel.__annotations__)
_SHAPE_TEXTS = ("kind", "model", "memory", "mig_profile")
_SHAPE_COUNTS = ("total", "free", "held", "shared", "blocked", "tainted")


def _row(found: object) -> DeviceModel:
    """A held device's row of the service's answer, as the REST contract has it."""
    if not isinstance(found, dict) or not all(isinstance(found.get(k), str) for k in _ROW_KEYS):
        raise UnavailableError("the shared view answered a device row that is not one")
    return cast(DeviceModel, {k: found[k] for k in _ROW_KEYS})


def _shape(found: object) -> ShapeCountModel:
    """A shape's counts of the service's answer, as the REST contract has it."""
    if (
        not isinstance(found, dict)
        or not all(isinstance(found.get(k), str) for k in _SHAPE_TEXTS)
        or not all(type(found.get(k)) is int for k in _SHAPE_COUNTS)
    ):
        raise UnavailableError("the shared view answered counts that are not counts")
    return cast(ShapeCountModel, {k: found[k] for k in (*_SHAPE_TEXTS, *_SHAPE_COUNTS)})


def _token() -> str:
    return os.environ.get(TOKEN_ENV, "")


class SharedViewClient:
    """A user's server's reads of the hub's shared view at ``url`` (the service's base URL),
    with ``token``: the server's own hub API token ($JUPYTERHUB_API_TOKEN), which the hub
    resolves to the user; never a name the caller says."""

    def __init__(self, url: str, token: str, *, timeout: float = CLIENT_TIMEOUT_S) -> None:
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.timeout = timeout

    def devices(self) -> dict[str, Any]:
        """The counts per shape and this user's held devices; :class:`UnavailableError`, in
        one line, where the view does not answer."""
        body = self._call(DEVICES_PATH)
        if not all(isinstance(body.get(k), list) for k in ("shapes", "held")):
            raise self._not_json()
        return body

    def possible(self, spec: dict[str, Any], name: str) -> dict[str, Any]:
        """The view's answer to a kernel's question (``possible``, ``classes``, ``never``);
        :class:`UnavailableError` where it does not answer."""
        try:
            data = json.dumps({"request": spec, "name": name}, allow_nan=False).encode()
        except (TypeError, ValueError) as error:
            raise UnavailableError(f"a question no JSON can carry: {error}") from error
        if len(data) > MAX_ASK_BYTES:
            raise UnavailableError(f"a question of {len(data)} bytes is not sent")
        body = self._call(POSSIBLE_PATH, data)
        if not isinstance(body.get("possible"), bool):
            raise self._not_json()
        return body

    def _not_json(self) -> UnavailableError:
        return UnavailableError(
            f"the shared view at {self.url} answered something that is not its JSON"
        )

    def _call(self, path: str, data: bytes | None = None) -> dict[str, Any]:
        """``GET`` (``POST`` ``data``) ``path`` of the view, its JSON object."""
        where = f"the shared view at {self.url}"
        if not self.token:
            raise UnavailableError(f"{where}: this server has no hub API token to present")
        headers = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            urllib.parse.urljoin(self.url, path), data=data, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            with error:
                said = _message(error.read())
            raise UnavailableError(f"{where} answered {error.code}: {said}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise UnavailableError(f"{where} cannot be reached: {reason}") from error
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise self._not_json()
        return body


def _message(raw: bytes) -> str:
    """An error answer's ``message``, else its first 200 characters, on one line."""
    text = raw.decode(errors="replace")
    try:
        said = json.loads(text).get("message") or text
    except (ValueError, AttributeError):
        said = text
    return " ".join(str(said).split())[:200] or "(no message)"

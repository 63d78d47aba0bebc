"""Devices a server gets as it starts (``c.DRAExtensionApp.startup_request``): a JupyterHub
spawner that offers devices in its form (:mod:`dra_jupyter.hub.localspawner`) passes the user's
choice this way, as ``dra.request`` keywords in ``$DRA_JUPYTER_STARTUP_REQUEST``.

The server makes that claim itself, as it makes REST claims (:meth:`ClaimService.create`):
its process is the holder, its user the owner, so on the shared-machine service the user's
own limits apply (the daemon asks the kernel who calls) and the devices come back when the
server stops or its process ends. The claim's environment (``CUDA_VISIBLE_DEVICES`` and the
like) goes into the server's own environment and every kernel's.

What came of it is written, as one JSON object, to ``$DRA_JUPYTER_STARTUP_REPORT`` when that
names a file: ``{"ok": true, "claim": ..., "devices": [...], "env": {...}}``, or ``{"ok":
false, "type": "LimitError", "message": "..."}`` (the message in one line). A server whose
claim is refused does not start.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_jupyter.errors import DraJupyterError, InvalidInputError, shown
from dra_jupyter.identity import current_user
from dra_jupyter.server.claims import Caller, ClaimService
from dra_jupyter.types import ClaimRecord

REQUEST_ENV = "DRA_JUPYTER_STARTUP_REQUEST"  # a JSON object of dra.request keywords
LEASE_ENV = "DRA_JUPYTER_STARTUP_LEASE"  # a duration ("8h"), as dra.request(lease=...)
REPORT_ENV = "DRA_JUPYTER_STARTUP_REPORT"  # a file to write what came of it to
CLAIM_NAME = "server"  # the claim's name stem (the service names it <user>-<n>)


def parse_request(text: str, *, what: str = "c.DRAExtensionApp.startup_request") -> dict[str, Any]:
    """The ``dra.request`` keywords of a startup request written as a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise InvalidInputError(
            f"{what}: {shown(text)} is not JSON; write the dra.request keywords as an object, "
            'e.g. {"gpu": 1}'
        ) from err
    if not isinstance(value, dict) or not value:
        raise InvalidInputError(
            f'{what}: expected an object of dra.request keywords such as {{"gpu": 1}}, '
            f"not {shown(value)}"
        )
    return value


def claim_at_start(
    service: ClaimService, request: dict[str, Any], lease: str | None
) -> tuple[ClaimRecord, dict[str, str]]:
    """Allocate now what ``request`` asks for, for this server's user and held by this
    server's process; the claim and its devices' environment."""
    body: dict[str, Any] = {**request}
    if lease:
        body["lease"] = lease
    record = service.create(Caller(user=current_user()), body)
    return record, service.environment([record])


def report(path: str, outcome: dict[str, Any]) -> None:
    """Write ``outcome`` to ``path`` whole, or not at all (a file written beside it, then
    renamed): whoever waits for it never reads half of it."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(outcome) + "\n", encoding="utf-8")
    partial.replace(target)


def succeeded(record: ClaimRecord, env: dict[str, str]) -> dict[str, Any]:
    return {"ok": True, "claim": record.name, "devices": record.device_keys, "env": env}


def failed(err: DraJupyterError) -> dict[str, Any]:
    """The refusal in one line, without the Python API's name in front (its message)."""
    line = " ".join(part.strip() for part in err.message.splitlines() if part.strip())
    return {"ok": False, "type": type(err).__name__, "message": line}


@dataclass
class Held:
    """The claim made at start, while it lives."""

    name: str
    kept: float  # when its activity was last recorded


def claim_for_server(
    service: ClaimService, text: str, lease: str, report_to: str, log: Any
) -> tuple[Held, dict[str, str]]:
    """The claim of ``startup_request`` (``text``), made now: its environment becomes this
    server's (and its kernels', which the caller sees to), what came of it is written to
    ``report_to`` (unless empty), and a refusal stops the server."""
    try:
        request = parse_request(text)
        record, env = claim_at_start(service, request, lease or None)
    except DraJupyterError as err:
        outcome = failed(err)
        _report(report_to, outcome, log)
        log.error("dra_jupyter: the devices asked for at start: %s", outcome["message"])
        raise SystemExit(1) from err
    os.environ.update(env)  # the server's own processes (terminals) too
    held = Held(record.name, time.time())
    _report(report_to, succeeded(record, env), log)
    log.info("dra_jupyter: claim %s at start: %s", record.name, ", ".join(record.device_keys))
    return held, env


def _report(path: str, outcome: dict[str, Any], log: Any) -> None:
    if path:
        try:
            report(path, outcome)
        except OSError as err:
            log.warning("dra_jupyter: %s cannot be written: %s", path, err)

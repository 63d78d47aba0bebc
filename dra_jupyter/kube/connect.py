"""Credentials for the Kubernetes API server, and its errors in our terms.

Credentials are looked up in this order: an explicit kubeconfig file; the pod's service
account when running in a cluster (``KUBERNETES_SERVICE_HOST`` set); ``$KUBECONFIG``;
``~/.kube/config``.

Request bodies go as Go writes JSON (keys sorted, no spaces: :func:`_canonical_dumps`), not
as the client's ``json.dumps`` does: the API server keeps a claim's opaque config
(``spec.devices.config[].opaque.parameters``, a RawExtension) byte for byte as sent, while
a patch of the claim re-encodes it in Go's form, so that a claim created with any other
bytes cannot be patched at all afterwards (422 "spec: field is immutable", even for an
annotation: a shared claim marked joined, a claim kept).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ClusterError
from dra_jupyter.model.objects import Wire

MAX_MESSAGE = 300  # characters of the server's message kept in ours


def _canonical_dumps(obj: Any, **_: Any) -> str:
    """JSON as Go's encoding/json writes it: keys sorted, compact (see the module)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class _GoJSON:
    """What the client's REST layer calls ``json`` (it dumps every request body with it)."""

    dumps = staticmethod(_canonical_dumps)
    loads = staticmethod(json.loads)


setattr(rest, "json", _GoJSON)  # noqa: B010  (the attribute is the module json to the type checker)
_NO_NAMESPACE = re.compile(r'namespaces "(?P<namespace>[^"]+)" not found')


class _Model(Protocol):
    @classmethod
    def from_dict(cls, obj: dict[str, Any] | None) -> Self | None: ...


M = TypeVar("M", bound=_Model)


def to_model(cls: type[M], wire: Wire) -> M:
    """A wire dict as the client's model ``cls`` (what its typed methods take)."""
    obj = cls.from_dict(wire)
    if obj is None:
        raise ValueError(f"{cls.__name__}: empty object")
    return obj


def to_wire(api: client.ApiClient, obj: object) -> Wire:
    """A model the client returned as a wire dict (camelCase, no unset fields)."""
    wire: Wire = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return wire


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from the first credentials found (see the module's docstring).

    Close it when done (``with api_client(...) as api:``).
    """
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    no_file = not os.environ.get("KUBECONFIG") and not Path("~/.kube/config").expanduser().exists()
    if kubeconfig is None and not in_cluster and no_file:
        raise ClusterError(
            "no kubeconfig: KUBECONFIG is unset and ~/.kube/config does not exist; set "
            "KUBECONFIG or DRA_JUPYTER_KUBECONFIG (the CLI: --kubeconfig PATH)"
        )
    try:
        if kubeconfig is None and in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return client.ApiClient(configuration)
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, persist_config=False
        )
        return api
    except (config.ConfigException, OSError, ValueError) as error:
        source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ClusterError(
            f"no usable Kubernetes credentials in {source}: {_first_line(error)}; fix it, or "
            "set KUBECONFIG or DRA_JUPYTER_KUBECONFIG (the CLI: --kubeconfig PATH)"
        ) from error


def _first_line(error: object) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:MAX_MESSAGE]


def server_message(body: Any) -> str:
    """The ``message`` of a ``Status`` response body, else the body itself, shortened."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        status = json.loads(text)
    except ValueError:
        return text.strip()[:MAX_MESSAGE]
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])[:MAX_MESSAGE]
    return text.strip()[:MAX_MESSAGE]


def doing(action: str, text: str) -> str:
    """``text`` after the action it was met doing (none: ``text`` alone)."""
    return f"{action}: {text}" if action else text


def cluster_error(error: Exception, action: str, api: client.ApiClient) -> ClusterError:
    """``error`` from the client, while doing ``action``, as one clear line."""
    host = api.configuration.host
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        message = server_message(error.body) or str(error.reason)
        remedy = {
            401: "; the credentials were not accepted: check --kubeconfig",
            403: "; a cluster admin must allow it (RBAC)",
        }.get(status, "")
        missing = _NO_NAMESPACE.fullmatch(message) if status == 404 else None
        if missing is not None:  # a wrong namespace: say which, and where it is chosen
            return ClusterError(
                doing(
                    action,
                    f"namespace {missing['namespace']!r} does not exist on the cluster at "
                    f"{host}; set DRA_JUPYTER_NAMESPACE to one that does (or unset it: the "
                    "kubeconfig context's namespace, else 'default')",
                ),
                status,
            )
        return ClusterError(doing(action, f"{host} answered {status}: {message}{remedy}"), status)
    if isinstance(error, urllib3.exceptions.HTTPError):
        reason = getattr(error, "reason", None) or error
        return ClusterError(
            doing(
                action,
                f"cannot reach the API server at {host} ({_first_line(reason)}); check "
                "that it runs and that --kubeconfig points at it",
            )
        )
    raise error

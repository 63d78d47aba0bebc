"""The spawn form read from the hub's shared view (:mod:`dra_jupyter.hub.sharedview`): one
``GET <view>api/choices`` per render, answered from the view's memory, so that the hub's own
process watches no ResourceSlice or claim and a render asks nothing of kube-apiserver.

The view is the service of ``c.JupyterHub.services`` named by
``c.DRAKubeSpawner.dra_shared_view_service`` (``dra-devices``, as
:func:`~dra_jupyter.hub.sharedview.shared_view_service` makes it): the form calls it at its
own ``url`` with its ``api_token`` (the service's token, which the view knows as its own).
No cache here: each render shows the counts as the view has them now (the view answers from
memory, made again only when its watches saw a change), and a render is one local call.

Where the view does not answer, the form still renders: the choices it last had (else "no
GPU"), saying ``device counts unavailable: <why>`` in one line (:func:`.formwire.uncounted`),
and the hub's log says so once per change.

A spawn that waits is explained by the view too (:func:`explain_waiting`: one ``POST
<view>api/explain``, the same text as the hub's own :meth:`.ServerDevices.explain`, computed
on the view's watched state), so that the hub's process lists nothing to explain it; where
the view does not answer, the hub reads the cluster itself, as without a view.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub.choices import Choice
from dra_jupyter.hub.formwire import (
    CHOICES_PATH,
    EXPLAIN_PATH,
    UNCOUNTED,
    choices_of,
    explain_ask,
    explained_of,
    uncounted,
)
from dra_jupyter.kube.spawn import ServerDevices

__all__ = ["EXPLAIN_TIMEOUT_S", "FORM_TIMEOUT_S", "FormView", "explain_waiting", "form_view"]

log = logging.getLogger("dra_jupyter")

FORM_TIMEOUT_S = 5.0  # a render waits at most this for the view (then renders without counts)
# an explanation waits at most this for the view (then the hub reads the cluster itself): the
# allocator's account of every node of a large cluster takes longer than a count
EXPLAIN_TIMEOUT_S = 30.0
_VIEWS: dict[tuple[str, str], FormView] = {}
_VIEWS_LOCK = threading.Lock()


class FormView:
    """The spawn form's reads of the view at ``url`` with ``token``; the last choices it
    answered are kept for the renders while it does not answer."""

    def __init__(self, url: str, token: str, *, timeout: float = FORM_TIMEOUT_S) -> None:
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.timeout = timeout
        self._lock = threading.Lock()
        self._known: list[Choice] = []
        self._problem: str | None = None  # the last problem said in the log

    def choices(self, namespace: str) -> tuple[list[Choice], dict[str, int], str]:
        """Every choice counted by the view, the users of each shared claim of
        ``namespace`` now, and "" (counted); where the view does not answer, the choices
        without counts (:func:`.formwire.uncounted`), no sharing, and the one line why."""
        try:
            offered, sharing = choices_of(self._call(namespace))
        except UnavailableError as error:
            problem = f"{UNCOUNTED}: {error.message}"
            with self._lock:
                known, said, self._problem = list(self._known), self._problem, problem
            if said != problem:
                log.warning("dra_jupyter: the spawn form: %s", problem)
            return uncounted(known, error.message), {}, problem
        with self._lock:
            self._known, said, self._problem = offered, self._problem, None
        if said is not None:
            log.info("dra_jupyter: the spawn form: the shared view at %s answers again", self.url)
        return offered, sharing, ""

    def explain(
        self, namespace: str, claim: Mapping[str, Any], request: Mapping[str, Any] | None
    ) -> str:
        """Why ``claim`` (a spawn's, of ``namespace``) waits, as the view explains it;
        :class:`UnavailableError` where the view does not answer."""
        body = json.dumps(explain_ask(namespace, claim, request)).encode()
        return explained_of(self._call(namespace, EXPLAIN_PATH, body, EXPLAIN_TIMEOUT_S))

    def _call(
        self,
        namespace: str,
        path: str = CHOICES_PATH,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> Any:
        """GET ``path`` for ``namespace``, or POST ``body`` there (waiting ``timeout``, by
        default the form's); the answer's JSON."""
        where = f"the shared view at {self.url}"
        if not self.token:
            raise UnavailableError(f"{where}: the hub has no API token of the service to present")
        headers = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        if body is None:
            path += "?" + urllib.parse.urlencode({"namespace": namespace})
        else:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            urllib.parse.urljoin(self.url, path), data=body, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            with error:
                said = _message(error.read())
            raise UnavailableError(f"{where} answered {error.code}: {said}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise UnavailableError(f"{where} cannot be reached: {reason}") from error
        try:
            return json.loads(raw)
        except ValueError:
            raise UnavailableError(f"{where} answered something that is not its JSON") from None


def _message(raw: bytes) -> str:
    """An error answer's ``message``, else its first 200 characters, on one line."""
    text = raw.decode(errors="replace")
    try:
        said = json.loads(text).get("message") or text
    except (ValueError, AttributeError):
        said = text
    return " ".join(str(said).split())[:200] or "(no message)"


def form_view(services: object, name: str) -> FormView | None:
    """The form's reader of the service ``name`` of ``services`` (the hub's
    ``c.JupyterHub.services``), one per URL and token for the life of the process; None
    where no such service has a URL (the spawner then watches the cluster itself)."""
    if not name or not isinstance(services, list):
        return None
    entry = next(
        (s for s in services if isinstance(s, Mapping) and s.get("name") == name and s.get("url")),
        None,
    )
    if entry is None:
        return None
    key = (str(entry["url"]), str(entry.get("api_token") or ""))
    with _VIEWS_LOCK:
        found = _VIEWS.get(key)
        if found is None:
            found = _VIEWS[key] = FormView(*key)
    return found


def explain_waiting(
    view: FormView | None,
    devices: ServerDevices,
    claim: Mapping[str, Any],
    request: Mapping[str, Any] | None,
) -> str:
    """Why a spawn's ``claim`` waits (:meth:`.ServerDevices.explain`'s text): asked of the
    hub's shared ``view`` where there is one (no request of the API server), else, or where
    it does not answer (said in the hub's log), read by ``devices`` from the cluster."""
    if view is not None:
        try:
            return view.explain(devices.namespace, claim, request)
        except UnavailableError as error:
            log.warning(
                "dra_jupyter: explaining a spawn: %s; the hub reads the cluster itself",
                error.message,
            )
    return devices.explain(dict(claim), request)

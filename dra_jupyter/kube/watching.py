"""Views of the cluster kept by watching: list once, then watch from that resourceVersion.

A :class:`Reflector` keeps the objects of one kind (in one namespace, of one label selector,
when given) in memory as wire dicts (the API's JSON, as the rest of this package reads it)
and answers reads from there: no API call per read. It follows client-go's reflector:

* the first LIST asks for gzip and reads the raw JSON (no client models are built);
* the WATCH starts at that list's resourceVersion, with bookmarks, so a quiet kind's
  resourceVersion stays fresh; a watch the server ends (its timeout) is opened again from
  the last resourceVersion, with no list;
* ``410 Gone`` (an ApiException, or an ``ERROR`` event in the stream) lists once more;
* any other error (403, 500, a lost connection, a garbled stream) is counted, said in one
  log line per new error, and retried after a backoff with full jitter
  (:data:`FIRST_BACKOFF_S` doubling to :data:`MAX_BACKOFF_S`) from the last resourceVersion;
* nothing lists again on a timer.

Its counters (:class:`WatchStats`: lists, relists, watches, restarts, errors, objects) are
plain numbers for a metrics collector. Its objects are a :class:`View`: changes reach
handlers (:meth:`View.add_handler`) as ``ADDED``, ``MODIFIED`` or ``DELETED`` with the
object, and what this process wrote itself shows at once (:meth:`View.applied`,
:meth:`View.deleted`), before its watch event arrives: read-your-writes.

:func:`shared` gives one reflector per API client, kind, namespace and selector in a process,
started on first use and stopped at exit (:func:`stop_all`).

Watch streams go through :class:`kubernetes.watch.Watch`, with one change
(:class:`_RawWatch`): it builds no model of the objects, and an ``ERROR`` event still
becomes an ApiException (its ``deserialize=False`` would fail on one, reading a key only
model building sets).
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import cluster_error
from dra_jupyter.model.objects import Wire

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "KINDS",
    "THREAD_PREFIX",
    "Handler",
    "Kind",
    "Reflector",
    "View",
    "WatchStats",
    "running",
    "shared",
    "stop_all",
]

log = logging.getLogger("dra_jupyter")

WATCH_TIMEOUT_S = 300  # a watch lasts this long to twice this (client-go's 5 to 10 minutes)
FIRST_BACKOFF_S = 0.2  # the first wait after an error; doubled per error in a row
# the longest wait between retries: an API server back after any outage is watched again
# within this long (what a lab shows "unavailable" for after it is back)
MAX_BACKOFF_S = 8.0
SHORT_WATCH_S = 1.0  # a watch that ends sooner with no event is an error (client-go's rule)
CONNECT_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 120.0  # reading one LIST (5 MB of slices on a big cluster)
GONE = 410
THREAD_PREFIX = "watch "  # a reflector's thread's name: this and what it watches

Handler = Callable[[str, Wire], None]  # (ADDED | MODIFIED | DELETED, the object)
Events = list[tuple[str, Wire]]


@dataclass(frozen=True)
class Kind:
    """A kind the reflector can keep: its plural name, its API group's client class, and the
    methods that list it in one namespace (None: cluster-scoped) and in all; ``custom``: a
    custom resource's group and version (its methods take them, and the plural, first)."""

    resource: str
    api: Callable[[ApiClient], Any]
    namespaced: str | None
    cluster: str
    custom: tuple[str, str] | None = None

    @classmethod
    def custom_resource(
        cls, group: str, version: str, plural: str, *, namespaced: bool = True
    ) -> Kind:
        """A CRD's resource (a JobSet, a Kueue Workload), through ``CustomObjectsApi``."""
        return cls(
            plural,
            client.CustomObjectsApi,
            "list_namespaced_custom_object" if namespaced else None,
            "list_cluster_custom_object",
            (group, version),
        )

    def lister(self, api: ApiClient, namespace: str | None) -> Callable[..., Any]:
        """The method that lists (and, with ``watch=True``, watches) the view's objects."""
        group = self.api(api)
        plural = (self.resource,) if self.custom else ()
        if namespace is None:
            return functools.partial(getattr(group, self.cluster), *(self.custom or ()), *plural)
        if self.namespaced is None:
            raise ValueError(f"{self.resource} are not namespaced; watch them with no namespace")
        method = getattr(group, self.namespaced)
        return functools.partial(method, *(self.custom or ()), namespace, *plural)


KINDS = {
    kind.resource: kind
    for kind in (
        Kind(
            "resourceclaims",
            client.ResourceV1Api,
            "list_namespaced_resource_claim",
            "list_resource_claim_for_all_namespaces",
        ),
        Kind("resourceslices", client.ResourceV1Api, None, "list_resource_slice"),
        Kind("deviceclasses", client.ResourceV1Api, None, "list_device_class"),
        Kind("devicetaintrules", client.ResourceV1Api, None, "list_device_taint_rule"),
        Kind("pods", client.CoreV1Api, "list_namespaced_pod", "list_pod_for_all_namespaces"),
        Kind("jobs", client.BatchV1Api, "list_namespaced_job", "list_job_for_all_namespaces"),
        # JobSet's (kube.runs.jobsets: its group and version), watched only where served
        Kind.custom_resource("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    )
}


@dataclass(frozen=True)
class WatchStats:
    """What a reflector did since it started (counts) and holds now."""

    lists: int = 0  # LIST requests: the first one and each relist
    relists: int = 0  # lists again after a 410 Gone
    watches: int = 0  # WATCH requests opened
    restarts: int = 0  # watches opened after the first (one ended: its timeout, an error)
    errors: int = 0  # failed requests and broken streams (each retried after a backoff)
    objects: int = 0  # objects in the view now


class _GoneError(Exception):
    """The watch's resourceVersion is too old: list again."""


class _BrokenError(Exception):
    """The stream said something that is not a watch event, or ended at once."""


class _RawWatch(watch.Watch):
    """:class:`kubernetes.watch.Watch` that keeps each event's object as the JSON dict it
    was (no return type: ``unmarshal_event`` builds no model)."""

    def get_return_type(self, func: Any) -> None:
        return None


def _version(value: object) -> int | None:
    """A resourceVersion as a number, where it is one (etcd's revisions are; the API says
    to treat them as opaque, so a version that is not one is never compared)."""
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _newer(ours: object, theirs: object) -> bool:
    """Whether a local write at ``ours`` is newer than what the server sent at ``theirs``."""
    a, b = _version(ours), _version(theirs)
    return a is not None and b is not None and a > b


class View:
    """Objects of one kind kept in memory, keyed by namespace and name, thread-safe: what a
    :class:`Reflector` fills from the API server, with this process's own writes on top
    until the server's news catch up with them, and the handlers that hear each change.

    Objects are the API's JSON as dicts, shared with every reader: read them, never change
    them.
    """

    def __init__(self, what: str, namespace: str | None = None) -> None:
        self.what = what  # in words, for logs: "resourceclaims in namespace team-a"
        self.namespace = namespace
        self._lock = threading.Condition()
        self._items: dict[str, Wire] = {}
        # this process's own writes, newer than what the server sent so far: key ->
        # (resourceVersion, the object or None for a deletion)
        self._local: dict[str, tuple[str, Wire | None]] = {}
        self._rv: str | None = None  # of the data held; None: nothing listed yet
        self._synced = False
        self._handlers: list[Handler] = []

    def list(self, labels: Mapping[str, str] | None = None) -> list[Wire]:
        """The objects held now (those whose labels include ``labels``), by namespace and
        name."""
        with self._lock:
            items = [self._items[k] for k in sorted(self._items)]
        if not labels:
            return items
        return [o for o in items if _has_labels(o, labels)]

    def get(self, name: str, namespace: str | None = None) -> Wire | None:
        """The object ``name`` (in ``namespace``, else the view's), or None."""
        with self._lock:
            return self._items.get(_key(namespace or self.namespace, name))

    @property
    def synced(self) -> bool:
        """Whether the first list arrived (it stays so through later errors)."""
        with self._lock:
            return self._synced

    @property
    def resource_version(self) -> str | None:
        with self._lock:
            return self._rv

    def add_handler(self, handler: Handler) -> Callable[[], None]:
        """Call ``handler(event, obj)`` on each change of the view (on the reflector's thread,
        or on the thread of :meth:`applied` and :meth:`deleted`); returns its remover. A
        relist reports what changed between the views. A handler's error is logged."""
        with self._lock:
            self._handlers.append(handler)

        def remove() -> None:
            with self._lock:
                if handler in self._handlers:
                    self._handlers.remove(handler)

        return remove

    def applied(self, obj: Wire) -> None:
        """This process created or changed ``obj`` (the server's answer): show it now, until
        the watch brings it or something newer."""
        meta = obj.get("metadata") or {}
        key = _key(meta.get("namespace"), str(meta.get("name")))
        with self._lock:
            held = self._items.get(key)
            if held is not None and _newer(_rv_of(held), _rv_of(obj)):
                return  # the watch is ahead already
            self._local[key] = (_rv_of(obj), obj)
            self._items[key] = obj
            events = [("MODIFIED" if held is not None else "ADDED", obj)]
        self._fire(events)

    def deleted(self, name: str, namespace: str | None = None) -> None:
        """This process deleted ``name``: hide it now. Events older than the object held
        are ignored until the watch says it is gone; a newer one shows it again (a
        finalizer keeps it while its ``deletionTimestamp`` is set)."""
        key = _key(namespace or self.namespace, name)
        with self._lock:
            held = self._items.pop(key, None)
            if held is None:
                return
            self._local[key] = (_rv_of(held), None)
            events = [("DELETED", held)]
        self._fire(events)

    def _replace(self, fresh: dict[str, Wire], rv: str) -> None:
        """A list's objects (at ``rv``) become the view; handlers hear what changed."""
        events: Events = []
        with self._lock:
            for key in list(self._local):
                if self._stale(key, fresh.get(key), rv):
                    local = self._local[key][1]
                    if local is None:
                        fresh.pop(key, None)
                    else:
                        fresh[key] = local
                else:
                    del self._local[key]
            events.extend(("DELETED", o) for k, o in self._items.items() if k not in fresh)
            for key, obj in fresh.items():
                was = self._items.get(key)
                if was is None:
                    events.append(("ADDED", obj))
                elif _rv_of(was) != _rv_of(obj):
                    events.append(("MODIFIED", obj))
            self._items = fresh
            self._rv = rv
            self._synced = True
            self._lock.notify_all()
        self._fire(events)

    def _apply(self, kind: str, obj: Wire) -> None:
        """A watch event: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""
        rv = _rv_of(obj)
        events: Events = []
        with self._lock:
            if rv:
                self._rv = rv
            if kind == "BOOKMARK":
                return
            meta = obj.get("metadata") or {}
            key = _key(meta.get("namespace"), str(meta.get("name")))
            if key in self._local:
                if self._stale(key, obj, None):
                    return  # older than this process's own write (a DELETED is newer)
                del self._local[key]
            if kind == "DELETED":
                held = self._items.pop(key, None)
                if held is not None:
                    events.append(("DELETED", obj))
            else:
                held = self._items.get(key)
                if held is None or _rv_of(held) != rv:
                    self._items[key] = obj
                    events.append(("ADDED" if held is None else "MODIFIED", obj))
        self._fire(events)

    def _stale(self, key: str, theirs: Wire | None, listed_at: str | None) -> bool:
        """Whether what the server sent of ``key`` (``theirs``, None: not in the list made
        at ``listed_at``) is older than this process's own write of it. A deletion here
        outdates the version it deleted and older ones; a write, older versions, and an
        object missing from a list made before it."""
        local_rv, local = self._local[key]
        if theirs is None:
            return local is not None and _newer(local_rv, listed_at)
        if local is None:
            return _rv_of(theirs) == local_rv or _newer(local_rv, _rv_of(theirs))
        return _newer(local_rv, _rv_of(theirs))

    def _fire(self, events: Events) -> None:
        with self._lock:
            handlers = list(self._handlers)
        for event, obj in events:
            for handler in handlers:
                try:
                    handler(event, obj)
                except Exception as error:  # one handler never stops the view
                    log.warning(
                        "dra_jupyter: watching %s: a handler failed on %s: %s: %s",
                        self.what,
                        event,
                        type(error).__name__,
                        error,
                    )


class Reflector(View):
    """The :class:`View` of one kind (one namespace, one label selector, when given), kept
    by listing once and then watching in a daemon thread (:meth:`start`, :meth:`stop`)."""

    def __init__(
        self,
        api: ApiClient,
        kind: str | Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        watch_timeout: float = WATCH_TIMEOUT_S,
        first_backoff: float = FIRST_BACKOFF_S,
        max_backoff: float = MAX_BACKOFF_S,
    ) -> None:
        self.kind = KINDS[kind] if isinstance(kind, str) else kind
        where = f" in namespace {namespace}" if namespace else ""
        selected = f" ({label_selector})" if label_selector else ""
        super().__init__(f"{self.kind.resource}{where}{selected}", namespace)
        self.api = api
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self._list_func = self.kind.lister(api, namespace)
        self._error: str | None = None
        self._stats = dict.fromkeys(("lists", "relists", "watches", "errors"), 0)
        self._progress = False  # the current watch brought an event (the backoff starts over)
        self._stopping = threading.Event()
        self._resume_from: str | None = None  # restart(): the resourceVersion to watch from
        self._resumed = threading.Event()
        self._watch: _RawWatch | None = None
        self._thread: threading.Thread | None = None
        self.watched_once = False  # the API server took one of its WATCHes

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the first list arrived (True), or failed, or ``timeout`` passed (False;
        a failed list is tried again in the background, see ``error``)."""
        with self._lock:
            self._lock.wait_for(lambda: self._synced or self._error is not None, timeout)
            return self._synced

    @property
    def error(self) -> str | None:
        """The last error, in one line, until a request succeeds again; None while well."""
        with self._lock:
            return self._error

    def stats(self) -> WatchStats:
        with self._lock:
            restarts = max(0, self._stats["watches"] - 1)
            return WatchStats(**self._stats, restarts=restarts, objects=len(self._items))

    # --- the loop ----------------------------------------------------------------------------

    def start(self) -> Reflector:
        """Start listing and watching in a daemon thread (once); returns the reflector."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"{THREAD_PREFIX}{self.what}", daemon=True
                )
                self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End the watch and the thread (waits up to ``timeout`` seconds)."""
        self._stopping.set()
        self._interrupt_until(lambda: self._thread is None or not self._thread.is_alive(), timeout)

    def restart(self, resource_version: str | None = None, timeout: float = 5.0) -> None:
        """End the open watch as a lost connection would, and watch again from
        ``resource_version`` (default: the last one seen); waits until the loop took it."""
        with self._lock:
            self._resume_from = resource_version or self._rv or ""
            self._resumed.clear()
        self._interrupt_until(self._resumed.is_set, timeout)

    def _interrupt_until(self, done: Callable[[], bool], timeout: float) -> None:
        """Close the open watch's connection until ``done()`` (a watch being opened misses
        the first close)."""
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            current = self._watch
            if current is not None:
                current.stop()  # type: ignore[no-untyped-call]
            if self._thread is not None:
                self._thread.join(0.05)
            else:
                time.sleep(0.05)

    def _run(self) -> None:
        failures = 0  # errors in a row: the backoff doubles with each
        gone = 0  # 410s in a row: a second one before any event backs off like an error
        while not self._stopping.is_set():
            self._progress = False
            try:
                if self.resource_version is None:
                    self._list()
                self._watch_once()
            except _GoneError:
                gone += 1
                if gone > 1:
                    self._wait(gone - 1)
                with self._lock:
                    self._rv = None
                    self._stats["relists"] += 1
                log.info("dra_jupyter: watching %s: 410 Gone, listing again", self.what)
            except Exception as error:  # the view retries whatever failed
                if self._stopping.is_set():
                    break
                if not self._take_restart():
                    failures = 0 if self._progress else failures
                    failures += 1
                    self._failed(error)
                    self._wait(failures)
                continue
            if self._progress:
                failures, gone = 0, 0
            self._take_restart()

    def _take_restart(self) -> bool:
        """Apply a pending :meth:`restart` (True), else False."""
        with self._lock:
            if self._resume_from is None:
                return False
            self._rv = self._resume_from or self._rv
            self._resume_from = None
        self._resumed.set()
        return True

    def _wait(self, failures: int) -> None:
        """Full jitter: a random wait up to the doubled backoff (``stop`` ends it)."""
        ceiling = min(self.max_backoff, self.first_backoff * 2 ** (failures - 1))
        self._stopping.wait(random.uniform(0, ceiling))  # jitter, no secret

    def _failed(self, error: Exception) -> None:
        """Count the error; say it in one log line when it is new (not each retry)."""
        if isinstance(error, _BrokenError):
            line = f"watching {self.what}: {error}"
        else:
            line = str(cluster_error(error, f"watching {self.what}", self.api))
        with self._lock:
            self._stats["errors"] += 1
            repeated, self._error = self._error == line, line
            self._lock.notify_all()
        if repeated:
            log.debug("dra_jupyter: %s (again)", line)
        else:
            log.warning("dra_jupyter: %s; retrying with backoff", line)

    def _recovered(self) -> None:
        with self._lock:
            was, self._error = self._error, None
        if was is not None:
            log.info("dra_jupyter: watching %s again", self.what)

    def _selection(self) -> dict[str, Any]:
        return {"label_selector": self.label_selector} if self.label_selector else {}

    def _list(self) -> None:
        """LIST (gzip, raw JSON) and replace the view; handlers hear what changed."""
        with self._lock:
            self._stats["lists"] += 1
        response = self._list_func(
            **self._selection(),
            _preload_content=False,
            _headers={"Accept-Encoding": "gzip"},
            _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S),
        )
        try:
            body = response.read()  # urllib3 undoes the gzip
        except BaseException:
            response.close()
            raise
        response.release_conn()
        try:
            listing = json.loads(body)
            rv = str(listing["metadata"]["resourceVersion"])
            items = listing.get("items") or []
        except (ValueError, KeyError, TypeError) as error:
            raise _BrokenError(f"the LIST answer is no list ({type(error).__name__})") from error
        kind = str(listing.get("kind", "")).removesuffix("List")
        fresh: dict[str, Wire] = {}
        for item in items:
            item.setdefault("kind", kind)  # a list's items leave them out; a GET has them
            item.setdefault("apiVersion", listing.get("apiVersion"))
            meta = item.get("metadata") or {}
            fresh[_key(meta.get("namespace"), str(meta.get("name")))] = item
        self._replace(fresh, rv)
        self._recovered()

    def _opened(self, **kwargs: Any) -> Any:
        """The WATCH request: once the API server took it, the view is well again (a quiet
        kind may send no event for minutes)."""
        response = self._list_func(**kwargs)
        self.watched_once = True
        self._recovered()
        return response

    def _watch_once(self) -> None:
        """One WATCH from the last resourceVersion, until the server ends it (returns), a 410
        (``_GoneError``), or an error (raised)."""
        timeout = int(self.watch_timeout * (1 + random.random()))  # spread
        with self._lock:
            self._stats["watches"] += 1
        self._watch = _RawWatch()  # type: ignore[no-untyped-call]
        stream = self._watch.stream(  # type: ignore[no-untyped-call]
            self._opened,
            **self._selection(),
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=timeout,
            _request_timeout=(CONNECT_TIMEOUT_S, timeout + 30),
        )
        opened, seen = time.monotonic(), 0
        try:
            for event in _events(stream):
                seen += 1
                self._progress = True
                self._apply(*_event(event))
                if self._stopping.is_set() or self._resume_from is not None:
                    break
        except ApiException as error:
            if error.status == GONE:
                raise _GoneError from error
            raise
        finally:
            stream.close()
            self._watch = None
        ours = self._stopping.is_set() or self._resume_from is not None
        if seen == 0 and time.monotonic() - opened < SHORT_WATCH_S and not ours:
            raise _BrokenError("the API server ended the watch at once, with no event")
        self._recovered()


def _key(namespace: object, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _rv_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _has_labels(obj: Wire, labels: Mapping[str, str]) -> bool:
    held = (obj.get("metadata") or {}).get("labels") or {}
    return all(held.get(k) == v for k, v in labels.items())


def _events(stream: Iterator[Any]) -> Iterator[Mapping[str, Any]]:
    """The stream's events; a line that is no JSON object (the client gives None for one
    that is no JSON, fails on one with no object) is ``_BrokenError``."""
    while True:
        try:
            event = next(stream)
        except StopIteration:
            return
        except (KeyError, TypeError, ValueError) as error:
            raise _BrokenError(f"the watch sent no event ({type(error).__name__})") from error
        if not isinstance(event, dict):
            raise _BrokenError("the watch sent a line that is no JSON object")
        yield event


def _event(event: Mapping[str, Any]) -> tuple[str, Wire]:
    """The type and object of a watch event (one we do not know is ``_BrokenError``)."""
    kind, obj = event.get("type"), event.get("object")
    if not isinstance(obj, dict) or kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise _BrokenError(f"the watch sent no event ({str(kind)[:40]})")
    return str(kind), obj


# --- one reflector per view in a process ------------------------------------------------------

_shared: dict[tuple[ApiClient, str, str | None, str | None], Reflector] = {}
_shared_lock = threading.Lock()


def shared(
    api: ApiClient,
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> Reflector:
    """This process's reflector of ``kind`` through ``api`` (in ``namespace``, of
    ``label_selector``), started on first use; every caller shares it."""
    key = (api, kind, namespace, label_selector)
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            found = Reflector(api, kind, namespace=namespace, label_selector=label_selector)
            _shared[key] = found.start()
        return found


def running(
    api: ApiClient,
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> Reflector | None:
    """The shared reflector of that view if one runs (what a write tells), else None."""
    with _shared_lock:
        return _shared.get((api, kind, namespace, label_selector))


def of_api(api: ApiClient) -> list[Reflector]:
    """The shared reflectors running through ``api`` now (for their counters)."""
    with _shared_lock:
        return [r for k, r in _shared.items() if k[0] is api]


def stop_all(timeout: float = 5.0, *, api: ApiClient | None = None) -> None:
    """Stop every shared reflector (at exit, and in tests), or those through ``api``
    (a backend's ``close``)."""
    with _shared_lock:
        keys = [k for k in _shared if api is None or k[0] is api]
        stopping = [_shared.pop(k) for k in keys]
    for reflector in stopping:
        reflector.stop(timeout)


atexit.register(stop_all)

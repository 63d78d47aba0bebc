"""The watched views a long-lived process reads (``settings.watch``: the Jupyter server):
of its namespace, dra-jupyter's claims, its pods (kernels' and runs') and its runs' Jobs,
selected by our labels; of the cluster, for the Devices panel, the ResourceSlices,
DeviceClasses and DeviceTaintRules and every namespace's claims (who holds devices). Each is
one shared :class:`~dra_jupyter.kube.watching.Reflector` of the process (list once, then
watch). What the server reads of them in steady state (its REST reads, its checks and sweep,
``GET /dra/api/runs``, ``GET /dra/api/devices``) is answered from memory.

Each change a view hears is told to the listeners of :meth:`NamespaceViews.on_change` by
topic (:data:`TOPICS`): what the server pushes to JupyterLab, so that an open lab need not
poll.

A view answers once its first list arrived and while it is well. Before that (10 s at most,
or a first list that failed), and where its WATCH was never taken (an account that may
list but not watch), :meth:`NamespaceViews.view` says None and the caller reads from the
API server as it did before. A view that watched and is in error since (the API
server gone, a 403 after an RBAC change) answers neither stale nor by a LIST of each read
(each server's readers at an API server just back): the read is a
:class:`~dra_jupyter.errors.ClusterError` that says in one line what is unavailable and why
(``device counts unavailable: watching resourceslices: ... answered 403: ...``) until the
view's own retries bring it back. Once :meth:`NamespaceViews.close` stopped them, none is
started again (a read after it lists).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from dra_jupyter.errors import ClusterError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kube import watching
from dra_jupyter.kube.deletions import Deletions
from dra_jupyter.kube.watching import Reflector
from dra_jupyter.types import USER_LABEL

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.accounting.prometheus import ViewCounts
    from dra_jupyter.types import Ended

__all__ = [
    "CLAIMS",
    "CLASSES",
    "JOBS",
    "JOBSETS",
    "PODS",
    "RULES",
    "SELECTORS",
    "SLICES",
    "SYNC_WAIT_S",
    "TOPICS",
    "NamespaceViews",
]

SYNC_WAIT_S = 10.0  # the first read of a view waits this long for its first list
CLAIMS, PODS, JOBS, JOBSETS = "resourceclaims", "pods", "jobs", "jobsets"
SLICES, CLASSES, RULES = "resourceslices", "deviceclasses", "devicetaintrules"
# the labels of kube.runs.jobs and kube.kernels.pods (which read these views: not imported)
COMPONENT_LABEL, RUN_COMPONENT = "dra-jupyter/component", "run"
# what each view of the namespace holds: dra-jupyter's claims (every user's, every run's),
# its pods (a kernel's, a run's: both carry the component label), its runs' Jobs
SELECTORS = {
    CLAIMS: USER_LABEL,
    PODS: COMPONENT_LABEL,
    JOBS: f"{COMPONENT_LABEL}={RUN_COMPONENT}",
    JOBSETS: f"{COMPONENT_LABEL}={RUN_COMPONENT}",
}
# what a change of a namespace's view is news of (kernels' pods are runs' too: one topic);
# a change of any cluster-wide view is news of the devices
TOPICS = {CLAIMS: "claims", PODS: "runs", JOBS: "runs"}
# views of a CRD a cluster may not serve (JobSet's): started by a read only, once discovery
# said it is served (kube.runs), never by a listener
OPTIONAL_TOPICS = {JOBSETS: "runs"}
DEVICES_TOPIC = "devices"
# what a read says is unavailable while a view is in error, by view
UNAVAILABLE = {CLAIMS: "claims", PODS: "runs and kernels", JOBS: "runs", JOBSETS: "runs"}
DEVICES_UNAVAILABLE = "device counts"


class NamespaceViews:
    """The views of one namespace through one API client, where ``enabled``; shared by a
    backend and its twins for other owners (``with_owner``)."""

    def __init__(
        self,
        api: Callable[[], ApiClient],
        namespace: str,
        *,
        enabled: bool,
        cluster_wide: bool = True,
    ) -> None:
        self._api = api  # the backend's client, made on first use
        self.namespace = namespace
        self.enabled = enabled
        # False: the cluster's views are never started (the hub's shared view keeps them:
        # dra_jupyter.kube.sharedview); the namespace's are
        self.cluster_wide = cluster_wide
        self.closed = False
        self.started = False  # a view was asked for (close has something to stop)
        # the inventory made of the cluster's views, and their resourceVersions then
        self._inventory: tuple[tuple[str | None, ...], Inventory] | None = None
        self._listeners: list[Callable[[str], None]] = []  # on_change's
        self._hooked: weakref.WeakSet[Reflector] = weakref.WeakSet()  # views told of
        self._listen_lock = threading.Lock()
        # the last state of the claims the claims view heard deleted (:mod:`.deletions`)
        self.deletions = Deletions()
        self._kept: weakref.WeakSet[Reflector] = weakref.WeakSet()  # views it hears

    def view(self, kind: str) -> Reflector | None:
        """The namespace's view of ``kind`` (:data:`SELECTORS`), started on first use, once
        synced and while well; None: read from the API server (not watching, closed, not
        synced within :data:`SYNC_WAIT_S`, never watched); a ``ClusterError`` while in
        error after it watched (the module's doc)."""
        if not self.enabled or self.closed:
            return None
        self.started = True
        found = self._shared(kind)
        if kind == CLAIMS:
            self._keep_deletions(found)
        self._hook(found, TOPICS.get(kind) or OPTIONAL_TOPICS[kind])
        return _answering(found, UNAVAILABLE[kind])

    def _keep_deletions(self, view: Reflector) -> None:
        with self._listen_lock:
            if view in self._kept:
                return
            self._kept.add(view)
        view.add_handler(self.deletions.hear)

    def deleted_claim(self, name: str) -> Ended | None:
        """Why the claim ``name`` of the namespace went, as the claims view heard it
        (:mod:`.deletions`); None where it heard nothing of it, or nothing is watched."""
        if not self._kept:
            return None
        return self.deletions.ended(name)

    def _shared(self, kind: str) -> Reflector:
        return watching.shared(
            self._api(), kind, namespace=self.namespace, label_selector=SELECTORS[kind]
        )

    def cluster(self, kind: str) -> Reflector | None:
        """The cluster's view of every object of ``kind`` (every namespace's, for claims),
        as :meth:`view` says it; None where this process keeps no cluster-wide view."""
        if not self.enabled or self.closed or not self.cluster_wide:
            return None
        self.started = True
        found = watching.shared(self._api(), kind)
        self._hook(found, DEVICES_TOPIC)
        return _answering(found, DEVICES_UNAVAILABLE)

    def inventory(self) -> Inventory | None:
        """The cluster's slices, classes and taint rules from their views (made again only
        when one of them changed); None where one does not answer (:meth:`view`)."""
        views = [self.cluster(kind) for kind in (SLICES, CLASSES, RULES)]
        if any(v is None for v in views):
            return None
        slices, classes, rules = [v for v in views if v is not None]
        versions = tuple(v.resource_version for v in (slices, classes, rules))
        made = self._inventory
        if made is not None and made[0] == versions:
            return made[1]
        host = self._api().configuration.host
        inventory = Inventory(
            name="kubernetes",
            description=f"the cluster at {host}",
            slices=tuple(slices.list()),
            device_classes=tuple(classes.list()),
            simulated=False,
            source=f"kubernetes:{host}",
            taint_rules=tuple(rules.list()),
        )
        self._inventory = (versions, inventory)
        return inventory

    def running(self, kind: str) -> Reflector | None:
        """The view of ``kind`` if one runs (what a write tells: read-your-writes); a write
        starts none."""
        if not self.started:
            return None
        return watching.running(
            self._api(), kind, namespace=self.namespace, label_selector=SELECTORS[kind]
        )

    def stats(self) -> list[ViewCounts]:
        """The counters of every view of this API client running now (of the namespace
        and of the cluster), by resource and scope, as plain data; starts none."""
        if not self.started:
            return []
        from dra_jupyter.accounting.prometheus import ViewCounts  # noqa: PLC0415

        counted = []
        for reflector in watching.of_api(self._api()):
            stats = reflector.stats()
            counted.append(
                ViewCounts(
                    resource=reflector.kind.resource,
                    scope="namespace" if reflector.namespace else "cluster",
                    lists=stats.lists,
                    relists=stats.relists,
                    watches=stats.watches,
                    restarts=stats.restarts,
                    errors=stats.errors,
                    objects=stats.objects,
                )
            )
        return counted

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        """Call ``listener(topic)`` (:data:`TOPICS`, ``devices``) on each change a view
        hears, on its thread: the namespace's views are started for it, the cluster's are
        told of once a read started them; what removes it. None where nothing is watched."""
        if not self.enabled or self.closed:
            return None
        with self._listen_lock:
            self._listeners.append(listener)
        self.started = True
        for kind, topic in TOPICS.items():
            self._hook(self._shared(kind), topic)

        def remove() -> None:
            with self._listen_lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _hook(self, view: Reflector, topic: str) -> None:
        """Tell the listeners of ``view``'s changes as ``topic``, once a view (and only
        while anyone listens: no handler is added for nobody)."""
        with self._listen_lock:
            if not self._listeners or view in self._hooked:
                return
            self._hooked.add(view)
        view.add_handler(lambda _event, _obj: self._tell(topic))

    def _tell(self, topic: str) -> None:
        with self._listen_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(topic)

    def close(self) -> None:
        """Stop every view of this API client (of the namespace and of the cluster); none
        starts again."""
        self.closed = True
        if self.started:
            watching.stop_all(api=self._api())


def _answering(view: Reflector, what: str) -> Reflector | None:
    """``view`` once synced and while well; None where it did not sync or was never
    watched (an account that may list but not watch: read from the API server); a
    ``ClusterError`` saying ``what`` is unavailable while it is in error after it watched."""
    if not view.wait_synced(SYNC_WAIT_S):
        return None
    error = view.error
    if error is None:
        return view
    if not view.watched_once:
        return None
    raise ClusterError(f"{what} unavailable: {error}; retrying")

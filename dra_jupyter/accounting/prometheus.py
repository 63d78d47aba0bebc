"""The book as Prometheus reads it: a collector (``prometheus_client``'s) that reads a
:class:`Snapshot` at every scrape and answers counters of GPU-seconds by user, group (the
user's first) and model, and gauges of devices by state and of the requests waiting; and,
where the backend watches the cluster (Kubernetes), its watched views' counters by resource
and scope (:class:`ViewCounts`).

No global state: each exposition (the server extension's handler, the service's port) makes
its own :class:`~prometheus_client.CollectorRegistry` with one :class:`UsageCollector`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dra_jupyter.accounting.book import Book

LABELS = ("user", "group", "model")
CONTENT_TYPE = CONTENT_TYPE_LATEST  # text/plain; version=...; charset=utf-8
# name (prometheus_client adds _total to a counter's), help, the Totals field it counts
COUNTERS = (
    ("dra_jupyter_held_gpu_seconds", "GPU-equivalent seconds held by claims", "held"),
    (
        "dra_jupyter_active_gpu_seconds",
        "GPU-equivalent seconds the held GPUs were active",
        "active",
    ),
    ("dra_jupyter_idle_gpu_seconds", "GPU-equivalent seconds the held GPUs were idle", "idle"),
    (
        "dra_jupyter_unknown_gpu_seconds",
        "GPU-equivalent seconds held whose GPU use is not known",
        "unknown",
    ),
    ("dra_jupyter_energy_joules", "Energy the held devices used, as reported", "energy"),
)

# name (a counter's without _total), help, the ViewCounts field it counts
VIEW_COUNTERS = (
    ("dra_jupyter_watch_lists", "LISTs of a watched view: its first and each relist", "lists"),
    ("dra_jupyter_watch_relists", "LISTs of a watched view again after a 410 Gone", "relists"),
    ("dra_jupyter_watch_restarts", "WATCHes of a view opened after its first", "restarts"),
    ("dra_jupyter_watch_errors", "Failed requests and broken streams of a view", "errors"),
)
VIEW_LABELS = ("resource", "scope")


@dataclass(frozen=True)
class ViewCounts:
    """What one watched view of the cluster did since it started, and holds now: plain
    data, read from its reflector (:class:`dra_jupyter.kube.watching.WatchStats`).
    ``scope``: ``namespace`` (one namespace's) or ``cluster`` (every namespace's, or a
    cluster-scoped kind's)."""

    resource: str
    scope: str
    lists: int = 0
    relists: int = 0
    watches: int = 0
    restarts: int = 0
    errors: int = 0
    objects: int = 0


@dataclass(frozen=True)
class Snapshot:
    """What a scrape reads: the whole book (from its first interval) at ``book.now``, each
    device's model and state (``held``, ``free``), and how many requests wait in line;
    ``book`` None where the backend keeps none (Kubernetes: then neither devices nor
    waiters are said). ``views``: the watched views' counters, where the backend has some."""

    book: Book | None
    devices: Sequence[tuple[str, str]]
    waiters: int
    views: Sequence[ViewCounts] = ()


class UsageCollector(Collector):
    """Reads ``read()`` at each scrape (see the module)."""

    def __init__(self, read: Callable[[], Snapshot]) -> None:
        self._read = read

    def describe(self) -> list[Metric]:
        return []  # registering reads nothing; every scrape reads the book

    def collect(self) -> Iterator[Metric]:
        snap = self._read()
        if snap.book is not None:
            yield from _usage(snap.book, snap)
        if snap.views:
            yield from _views(snap.views)


def _usage(book: Book, snap: Snapshot) -> Iterator[Metric]:
    """The book's counters by user, group and model; the devices' and waiters' gauges."""
    rows = book.report(("user", "primary_group", "model"))
    for name, text, field in COUNTERS:
        family = CounterMetricFamily(name, text, labels=LABELS)
        for row in rows:
            family.add_metric(list(row.key), getattr(row.totals, field))
        yield family
    devices = GaugeMetricFamily(
        "dra_jupyter_devices", "Devices by model and state", labels=("model", "state")
    )
    for (model, state), count in sorted(Counter(snap.devices).items()):
        devices.add_metric([model, state], count)
    yield devices
    yield GaugeMetricFamily(
        "dra_jupyter_waiters", "Requests waiting in line for devices", value=snap.waiters
    )


def _views(views: Sequence[ViewCounts]) -> Iterator[Metric]:
    """The watched views' counters and the gauge of the objects each holds."""
    ordered = sorted(views, key=lambda v: (v.resource, v.scope))
    for name, text, field in VIEW_COUNTERS:
        family = CounterMetricFamily(name, text, labels=VIEW_LABELS)
        for view in ordered:
            family.add_metric([view.resource, view.scope], getattr(view, field))
        yield family
    objects = GaugeMetricFamily(
        "dra_jupyter_watch_objects", "Objects a watched view holds now", labels=VIEW_LABELS
    )
    for view in ordered:
        objects.add_metric([view.resource, view.scope], view.objects)
    yield objects


def exposition(read: Callable[[], Snapshot]) -> bytes:
    """The text format of one scrape of ``read``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(UsageCollector(read))
    return generate_latest(registry)


def registry_of(read: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry of its own with one collector over ``read`` (for an HTTP server)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(UsageCollector(read))
    return registry

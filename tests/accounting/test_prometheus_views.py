"""The watched views' counters in the Prometheus exposition (issue #38, item 6): per view,
by resource and scope, the LISTs, relists, watch restarts and errors as counters and the
objects held as a gauge; a backend that keeps no book but watches (Kubernetes) answers
those only, one that keeps a book and watches nothing (the local ledger) none of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dra_jupyter.accounting.book import Book
from dra_jupyter.accounting.prometheus import Snapshot, ViewCounts, exposition
from dra_jupyter.api import Session
from dra_jupyter.types import Owner, watched_views_of

VIEWS = [
    ViewCounts("resourceclaims", "namespace", lists=2, relists=1, watches=4, restarts=3),
    ViewCounts("resourceslices", "cluster", lists=1, watches=1, errors=2, objects=1000),
    ViewCounts("resourceclaims", "cluster", lists=1, watches=2, restarts=1, objects=7),
]


def samples(text: str) -> dict[str, dict[tuple[str, str], float]]:
    """Every sample by name, then by (resource, scope), of the families that have them."""
    found: dict[str, dict[tuple[str, str], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.labels.get("resource", ""), s.labels.get("scope", ""))
            found.setdefault(s.name, {})[key] = s.value
    return found


def test_a_scrape_without_a_book_says_each_views_counters_and_objects() -> None:
    text = exposition(lambda: Snapshot(None, (), 0, VIEWS)).decode()
    said = samples(text)
    claims, cluster_claims = ("resourceclaims", "namespace"), ("resourceclaims", "cluster")
    slices = ("resourceslices", "cluster")
    assert said["dra_jupyter_watch_lists_total"] == {claims: 2, cluster_claims: 1, slices: 1}
    assert said["dra_jupyter_watch_relists_total"] == {claims: 1, cluster_claims: 0, slices: 0}
    assert said["dra_jupyter_watch_restarts_total"] == {claims: 3, cluster_claims: 1, slices: 0}
    assert said["dra_jupyter_watch_errors_total"] == {claims: 0, cluster_claims: 0, slices: 2}
    assert said["dra_jupyter_watch_objects"] == {claims: 0, cluster_claims: 7, slices: 1000}
    assert "# TYPE dra_jupyter_watch_lists_total counter" in text
    assert "# TYPE dra_jupyter_watch_objects gauge" in text
    # no book: no usage counters, and neither devices nor waiters are said
    assert not any(name.startswith(("dra_jupyter_held", "dra_jupyter_devices")) for name in said)
    assert "dra_jupyter_waiters" not in text


def test_a_scrape_with_a_book_and_no_views_says_no_watch_counters() -> None:
    book = Book((), 0.0, 1.0)
    text = exposition(lambda: Snapshot(book, [("NVIDIA H200", "free")], 0)).decode()
    assert "dra_jupyter_watch_" not in text
    assert samples(text)["dra_jupyter_devices"] == {("", ""): 1}
    with_views = exposition(lambda: Snapshot(book, [("NVIDIA H200", "free")], 0, VIEWS[:1]))
    said = samples(with_views.decode())
    assert said["dra_jupyter_watch_lists_total"] == {("resourceclaims", "namespace"): 2}
    assert said["dra_jupyter_devices"] == {("", ""): 1}


class Watching:
    """A backend as the Kubernetes one is to a scrape: it keeps no usage book, and its
    watched views count what they did (plain data, through the backend)."""

    owner = Owner("alice", "host", 0)

    def watch_stats(self) -> list[ViewCounts]:
        return list(VIEWS)

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        return None  # nothing to push here

    def __getattr__(self, name: str) -> Any:  # no book, no devices, no line read
        raise AttributeError(name)


def test_a_session_of_a_backend_without_a_book_scrapes_its_views_only() -> None:
    backend = Watching()
    assert watched_views_of(backend) is backend
    snap = Session(backend=backend).usage_snapshot()
    assert snap == Snapshot(None, (), 0, VIEWS)

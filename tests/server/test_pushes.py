"""The server's pushes (:mod:`dra_jupyter.server.pushes`) with a backend whose views tell
of changes from their own threads: a burst is one ``changed`` event of its topics, sent on
the loop; a backend that watches nothing pushes nothing, and ``stop`` ends it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dra_jupyter.errors import ClusterError
from dra_jupyter.server.claim_events import CHANGED
from dra_jupyter.server.pushes import GATHER_S, Pushes


class Watching:
    """A backend with watched views (:class:`~dra_jupyter.types.backend.WatchedViews`)."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[str], None]] = []

    def watch_stats(self) -> list[Any]:
        return []

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)


class Unwatched(Watching):
    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        return None


def tell(backend: Watching, topics: list[str]) -> None:
    """Each topic told from a thread of its own, as the views' reflectors do."""
    threads = [
        threading.Thread(target=lambda t=t: [lst(t) for lst in backend.listeners]) for t in topics
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.pure
def test_a_burst_of_changes_is_one_event_of_its_topics_sent_on_the_loop() -> None:
    async def scenario() -> list[tuple[str, dict[str, Any], bool]]:
        sent: list[tuple[str, dict[str, Any], bool]] = []
        loop_thread = threading.current_thread()

        def emit(*, schema_id: str, data: dict[str, Any]) -> None:
            sent.append((schema_id, data, threading.current_thread() is loop_thread))

        backend = Watching()
        pushes = Pushes(lambda: backend, emit)
        assert not pushes.pushing
        pushes.start()
        assert pushes.pushing
        tell(backend, ["claims"] * 20 + ["runs", "devices", "claims"])
        await asyncio.sleep(GATHER_S * 4)
        tell(backend, ["runs"])
        await asyncio.sleep(GATHER_S * 4)
        pushes.stop()
        assert backend.listeners == []
        assert not pushes.pushing
        return sent

    assert asyncio.run(scenario()) == [
        (CHANGED, {"topics": ["claims", "devices", "runs"]}, True),
        (CHANGED, {"topics": ["runs"]}, True),
    ]


@pytest.mark.pure
def test_a_backend_that_watches_nothing_pushes_nothing() -> None:
    async def scenario() -> bool:
        pushes = Pushes(object, lambda **_: None)  # the local ledger, the service
        pushes.start()
        unwatched = Pushes(Unwatched, lambda **_: None)  # Kubernetes without watch
        unwatched.start()
        return pushes.pushing or unwatched.pushing

    assert asyncio.run(scenario()) is False


@pytest.mark.pure
def test_a_backend_that_cannot_be_opened_pushes_nothing() -> None:
    def broken() -> object:
        raise ClusterError("no kubeconfig: KUBECONFIG is unset and ~/.kube/config does not exist")

    pushes = Pushes(broken, lambda **_: None)
    pushes.listen()  # the startup report says why; the server starts all the same
    assert not pushes.pushing

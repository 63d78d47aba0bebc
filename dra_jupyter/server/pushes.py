"""Changes pushed to JupyterLab: where the backend watches the cluster (Kubernetes, see
:meth:`dra_jupyter.types.backend.WatchedViews.on_change`), each change its views hear
becomes a ``changed`` event (``events/changed.json``) on the server's event bus, which the
lab's event stream already carries: the lab then reads what changed at once, and polls
only slowly, for a lost connection (``GET /claims`` says ``pushed``).

The views tell on their own threads, and a burst (a relist, a run's pods starting) tells
many times: the topics heard are gathered on the server's loop and sent as one event at
most every :data:`GATHER_S`. An event carries the topics only (``claims``, ``runs``,
``devices``), never a claim or a user: the lab reads the rest through the REST API, whose
answers hold what the caller may see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tornado.ioloop import IOLoop

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.server.claim_events import CHANGED
from dra_jupyter.types.backend import watched_views_of

GATHER_S = 0.25  # the topics heard within this long after the first go as one event


class Pushes:
    """The ``changed`` events of one server: :meth:`listen` as it is made (so that its
    first answer already says whether it pushes), :meth:`start` on its loop, :meth:`stop`
    at its end. ``emit(schema_id, data)`` is the event logger's."""

    def __init__(self, backend: Callable[[], object], emit: Callable[..., Any]) -> None:
        self._backend = backend  # opened by listen: a backend that cannot be opened pushes not
        self._emit = emit
        self._loop: IOLoop | None = None
        self._remove: Callable[[], None] | None = None
        self._topics: set[str] = set()  # heard, not sent yet (the loop's only)
        self.sent = 0  # events sent (for tests and logs)

    @property
    def pushing(self) -> bool:
        """Whether changes are pushed (the views tell of them): what ``GET /claims`` says."""
        return self._remove is not None

    def listen(self) -> None:
        """Hear the views' changes (dropped until :meth:`start`: nobody reads them yet)."""
        if self._remove is not None:
            return
        try:
            views = watched_views_of(self._backend())
        except DraJupyterError:
            return  # the startup report says why; nothing to push
        if views is not None:
            self._remove = views.on_change(self._heard)

    def start(self) -> None:
        """Send what is heard from now on, on the current loop."""
        self.listen()
        self._loop = IOLoop.current()

    def stop(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()

    def _heard(self, topic: str) -> None:
        """On a view's thread: hand the topic to the loop (thread-safe)."""
        loop = self._loop
        if loop is not None and self._remove is not None:
            loop.add_callback(self._gather, topic)

    def _gather(self, topic: str) -> None:
        if not self._topics and self._loop is not None:
            self._loop.call_later(GATHER_S, self._send)
        self._topics.add(topic)

    def _send(self) -> None:
        topics, self._topics = sorted(self._topics), set()
        if topics and self._remove is not None:
            self._emit(schema_id=CHANGED, data={"topics": topics})
            self.sent += 1

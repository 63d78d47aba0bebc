"""The service's optional Prometheus port (``prometheus_port`` of its policy; off by
default): ``prometheus_client``'s HTTP server on 127.0.0.1 only, on a thread of its own,
answering the usage counters of every user and the gauges of devices and waiters
(:mod:`dra_jupyter.accounting.prometheus`). Whoever can reach 127.0.0.1 on that port reads every
user's usage: the machine's users, by design (a Prometheus on the machine scrapes it)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from dra_jupyter.accounting.prometheus import Snapshot, registry_of
from dra_jupyter.accounting.weights import Weights
from dra_jupyter.local.backend import LocalBackend


def snapshot_of(local: LocalBackend, waiters: Callable[[], int]) -> Callable[[], Snapshot]:
    """What one scrape reads: the whole book, each device's model and state, the waiters."""
    models = Weights(local.devices).models()

    def read() -> Snapshot:
        book = local.usage_book(math.inf)
        held = {key for r in local.ledger.read_claims() for key in r.device_keys}
        devices = [(m, "held" if key in held else "free") for key, m in models.items()]
        return Snapshot(book, devices, waiters())

    return read


class Exporter:
    """The port, while the daemon runs."""

    def __init__(self, port: int, read: Callable[[], Snapshot]) -> None:
        self.server: WSGIServer
        self.thread: threading.Thread
        self.server, self.thread = start_http_server(
            port, addr="127.0.0.1", registry=registry_of(read)
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown()
            self.server.server_close()

"""The machine's health watcher run by the Jupyter server, where the backend does not watch
its devices itself (the embedded ledger on NVML devices:
:func:`dra_jupyter.backends.open_health_watcher`): a user of the default gets a failing GPU
taken out of service without starting anything. One watcher per ledger (its lock): a
server that finds one running (``dra-jupyter health --watch``, another server) leaves the
work to it. The service runs its own watcher; a simulated inventory and Kubernetes have
nothing to watch.

A GPU tainted ``NoExecute`` releases its holders after ``grace``, with or without the
watcher: the server's health check does it on every backend of this machine
(:meth:`~dra_jupyter.server.checks.Checks.check_health`).
"""

from __future__ import annotations

import logging

from dra_jupyter.backends import open_health_watcher
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.types import Backend, Watching


def start_watcher(backend: Backend, grace: float, log: logging.Logger) -> Watching | None:
    """The backend's health watcher, started; None where it has none (or one runs
    already), or it cannot start (said in the log: the server runs on without it)."""
    try:
        return open_health_watcher(backend, grace)
    except DraJupyterError as err:
        log.warning("dra_jupyter: the health watcher cannot start: %s", err)
        return None

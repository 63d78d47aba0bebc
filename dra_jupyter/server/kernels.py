"""The server's kernels: the environment they start with, and what they execute.

**Environment.** Kernels started by this server get what makes ``dra.request()`` inside
them use the server's backend and name their kernel and server (:func:`kernel_env`):
``DRA_JUPYTER_KERNEL_ID``, ``DRA_JUPYTER_SERVER_ID``, ``DRA_JUPYTER_BACKEND``; locally
``DRA_JUPYTER_LEDGER`` and ``DRA_JUPYTER_INVENTORY``, on Kubernetes
``DRA_JUPYTER_NAMESPACE`` (and ``DRA_JUPYTER_KUBECONFIG`` when the server has one); and
``DRA_JUPYTER_IDLE_TIMEOUT`` when idle release is on, for ``%dra status``. We wrap the
``start_kernel`` of the server's kernel manager *instance* (:func:`install_kernel_env`)
rather than configure a ``MappingKernelManager`` subclass: ``kernel_manager_class`` stays
whatever the deployment chose (another extension's, a gateway's), and every path that
starts a kernel (``POST /api/kernels``, sessions, other extensions) goes through the
instance's ``start_kernel``. jupyter_client keeps the launch arguments, so a restarted
kernel keeps the environment. The kernel id is chosen before the start (a fresh uuid,
as ``MultiKernelManager.new_kernel_id`` does) so it can be put in the environment.

**Execution.** jupyter_server's ``kernel.last_activity`` is bumped by every IOPub message
whose type or parent type is tracked, and ``comm_msg``/``comm_open`` are tracked, so
widget traffic counts as activity there (and ``untracked_message_types`` is server-wide:
changing it would also change jupyter_server's own culling). :class:`ExecutionWatcher`
subscribes to each kernel's IOPub channel itself and counts only messages whose parent
is an ``execute_request``: a cell that starts, prints or ends. Its ``status`` messages
give busy/idle for running cells; comm traffic and REST polling never touch it.

**Restarts a kernel asks for** (:mod:`dra_jupyter.kernel.restarts`) come on the same channel, in
the metadata of a ``display_data``: the watcher reads display messages' metadata (small),
never their content.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.session import Session as ZmqSession
from tornado import web

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.kernel.restarts import RESTART_ASKED
from dra_jupyter.settings import Settings

KERNEL_ID_ENV = "DRA_JUPYTER_KERNEL_ID"
SERVER_ID_ENV = "DRA_JUPYTER_SERVER_ID"
BACKEND_ENV = "DRA_JUPYTER_BACKEND"
LEDGER_ENV = "DRA_JUPYTER_LEDGER"
INVENTORY_ENV = "DRA_JUPYTER_INVENTORY"
NAMESPACE_ENV = "DRA_JUPYTER_NAMESPACE"
KUBECONFIG_ENV = "DRA_JUPYTER_KUBECONFIG"
IDLE_TIMEOUT_ENV = "DRA_JUPYTER_IDLE_TIMEOUT"  # seconds; only when idle release is on
SOCKET_ENV = "DRA_JUPYTER_SOCKET"
SHARED_VIEW_ENV = "DRA_JUPYTER_SHARED_VIEW_URL"

Clock = Callable[[], float]


def kernel_env(kernel_id: str, settings: Settings, idle_timeout: float = 0) -> dict[str, str]:
    """What a kernel of this server needs to use the server's backend (``settings``, its
    ``backend`` resolved to ``local``, ``service`` or ``kubernetes``), to own its claims and
    label them with its server, and to tell its user when they are released for idleness."""
    env = {KERNEL_ID_ENV: kernel_id, BACKEND_ENV: settings.backend}
    if settings.server_id:
        env[SERVER_ID_ENV] = settings.server_id
    if settings.backend == "kubernetes":
        if settings.namespace:
            env[NAMESPACE_ENV] = settings.namespace
        if settings.kubeconfig:
            env[KUBECONFIG_ENV] = settings.kubeconfig
        if settings.shared_view_url:  # nor do its kernels read cluster-wide kinds
            env[SHARED_VIEW_ENV] = settings.shared_view_url
    elif settings.backend == "service":
        env[SOCKET_ENV] = str(settings.socket)
    else:
        env[LEDGER_ENV] = str(settings.ledger)
        env[INVENTORY_ENV] = settings.inventory
        env.update(  # reclaim under pressure: a kernel that waits takes turns as the server
            DRA_JUPYTER_RECLAIM="1" if settings.reclaim else "0",
            DRA_JUPYTER_RECLAIM_GRACE=f"{settings.reclaim_grace:g}",
            DRA_JUPYTER_KEEPS_UNDER_PRESSURE=str(settings.keeps_under_pressure),
            DRA_JUPYTER_RECLAIM_IDLE=f"{settings.reclaim_idle:g}",
        )
    if idle_timeout > 0:
        env[IDLE_TIMEOUT_ENV] = f"{idle_timeout:g}"
    return env


def install_kernel_env(kernel_manager: Any, extra: Callable[[str], Mapping[str, str]]) -> None:
    """Wrap ``kernel_manager.start_kernel`` so new kernels get ``extra(kernel_id)`` in their
    environment. Undone by :func:`uninstall_kernel_env`."""
    original = kernel_manager.start_kernel

    async def start_kernel(*args: Any, kernel_id: str | None = None, **kwargs: Any) -> Any:
        if kernel_id is None or kernel_id not in kernel_manager:
            kernel_id = kernel_id or str(uuid.uuid4())
            # jupyter_client uses ``env`` as the whole environment when it is given
            base = kwargs.get("env") or os.environ
            kwargs["env"] = {**base, **extra(kernel_id)}
        try:
            return await original(*args, kernel_id=kernel_id, **kwargs)
        except DraJupyterError as err:
            # ours (a GPU kernel's pod that could not be placed, say): its words and status
            # in the REST answer, which would otherwise say "Unhandled error"
            raise web.HTTPError(err.http_status, str(err), reason=err.reason) from err

    start_kernel.dra_original = original  # type: ignore[attr-defined]
    kernel_manager.start_kernel = start_kernel


def uninstall_kernel_env(kernel_manager: Any) -> None:
    original = getattr(kernel_manager.start_kernel, "dra_original", None)
    if original is not None:
        kernel_manager.start_kernel = original


@dataclass
class Execution:
    """What a kernel has executed, as far as idle release is concerned."""

    last_execute: float  # seconds since the epoch: the last message of a running cell
    busy: bool = False  # a cell is running


@dataclass
class _Watch:
    stream: Any  # a ZMQStream on the kernel's IOPub channel
    execution: Execution
    kernel: Any = None  # jupyter_server's kernel manager of it (its own execution_state)


@dataclass
class ExecutionWatcher:
    """Follows the IOPub channel of each kernel; see the module docstring."""

    clock: Clock = time.time
    watches: dict[str, _Watch] = field(default_factory=dict)
    # called with the kernel's id when a cell ends (its deadline starts from then)
    on_cell_end: Callable[[str], None] | None = None
    # called with the kernel's id when a cell starts (the kernel goes busy)
    on_cell_start: Callable[[str], None] | None = None
    # called with the kernel's id and what it asked for (RESTART_ASKED)
    on_restart_asked: Callable[[str, dict[str, Any]], None] | None = None

    def execution(self, kernel_id: str) -> Execution | None:
        """What the kernel executed. A cell that started before our subscription to its
        IOPub channel took (a SUB socket misses what is published while it joins: a cell
        sent right after the kernel started) is known from jupyter_server's own
        ``execution_state``, which it follows from the kernel's start on."""
        watch = self.watches.get(kernel_id)
        if watch is None:
            return None
        execution = watch.execution
        if not execution.busy and getattr(watch.kernel, "execution_state", None) == "busy":
            # a view, not kept: the cell's end (its idle status, which we do get) is ours
            return Execution(last_execute=self.clock(), busy=True)
        return execution

    def busy(self) -> list[str]:
        """The kernels running a cell now."""
        return [k for k in list(self.watches) if (e := self.execution(k)) and e.busy]

    def attach(self, kernel_manager: Any, kernel_id: str) -> None:
        if kernel_id in self.watches:
            return
        kernel = kernel_manager.get_kernel(kernel_id)
        execution = Execution(last_execute=self.clock())
        # our own Session: deserialising records signatures, shared ones would clash
        session = ZmqSession(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()

        def on_recv(msg_list: list[Any]) -> None:
            _idents, fed = session.feed_identities(msg_list)
            msg = session.deserialize(fed, content=False)
            msg_type = msg["header"]["msg_type"]
            parent_type = (msg.get("parent_header") or {}).get("msg_type")
            if msg_type != "status" and parent_type != "execute_request":
                return
            if msg_type == "display_data" and self.on_restart_asked is not None:
                asked = (msg.get("metadata") or {}).get(RESTART_ASKED)
                if isinstance(asked, dict):
                    self.on_restart_asked(kernel_id, asked)
            if msg_type == "status":
                state = session.deserialize(fed)["content"].get("execution_state")
                if state == "starting":  # a (re)started kernel runs nothing yet
                    execution.busy = False
                    execution.last_execute = self.clock()
                if parent_type != "execute_request":
                    return
                ended = execution.busy and state == "idle"
                started = not execution.busy and state == "busy"
                execution.busy = state == "busy"
                execution.last_execute = self.clock()
                if ended and self.on_cell_end is not None:
                    self.on_cell_end(kernel_id)
                if started and self.on_cell_start is not None:
                    self.on_cell_start(kernel_id)
                return
            execution.last_execute = self.clock()

        stream.on_recv(on_recv)
        self.watches[kernel_id] = _Watch(stream, execution, kernel)

    def restarted(self, kernel_id: str) -> None:
        watch = self.watches.get(kernel_id)
        if watch is not None:
            watch.execution.busy = False
            watch.execution.last_execute = self.clock()

    def detach(self, kernel_id: str) -> None:
        watch = self.watches.pop(kernel_id, None)
        if watch is not None and not watch.stream.closed():
            watch.stream.close()

    def detach_all(self) -> None:
        for kernel_id in list(self.watches):
            self.detach(kernel_id)

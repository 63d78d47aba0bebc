"""``dra-jupyter service``: the one process of a machine that owns its devices and ledger.

One thread, one ``selectors`` loop over: the listening Unix socket (mode 0666: anyone may
connect, the daemon decides), each connection, a pidfd per process that holds claims (it
becomes readable when that process exits: its claims are released at once, a reused pid
never fools it), and the signal wake-up pipe (SIGHUP reloads the policy, SIGTERM and SIGINT
stop). Being the only writer of the ledger, it enforces the limits without races; the
embedded :class:`~dra_jupyter.local.backend.LocalBackend` allocates, on a ledger in a
folder only the daemon's user can open (0700; the file 0600).

Each connection's caller is what the kernel says (:func:`~dra_jupyter.service.peer.peer_of`):
claims belong to its user, and are held by its process (or, ``detached``, live by their
lease alone: the CLI's). Frames are bounded (:data:`~dra_jupyter.service.protocol.MAX_FRAME`)
before more is read; a malformed, oversized or unknown-version frame gets a one-line error
and the daemon goes on serving everyone else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from dra_jupyter.errors import (
    DiscoveryError,
    DraJupyterError,
    InvalidInputError,
    LedgerError,
    UnavailableError,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.sweeps import reclaim_reason
from dra_jupyter.local.watcher import HealthWatcher
from dra_jupyter.service import protocol
from dra_jupyter.service.access import Access
from dra_jupyter.service.args import device_capacities, device_kinds, strategy_named
from dra_jupyter.service.connections import Connection, Connections, UserState
from dra_jupyter.service.exporter import Exporter, snapshot_of
from dra_jupyter.service.files import bind_socket, keep_open, open_private_ledger
from dra_jupyter.service.gpus import GpuSampler
from dra_jupyter.service.jobs import Job, Jobs
from dra_jupyter.service.line import Line
from dra_jupyter.service.ops import HANDLERS, WAITING, Ops
from dra_jupyter.service.peer import HOST
from dra_jupyter.service.policy import Policy, load_policy
from dra_jupyter.service.pressure import Pressure
from dra_jupyter.service.watches import Watch, Watches
from dra_jupyter.types import Owner, process_start_time

log = logging.getLogger("dra_jupyter.service")

DEFAULT_SOCKET = Path("/run/dra-jupyter/socket")
TICK = 1.0  # seconds between checks of leases, idle claims and waits that ran out


class Daemon:
    """The service (see the module docstring). ``inventory`` replaces the policy's (tests).

    Its parts: :attr:`access` (the policy in force), :attr:`connections`, :attr:`watches`
    (the processes that hold claims), :attr:`line` (requests waiting for devices) and
    :attr:`ops` (what each frame asks, dispatched by :data:`~dra_jupyter.service.ops.HANDLERS`).
    """

    def __init__(
        self,
        socket_path: Path,
        config: Path | None = None,
        *,
        inventory: Inventory | None = None,
        import_ledger: Path | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.import_from = import_ledger
        self.config = config
        self.access = Access(load_policy(config))
        policy = self.access.policy
        self.devices = inventory or resolve_inventory(policy.inventory)
        self.kinds = device_kinds(self.devices)
        self.capacities = device_capacities(self.devices)
        self.ledger = open_private_ledger(policy.ledger, policy.synchronous)
        # The ledger opens a connection per transaction; while this one stays open, closing
        # those does not checkpoint and delete the WAL each time (an fsync or two each).
        self._keeper = keep_open(policy.ledger)
        pid = os.getpid()
        self.local = LocalBackend(
            self.devices,
            self.ledger,
            Owner(
                user="dra-jupyter-service", host=HOST, pid=pid, start_time=process_start_time(pid)
            ),
            strategy=strategy_named(policy.strategy),
        )
        self.selector = selectors.DefaultSelector()
        self.connections = Connections(
            self.selector, self.access, frame=self._frame, dropped=self._dropped
        )
        self.watches = Watches(self.selector, self.local, released=self._freed)
        self.jobs = Jobs(self.selector)  # costly requests, worked out off the loop
        self.line = Line(
            self.access,
            self.ledger,
            self.local,
            self.kinds,
            self.capacities,
            self.connections,
            watch=self.watches.watch,
            jobs=self.jobs,
        )
        self.ops = Ops(
            self.access, self.ledger, self.local, self.devices, self.line, self.watches.watch
        )
        self.gpus = GpuSampler(self.access, self.devices, self.ledger, self.local)
        self.ops.gpus = self.gpus  # one metrics source; the processes in the metrics answer
        # reclaim under pressure: a request that starts to wait warns at once, not a tick later
        self.pressure = Pressure(self.access, self.ledger, self.local, self.line, self.gpus)
        self.ops.pressure = self.pressure
        self.line.joined = lambda: self._guarded(self._pressure)
        self._stop = False
        self._reload = False
        self._next_tick = 0.0
        self._next_gpus = 0.0
        self.listener: socket.socket | None = None
        self.exporter: Exporter | None = None  # the Prometheus port, where the policy has one
        self.health: HealthWatcher | None = None  # the machine's one, on NVML's devices

    @property
    def policy(self) -> Policy:
        """The policy in force (the last one loaded)."""
        return self.access.policy

    # --- start and stop ------------------------------------------------------------------

    def start(self) -> None:
        """Reclaim what owners that died while the daemon was down held, watch the living
        ones, and listen."""
        if self.import_from is not None:
            self.import_ledger(self.import_from)
        released = self.local.sweep(None, time.time(), ()).released
        for record, reason in released:
            log.info("claim %s of %s released at start: %s", record.name, record.owner.user, reason)
        for record in self.ledger.read_claims():
            self.watches.watch(record.owner)
        self.listener = bind_socket(self.socket_path)
        self._socket_file = self.socket_path.lstat()  # the file this daemon made
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno())
        self.selector.register(self._wake_r, selectors.EVENT_READ, "signal")
        signal.signal(signal.SIGHUP, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start_exporter()
        self.start_health()
        log.info(
            "serving %s on %s (ledger %s, %d live claims)",
            self.devices.description,
            self.socket_path,
            self.policy.ledger,
            len(self.ledger.read_claims()),
        )

    def import_ledger(self, path: Path) -> tuple[int, int]:
        """Take over the live claims of an embedded ledger (the local backend's file), each
        whose holder is alive, lease not over, name not taken and devices all this
        inventory's and free; the others are logged, with why, and left. Owners stay the
        user names that ledger recorded, which its users could write: import only a ledger
        whose writers you trust. The file is read as it is, of any schema version this
        dra-jupyter knows, and left unchanged. Returns (imported, skipped)."""
        if not path.is_file():
            raise InvalidInputError(f"--import-ledger {path}: no such file")
        records = Ledger.claims_in(path)
        now = time.time()
        imported = skipped = 0
        with self.ledger.transaction() as tx:
            held = Ledger.claims(tx)
            taken = {key for r in held for key in r.device_keys}
            names = {r.name for r in held}
            for record in records:
                keys = set(record.device_keys)
                why = reclaim_reason(record, now)
                if why is None and record.name in names:
                    why = "its name is taken"
                elif why is None and not keys <= self.kinds.keys():
                    why = "its devices are not this inventory's"
                elif why is None and keys & taken:
                    why = "its devices are held already"
                if why is not None:
                    log.warning(
                        "claim %s of %s not imported: %s", record.name, record.owner.user, why
                    )
                    skipped += 1
                    continue
                Ledger.insert(tx, record, self.local.weights.parts(record.allocation))
                taken |= keys
                names.add(record.name)
                imported += 1
        log.info("imported %d claims from %s (%d left there)", imported, path, skipped)
        return imported, skipped

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        else:
            self._stop = True

    def serve_forever(self) -> None:
        try:
            while not self._stop:
                ready = self.connections.ready
                due = min(self._next_tick, self._next_gpus)
                timeout = 0.0 if ready else max(0.0, due - time.monotonic())
                events = self.selector.select(timeout)
                if events or ready:
                    self._serve_batch(events)
                if self._reload:
                    self._reload = False
                    self.reload()
                if time.monotonic() >= self._next_tick:
                    self._next_tick = time.monotonic() + TICK
                    self._guarded(self.line.tick)
                    self._guarded(self._pressure)
                    self._guarded(self._health_tick)
                if time.monotonic() >= self._next_gpus:
                    self._next_gpus = time.monotonic() + self.policy.gpu_sample_interval
                    self._guarded(self._sample_gpus)
        finally:
            self.close()

    def _serve_batch(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Serve what is ready now as one ledger transaction (a group commit): every
        request's transaction is a savepoint of it (rolled back alone on its error), and
        no answer leaves before the one commit, so an answer still means committed. With
        many clients one commit serves many requests. Where the commit fails, nothing of
        the batch was written: the connections answered in it are closed unanswered (their
        clients see the service go, and may ask again). One event alone is served without
        a batch (its own transaction is the commit; a batch's savepoints would only add)."""
        connections = self.connections
        stack = contextlib.ExitStack()
        try:
            if len(events) + len(connections.ready) > 1:
                stack.enter_context(self.ledger.batch())
                connections.deferred = {}
        except LedgerError as err:  # cannot even begin: serve unbatched, each says its error
            log.error("%s", err)
        try:
            for key, mask in events:
                self._guarded(self._dispatch, key, mask)
            while connections.ready:
                self._guarded(connections.process, connections.ready.pop())
        finally:
            deferred, connections.deferred = connections.deferred, None
            try:
                stack.close()
            except LedgerError as err:
                log.error(
                    "a batch of requests was not committed, %d connections closed: %s",
                    len(deferred or ()),
                    err,
                )
                for conn in deferred or ():
                    connections.drop(conn)
                deferred = None
        for conn in deferred or ():
            connections.flush(conn)

    def _guarded(self, step: Any, *args: Any) -> None:
        """One step of the loop; what it raises (a ledger on a full disk, a bug) is logged,
        and the daemon goes on serving (the step is tried again at its next event)."""
        try:
            step(*args)
        except Exception:
            log.error("%s failed: %s", step.__name__, traceback.format_exc())

    def start_exporter(self) -> None:
        """The policy's Prometheus port on 127.0.0.1, if it names one (its thread reads the
        ledger with connections of its own)."""
        port = self.policy.prometheus_port
        if port and self.exporter is None:
            read = snapshot_of(self.local, lambda: len(self.line.waits))
            self.exporter = Exporter(port, read)
            log.info("Prometheus usage counters on http://127.0.0.1:%d/", self.exporter.port)

    def start_health(self) -> None:
        """The machine's health watcher (:mod:`~dra_jupyter.local.watcher`), where the
        devices are read through NVML: its thread writes taints and events to the ledger;
        the loop's tick releases claims whose GPU was taken out (:meth:`_health_tick`)."""
        if self.devices.source != "nvml" or self.health is not None:
            return
        watcher = HealthWatcher(
            self.local,
            grace=self.policy.health_grace,
            poll_interval=self.policy.health_poll_interval,
        )
        try:
            watcher.start()
        except DiscoveryError as err:  # the devices were read: NVML may come back later
            log.error("no health watcher: %s", err)
            return
        self.health = watcher
        log.info("health watcher on %d GPUs", len(watcher.nvml.gpus) if watcher.nvml else 0)

    def _health_tick(self) -> None:
        """Release the claims on devices tainted NoExecute (by the watcher or an admin, on
        NVML or simulated devices) whose grace is over; the devices they free go to the
        line."""
        if self.health is not None:
            self.health.grace = self.policy.health_grace  # as reloaded
            released = self.health.enforce(time.time())
        else:
            released = self.local.release_taken_out(self.policy.health_grace, time.time())
        if released:
            self.line.serve()

    def close(self) -> None:
        if self.health is not None:
            self.health.stop()
            self.health = None
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        if self.listener is not None:
            with contextlib.suppress(OSError):  # ours (not another daemon's since): removed
                if os.path.samestat(self.socket_path.lstat(), self._socket_file):
                    self.socket_path.unlink()
            self.listener.close()
            self.listener = None
        self._keeper.close()
        self.ops.close()
        self.gpus.close()
        self.jobs.close()
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, Connection):
                key.data.sock.close()
            elif isinstance(key.data, Watch):
                os.close(key.data.fd)
        self.selector.close()

    def reload(self) -> None:
        """SIGHUP: the policy file again; one that does not parse leaves this one in force.
        The ledger, inventory and strategy stay those of the start."""
        try:
            policy = load_policy(self.config)
        except DraJupyterError as err:
            log.error("policy not reloaded, the one in force stays: %s", err)
            return
        self.access.replace(
            replace(
                policy,
                ledger=self.policy.ledger,
                inventory=self.policy.inventory,
                strategy=self.policy.strategy,
                synchronous=self.policy.synchronous,
            )
        )
        self.gpus.reload()
        log.info("policy reloaded from %s", self.config)

    # --- the loop ------------------------------------------------------------------------

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if data == "listener":
            assert self.listener is not None
            self.connections.accept(self.listener)
        elif data == "signal":
            with contextlib.suppress(OSError):
                while self._wake_r.recv(64):
                    pass
        elif isinstance(data, Watch):
            self.watches.exited(data)
        elif isinstance(data, Job):
            self.jobs.read(data)
        elif isinstance(data, Connection):
            if mask & selectors.EVENT_READ:
                self.connections.read(data)
            if mask & selectors.EVENT_WRITE and data.sock.fileno() >= 0:
                self.connections.flush(data)

    def _frame(self, conn: Connection, line: bytes) -> None:
        """One frame of ``conn``: counted against its user's rate, parsed, served by the
        op's handler (:data:`~dra_jupyter.service.ops.HANDLERS`), answered."""
        request_id: protocol.RequestId = None
        try:
            self.connections.rate(conn.peer)  # every frame counts, malformed ones too
            request_id, op, args = protocol.parse_request(line)
            result = HANDLERS[op](self.ops, conn, request_id, args)
        except DraJupyterError as err:
            if isinstance(err, protocol.ProtocolError):
                request_id = err.request_id
                log.warning("uid %d pid %d: %s", conn.peer.uid, conn.peer.pid, err)
            self.connections.send(conn, protocol.refusal(request_id, err))
            return
        except Exception as err:  # a bug: said in one line to the caller, logged in full
            log.error("internal error serving uid %d: %s", conn.peer.uid, traceback.format_exc())
            self.connections.send(
                conn,
                protocol.refusal(
                    request_id,
                    UnavailableError(
                        f"internal error in the dra-jupyter service ({type(err).__name__}); "
                        "its log has the traceback"
                    ),
                ),
            )
            return
        if result is not WAITING:
            self.connections.send(conn, protocol.answer(request_id, result))

    def _sample_gpus(self) -> None:
        """The GPU sampler's tick (:mod:`~dra_jupyter.service.gpus`); what it released frees
        devices for the line."""
        if self.gpus.tick(time.time()):
            self.line.serve()

    def _pressure(self) -> None:
        """A turn of reclaim under pressure (:mod:`~dra_jupyter.service.pressure`)."""
        self.pressure.turn(time.time())

    def _dropped(self, conn: Connection, state: UserState) -> None:
        """``conn`` closed: its requests leave the line."""
        self.line.forget(conn, state)

    def _freed(self) -> None:
        """Claims of a process that exited were released: serve the line."""
        self.line.serve()


def run_service(
    config: Path | None, socket_path: Path | None, import_ledger: Path | None = None
) -> int:
    """``dra-jupyter service``: serve until SIGTERM or SIGINT."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s dra-jupyter service: %(message)s"
    )
    os.umask(0o077)
    daemon = Daemon(socket_path or DEFAULT_SOCKET, config, import_ledger=import_ledger)
    daemon.start()
    daemon.serve_forever()
    return 0


__all__ = ["DEFAULT_SOCKET", "Daemon", "bind_socket", "open_private_ledger", "run_service"]

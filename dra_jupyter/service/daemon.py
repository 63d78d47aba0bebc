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
import math
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dra_jupyter.errors import (
    AllocationError,
    BusyError,
    DraJupyterError,
    ForbiddenError,
    InvalidInputError,
    LedgerError,
    LimitError,
    UnavailableError,
    shown,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend, reclaim_reason, shape_of, shape_summary
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.metrics import MetricsSource, Sample, source_for
from dra_jupyter.service import protocol
from dra_jupyter.service.args import (
    claim_arg,
    device_capacities,
    device_kinds,
    duration_text,
    kernel_id_arg,
    labelled,
    name_arg,
    percent_text,
    probe,
    process_owner,
    seconds_arg,
    share_percent,
    strategy_named,
)
from dra_jupyter.service.files import bind_socket, keep_open, open_private_ledger
from dra_jupyter.service.peer import Peer, alive, open_pidfd, peer_of, user_groups
from dra_jupyter.service.policy import Limits, Policy, load_policy
from dra_jupyter.types import (
    ClaimRecord,
    Owner,
    claim_prefix,
    process_start_time,
)

log = logging.getLogger("dra_jupyter.service")

DEFAULT_SOCKET = Path("/run/dra-jupyter/socket")
READ_CHUNK = 256 << 10
# No frame of a connection is read while this much of its answers waits to be sent; so a
# client that sends and never reads holds at most this, one answer and one frame.
BACKLOG = 1 << 20
MAX_PENDING_OUTPUT = BACKLOG + protocol.MAX_ANSWER
TICK = 1.0  # seconds between checks of leases, idle claims and waits that ran out
HOST = socket.gethostname()


@dataclass(eq=False)
class Connection:
    sock: socket.socket
    peer: Peer
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    closing: bool = False  # refuse further frames; close once the output is sent


@dataclass
class UserState:
    tokens: float
    stamp: float
    connections: int = 0
    waiting: int = 0


@dataclass
class Wait:
    """A request waiting in line for devices (FIFO per request shape)."""

    conn: Connection
    request_id: int | str | None
    claim: dict[str, Any]
    shape: str
    owner: Owner
    lease: float | None
    timeout: float | None
    start: float
    position: int = 0


@dataclass
class Watch:
    """A pidfd of a process that holds claims."""

    pid: int
    start_time: int | None
    fd: int


class Daemon:
    """The service (see the module docstring). ``inventory`` replaces the policy's (tests)."""

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
        self.policy: Policy = load_policy(config)
        self.devices = inventory or resolve_inventory(self.policy.inventory)
        self.kinds = device_kinds(self.devices)
        self.capacities = device_capacities(self.devices)
        self.ledger = open_private_ledger(self.policy.ledger, self.policy.synchronous)
        # The ledger opens a connection per transaction; while this one stays open, closing
        # those does not checkpoint and delete the WAL each time (an fsync or two each).
        self._keeper = keep_open(self.policy.ledger)
        pid = os.getpid()
        self.local = LocalBackend(
            self.devices,
            self.ledger,
            Owner(
                user="dra-jupyter-service", host=HOST, pid=pid, start_time=process_start_time(pid)
            ),
            strategy=strategy_named(self.policy.strategy),
        )
        self.selector = selectors.DefaultSelector()
        self.users: dict[int, UserState] = {}
        self.waits: list[Wait] = []
        self.watches: dict[tuple[int, int | None], Watch] = {}
        self._groups: dict[str, tuple[str, ...]] = {}
        self._limits: dict[tuple[str, tuple[str, ...]], Limits] = {}  # by user and groups
        self._ready: set[Connection] = set()  # connections with frames left to read
        self._possible: set[str] = set()  # shapes met on the idle machine (check_possible)
        # connections whose answers wait for the batch's commit (None: not in a batch)
        self._deferred: dict[Connection, None] | None = None
        self._stop = False
        self._reload = False
        self._next_tick = 0.0
        self.listener: socket.socket | None = None
        self._metrics: MetricsSource | None = None  # made on the first metrics op
        self._samples: list[Sample] = []
        self._sampled = -math.inf  # time.monotonic() of that read
        self.metrics_reads = 0

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
            self._watch(record.owner)
        self.listener = bind_socket(self.socket_path)
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno())
        self.selector.register(self._wake_r, selectors.EVENT_READ, "signal")
        signal.signal(signal.SIGHUP, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
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
                Ledger.insert(tx, record)
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
                timeout = 0.0 if self._ready else max(0.0, self._next_tick - time.monotonic())
                events = self.selector.select(timeout)
                if events or self._ready:
                    self._serve_batch(events)
                if self._reload:
                    self._reload = False
                    self.reload()
                if time.monotonic() >= self._next_tick:
                    self._next_tick = time.monotonic() + TICK
                    self._guarded(self._tick)
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
        stack = contextlib.ExitStack()
        try:
            if len(events) + len(self._ready) > 1:
                stack.enter_context(self.ledger.batch())
                self._deferred = {}
        except LedgerError as err:  # cannot even begin: serve unbatched, each says its error
            log.error("%s", err)
        try:
            for key, mask in events:
                self._guarded(self._dispatch, key, mask)
            while self._ready:
                self._guarded(self._process, self._ready.pop())
        finally:
            deferred, self._deferred = self._deferred, None
            try:
                stack.close()
            except LedgerError as err:
                log.error(
                    "a batch of requests was not committed, %d connections closed: %s",
                    len(deferred or ()),
                    err,
                )
                for conn in deferred or ():
                    self._drop(conn)
                deferred = None
        for conn in deferred or ():
            self._flush(conn)

    def _guarded(self, step: Any, *args: Any) -> None:
        """One step of the loop; what it raises (a ledger on a full disk, a bug) is logged,
        and the daemon goes on serving (the step is tried again at its next event)."""
        try:
            step(*args)
        except Exception:
            log.error("%s failed: %s", step.__name__, traceback.format_exc())

    def close(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):
                if os.path.samestat(self.socket_path.stat(), os.fstat(self.listener.fileno())):
                    self.socket_path.unlink()
            self.listener.close()
            self.listener = None
        self._keeper.close()
        if self._metrics is not None:
            with contextlib.suppress(Exception):  # NVML's shutdown: nothing to do about it
                self._metrics.close()
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
        self.policy = replace(
            policy,
            ledger=self.policy.ledger,
            inventory=self.policy.inventory,
            strategy=self.policy.strategy,
            synchronous=self.policy.synchronous,
        )
        self._groups.clear()
        self._limits.clear()
        log.info("policy reloaded from %s", self.config)

    # --- the loop ------------------------------------------------------------------------

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if data == "listener":
            self._accept()
        elif data == "signal":
            with contextlib.suppress(OSError):
                while self._wake_r.recv(64):
                    pass
        elif isinstance(data, Watch):
            self._exited(data)
        elif isinstance(data, Connection):
            if mask & selectors.EVENT_READ:
                self._read(data)
            if mask & selectors.EVENT_WRITE and data.sock.fileno() >= 0:
                self._flush(data)

    def _accept(self) -> None:
        assert self.listener is not None
        for _ in range(64):  # a burst of connections, without starving the others
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE and the like: log, keep serving who is here
                log.error("cannot accept a connection: %s", err)
                return
            sock.setblocking(False)
            try:
                peer, pidfd = peer_of(sock)
            except OSError:
                sock.close()
                continue
            if pidfd is not None:
                os.close(pidfd)
            conn = Connection(sock, peer)
            state = self._user(peer.uid)
            if state.connections >= self.policy.connections_per_user:
                conn.closing = True
                self._send(
                    conn,
                    protocol.refusal(
                        None,
                        LimitError(
                            f"user {peer.user}: limit {self.policy.connections_per_user} open "
                            "connections (connections_per_user); close some"
                        ),
                    ),
                )
                self.selector.register(sock, selectors.EVENT_WRITE, conn)
                state.connections += 1
                continue
            state.connections += 1
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _user(self, uid: int) -> UserState:
        state = self.users.get(uid)
        if state is None:
            state = self.users[uid] = UserState(tokens=self.policy.burst, stamp=time.monotonic())
        return state

    def _read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        if conn.closing:
            return  # an oversized frame was refused: what follows is not read
        conn.inbuf += chunk
        self._process(conn)

    def _process(self, conn: Connection) -> None:
        """The complete frames of ``conn``, while its answers do not back up."""
        while not conn.closing and len(conn.outbuf) < BACKLOG and conn.sock.fileno() >= 0:
            end = conn.inbuf.find(b"\n", 0, protocol.MAX_FRAME)
            if end < 0:
                if len(conn.inbuf) >= protocol.MAX_FRAME:
                    self._oversized(conn)
                break
            line = bytes(conn.inbuf[:end])
            del conn.inbuf[: end + 1]
            self._frame(conn, line)

    def _oversized(self, conn: Connection) -> None:
        log.warning(
            "uid %d pid %d: a frame over %d bytes, refused; connection closed",
            conn.peer.uid,
            conn.peer.pid,
            protocol.MAX_FRAME,
        )
        conn.inbuf.clear()
        conn.closing = True
        self._send(
            conn,
            protocol.refusal(
                None,
                InvalidInputError(
                    f"service protocol: a frame over {protocol.MAX_FRAME} bytes (the limit of one "
                    "request) was refused, and the connection closed"
                ),
            ),
        )

    def _send(self, conn: Connection, data: bytes) -> None:
        if conn.sock.fileno() < 0:
            return
        conn.outbuf += data
        if len(conn.outbuf) > MAX_PENDING_OUTPUT:
            log.warning(
                "uid %d pid %d does not read its answers; connection closed",
                conn.peer.uid,
                conn.peer.pid,
            )
            self._drop(conn)
            return
        self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        if self._deferred is not None:  # inside a batch: sent once it is committed
            self._deferred[conn] = None
            return
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf[:READ_CHUNK])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            del conn.outbuf[:sent]
        if not conn.outbuf and conn.closing:
            self._drop(conn)
            return
        backed_up = len(conn.outbuf) >= BACKLOG
        if not backed_up and b"\n" in conn.inbuf:
            self._ready.add(conn)  # frames read while its answers backed up: go on
        events = (0 if backed_up else selectors.EVENT_READ) | (
            selectors.EVENT_WRITE if conn.outbuf else 0
        )
        with contextlib.suppress(KeyError, ValueError):
            if self.selector.get_key(conn.sock).events != events:
                self.selector.modify(conn.sock, events, conn)

    def _drop(self, conn: Connection) -> None:
        if conn.sock.fileno() < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        self._ready.discard(conn)
        state = self._user(conn.peer.uid)
        state.connections -= 1
        for wait in [w for w in self.waits if w.conn is conn]:
            self.waits.remove(wait)
            state.waiting -= 1

    # --- frames --------------------------------------------------------------------------

    def _frame(self, conn: Connection, line: bytes) -> None:
        request_id: int | str | None = None
        try:
            self._rate(conn.peer)  # every frame counts, malformed ones too
            request_id, op, args = protocol.parse_request(line)
            result = getattr(self, f"op_{op}")(conn, request_id, args)
        except DraJupyterError as err:
            request_id = getattr(err, "request_id", request_id)
            if isinstance(err, InvalidInputError) and str(err).startswith("service protocol"):
                log.warning("uid %d pid %d: %s", conn.peer.uid, conn.peer.pid, err)
            self._send(conn, protocol.refusal(request_id, err))
            return
        except Exception as err:  # a bug: said in one line to the caller, logged in full
            log.error("internal error serving uid %d: %s", conn.peer.uid, traceback.format_exc())
            self._send(
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
        if result is not _WAITING:
            self._send(conn, protocol.answer(request_id, result))

    def _rate(self, peer: Peer) -> None:
        state = self._user(peer.uid)
        now = time.monotonic()
        state.tokens = min(
            self.policy.burst, state.tokens + (now - state.stamp) * self.policy.requests_per_second
        )
        state.stamp = now
        if state.tokens < 1:
            raise LimitError(
                f"user {peer.user}: limit {self.policy.requests_per_second:g} requests per "
                "second (requests_per_second); slow down and try again"
            )
        state.tokens -= 1

    # --- who may do what -----------------------------------------------------------------

    def _admin(self, peer: Peer) -> bool:
        return self.policy.is_admin(peer.uid, peer.groups)

    def _visible(self, peer: Peer, record: ClaimRecord) -> bool:
        return (
            record.owner.user == peer.user or self.policy.visibility == "all" or self._admin(peer)
        )

    def _limits_of(self, user: str, groups: tuple[str, ...] | None = None) -> Limits:
        if groups is None:
            groups = self._groups.get(user)
            if groups is None:
                groups = self._groups[user] = user_groups(user)
        key = (user, groups)
        limits = self._limits.get(key)
        if limits is None:  # the same until the policy is reloaded
            if len(self._limits) >= 4096:
                self._limits.clear()
            limits = self._limits[key] = self.policy.limits(user, groups)
        return limits

    def _shown(self, peer: Peer, held: list[ClaimRecord]) -> list[ClaimRecord]:
        """``held`` as ``peer`` may see it: others' claims, where hidden, keep their devices
        (so that boards and explanations are right) but not their names or owners."""
        out = []
        for i, record in enumerate(held, 1):
            if self._visible(peer, record):
                out.append(record)
                continue
            name = f"hidden-{i}"
            meta = {"name": name, "namespace": record.namespace}
            out.append(
                replace(
                    record,
                    name=name,
                    owner=Owner(user="another user", host="", pid=0),
                    spec={**record.spec, "metadata": meta},
                )
            )
        return out

    def _find(self, name: Any) -> ClaimRecord | None:
        name = name_arg({"name": name})
        return next((r for r in self.ledger.read_claims() if r.name == name), None)

    def _may_change(self, peer: Peer, record: ClaimRecord, what: str) -> None:
        if record.owner.user == peer.user or self._admin(peer):
            return
        whose = f"user {record.owner.user}" if self._visible(peer, record) else "another user"
        raise ForbiddenError(
            f"claim {record.name} belongs to {whose}; only its owner or an admin can {what} it"
        )

    # --- ops -----------------------------------------------------------------------------

    def op_hello(self, conn: Connection, _id: Any, _args: dict[str, Any]) -> Any:
        peer = conn.peer
        return {
            "version": protocol.VERSION,
            "user": peer.user,
            "uid": peer.uid,
            "pid": peer.pid,
            "groups": list(peer.groups),
            "admin": self._admin(peer),
            "visibility": self.policy.visibility,
            "limits": self._limits_of(peer.user, peer.groups).to_dict(),
        }

    def op_inventory(self, conn: Connection, _id: Any, _args: dict[str, Any]) -> Any:
        return protocol.inventory_to_wire(self.devices)

    def op_list(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        everyone = args.get("all_users") is True
        held = self.local.claims(all_users=True)  # reclaims first
        shown_ = [
            r
            for r in held
            if r.owner.user == conn.peer.user or (everyone and self._visible(conn.peer, r))
        ]
        return [protocol.record_to_wire(r) for r in shown_]

    def op_holders(self, conn: Connection, _id: Any, _args: dict[str, Any]) -> Any:
        held = self._shown(conn.peer, self.local.claims(all_users=True))
        return [protocol.record_to_wire(r) for r in held]

    def op_waiting(self, conn: Connection, _id: Any, _args: dict[str, Any]) -> Any:
        """The line, first come first: who waits (another user's name hidden unless
        visible), for what, since when."""
        peer = conn.peer
        return [
            {
                "owner": (
                    w.owner
                    if w.owner.user == peer.user
                    or self.policy.visibility == "all"
                    or self._admin(peer)
                    else Owner(user="another user", host="", pid=0)
                ).to_dict(),
                "what": shape_summary(w.shape),
                "since": w.start,
            }
            for w in self.waits
        ]

    def op_record(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        record = self._find(args.get("name"))
        if record is not None and self._visible(conn.peer, record):
            return {
                "record": protocol.record_to_wire(record),
                "released_at": None,
                "released": None,
            }
        gone = self.ledger.released(name_arg(args))
        if gone is None or not (gone.owner.user == conn.peer.user or self._admin(conn.peer)):
            return {"record": None, "released_at": None, "released": None}
        released = None
        if gone.record is not None:  # a release of a version-1 ledger kept only its time
            released = {
                "record": protocol.record_to_wire(gone.record),
                "reason": gone.reason,
                "time": gone.time,
                "message": gone.message,
            }
        return {"record": None, "released_at": gone.time, "released": released}

    def op_keep(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        record = self._find(args.get("name"))
        if record is None:
            return False
        self._may_change(conn.peer, record, "keep")
        return self.local.touch(record.name, time.time())

    def op_release(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        reason = args.get("reason", "user")
        if (
            not isinstance(reason, str)
            or not 0 < len(reason) <= protocol.MAX_REASON
            or not set(reason) <= protocol.REASON_CHARACTERS
        ):
            raise InvalidInputError(
                f"release: reason {shown(reason)}; use at most {protocol.MAX_REASON} "
                "lower-case letters and '-'"
            )
        name = name_arg(args)
        with self.ledger.transaction() as tx:
            record = next((r for r in Ledger.claims(tx) if r.name == name), None)
            if record is None:
                return False
            self._may_change(conn.peer, record, "release")
            Ledger.delete(tx, record, reason, time.time())
        log.info(
            "claim %s of %s released by %s (%s)", name, record.owner.user, conn.peer.user, reason
        )
        self._serve_waits()
        return True

    def op_explain(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        claim = claim_arg(args)
        held = self._shown(conn.peer, self.local.claims(all_users=True))
        return self.local.allocator(held).explain([probe(claim)]).to_dict()

    def op_metrics(self, conn: Connection, _id: Any, _args: dict[str, Any]) -> Any:
        """The devices' metrics, read at most once per ``metrics_max_age`` (the policy's) for
        every client (the machine's NVML is read by the daemon alone, not by each server)."""
        if self._metrics is None:
            self._metrics = source_for(self.devices)
        if time.monotonic() - self._sampled >= self.policy.metrics_max_age:
            held = {d for r in self.ledger.read_claims() for d in r.device_keys}
            self._samples = self._metrics.sample(held, time.time())
            self._sampled = time.monotonic()
            self.metrics_reads += 1
        return {
            "source": self._metrics.name,
            "simulated": self._metrics.simulated,
            "problem": self._metrics.problem,
            "time": max((s.time for s in self._samples), default=None),
            "reads": self.metrics_reads,
            "samples": [s.to_dict() for s in self._samples],
        }

    def op_adopt(self, conn: Connection, _id: Any, args: dict[str, Any]) -> Any:
        """The caller's process holds the caller's claims of ``kernel_id`` from now on (a
        Jupyter server, before it restarts that kernel)."""
        kernel_id = kernel_id_arg(args)
        if kernel_id is None:
            raise InvalidInputError("adopt: kernel_id is missing")
        holder = process_owner(conn.peer, kernel_id, HOST)
        kept, released = [], []
        now = time.time()
        with self.ledger.transaction() as tx:
            for record in Ledger.claims(tx):
                if record.owner.kernel_id != kernel_id or record.owner.user != conn.peer.user:
                    continue
                reason = reclaim_reason(record, now)
                if reason is not None:
                    Ledger.delete(tx, record, reason, now)
                    released.append({"record": protocol.record_to_wire(record), "reason": reason})
                    continue
                Ledger.set_owner(tx, record.name, holder)
                kept.append(protocol.record_to_wire(replace(record, owner=holder)))
        if kept:
            self._watch(holder)
        if released:
            self._serve_waits()
        return {"kept": kept, "released": released}

    def op_request(self, conn: Connection, request_id: Any, args: dict[str, Any]) -> Any:
        peer = conn.peer
        claim = claim_arg(args)
        limits = self._limits_of(peer.user, peer.groups)
        timeout = seconds_arg(args, "timeout", 0.0)
        lease = seconds_arg(args, "lease", None)
        wait_max = limits.wait_max
        if wait_max.value:
            if timeout is None:
                timeout = wait_max.value
            elif timeout > wait_max.value:
                raise LimitError(
                    f"user {peer.user}: limit {duration_text(wait_max.value)} of waiting in line "
                    f"({wait_max.source}); pass a shorter timeout"
                )
        lease_max = limits.lease_max
        if lease is None:  # none named: the default, else the longest allowed, else none
            lease = limits.lease_default.value or lease_max.value or None
        if lease_max.value and lease is not None and lease > lease_max.value:
            raise LimitError(
                f"user {peer.user}: limit {duration_text(lease_max.value)} lease "
                f"({lease_max.source}); a lease of {duration_text(lease)} asked; pass a "
                "shorter lease"
            )
        detached = args.get("detached") is True
        kernel_id = kernel_id_arg(args)
        if detached:
            owner = Owner(user=peer.user, host=HOST, pid=0, kernel_id=kernel_id)
        else:
            owner = process_owner(peer, kernel_id, HOST)
        claim = labelled(claim, peer.user)
        shape = shape_of(claim)
        if shape not in self._possible:  # the inventory is fixed: possible once, always
            self.local.check_possible(claim)
            if len(self._possible) >= 4096:
                self._possible.clear()
            self._possible.add(shape)
        wait = Wait(conn, request_id, claim, shape, owner, lease, timeout, time.monotonic())
        ahead = sum(1 for w in self.waits if w.shape == shape)
        if not ahead:
            record = self._attempt(wait, peer.groups)
            if record is not None:
                return protocol.record_to_wire(record)
        if timeout is not None and timeout <= 0:
            raise self._busy(peer, claim, ahead + 1, 0.0)
        state = self._user(peer.uid)
        if state.waiting >= self.policy.queue_per_user:
            raise LimitError(
                f"user {peer.user}: limit {self.policy.queue_per_user} requests waiting in "
                f"line (queue_per_user), has {state.waiting}; wait for those first"
            )
        state.waiting += 1
        wait.position = ahead + 1
        self.waits.append(wait)
        log.info("a request of %s waits in line (number %d)", peer.user, wait.position)
        self._send(conn, protocol.waiting(request_id, wait.position, 0.0, timeout))
        return _WAITING

    # --- allocation ----------------------------------------------------------------------

    def _attempt(self, wait: Wait, groups: tuple[str, ...] | None) -> ClaimRecord | None:
        """Allocate ``wait`` now if the devices are free and the owner's limits allow; None
        when the devices are busy. Raises LimitError over a limit. One ledger transaction:
        expired leases go, the live claims are read, the allocator decides, the limits are
        checked, the claim is written (dead holders need no check here: their pidfds
        released their claims when they exited)."""
        now = time.time()
        user = wait.owner.user
        meta = dict(wait.claim["metadata"])
        with self.ledger.transaction() as tx:
            held = []
            for record in Ledger.claims(tx):
                if record.lease_expires is not None and record.lease_expires <= now:
                    Ledger.delete(tx, record, "expired", now)
                else:
                    held.append(record)
            if meta.get("name") and any(r.name == meta["name"] for r in held):
                raise AllocationError(
                    f"claim {meta['name']} exists already; release it first or use another name"
                )
            results = self.local.allocator(held).allocate([probe(wait.claim)])
            if results is None:
                return None
            allocation = results[0].to_dict()
            if not allocation.get("devices", {}).get("results"):
                raise InvalidInputError("request: the claim holds no device; ask for at least one")
            claims = sum(1 for r in held if r.owner.user == user)
            if claims >= self.policy.claims_per_user:
                raise LimitError(
                    f"user {user}: limit {self.policy.claims_per_user} claims (claims_per_user), "
                    f"holds {claims}; release some first"
                )
            self._check_limits(user, groups, held, allocation)
            if not meta.get("name"):
                meta["name"] = Ledger.next_name(tx, claim_prefix(user))
            record = ClaimRecord(
                name=meta["name"],
                namespace=meta.get("namespace") or "default",
                owner=wait.owner,
                spec={**wait.claim, "metadata": meta},
                allocation=allocation,
                created=now,
                last_activity=now,
                lease_expires=now + wait.lease if wait.lease is not None else None,
            )
            Ledger.insert(tx, record)
        log.info("claim %s allocated to %s: %s", record.name, user, ", ".join(record.device_keys))
        self._watch(wait.owner)  # a holder that is gone already: released at once
        return record

    def _check_limits(
        self,
        user: str,
        groups: tuple[str, ...] | None,
        held: list[ClaimRecord],
        allocation: dict[str, Any],
    ) -> None:
        limits = self._limits_of(user, groups)
        if not (limits.gpus.value or limits.mig.value or limits.gpu_share.value):
            return
        mine: set[str] = set()
        mine_shared = 0.0  # percent of a GPU, summed over the user's shares
        for record in held:
            if record.owner.user == user:
                mine.update(record.device_keys)
                mine_shared += self._shared(record.allocation)
        results = allocation.get("devices", {}).get("results", [])
        share = limits.gpu_share
        asks_shared = self._shared(allocation)
        if share.value and asks_shared and mine_shared + asks_shared > share.value + 1e-9:
            raise LimitError(
                f"user {user}: limit {percent_text(share.value)} of a GPU ({share.source}), "
                f"holds {percent_text(mine_shared)}; the request needs "
                f"{percent_text(asks_shared)} more"
            )
        new = {f"{r['driver']}/{r['pool']}/{r['device']}" for r in results} - mine
        for key, noun, limit in (("gpu", "GPU", limits.gpus), ("mig", "MIG slice", limits.mig)):
            if not limit.value:
                continue
            holds = sum(1 for d in mine if self._kind(d) == key)
            asks = sum(1 for d in new if self._kind(d) == key)
            if asks and holds + asks > limit.value:
                plural = "s" if limit.value != 1 else ""
                raise LimitError(
                    f"user {user}: limit {int(limit.value)} {noun}{plural} ({limit.source}), "
                    f"holds {holds}; the request needs {asks} more"
                )

    def _shared(self, allocation: dict[str, Any]) -> float:
        """Percent of a GPU the shares of an allocation hold (whole devices: 0)."""
        return sum(
            share_percent(r, self.capacities.get(f"{r['driver']}/{r['pool']}/{r['device']}", {}))
            for r in allocation.get("devices", {}).get("results", [])
        )

    def _kind(self, device_key: str) -> str:
        return "mig" if self.kinds.get(device_key) == "mig" else "gpu"

    def _busy(self, peer: Peer, claim: dict[str, Any], position: int, waited: float) -> BusyError:
        held = self._shown(peer, self.ledger.read_claims())
        explanation = self.local.allocator(held).explain([probe(claim)])
        waited_text = f" after waiting {waited:.0f}s" if waited >= 1 else ""
        place = f" (number {position} in the queue)" if position > 1 else ""
        holders = ", ".join(f"{r.name} ({r.owner.user})" for r in held) or "nobody"
        return BusyError(
            f"the devices are busy{waited_text}{place}; pass timeout='10m' to wait in line, "
            "or release claims you no longer need:\n"
            + explanation.summary()
            + f"\nclaims held now: {holders}",
            explanation,
        )

    def _serve_waits(self) -> None:
        """Give freed devices to the requests in line, first come first served per shape;
        tell each waiting one its new place, and refuse those whose wait ran out."""
        now = time.monotonic()
        blocked: set[str] = set()
        places: dict[str, int] = {}
        for wait in list(self.waits):
            if wait.conn.sock.fileno() < 0:
                continue
            waited = now - wait.start
            done: bytes | None = None
            if wait.shape not in blocked:
                try:
                    record = self._attempt(wait, wait.conn.peer.groups)
                except DraJupyterError as err:
                    done = protocol.refusal(wait.request_id, err)
                else:
                    if record is not None:
                        done = protocol.answer(wait.request_id, protocol.record_to_wire(record))
            if done is None and wait.timeout is not None and waited >= wait.timeout:
                position = places.get(wait.shape, 0) + 1
                done = protocol.refusal(
                    wait.request_id, self._busy(wait.conn.peer, wait.claim, position, waited)
                )
            if done is not None:
                self.waits.remove(wait)
                self._user(wait.conn.peer.uid).waiting -= 1
                self._send(wait.conn, done)
                continue
            blocked.add(wait.shape)
            places[wait.shape] = position = places.get(wait.shape, 0) + 1
            if position != wait.position:
                wait.position = position
                self._send(
                    wait.conn, protocol.waiting(wait.request_id, position, waited, wait.timeout)
                )

    # --- processes that hold claims ------------------------------------------------------

    def _watch(self, owner: Owner) -> None:
        if owner.pid <= 0 or owner.host != HOST:
            return
        key = (owner.pid, owner.start_time)
        if key in self.watches:
            return
        fd = open_pidfd(owner.pid)
        if fd is not None and (process_start_time(owner.pid) != owner.start_time or not alive(fd)):
            os.close(fd)  # the pid is another process's now
            fd = None
        if fd is None:
            self._reclaim_process(owner.pid, owner.start_time)
            return
        watch = Watch(owner.pid, owner.start_time, fd)
        self.watches[key] = watch
        self.selector.register(fd, selectors.EVENT_READ, watch)

    def _exited(self, watch: Watch) -> None:
        self.selector.unregister(watch.fd)
        os.close(watch.fd)
        self.watches.pop((watch.pid, watch.start_time), None)
        self._reclaim_process(watch.pid, watch.start_time)

    def _reclaim_process(self, pid: int, start_time: int | None) -> None:
        def select(record: ClaimRecord) -> str | None:
            o = record.owner
            if o.host == HOST and o.pid == pid and o.start_time == start_time:
                return "kernel-shutdown" if o.kernel_id else "reclaimed"
            return None

        swept = self.local.sweep(select, time.time(), ())
        for record, reason in swept.released:
            log.info("claim %s of %s released: %s", record.name, record.owner.user, reason)
        if swept.released:
            self._serve_waits()

    def _tick(self) -> None:
        """Once a second: expired leases, idle claims, waits that ran out."""
        now = time.time()

        def idle(record: ClaimRecord) -> str | None:
            if record.owner.pid <= 0:
                return None  # a detached claim lives by its lease
            limit = self._limits_of(record.owner.user).idle.value
            return "idle" if limit and now - record.last_activity >= limit else None

        def words(record: ClaimRecord, reason: str) -> str | None:
            if reason != "idle":
                return None
            return f"idle for {duration_text(self._limits_of(record.owner.user).idle.value)}"

        try:
            swept = self.local.sweep(idle, now, (), message=words)
        except LedgerError as err:
            log.error("%s", err)
            return
        for record, reason in swept.released:
            log.info("claim %s of %s released: %s", record.name, record.owner.user, reason)
        if swept.released or self.waits:
            self._serve_waits()


_WAITING = object()


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

"""The daemon's connections: accepting them, reading their frames, sending their answers
without blocking, and each user's counts (open connections, requests per second).

A connection's frames are bounded (:data:`~dra_jupyter.service.protocol.MAX_FRAME`) before
more is read, and none is read while :data:`BACKLOG` of its answers waits to be sent: a
client that sends and never reads holds at most that, one answer and one frame.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dra_jupyter.errors import LimitError
from dra_jupyter.service import protocol
from dra_jupyter.service.access import Access
from dra_jupyter.service.peer import Peer, peer_of

log = logging.getLogger("dra_jupyter.service")

READ_CHUNK = 256 << 10
# No frame of a connection is read while this much of its answers waits to be sent; so a
# client that sends and never reads holds at most this, one answer and one frame.
BACKLOG = 1 << 20
MAX_PENDING_OUTPUT = BACKLOG + protocol.MAX_ANSWER
ACCEPT_BURST = 64  # connections accepted at one event, without starving the others


@dataclass(eq=False)
class Connection:
    """One client's socket, who it is, and what is read of it and waits to be sent."""

    sock: socket.socket
    peer: Peer
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    closing: bool = False  # refuse further frames; close once the output is sent


@dataclass
class UserState:
    """A user's request tokens (a bucket refilled at the policy's rate), open connections
    and requests waiting in line."""

    tokens: float
    stamp: float
    connections: int = 0
    waiting: int = 0


class Connections:
    """Every open connection of the daemon's ``selector``. A complete frame goes to
    ``frame``; a connection that closes goes to ``dropped`` (with its user's state) once it
    is unregistered. Inside a batch (:attr:`deferred` not None) answers wait for its commit."""

    def __init__(
        self,
        selector: selectors.BaseSelector,
        access: Access,
        frame: Callable[[Connection, bytes], None],
        dropped: Callable[[Connection, UserState], None],
    ) -> None:
        self.selector = selector
        self.access = access
        self._frame = frame
        self._dropped = dropped
        self.users: dict[int, UserState] = {}
        self.ready: set[Connection] = set()  # connections with frames left to read
        # connections whose answers wait for the batch's commit (None: not in a batch)
        self.deferred: dict[Connection, None] | None = None

    def user(self, uid: int) -> UserState:
        state = self.users.get(uid)
        if state is None:
            state = self.users[uid] = UserState(
                tokens=self.access.policy.burst, stamp=time.monotonic()
            )
        return state

    def accept(self, listener: socket.socket) -> None:
        policy = self.access.policy
        for _ in range(ACCEPT_BURST):
            try:
                sock, _addr = listener.accept()
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
            state = self.user(peer.uid)
            if state.connections >= policy.connections_per_user:
                conn.closing = True
                self.send(
                    conn,
                    protocol.refusal(
                        None,
                        LimitError(
                            f"user {peer.user}: limit {policy.connections_per_user} open "
                            "connections (connections_per_user); close some"
                        ),
                    ),
                )
                self.selector.register(sock, selectors.EVENT_WRITE, conn)
                state.connections += 1
                continue
            state.connections += 1
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.drop(conn)
            return
        if conn.closing:
            return  # an oversized frame was refused: what follows is not read
        conn.inbuf += chunk
        self.process(conn)

    def process(self, conn: Connection) -> None:
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
        self.send(
            conn,
            protocol.refusal(
                None,
                protocol.ProtocolError(
                    None,
                    f"a frame over {protocol.MAX_FRAME} bytes (the limit of one request) was "
                    "refused, and the connection closed",
                ),
            ),
        )

    def rate(self, peer: Peer) -> None:
        """Take a token of ``peer``'s user for one frame; LimitError when none is left."""
        policy = self.access.policy
        state = self.user(peer.uid)
        now = time.monotonic()
        state.tokens = min(
            policy.burst, state.tokens + (now - state.stamp) * policy.requests_per_second
        )
        state.stamp = now
        if state.tokens < 1:
            raise LimitError(
                f"user {peer.user}: limit {policy.requests_per_second:g} requests per "
                "second (requests_per_second); slow down and try again"
            )
        state.tokens -= 1

    def send(self, conn: Connection, data: bytes) -> None:
        if conn.sock.fileno() < 0:
            return
        conn.outbuf += data
        if len(conn.outbuf) > MAX_PENDING_OUTPUT:
            log.warning(
                "uid %d pid %d does not read its answers; connection closed",
                conn.peer.uid,
                conn.peer.pid,
            )
            self.drop(conn)
            return
        self.flush(conn)

    def flush(self, conn: Connection) -> None:
        if self.deferred is not None:  # inside a batch: sent once it is committed
            self.deferred[conn] = None
            return
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf[:READ_CHUNK])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.drop(conn)
                return
            del conn.outbuf[:sent]
        if not conn.outbuf and conn.closing:
            self.drop(conn)
            return
        backed_up = len(conn.outbuf) >= BACKLOG
        if not backed_up and b"\n" in conn.inbuf:
            self.ready.add(conn)  # frames read while its answers backed up: go on
        events = (0 if backed_up else selectors.EVENT_READ) | (
            selectors.EVENT_WRITE if conn.outbuf else 0
        )
        with contextlib.suppress(KeyError, ValueError):
            if self.selector.get_key(conn.sock).events != events:
                self.selector.modify(conn.sock, events, conn)

    def drop(self, conn: Connection) -> None:
        if conn.sock.fileno() < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        self.ready.discard(conn)
        state = self.user(conn.peer.uid)
        state.connections -= 1
        self._dropped(conn, state)

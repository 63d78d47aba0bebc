"""The service backend: :class:`~dra_jupyter.types.Backend` over the daemon's Unix socket.

The Python API, the magics, the CLI and the Jupyter server extension use it as they use
the local backend. What the caller is never travels: the daemon asks the kernel, so the
owner's ``user`` here is only what this process believes (``JUPYTERHUB_USER`` or the OS
user); the claims it gets back carry the user the daemon decided. Only the owner's
``kernel_id`` and whether the claim is ``detached`` (``pid`` 0: it lives by its lease, the
CLI's) are sent.

One connection per process (made again after a fork, or after the daemon restarted),
shared by :meth:`ServiceBackend.with_owner` twins, one call at a time (a lock).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import socket
import struct
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from dra_jupyter.accounting.book import Book
from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.errors import (
    InvalidInputError,
    UnavailableError,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.metrics.base import DeviceProcess, Sample
from dra_jupyter.model.objects import Wire
from dra_jupyter.service import protocol
from dra_jupyter.types import (
    Capabilities,
    ClaimRecord,
    DeviceTaint,
    Ended,
    HealthEvent,
    OnWait,
    Owner,
    ReclaimNotice,
    Select,
    Sweep,
    Waiter,
    Waiting,
)

CAPABILITIES = Capabilities(
    where="the dra-jupyter service",
    devices_here=True,
    waits=True,
    leases=True,
    allocates_later=False,
    claim_states=False,
    releases_taken_out=True,
)
CONNECT_TIMEOUT = 5.0  # seconds to connect to the daemon
ANSWER_TIMEOUT = 60.0  # seconds an answer may take; a request in line: its timeout and this


class Channel:
    """This process's connection to the daemon, one call at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pid = 0
        self._buffer = bytearray()
        self._ids = itertools.count(1)

    def _connect(self) -> socket.socket:
        if self._sock is not None and self._pid == os.getpid():
            return self._sock
        self._close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect(str(self.path))
        except OSError as err:
            sock.close()
            raise UnavailableError(
                f"the dra-jupyter service at {self.path} does not answer ({err.strerror or err}); "
                "it may be restarting: try again in a moment; if it stays down, its admin "
                "starts it (systemctl start dra-jupyter, or dra-jupyter service --config FILE)"
            ) from err
        try:
            self._check_daemon(sock)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(ANSWER_TIMEOUT)
        self._sock, self._pid = sock, os.getpid()
        self._buffer.clear()
        return sock

    def _check_daemon(self, sock: socket.socket) -> None:
        """The process that listens is root, this user, or the owner of the socket's folder
        (who alone could put a socket there): not another user posing as the service."""
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        try:
            owner = self.path.parent.stat().st_uid
        except OSError:
            owner = 0
        if uid not in (0, os.getuid(), owner):
            raise UnavailableError(
                f"the process listening at {self.path} runs as uid {uid}, which is not the "
                f"service's (root, or the owner of {self.path.parent}); not using it"
            )

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._sock is not None and self._pid == os.getpid():
            self._sock.close()
        self._sock = None
        self._buffer.clear()

    def call(
        self, op: str, args: Wire, on_wait: OnWait | None = None, *, wait: float | None = 0.0
    ) -> Any:
        """The result of ``op``; ``wait``: how long the daemon may keep the request in line
        (None: without limit), during which no answer is overdue."""
        with self._lock:
            try:
                return self._call(op, args, on_wait, wait)
            except BaseException:
                self._close()  # a half-read answer must not be the next call's
                raise

    def _call(self, op: str, args: Wire, on_wait: OnWait | None, wait: float | None) -> Any:
        request_id = next(self._ids)
        frame = protocol.request_frame(request_id, op, args)
        if len(frame) > protocol.MAX_FRAME:
            raise InvalidInputError(
                f"{op}: the request is {len(frame)} bytes, over the service's limit of "
                f"{protocol.MAX_FRAME}"
            )
        sock = self._connect()
        try:
            self._send(sock, frame)
        except UnavailableError:  # the daemon restarted since the last call: once more, anew
            self._close()
            sock = self._connect()
            self._send(sock, frame)
        while True:
            reply = self._read(sock)
            if reply.get("id") != request_id and reply.get("id") is not None:
                continue  # an answer of a call that was given up
            if "waiting" in reply:
                sock.settimeout(None if wait is None else wait + ANSWER_TIMEOUT)
                if on_wait is not None:
                    w = reply["waiting"]
                    on_wait(Waiting(int(w["position"]), float(w["waited"]), w.get("timeout")))
                continue
            sock.settimeout(ANSWER_TIMEOUT)
            if reply.get("ok") is True:
                return reply.get("result")
            raise protocol.error_from_wire(reply.get("error"))

    def _send(self, sock: socket.socket, frame: bytes) -> None:
        try:
            sock.sendall(frame)
        except OSError as err:
            raise self._lost(err) from err

    def _lost(self, err: OSError | None = None) -> UnavailableError:
        why = f" ({err.strerror or err})" if err is not None else ""
        return UnavailableError(
            f"the dra-jupyter service at {self.path} closed the connection{why}; "
            "try again (it may have restarted)"
        )

    def _read(self, sock: socket.socket) -> dict[str, Any]:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                try:
                    reply = json.loads(line)
                except ValueError as err:
                    raise UnavailableError(
                        f"the dra-jupyter service at {self.path} sent a frame that is not JSON"
                    ) from err
                if not isinstance(reply, dict):
                    raise UnavailableError(f"the service at {self.path} sent a non-object frame")
                return reply
            if len(self._buffer) > protocol.MAX_ANSWER:
                raise UnavailableError(
                    f"the dra-jupyter service at {self.path} sent an answer over "
                    f"{protocol.MAX_ANSWER} bytes"
                )
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError as err:
                raise UnavailableError(
                    f"the dra-jupyter service at {self.path} did not answer in {ANSWER_TIMEOUT:g}s"
                ) from err
            except OSError as err:
                raise self._lost(err) from err
            if not chunk:
                raise self._lost()
            self._buffer += chunk


class ServiceBackend:
    """Claims of one owner, made and kept by the daemon (see the module docstring)."""

    capabilities = CAPABILITIES
    cluster: None = None  # one machine's devices: no reserve, no pods

    def __init__(
        self,
        socket_path: Path,
        owner: Owner,
        *,
        strategy: Strategy = "topology",
        namespace: str = "default",
        channel: Channel | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.owner = owner
        self.namespace = namespace or "default"
        self.strategy: Strategy = strategy
        self.channel = channel or Channel(socket_path)
        self._inventory: Inventory | None = None
        self._cache = AllocatorCache()
        self._watched = _Watched()

    def _call(self, op: str, args: Wire | None = None, on_wait: OnWait | None = None) -> Any:
        return self.channel.call(op, args or {}, on_wait)

    def hello(self) -> dict[str, Any]:
        """Who the daemon says this process is, and the limits that apply."""
        answer: dict[str, Any] = self._call("hello")
        return answer

    def inventory(self, *, refresh: bool = False) -> Inventory:
        if self._inventory is None or refresh:
            self._inventory = protocol.inventory_from_wire(self._call("inventory"))
        return self._inventory

    def with_owner(self, owner: Owner) -> ServiceBackend:
        twin = ServiceBackend(
            self.socket_path,
            owner,
            strategy=self.strategy,
            namespace=self.namespace,
            channel=self.channel,
        )
        twin._inventory, twin._cache = self._inventory, self._cache
        twin._watched = self._watched
        return twin

    def allocator(self, held: list[ClaimRecord]) -> Allocator:
        devices = self.inventory()
        return Allocator(
            devices.patched_slices,
            devices.device_classes,
            [r.to_object() for r in held],
            self.strategy,
            cache=self._cache,
        )

    def check_possible(self, claim: Wire, *, explain: bool = True) -> None:
        self.allocator([]).check_idle(claim, self.inventory().description, explain=explain)

    def _owner_args(self) -> Wire:
        return {"kernel_id": self.owner.kernel_id, "detached": self.owner.pid == 0}

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: OnWait | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        if not checked:
            self.check_possible(claim)
        args = {"claim": claim, "timeout": timeout, "lease": lease, **self._owner_args()}
        if timeout == 0:
            return protocol.record_from_wire(self._call("request", args, on_wait))
        # A wait in line has a connection of its own: the process's other calls go on.
        line = Channel(self.socket_path)
        try:
            return protocol.record_from_wire(line.call("request", args, on_wait, wait=timeout))
        finally:
            line.close()

    def release(
        self, name: str, reason: str = "user", *, any_owner: bool = False, by: str | None = None
    ) -> bool:
        """Give the claim back; the daemon decides whether this user may (its owner, or an
        admin): ``any_owner`` adds nothing a caller could not do anyway, nor ``by`` (the
        daemon records an admin's release by its peer, this process's user)."""
        if by is not None and reason == "admin":
            reason = "user"  # the daemon's words: it says ``admin`` where its peer is one
        done = bool(self._call("release", {"name": name, "reason": reason}))
        if done:
            self._watched.released_here(name)
        return done

    def record(self, name: str) -> ClaimRecord | None:
        found = self._call("record", {"name": name})
        return None if found["record"] is None else protocol.record_from_wire(found["record"])

    def claims(self, *, all_users: bool = False) -> list[ClaimRecord]:
        return [protocol.record_from_wire(r) for r in self._call("list", {"all_users": all_users})]

    def claims_with_state(self, *, all_users: bool = False) -> list[tuple[ClaimRecord, str]]:
        return [(r, "allocated") for r in self.claims(all_users=all_users)]

    def holders(self) -> list[ClaimRecord]:
        return [protocol.record_from_wire(r) for r in self._call("holders")]

    def taint(self, device: str, effect: str, reason: str, key: str) -> DeviceTaint:
        """An admin's taint, recorded by the daemon as theirs (others: ForbiddenError)."""
        args = {"device": device, "effect": effect, "reason": reason, "key": key}
        return protocol.taint_from_wire(self._call("taint", args))

    def untaint(self, device: str, key: str) -> DeviceTaint:
        return protocol.taint_from_wire(self._call("untaint", {"device": device, "key": key}))

    def taints(self, *, history: bool = False) -> list[DeviceTaint]:
        answer = self._call("taints", {"history": history})
        if not isinstance(answer, list):
            raise UnavailableError("service protocol: the taints are not a list")
        return [protocol.taint_from_wire(t) for t in answer]

    def health_events(self, *, device: str | None = None) -> list[HealthEvent]:
        """The daemon's record of the GPUs its health watcher took out (``device``: one
        GPU's), the claims hit named as this user may see them."""
        answer = self._call("health", {} if device is None else {"device": device})
        if not isinstance(answer, list):
            raise UnavailableError("service protocol: the health record is not a list")
        return [protocol.health_event_from_wire(e) for e in answer]

    def explain(self, claim: Wire) -> dict[str, Any]:
        """Why ``claim`` could or could not be allocated now (the explanation's dict)."""
        answer: dict[str, Any] = self._call("explain", {"claim": claim})
        return answer

    def state(self, name: str) -> str:
        return "allocated" if self.record(name) is not None else "released"

    def released_at(self, name: str) -> float | None:
        ended = self._call("record", {"name": name})["released_at"]
        return None if ended is None else float(ended)

    def ended(self, name: str) -> Ended | None:
        gone = self._call("record", {"name": name}).get("released")
        if not isinstance(gone, dict):
            return None
        return Ended(
            protocol.record_from_wire(gone["record"]),
            str(gone["reason"]),
            float(gone["time"]),
            None if gone.get("message") is None else str(gone["message"]),
        )

    def metrics_source(self) -> ServiceMetrics:
        """The daemon's metrics: it reads NVML (or the simulated source) once for all."""
        return ServiceMetrics(self)

    def touch(self, name: str, now: float) -> bool:
        return bool(self._call("keep", {"name": name}))

    def activity(
        self, *, kernel_id: str | None = None, name: str | None = None, busy: bool = False
    ) -> int:
        """Tell the daemon that this user's claims of ``kernel_id`` (or the claim ``name``)
        were active now, and whether a cell runs (``busy``): what reclaim under pressure
        judges idleness by. Not a Keep. Returns how many claims it recorded."""
        args: Wire = {"busy": busy}
        if kernel_id is not None:
            args["kernel_id"] = kernel_id
        if name is not None:
            args["name"] = name
        return int(self._call("activity", args))

    def usage_book(self, last: float) -> Book:
        """The daemon's usage book of the last ``last`` seconds (``inf``: all of it): an
        admin's of every user, anyone else's own."""
        data = self._call("usage", {"last": None if math.isinf(last) else last})
        try:
            return Book.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise UnavailableError(
                "service protocol: the daemon sent a usage book that is not one "
                f"({type(err).__name__}); is it another version of dra-jupyter?"
            ) from err

    def sweep(
        self,
        select: Select | None,
        now: float,
        live_kernels: Collection[str],
        *,
        wait: bool = True,  # no lock here to wait for: the daemon is the one writer
    ) -> Sweep:
        """The daemon reclaims dead holders and expired leases by itself; this releases the
        claims of this user that ``select`` names a reason for (a server's idle release).
        Claims of this process that the daemon released since the last sweep (idle, a
        lease, an admin) are among the released too, with the daemon's reason, so that the
        server announces them as it does its own."""
        swept = Sweep(complete=False)
        records = self.claims()
        for record in self._watched.gone_since(records, self.owner.host, live_kernels):
            ended = self.ended(record.name)
            swept.released.append((record, ended.reason if ended is not None else "reclaimed"))
            if ended is not None:
                swept.ended[record.name] = ended
        for record in records:
            reason = select(record) if select is not None else None
            if reason is not None and self.release(record.name, reason):
                swept.released.append((record, reason))
            else:
                swept.kept.append(record)
        return swept

    def where(self) -> str:
        return f"the service at {self.socket_path}"

    def close(self) -> None:
        """Nothing to let go of: no view is kept running."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to group: each call is one transaction of the daemon."""
        return contextlib.nullcontext()

    def waiting(self) -> list[Waiter]:
        """The daemon's line in its order (fair share, then first come first), each with its
        position and why (another user's name hidden unless the policy's visibility shows
        it)."""
        try:
            return [
                Waiter(
                    Owner.from_dict(dict(w["owner"])),
                    str(w["what"]),
                    float(w["since"]),
                    int(w.get("position", 0)),
                    str(w.get("why", "")),
                    summary_classes(str(w["what"])),
                )
                for w in self._call("waiting")
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise UnavailableError(
                f"service protocol: the daemon sent a line that is not one ({type(err).__name__})"
                "; is it another version of dra-jupyter?"
            ) from err

    def notices(self) -> list[ReclaimNotice]:
        """The warnings of reclaim under pressure on this user's claims (an admin's: all)."""
        try:
            return [
                ReclaimNotice(
                    str(n["claim"]),
                    str(n["waiter"]),
                    str(n["what"]),
                    float(n["deadline"]),
                    int(n["keeps_left"]),
                    str(n["message"]),
                    float(n["warned"]),
                )
                for n in self._call("notices")
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise UnavailableError(
                "service protocol: the daemon sent notices that are not ones "
                f"({type(err).__name__}); is it another version of dra-jupyter?"
            ) from err

    def adopt(self, kernel_id: str, holder: Owner, now: float) -> Sweep:
        """This process holds this user's claims of ``kernel_id`` from now on (the daemon
        takes the holder from the connection, not from ``holder``)."""
        answer = self._call("adopt", {"kernel_id": kernel_id})
        swept = Sweep(
            kept=[protocol.record_from_wire(r) for r in answer["kept"]],
            released=[
                (protocol.record_from_wire(r["record"]), str(r["reason"]))
                for r in answer["released"]
            ],
        )
        for record, _reason in swept.released:  # reported here: not again by a sweep
            self._watched.released_here(record.name)
        return swept


class _Watched:
    """The claims held by this process, or of its live kernels, that a sweep saw last,
    shared by a backend and its twins (:meth:`ServiceBackend.with_owner`): one gone by the
    next sweep, and not released through this process, was released by the daemon. Each
    is reported once (names are never reused), also when threads sweep at once."""

    MOST = 4096  # names remembered as reported

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, ClaimRecord] = {}
        self.done: dict[str, None] = {}  # names released here or reported, oldest first

    def released_here(self, name: str) -> None:
        with self.lock:
            self.seen.pop(name, None)
            self._done(name)

    def gone_since(
        self, records: list[ClaimRecord], host: str, live_kernels: Collection[str]
    ) -> list[ClaimRecord]:
        pid = os.getpid()
        names = {r.name for r in records}
        with self.lock:
            gone = [r for n, r in self.seen.items() if n not in names and n not in self.done]
            for record in gone:
                self._done(record.name)
            self.seen = {
                r.name: r
                for r in records
                if r.name not in self.done
                and (
                    (r.owner.pid == pid and r.owner.host == host)
                    or (r.owner.kernel_id is not None and r.owner.kernel_id in live_kernels)
                )
            }
        return gone

    def _done(self, name: str) -> None:
        self.done[name] = None
        while len(self.done) > self.MOST:
            del self.done[next(iter(self.done))]


class ServiceMetrics:
    """A :class:`~dra_jupyter.metrics.base.MetricsSource` that asks the daemon (op
    ``metrics``), which reads the machine's source at most once a second for every client."""

    def __init__(self, backend: ServiceBackend) -> None:
        self.backend = backend
        self.name = "service"
        self.simulated = False
        self.problem = ""
        self.reads = 0  # the daemon's reads of its source so far, as it last said

    def sample(self, held: Collection[str], now: float) -> list[Sample]:
        answer = self.backend._call("metrics")  # the daemon knows what is held
        self.name = f"service ({answer.get('source')})"
        self.simulated = bool(answer.get("simulated"))
        self.problem = str(answer.get("problem") or "")
        self.reads = int(answer.get("reads") or 0)
        fields = set(Sample.__dataclass_fields__)
        return [
            Sample(**{k: v for k, v in s.items() if k in fields})
            for s in answer.get("samples", [])
            if isinstance(s, dict)
        ]

    def processes(self, now: float, since: float = 0.0) -> list[DeviceProcess] | None:
        """The processes on the devices as the daemon last sampled them (its metrics
        answer's ``processes``, those the caller may see); None from a daemon that has no
        GPU signal (or knows no such field)."""
        rows = self.backend._call("metrics").get("processes")
        if not isinstance(rows, list):
            return None
        return [
            DeviceProcess(
                device=str(r["device"]),
                pid=int(r["pid"]),
                time=float(r["time"]),
                memory_used=r.get("memory_used"),
                utilization=r.get("utilization"),
                user=r.get("user"),
                uid=r.get("uid"),
                command=r.get("command"),
                since=r.get("since"),
                claim=r.get("claim"),
                enforce=r.get("enforce"),
            )
            for r in rows
            if isinstance(r, dict)
        ]

    def energy(self) -> dict[str, float] | None:
        return None  # the daemon keeps the books of energy

    def close(self) -> None:
        return None


def summary_classes(what: str) -> tuple[str, ...]:
    """The device classes of a waiting request in the daemon's words (``8 gpu.nvidia.com,
    1 mig.nvidia.com + selectors``: :func:`~dra_jupyter.local.shapes.shape_summary`)."""
    words = (part.split(" ") for part in what.split(", "))
    return tuple(dict.fromkeys(w[1] for w in words if len(w) > 1 and "." in w[1]))

"""Group commit: the daemon serves what many clients send at once in one ledger transaction,
and answers only after its commit. Whatever a client was answered is in the ledger file by
then, for any other reader (here: root's own SQLite connection, opened after the answer)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import BusyError
from dra_jupyter.service import protocol
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.types import Owner
from tests.service.accounts import service

FAST = "requests_per_second = 100000\nburst = 100000\nconnections_per_user = 100\n"
CLIENTS = 12  # more than the 8 GPUs: some are told busy
ROUNDS = 15


def rows(ledger: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


def test_an_answer_means_committed_under_many_clients() -> None:
    with service(FAST) as svc:
        owner = Owner(user="ignored", host=socket.gethostname(), pid=0)  # detached
        problems: list[str] = []
        counts = {"granted": 0, "busy": 0}
        lock = threading.Lock()
        start = threading.Barrier(CLIENTS)

        def client() -> None:
            backend = ServiceBackend(svc.socket, owner)
            try:
                rounds(backend)
            except Exception as err:  # said by the test, not lost in a thread
                with lock:
                    problems.append(f"{type(err).__name__}: {err}")
            finally:
                backend.channel.close()

        def rounds(backend: ServiceBackend) -> None:
            classes = [c["metadata"]["name"] for c in backend.inventory().device_classes]
            claim = build_claim("", {"gpu": 1}, classes=classes)
            start.wait(60)
            for _ in range(ROUNDS):
                try:
                    made = backend.allocate(claim, lease=600, checked=True)
                except BusyError:
                    with lock:
                        counts["busy"] += 1
                    continue
                live = rows(svc.ledger, "SELECT name FROM claims WHERE name = ?", made.name)
                done = backend.release(made.name)
                ended = rows(svc.ledger, "SELECT reason FROM releases WHERE name = ?", made.name)
                still = rows(svc.ledger, "SELECT name FROM claims WHERE name = ?", made.name)
                with lock:
                    counts["granted"] += 1
                    if not done or live != [(made.name,)] or ended != [("user",)] or still:
                        problems.append(f"{made.name}: {done} {live} {ended} {still}")

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads)
        assert problems == []
        assert counts["granted"] + counts["busy"] == CLIENTS * ROUNDS
        assert counts["granted"] >= 8  # every GPU was handed out at least once
        assert rows(svc.ledger, "SELECT COUNT(*) FROM claims") == [(0,)]


def test_a_batch_whose_commit_fails_closes_its_connections_unanswered() -> None:
    """Where the one commit of a batch fails (here: no file may grow, a full disk as the
    daemon sees it), nothing of it is in the ledger and none of its requests is answered:
    each connection of the batch is closed (its client sees the service go). The daemon
    serves on once the disk has room again."""
    with service(FAST) as svc:
        assert svc.process is not None
        pid = svc.process.pid
        owner = Owner(user="ignored", host=socket.gethostname(), pid=0)  # detached
        backend = ServiceBackend(svc.socket, owner)
        try:
            classes = [c["metadata"]["name"] for c in backend.inventory().device_classes]
            claim = build_claim("", {"gpu": 1}, classes=classes)
            clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
            for i, sock in enumerate(clients):
                sock.settimeout(60)
                sock.connect(str(svc.socket))
                assert hello(sock, i) is True  # accepted and served, one at a time
            os.kill(pid, signal.SIGSTOP)  # both requests wait for the same loop turn
            try:
                limit(pid, "1:")  # no file of the daemon may grow: its commit fails
                for i, sock in enumerate(clients):
                    args = {"claim": claim, "lease": 600}
                    frame = protocol.request_frame(10 + i, "request", args)
                    sock.sendall(frame)
            finally:
                os.kill(pid, signal.SIGCONT)
            try:
                for sock in clients:
                    assert sock.recv(65536) == b""  # closed, unanswered
            finally:
                limit(pid, "unlimited:")
                for sock in clients:
                    sock.close()
            assert rows(svc.ledger, "SELECT COUNT(*) FROM claims") == [(0,)]
            made = backend.allocate(claim, lease=600, checked=True)  # it serves on
            assert rows(svc.ledger, "SELECT name FROM claims") == [(made.name,)]
        finally:
            backend.channel.close()
        assert svc.process.poll() is None


def hello(sock: socket.socket, request_id: int) -> Any:
    sock.sendall(protocol.request_frame(request_id, "hello", {}))
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the service closed the connection"
        data += chunk
    return json.loads(data)["ok"]


def limit(pid: int, size: str) -> None:
    """The largest file ``pid`` may write (RLIMIT_FSIZE, its soft limit ``SOFT:``), set from
    outside (util-linux)."""
    subprocess.run(["prlimit", f"--pid={pid}", f"--fsize={size}"], check=True, timeout=60)

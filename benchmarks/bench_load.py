"""The REST API under load: concurrent clients creating and deleting claims.

Run with ``.venv/bin/python -m benchmarks.bench_load`` (``make bench-load``). Starts real
``jupyter server`` processes with the extension, on a temporary ledger and the simulated
``h200-8x`` inventory (8 GPUs), listening on 127.0.0.1 only, and prints Markdown tables.

Every figure comes from the same client code: ``--clients`` concurrent clients (asyncio,
one kept-alive HTTP/1.1 connection each, token auth) in this process, each sending its
next request as soon as the previous one is answered. A run stops after ``--ops`` requests
or ``--seconds``, whichever comes first (bounded in count and time).

* **baseline**: ``GET /api/status``, jupyter_server's own authenticated handler (no
  extension code): what the server, Tornado and this client cost per request on this
  machine, so that the other rows read as ratios to it;
* **create/delete, 1 server**: each client loops ``POST /dra/api/claims {"gpu": 1}``, then
  ``DELETE`` of the claim when it was made (201); with 16 clients on 8 GPUs about half the
  POSTs find every GPU held and are answered 409 (busy), as on a shared machine. One
  operation is one request; the answers are counted by status;
* **create/delete, 2 servers**: the same, the clients spread over two servers that share
  one ledger (so every write takes the ledger's lock across processes);
* **reads under a slow write**: ``GET /dra/api/claims`` in a loop on one connection while
  another process holds the ledger's write lock (``BEGIN IMMEDIATE``, for
  ``--hold`` seconds, as a slow writer would), and while one POST waits behind that lock:
  the GETs' latencies during the hold. A read that waited behind the write shows as a
  latency close to ``--hold``; and while one POST with a ``--big-post`` bytes ``model``
  string is handled (the issue's 50 MB body stalled every read for seconds).

Percentiles are of every request's latency (send to last byte), in milliseconds. **CPU**
(robust where the machine is shared, unlike rates and latencies): each load run's server
CPU seconds (``/proc/PID/stat``, every thread) and this process's (the clients) per
request; and first, one request at a time on one connection, ``--cost`` of each kind (the
baseline GET, a POST that allocates and the DELETE of its claim, a POST answered busy), the
server's CPU per request from its threads' ``schedstat`` (nanoseconds), with the part on
the event loop (the main thread: jupyter_server, Tornado and our handlers; the rest is the
writer and reader threads, ours). ``--profile FILE`` instead runs one server under yappi
(CPU clock, every thread) for those requests (and ``--rounds`` create/delete runs) and
writes its statistics (pstats: ``FILE`` the event loop, ``FILE.threads`` the others).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.servers import HOST, TOKEN, Server, cpu_ns, cpu_seconds, jupyter_server


class Connection:
    """One kept-alive HTTP/1.1 connection (asyncio streams; small, so that the client
    costs little next to the server)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
            f"Authorization: token {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(ConnectionError):  # the server closed first (a big body)
                await self.writer.wait_closed()
            self.writer = None


@dataclass
class Run:
    """The latencies (seconds) and answers of one load run."""

    name: str
    latencies: list[float] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    cpu: float | None = None  # CPU seconds of the servers over the run (every thread)
    client_cpu: float | None = None  # CPU seconds of this process (the clients) over it

    def row(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies)
        cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
        rate = len(ms) / self.seconds
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(self.answers.items()))
        cpu = "" if self.cpu is None else f" {self.cpu / len(ms) * 1000:.2f} |"
        client = "" if self.client_cpu is None else f" {self.client_cpu / len(ms) * 1000:.2f} |"
        return (
            f"| {self.name} | {len(ms)} | {rate:,.0f} | {statistics.median(ms):.1f} | "
            f"{cuts[98]:.1f} | {ms[-1]:.1f} |{cpu}{client} {answers} |"
        )


async def _load(name: str, ports: list[int], clients: int, ops: int, seconds: float) -> Run:
    """``clients`` clients (spread over ``ports``) until ``ops`` requests or ``seconds``."""
    run = Run(name)
    deadline = time.perf_counter() + seconds
    budget = [ops]

    def take() -> bool:
        if budget[0] <= 0 or time.perf_counter() > deadline:
            return False
        budget[0] -= 1
        return True

    async def timed(conn: Connection, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        start = time.perf_counter()
        status, data = await conn.call(method, path, body)
        run.latencies.append(time.perf_counter() - start)
        run.answers[f"{method} {status}"] += 1
        if status >= 500:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return status, data

    async def client(i: int) -> None:
        conn = Connection(ports[i % len(ports)])
        try:
            while take():
                if name.startswith("baseline"):
                    await timed(conn, "GET", "/api/status")
                    continue
                status, data = await timed(conn, "POST", "/dra/api/claims", {"gpu": 1})
                if status == 201:  # always given back: at most one request over the budget
                    budget[0] -= 1
                    claim = json.loads(data)["name"]
                    status, _ = await timed(conn, "DELETE", f"/dra/api/claims/{claim}")
                    assert status == 204, status
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    run.seconds = time.perf_counter() - start
    return run


def load(name: str, servers: list[Server], clients: int, ops: int, seconds: float) -> Run:
    before, client = sum(cpu_seconds(s.pid) for s in servers), time.process_time()
    run = asyncio.run(_load(name, [s.port for s in servers], clients, ops, seconds))
    run.cpu = sum(cpu_seconds(s.pid) for s in servers) - before
    run.client_cpu = time.process_time() - client
    return run


KINDS = ("GET /api/status", "POST claims (201)", "DELETE claims/NAME (204)", "POST claims (409)")


async def _costs(server: Server, repeat: int) -> dict[str, list[tuple[int, int]]]:
    """The server's CPU nanoseconds for each kind of request, one at a time on one
    connection: ``repeat`` times a baseline GET, a POST that allocates and the DELETE of
    its claim, then with every GPU held a POST that is answered busy (409)."""
    conn = Connection(server.port)
    out: dict[str, list[tuple[int, int]]] = {k: [] for k in KINDS}

    async def timed(kind: str, method: str, path: str, body: Any = None) -> bytes:
        loop, others = cpu_ns(server.pid)
        status, data = await conn.call(method, path, body)
        loop_after, others_after = cpu_ns(server.pid)
        out[kind].append((loop_after - loop, others_after - others))
        assert kind.endswith(f"({status})") or status == 200, (kind, status, data[:300])
        return data

    held = []
    try:
        for _ in range(repeat):
            await timed(KINDS[0], "GET", "/api/status")
            claim = json.loads(await timed(KINDS[1], "POST", "/dra/api/claims", {"gpu": 1}))
            await timed(KINDS[2], "DELETE", f"/dra/api/claims/{claim['name']}")
        while True:  # hold every GPU
            status, data = await conn.call("POST", "/dra/api/claims", {"gpu": 1})
            if status != 201:
                break
            held.append(json.loads(data)["name"])
        for _ in range(repeat):
            await timed(KINDS[3], "POST", "/dra/api/claims", {"gpu": 1})
    finally:
        for name in held:
            await conn.call("DELETE", f"/dra/api/claims/{name}")
        await conn.close()
    return out


def costs(server: Server, repeat: int) -> dict[str, list[tuple[int, int]]]:
    return asyncio.run(_costs(server, repeat))


async def _reads_under_lock(port: int, ledger: Path, hold: float) -> tuple[Run, Run]:
    """GET claims in a loop while another process holds the write lock for ``hold`` s;
    then the same with one POST waiting behind that lock."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(ledger), str(hold)],
        stdout=subprocess.PIPE,
        text=True,
    )
    runs = []
    try:
        for name, with_post in (("GET claims, lock held", False), ("GET claims, POST waits", True)):
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "locked"
            run = Run(name)
            conn, writer = Connection(port), Connection(port)
            post = (
                asyncio.ensure_future(writer.call("POST", "/dra/api/claims", {"gpu": 1}))
                if with_post
                else None
            )
            start = time.perf_counter()
            end = start + hold * 0.9  # within the hold
            while time.perf_counter() < end:
                t = time.perf_counter()
                status, _ = await conn.call("GET", "/dra/api/claims")
                run.latencies.append(time.perf_counter() - t)
                run.answers[f"GET {status}"] += 1
            run.seconds = time.perf_counter() - start
            if post is not None:
                status, data = await post
                run.answers[f"POST {status} (after the hold)"] += 1
                if status == 201:
                    await writer.call("DELETE", f"/dra/api/claims/{json.loads(data)['name']}")
            await conn.close()
            await writer.close()
            runs.append(run)
    finally:
        holder.wait(timeout=hold * 3 + 30)
        if holder.stdout is not None:
            holder.stdout.close()
    return runs[0], runs[1]


async def _reads_beside_a_big_post(port: int, size: int) -> Run:
    """GET claims in a loop while one POST with a ``size``-byte ``model`` string is handled
    (until it is answered, at most 60 s)."""
    run = Run(f"GET claims, POST of {size / 2**20:g} MiB runs")
    conn, writer = Connection(port), Connection(port)
    post = asyncio.ensure_future(
        writer.call("POST", "/dra/api/claims", {"gpu": 1, "model": "x" * size})
    )
    await asyncio.sleep(0)  # sent first
    start = time.perf_counter()
    while not post.done() and time.perf_counter() < start + 60:
        t = time.perf_counter()
        status, _ = await conn.call("GET", "/dra/api/claims")
        run.latencies.append(time.perf_counter() - t)
        run.answers[f"GET {status}"] += 1
    run.seconds = time.perf_counter() - start
    status, _ = await post
    run.answers[f"POST {status}"] += 1
    await conn.close()
    await writer.close()
    return run


# Another process: take the ledger's write lock twice, ``hold`` seconds each.
_HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
for _ in range(2):
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("ROLLBACK")
    time.sleep(0.5)
"""


def _ready(port: int) -> bool:
    async def ready() -> int:
        conn = Connection(port)
        try:
            return (await conn.call("GET", "/dra/api/devices"))[0]
        finally:
            await conn.close()

    return asyncio.run(ready()) == 200


def server(tmp: Path, ledger: Path, index: int, profile: Path | None = None) -> Any:
    """A ``jupyter server`` subprocess with the extension on ``ledger``."""
    return jupyter_server(tmp, ledger=ledger, name=f"server-{index}", ready=_ready, profile=profile)


def _cost_table(samples: dict[str, list[tuple[int, int]]]) -> None:
    base = statistics.median(a + b for a, b in samples[KINDS[0]])
    print(
        "| request | requests | server CPU ms, median | mean | of which on the event loop "
        "(mean) | x the baseline's median |"
    )
    print("|---|---|---|---|---|---|")
    for kind, ns in samples.items():
        total = [a + b for a, b in ns]
        median = statistics.median(total)
        print(
            f"| {kind} | {len(ns)} | {median / 1e6:.2f} | {statistics.fmean(total) / 1e6:.2f} | "
            f"{statistics.fmean(a for a, _ in ns) / 1e6:.2f} | {median / base:.1f} |"
        )


def profile(out: Path, args: argparse.Namespace) -> None:
    """One server under yappi: the costs, then one create/delete run; the statistics in
    ``out`` (pstats; read with ``python -m pstats``)."""
    with tempfile.TemporaryDirectory(prefix="dra-bench-load-") as name:
        tmp = Path(name)
        with server(tmp, tmp / "ledger.sqlite", 1, profile=out.resolve()) as first:
            _cost_table(costs(first, args.cost))
            if args.rounds:
                shape = (args.clients, args.ops, args.seconds)
                print(load("create/delete, 1 server (profiled)", [first], *shape).row())
    print(f"\nprofile of the server (yappi, CPU time): {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--ops", type=int, default=5000, help="most requests per run (5000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="most seconds per run (20)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each kind, interleaved")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds the lock is held")
    parser.add_argument(
        "--big-post", type=int, default=5 * 2**20, help="bytes of the big POST's model (5 MiB)"
    )
    parser.add_argument(
        "--cost", type=int, default=300, help="requests of each kind, one at a time (300)"
    )
    parser.add_argument(
        "--profile", type=Path, help="only profile one server (yappi) and write its stats here"
    )
    args = parser.parse_args()
    if args.profile is not None:
        profile(args.profile, args)
        return
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-load-") as name, ExitStack() as stack:
        tmp = Path(name)
        ledger = tmp / "ledger.sqlite"
        first = stack.enter_context(server(tmp, ledger, 1))
        second = stack.enter_context(server(tmp, ledger, 2))
        samples = costs(first, args.cost)
        shape = (args.clients, args.ops, args.seconds)
        for _ in range(args.rounds):  # interleaved, so that the machine's moods hit all
            runs.append(load("baseline: GET /api/status, 1 server", [first], *shape))
            runs.append(load("create/delete, 1 server", [first], *shape))
            runs.append(load("baseline: GET /api/status, 2 servers", [first, second], *shape))
            runs.append(load("create/delete, 2 servers, one ledger", [first, second], *shape))
        locked, waiting = asyncio.run(_reads_under_lock(first.port, ledger, args.hold))
        big = asyncio.run(_reads_beside_a_big_post(first.port, args.big_post))
        left = sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM claims").fetchone()[0]
        assert left == 0, f"{left} claims left in the ledger"

    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the end: {load_avg} ({os.cpu_count()} CPUs)\n")
    print(f"## Server CPU per request: one at a time, {args.cost} of each kind\n")
    _cost_table(samples)
    print(
        f"\n## Load: {args.clients} clients, at most {args.ops} requests or "
        f"{args.seconds:g} s per run, simulated h200-8x\n"
    )
    print(
        "| run | requests | per second | p50 ms | p99 ms | max ms | server CPU ms per "
        "request | client CPU ms per request | answers |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        print(run.row())
    for base, load_run in zip(runs[0::2], runs[1::2], strict=True):
        b, lr = len(base.latencies) / base.seconds, len(load_run.latencies) / load_run.seconds
        assert base.cpu is not None and load_run.cpu is not None
        cpu = (load_run.cpu / len(load_run.latencies)) / (base.cpu / len(base.latencies))
        print(
            f"\n{load_run.name}: {lr / b:.2f}x the baseline's requests per second, "
            f"{cpu:.2f}x its server CPU per request",
            end="",
        )
    print(
        "\n\n## Reads during a slow write (another process holds the write lock for "
        f"{args.hold:g} s; a big POST)\n"
    )
    print("| run | requests | per second | p50 ms | p99 ms | max ms | answers |")
    print("|---|---|---|---|---|---|---|")
    print(locked.row())
    print(waiting.row())
    print(big.row())


if __name__ == "__main__":
    main()

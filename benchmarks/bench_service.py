"""The shared-machine service against the embedded backend, measured side by side.

Run with ``.venv/bin/python -m benchmarks.bench_service`` (``make bench-service``). Starts a
real ``dra-jupyter service`` (a subprocess, the simulated ``h200-8x``: 8 GPUs; rate limits
raised out of the way) on a socket and a ledger in a temporary folder, and prints a
Markdown table:

(a) **Round trip**: one ``request`` of 1 GPU and its ``release``, ``--repeat`` times, through
    the :class:`~dra_jupyter.service.client.ServiceBackend` (one kept connection) and through
    the embedded :class:`~dra_jupyter.local.backend.LocalBackend` on a ledger of the same
    kind in the same folder, alternating: p50 and p99 in ms, and their ratio.
(b) **Sustained operations**: ``--clients`` processes (forked), each doing request+release
    pairs of 1 GPU for ``--seconds`` against the service, then against the embedded
    backend's ledger; operations (a request or a release, answered) per second, all clients
    together. Busy answers (8 GPUs, 16 clients) count: they are answered operations.
(d) **CPU per operation**: the daemon's CPU time (user + system, ``/proc/PID/stat``) over
    the round trips of (a) and over (b), per answered operation: what bounds a one-thread
    daemon's operations/s, and a figure that a loaded machine moves much less than wall
    times.
(c) **Memory**: the daemon's resident set (``VmRSS``) after (a) and (b), with
    ``--history`` released claims in the ledger's history (written into the ledger before
    the daemon starts).
(e) **Held up?**: the round trips of (a) again, for ``--held-seconds`` (15: three budgets
    of the heavy request's), while another client
    sends the heaviest request the limits allow, again as soon as each is answered: a frame
    of nearly 1 MiB, ``--heavy-requests`` requests (32, the API's limit) of costly CEL
    selectors each under the cost limit (two nested ``map`` over list literals, about a
    second per device on the engine; as many as the frame holds, each new to the caches);
    p50, p99 and the slowest beside those of (a) on the idle daemon, and how the heavy requests were
    answered (refused past the policy's ``request_cpu``, 5 s by default, worked out off the
    daemon's loop). ``--heavy-selectors`` fewer selectors per request (4 x 4: the issue's
    case).

Targets of issue 16: round trip p50 <= 2 ms, >= 1,000 operations/s, RSS <= 100 MB. Of issue
26: no user's request delayed by another's by more than 100 ms (the p99 of (e)).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.servers import environment
from dra_jupyter.backends import service_answers
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.service import protocol
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.types import Backend, Owner
from tests.helpers import running

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
            ]
        }
    },
}
POLICY = """[service]
ledger = "{ledger}"
inventory = "h200-8x"
requests_per_second = 1000000
burst = 1000000
connections_per_user = 1000
claims_per_user = 100000
"""


def owner() -> Owner:
    return Owner(user="bench", host=socket.gethostname(), pid=0)  # detached: lives by lease


@contextmanager
def daemon(root: Path, history: int) -> Iterator[tuple[Path, int]]:
    ledger = root / "state" / "ledger.sqlite"
    (root / "state").mkdir(mode=0o700)
    Ledger(ledger)  # the schema, then the history, before the daemon starts
    conn = sqlite3.connect(ledger)
    record = json.dumps(owner().to_dict())
    conn.executemany(
        "INSERT INTO releases (name, owner, reason, time) VALUES (?, ?, 'user', ?)",
        ((f"old-{i}", record, 1.0 + i) for i in range(history)),
    )
    conn.commit()
    conn.close()
    config = root / "service.toml"
    config.write_text(POLICY.format(ledger=ledger))
    sock = root / "socket"
    argv = [sys.executable, "-m", "dra_jupyter.cli", "service", "--config", str(config)]
    with running(
        [*argv, "--socket", str(sock)],
        log=root / "service.log",
        ready=lambda: service_answers(sock),
        env=environment(),
        what="dra-jupyter service",
    ) as process:
        yield sock, process.pid


def round_trips(backend: Backend, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        record = backend.allocate(CLAIM, lease=600, checked=True)
        backend.release(record.name)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _client(make: Callable[[], Backend], seconds: float, start: float, results: Any) -> None:
    backend = make()
    while time.time() < start:
        time.sleep(0.001)
    done = 0
    end = start + seconds
    while time.time() < end:
        try:
            record = backend.allocate(CLAIM, lease=600, checked=True)
            done += 1
            backend.release(record.name)
            done += 1
        except DraJupyterError:
            done += 1  # busy: an answered operation
    results.put(done)


def sustained(make: Callable[[], Backend], clients: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    start = time.time() + 1.0
    procs = [
        ctx.Process(target=_client, args=(make, seconds, start, results)) for _ in range(clients)
    ]
    for p in procs:
        p.start()
    total = sum(int(results.get(timeout=seconds + 120)) for _ in procs)
    for p in procs:
        p.join(60)
    return total / seconds


def costly_selector(n: int, seed: int) -> str:
    """Near the cost limit (887,403 of 1,000,000), about a second per device on the engine."""
    outer = ",".join(str(i + seed) for i in range(n))
    inner = ",".join(str(i) for i in range(n))
    return f"size([{outer}].map(x, [{inner}].map(y, y))) > 0"


def heaviest(requests: int, selectors: int, seed: int) -> dict[str, Any]:
    """``requests`` requests of a GPU, each with ``selectors`` costly selectors (0: as many
    as a frame of 1 MiB holds), every one new (``seed``)."""
    size = len(costly_selector(260, seed * 10_000)) + 40  # and its JSON around it
    per = selectors or max(1, (protocol.MAX_FRAME - 4096) // (size * requests))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": f"r{i}",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 1,
                            "selectors": [
                                {"cel": {"expression": costly_selector(260, seed * 10_000 + k)}}
                                for k in range(i * per, (i + 1) * per)
                            ],
                        },
                    }
                    for i in range(requests)
                ]
            }
        },
    }


def _heavy(sock: Path, requests: int, selectors: int, stop: Any, answers: Any) -> None:
    """Send the heaviest request, again as soon as it is answered, until ``stop``."""
    backend = ServiceBackend(sock, owner())
    seed = 1
    said: dict[str, int] = {}
    while not stop.is_set():
        seed += 1
        try:
            record = backend.allocate(heaviest(requests, selectors, seed), checked=True)
            backend.release(record.name)
            said["allocated"] = said.get("allocated", 0) + 1
        except DraJupyterError as err:
            said[type(err).__name__] = said.get(type(err).__name__, 0) + 1
    answers.put(said)


def held_up(sock: Path, backend: Backend, seconds: float, requests: int, selectors: int) -> Any:
    """The round trips of ``backend`` for ``seconds`` while another client sends the heaviest
    request, and how those were answered."""
    ctx = multiprocessing.get_context("fork")
    stop, answers = ctx.Event(), ctx.Queue()
    sender = ctx.Process(target=_heavy, args=(sock, requests, selectors, stop, answers))
    sender.start()
    time.sleep(1.0)  # its first frame is in
    times: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            times += round_trips(backend, 50)
    finally:
        stop.set()
    said = answers.get(timeout=600)
    sender.join(60)
    return times, said


def print_held_up(
    args: argparse.Namespace, idle: list[float], loaded: list[float], said: dict[str, int]
) -> None:
    heavy = heaviest(args.heavy_requests, args.heavy_selectors, 1)
    count = sum(len(r["exactly"]["selectors"]) for r in heavy["spec"]["devices"]["requests"])
    size = len(protocol.request_frame(1, "request", {"claim": heavy, "timeout": 0}))
    print()
    print(
        f"While another client sends the heaviest request ({args.heavy_requests} requests, "
        f"{count} costly selectors, a frame of {size:,} bytes), again and again for "
        f"{args.held_seconds:g} s (answered: "
        f"{', '.join(f'{k} x{v}' for k, v in sorted(said.items()))}; {len(loaded)} round trips):"
    )
    print()
    print("| round trip of 1 GPU | idle daemon (a) | heavy request sent | heavy / idle |")
    print("|---|---|---|---|")
    for q in (50, 99):
        before, during = pct(idle, q), pct(loaded, q)
        print(f"| p{q} (ms) | {before:.2f} | {during:.2f} | {during / before:.2f} |")
    print(f"| max (ms) | {max(idle):.2f} | {max(loaded):.2f} | {max(loaded) / max(idle):.2f} |")


def cpu_ms(pid: int) -> float:
    """The process's CPU time so far (user + system), in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--held-seconds", type=float, default=15.0)
    parser.add_argument("--heavy-requests", type=int, default=32)
    parser.add_argument("--heavy-selectors", type=int, default=0, help="0: a frame's worth")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dra-bench-service-"))
    try:
        inventory = resolve_inventory("h200-8x")
        embedded_ledger = root / "embedded" / "ledger.sqlite"

        def embedded() -> Backend:
            return LocalBackend(inventory, Ledger(embedded_ledger), owner())

        with daemon(root, args.history) as (sock, pid):

            def served() -> Backend:
                return ServiceBackend(sock, owner())

            service_backend, local_backend = served(), embedded()
            round_trips(service_backend, 20)  # warm: imports, caches, the connection
            round_trips(local_backend, 20)
            svc_times: list[float] = []
            loc_times: list[float] = []
            cpu_round_trips = 0.0
            for _ in range(10):  # alternating, so that both see the same machine
                before = cpu_ms(pid)
                svc_times += round_trips(service_backend, args.repeat // 10)
                cpu_round_trips += cpu_ms(pid) - before
                loc_times += round_trips(local_backend, args.repeat // 10)
            before = cpu_ms(pid)
            svc_ops = sustained(served, args.clients, args.seconds)
            cpu_sustained = (cpu_ms(pid) - before) / (svc_ops * args.seconds)
            loc_ops = sustained(embedded, args.clients, args.seconds)
            rss = rss_mb(pid)
            loaded, said = held_up(
                sock, service_backend, args.held_seconds, args.heavy_requests, args.heavy_selectors
            )
        rows = [
            ("round trip p50 (ms)", pct(svc_times, 50), pct(loc_times, 50)),
            ("round trip p99 (ms)", pct(svc_times, 99), pct(loc_times, 99)),
            (f"operations/s, {args.clients} clients", svc_ops, loc_ops),
        ]
        print("| measure | service | embedded | service / embedded |")
        print("|---|---|---|---|")
        for name, svc, loc in rows:
            print(f"| {name} | {svc:.2f} | {loc:.2f} | {svc / loc:.2f} |")
        per_op = cpu_round_trips / (2 * len(svc_times))
        print(f"| daemon CPU per operation (ms), round trips | {per_op:.2f} | | |")
        print(
            f"| daemon CPU per operation (ms), {args.clients} clients | {cpu_sustained:.2f} | | |"
        )
        print(f"| daemon RSS (MB), 8 GPUs, {args.history:,} released claims | {rss:.1f} | | |")
        print_held_up(args, svc_times, loaded, said)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What the live widgets cost: one refresh of the device board, in the kernel and on the
server extension.

Run with ``.venv/bin/python benchmarks/bench_widgets.py``. For each simulated inventory:

(a) **Kernel refresh**: ``board_rows(session)`` (the ledger read, the device table, one
metrics sample, the join), as a ``refresh`` message makes the kernel compute it, with a
temporary ledger holding one claim.

(b) **Server poll**: what the board's JavaScript asks every ``interval`` (1 s) when the
server extension answers: ``GET devices``, ``GET claims`` and ``GET metrics?history=40``
on a real ``jupyter server`` (one kept-alive connection, sequential here; the browser
sends them in parallel), and the bytes the three answers carry.

Each figure is the p50 and p99 of ``--repeat`` refreshes, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.bench_server import percentiles, server
from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from dra_jupyter.widgets.rows import board_rows

POLL = ("/dra/api/devices", "/dra/api/claims", "/dra/api/metrics?history=40")


def kernel_refresh(tmp: Path, inventory: str, repeat: int) -> tuple[int, float, float]:
    session = Session(Settings(ledger=tmp / f"kernel-{inventory}.sqlite", inventory=inventory))
    claim = session.request(gpu=1, apply_env=False)
    board_rows(session)  # warm up: inventory, ledger, metrics source
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        rows = board_rows(session)
        samples.append(time.perf_counter() - start)
    claim.release()
    p50, p99 = percentiles(samples)
    return len(rows), p50 * 1000, p99 * 1000


def server_poll(tmp: Path, inventory: str, repeat: int) -> tuple[float, float, int]:
    ledger = tmp / f"server-{inventory}.sqlite"
    with server(tmp, Path(inventory), ledger, idle_timeout=3600, check_interval=1.0) as client:
        code, claim = client.call("POST", "/dra/api/claims", {"gpu": 1})
        assert code == 201, claim
        for path in POLL:  # warm up
            assert client.call("GET", path)[0] == 200
        time.sleep(3)  # a few history samples (metrics_interval 2 s)
        samples, size = [], 0
        for _ in range(repeat):
            start = time.perf_counter()
            answers = [client.call("GET", path) for path in POLL]
            samples.append(time.perf_counter() - start)
            assert all(code == 200 for code, _ in answers)
            size = sum(len(json.dumps(body)) for _, body in answers)
    p50, p99 = percentiles(samples)
    return p50 * 1000, p99 * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--inventories", nargs="+", default=["h200-8x", "h200-mig"])
    args = parser.parse_args()
    print(f"repeat {args.repeat}\n")
    print(
        "| inventory | rows | kernel refresh p50 / p99 ms | server poll p50 / p99 ms | poll bytes |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for inventory in args.inventories:
            rows, k50, k99 = kernel_refresh(tmp, inventory, args.repeat)
            s50, s99, size = server_poll(tmp, inventory, args.repeat)
            print(
                f"| {inventory} | {rows} | {k50:.1f} / {k99:.1f} | {s50:.1f} / {s99:.1f} "
                f"| {size:,} |"
            )


if __name__ == "__main__":
    main()

"""``dra-jupyter usage --since 30d`` over a ledger of 100 users x 30 days of claim
intervals, beside ``dra-jupyter claims --all`` on the same ledger, measured side by side.

Run with ``.venv/bin/python -m benchmarks.bench_usage`` (``make bench-usage``). Writes a
ledger in a temporary folder: ``--users`` users (100), each holding ``--per-day`` claims a
day (4) for ``--days`` days (30) (1, 2 or 4 GPUs, or a MIG-sized share, 10 minutes to 6
hours each, with activity reported), plus 8 live claims; then runs each command
``--repeat`` times, alternating, in two ways:

* **command**: ``python -m dra_jupyter.cli ...`` as a subprocess, the whole command a user
  waits for (the interpreter's start included);
* **in process**: ``dra_jupyter.cli.main([...])`` in this process after one warm-up, the
  command's own work (reading the ledger, the arithmetic, the table); also its CPU time
  (this thread's), which a loaded machine moves less than wall time.

Prints a Markdown table: p50 and p90 in ms of each, and usage over claims. Target (issue
26): ``usage --since 30d`` <= 200 ms.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dra_jupyter.accounting.book import DevicePart
from dra_jupyter.cli.main import main
from dra_jupyter.inventory.simulated import load
from dra_jupyter.local import book
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import ClaimRecord, Owner

DAY = 86400.0


def write_ledger(path: Path, users: int, days: int, per_day: int, seed: int = 26) -> int:
    """The book of ``users`` x ``days`` x ``per_day`` closed intervals, and 8 live claims;
    returns how many intervals."""
    rng = random.Random(seed)
    ledger = Ledger(path)
    now = time.time()
    count = 0
    with ledger.transaction() as tx:
        for u in range(users):
            user = f"user{u:03d}"
            for day in range(days):
                for k in range(per_day):
                    start = now - (days - day) * DAY + rng.uniform(0, DAY - 6 * 3600)
                    length = rng.uniform(600, 6 * 3600)
                    gpus = rng.choice([1, 1, 2, 4])
                    parts = tuple(
                        DevicePart(f"gpu.nvidia.com/gpu-node-1/gpu-{g}", 1.0, "NVIDIA H200")
                        for g in range(gpus)
                    )
                    if rng.random() < 0.2:
                        parts = (
                            DevicePart("gpu.nvidia.com/gpu-node-1/gpu-7", 0.25, "NVIDIA H200"),
                        )
                    record = ClaimRecord(
                        name=f"{user}-{day * per_day + k + 1}",
                        namespace="default",
                        owner=Owner(user, "bench", 0),
                        spec={"metadata": {"name": f"{user}-{day}-{k}"}},
                        allocation={},
                        created=start,
                        last_activity=start,
                    )
                    book.open_interval(tx, record, parts, ended=start + length, reason="idle")
                    active = rng.uniform(0, length)
                    book.add_activity(tx, record.name, active, length - active, 0, active * 300)
                    count += 1
    local = LocalBackend(load("h200-8x"), ledger, Owner("bench", "bench", 0))
    local.allocate(_claim(8), lease=30 * DAY)  # the 8 GPUs: live claims to list
    return count


def _claim(gpus: int) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus},
                    }
                ]
            }
        },
    }


def timed_command(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dra_jupyter.cli", *argv], capture_output=True, check=False
    )
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def timed_in_process(argv: list[str], cpu: list[float] | None = None) -> float:
    """Wall ms of ``main(argv)``; its CPU ms (this thread's) appended to ``cpu``."""
    out, err = io.StringIO(), io.StringIO()
    start, start_cpu = time.perf_counter(), time.thread_time()
    code = main(argv, out, err)
    elapsed = (time.perf_counter() - start) * 1000
    if cpu is not None:
        cpu.append((time.thread_time() - start_cpu) * 1000)
    if code != 0:
        raise SystemExit(f"{argv}: exit {code}: {err.getvalue()[-500:]}")
    return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.sqlite"
        intervals = write_ledger(path, args.users, args.days, args.per_day)
        common = ["--ledger", str(path), "--inventory", "h200-8x"]
        commands = {
            "usage --since 30d": ["usage", "--since", "30d", *common],
            "claims --all": ["claims", "--all", *common],
        }
        os.environ.pop("DRA_JUPYTER_BACKEND", None)
        for argv_ in commands.values():  # warm: the file cache, the parsed claims
            timed_in_process(argv_)
            timed_command(argv_)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for name, argv_ in commands.items():
                times.setdefault((name, "command"), []).append(timed_command(argv_))
                cpu = times.setdefault((name, "in process, CPU"), [])
                times.setdefault((name, "in process"), []).append(timed_in_process(argv_, cpu))
        print(
            f"{intervals:,} intervals ({args.users} users x {args.days} days x "
            f"{args.per_day}), {args.repeat} runs each, alternating; load "
            f"{os.getloadavg()[0]:.1f}\n"
        )
        print(
            "| how | usage --since 30d p50 / p90 (ms) | claims --all p50 / p90 (ms) "
            "| usage / claims (p50) |"
        )
        print("|---|---|---|---|")
        for how in ("command", "in process", "in process, CPU"):
            u, c = times[("usage --since 30d", how)], times[("claims --all", how)]
            print(
                f"| {how} | {statistics.median(u):.0f} / {percentile(u, 0.9):.0f} | "
                f"{statistics.median(c):.0f} / {percentile(c, 0.9):.0f} | "
                f"{statistics.median(u) / statistics.median(c):.2f} |"
            )
        print(json.dumps({f"{k[0]} ({k[1]})": statistics.median(v) for k, v in times.items()}))


if __name__ == "__main__":
    main_()

"""The hand-off: from a release to the waiter's claim allocated, the waiter in another process.

Run with ``.venv/bin/python -m benchmarks.bench_handoff`` (``make bench-handoff``). Two
processes (forked) take turns holding every GPU of the simulated ``h200-8x`` (8 GPUs): the
one that holds waits until the other waits in line for them, holds on for a random while
(uniform in ``[0, --hold)``: a release comes at any moment of a waiter's poll interval,
as in real use), then releases and asks again at once (it queues behind the other). Each
hand-off is the time from just before the ``release`` call in one process to just after
the ``allocate`` that waited returned in the other (``time.monotonic``: one clock for every
process of the machine). ``--handoffs`` of them (200) per backend, after a few for warm-up:

* the embedded backend with the wake-up (:mod:`dra_jupyter.local.wakeup`);
* the embedded backend with it off (``LocalBackend(wakeup=False)``: polling every 0.5 s,
  the default ``DRA_JUPYTER_POLL_INTERVAL``): the baseline;
* the service: a real ``dra-jupyter service`` daemon (a subprocess on a socket and a ledger
  in a temporary folder, as ``benchmarks/bench_service.py`` starts it; no root needed), its
  clients the two processes (``--no-service`` leaves it out).

Prints a Markdown table: p50, p99 and the slowest in ms, and the baseline's over each. Target
of issue 27: p50 <= 50 ms, p99 <= 200 ms on the embedded ledger and the service.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_service import daemon, owner
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.types import Backend, Owner

ALL_GPUS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}
            ]
        }
    },
}
WARM_UP = 4  # hand-offs left out of the figures: imports, caches, connections


def _turns(make: Callable[[], Backend], which: int, total: int, hold: float, out: Any) -> None:
    """Process ``which`` (0 or 1) of two that take ``total`` turns in all, alternately: wait
    for every GPU, hold them until the other waits (where it has turns left) and a random
    while more, release them. Puts ``("got", t)`` and ``("released", t)`` events on ``out``,
    then ``("done", 0.0)``."""
    backend = make()
    rng = random.Random(27 + which)
    try:
        for turn in range(which, total, 2):
            record = backend.allocate(ALL_GPUS, timeout=None, lease=600, checked=True)
            out.put(("got", time.monotonic()))
            deadline = time.monotonic() + (60 if turn + 1 < total else 0)
            while not backend.waiting() and time.monotonic() < deadline:
                time.sleep(0.002)  # the other process is not in line yet
            time.sleep(rng.uniform(0.0, hold))
            start = time.monotonic()
            backend.release(record.name)
            out.put(("released", start))
    finally:
        out.put(("done", 0.0))


def handoffs(make: Callable[[], Backend], count: int, hold: float) -> list[float]:
    """``count`` hand-offs (after :data:`WARM_UP` more) between two forked processes, in ms."""
    ctx = multiprocessing.get_context("fork")
    events = ctx.Queue()
    total = count + WARM_UP + 1
    procs = [ctx.Process(target=_turns, args=(make, i, total, hold, events)) for i in range(2)]
    for p in procs:
        p.start()
        time.sleep(0.5)  # the first holds before the second asks: it waits in line
    log: list[tuple[str, float]] = []
    done = 0
    while done < len(procs):
        kind, when = events.get(timeout=600)
        if kind == "done":
            done += 1
        else:
            log.append((kind, when))
    for p in procs:
        p.join(60)
    log.sort(key=lambda e: e[1])
    out, released = [], None
    for kind, when in log:
        if kind == "released":
            released = when
        elif released is not None:  # got after the release before it: one hand-off
            out.append((when - released) * 1000)
            released = None
    return out[WARM_UP:]


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handoffs", type=int, default=200)
    parser.add_argument("--hold", type=float, default=0.5, help="seconds, at most")
    parser.add_argument("--no-service", action="store_true", help="the embedded ledger only")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dj-handoff-"))  # short: sockets' paths are bounded
    try:
        inventory = resolve_inventory("h200-8x")
        results: dict[str, list[float]] = {}
        for name, wakeup in (("embedded, wake-up", True), ("embedded, polling", False)):
            path = root / f"{'wake' if wakeup else 'poll'}.sqlite"
            Ledger(path)

            def embedded(path: Path = path, wakeup: bool = wakeup) -> Backend:
                return LocalBackend(inventory, Ledger(path), Owner.current(), wakeup=wakeup)

            results[name] = handoffs(embedded, args.handoffs, args.hold)
        if not args.no_service:
            (root / "service").mkdir()
            with daemon(root / "service", 0) as (sock, _pid):

                def served() -> Backend:
                    return ServiceBackend(sock, owner())

                results["service"] = handoffs(served, args.handoffs, args.hold)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    baseline = results["embedded, polling"]
    print(f"\n{args.handoffs} hand-offs each, held up to {args.hold:g} s before each release\n")
    print("| backend | p50 (ms) | p99 (ms) | slowest (ms) | polling / this, p50 | p99 |")
    print("|---|---|---|---|---|---|")
    for name, times in results.items():
        p50, p99 = pct(times, 50), pct(times, 99)
        ratio50, ratio99 = pct(baseline, 50) / p50, pct(baseline, 99) / p99
        print(
            f"| {name} | {p50:.1f} | {p99:.1f} | {max(times):.1f} | {ratio50:.1f} | {ratio99:.1f} |"
        )


if __name__ == "__main__":
    main()

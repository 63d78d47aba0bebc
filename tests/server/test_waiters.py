"""A holder is told who waits for its devices (docs/labextension.md, the notification
rules): ``GET /dra/api/devices`` names, with each request in line, the live claims it
waits on (``holders``), which the lab turns into one notification per waiting request;
the request's end (served, given up) takes it out of the answer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dra_jupyter.local.ledger import Ledger
from tests.server.conftest import Fetch

BOUND = 6.0  # seconds: the lab reads the line at each refresh (refreshInterval 5 s)


def body(response: Any) -> Any:
    return json.loads(response.body)


async def post(jp_fetch: Fetch, payload: Any) -> Any:
    return body(await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps(payload)))


def request_in_line(ledger_path: Path, what: str) -> subprocess.Popen[bytes]:
    """``dra-jupyter request <what> --timeout 5m`` in a process of its own: it waits."""
    env = {**os.environ, "DRA_JUPYTER_LEDGER": str(ledger_path), "DRA_JUPYTER_INVENTORY": "h200-8x",
           "DRA_JUPYTER_POLL_INTERVAL": "0.05"}  # fmt: skip
    code = "from dra_jupyter.cli import main; raise SystemExit(main())"
    argv = [sys.executable, "-c", code, "request", what, "--timeout", "5m", "--lease", "1m"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def in_line(ledger_path: Path, waiter: subprocess.Popen[bytes]) -> float:
    """When the request took its place in line (bounded wait)."""
    ledger = Ledger(ledger_path)
    for _ in range(1200):
        if ledger.waiters():
            return time.time()
        assert waiter.poll() is None, "the request ended before it waited"
        await asyncio.sleep(0.05)
    raise AssertionError("the request never took its place in line")


async def waiting_within(jp_fetch: Fetch, bound: float, *, empty: bool) -> tuple[list[Any], float]:
    """The first answer's line that is (or is not) empty, polled for at most ``bound`` s,
    and how long it took."""
    start = time.monotonic()
    while True:
        waiting = body(await jp_fetch("dra", "api", "devices"))["waiting"]
        took = time.monotonic() - start
        if bool(waiting) != empty or took > bound:
            return waiting, took
        await asyncio.sleep(0.1)


async def test_a_waiter_names_the_claims_it_waits_on_and_goes_when_served(
    jp_fetch: Fetch, ledger_path: Path
) -> None:
    first = await post(jp_fetch, {"gpu": 4})
    second = await post(jp_fetch, {"gpu": 4})
    waiter = request_in_line(ledger_path, "gpu=2")
    try:
        await in_line(ledger_path, waiter)
        waiting, took = await waiting_within(jp_fetch, BOUND, empty=False)
        [entry] = waiting
        assert took < BOUND
        assert entry["what"] == "gpu=2"
        assert sorted(entry["holders"]) == sorted([first["name"], second["name"]])
        await jp_fetch("dra", "api", "claims", first["name"], method="DELETE")
        assert waiter.wait(timeout=120) == 0  # served: it has the devices
        waiting, took = await waiting_within(jp_fetch, BOUND, empty=True)
        assert waiting == [], f"still in line {took:.1f} s after it was served"
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


async def test_a_waiter_that_gives_up_leaves_the_answer(jp_fetch: Fetch, ledger_path: Path) -> None:
    held = await post(jp_fetch, {"gpu": 8})
    waiter = request_in_line(ledger_path, "gpu=1")
    try:
        await in_line(ledger_path, waiter)
        [entry], _ = await waiting_within(jp_fetch, BOUND, empty=False)
        assert entry["holders"] == [held["name"]]
        waiter.send_signal(signal.SIGINT)  # Ctrl-C: the request is given up
        waiter.wait(timeout=60)
        waiting, took = await waiting_within(jp_fetch, BOUND, empty=True)
        assert waiting == [], f"still in line {took:.1f} s after it gave up"
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()

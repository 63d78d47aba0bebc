"""The Jupyter server extension: how soon an idle claim's device is back, and REST latency.

Run with ``.venv/bin/python -m benchmarks.bench_server``. Starts real ``jupyter server``
processes (with the extension, a temporary ledger and a simulated inventory of 16 HGX
H200 nodes, 128 GPUs), on this machine, and prints a Markdown table.

(a) **Idle release.** ``--claims`` real ipykernel kernels, each with a one-GPU claim made
through ``POST /dra/api/claims`` (with its ``kernel_id``), created at scattered phases of
the check (``check_interval`` 1 s, ``idle_timeout`` 3 s). ``GET /dra/api/claims`` is
polled every ~10 ms; a claim's delay is the first poll that no longer lists it minus its
``idle_deadline`` (as the API reported it). Target: within ``check_interval`` + 1 s.

(b) **REST latency** with 100 claims in the ledger, owned by 50 distinct kernel ids (two
claims each). The claims are made directly on the ledger with the local backend (the
layer under the server's service), held by this benchmark's process for fake kernel ids,
not by 50 real kernels: the server lists, checks and serves them exactly as kernels'
claims, but its periodic check has no kernels to watch. Each figure is the p50 and p99 of
``--repeat`` requests over one kept-alive HTTP connection, in milliseconds.
"""

from __future__ import annotations

import argparse
import getpass
import http.client
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from benchmarks.servers import HOST, TOKEN, jupyter_server
from dra_jupyter.inventory import nvidia
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import Owner

NODES = 16  # 8 GPUs each


def _claim() -> dict[str, Any]:
    return {
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


class Client:
    """One kept-alive HTTP connection to the server, with its token; ``pid`` is the
    server's process."""

    def __init__(self, port: int, pid: int = 0) -> None:
        self.port, self.pid = port, pid
        self.conn = http.client.HTTPConnection(HOST, port, timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body)
        headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
        self.conn.request(method, path, body=payload, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None)

    def close(self) -> None:
        self.conn.close()


def _answers(port: int) -> bool:
    client = Client(port)
    try:
        return client.call("GET", "/dra/api/devices")[0] == 200
    finally:
        client.close()


@contextmanager
def server(
    tmp: Path, inventory: Path, ledger: Path, *, idle_timeout: float, check_interval: float
) -> Iterator[Client]:
    """A ``jupyter server`` subprocess with the extension, isolated in ``tmp``."""
    options = [
        f"--DRAExtensionApp.idle_timeout={idle_timeout}",
        f"--DRAExtensionApp.idle_warning={min(1.0, idle_timeout / 2)}",
        f"--DRAExtensionApp.check_interval={check_interval}",
    ]
    with jupyter_server(
        tmp,
        ledger=ledger,
        inventory=inventory,
        name=f"server-{ledger.stem}",
        options=options,
        ready=_answers,
    ) as running:
        client = Client(running.port, running.pid)
        try:
            yield client
        finally:
            client.close()


def idle_release(
    tmp: Path, inventory: Path, claims: int, check_interval: float, idle_timeout: float
) -> list[float]:
    """Seconds from each claim's idle deadline to the first poll that no longer lists it."""
    ledger = tmp / "idle.sqlite"
    with server(
        tmp, inventory, ledger, idle_timeout=idle_timeout, check_interval=check_interval
    ) as client:
        names = []
        for _ in range(claims):
            status, kernel = client.call("POST", "/api/kernels", {"name": "python3"})
            assert status == 201, kernel
            time.sleep(random.uniform(0, check_interval))  # scatter the check's phase
            status, claim = client.call(
                "POST", "/dra/api/claims", {"gpu": 1, "kernel_id": kernel["id"]}
            )
            assert status == 201, claim
            names.append(claim["name"])
        deadlines: dict[str, float] = {}
        delays: dict[str, float] = {}
        polls = int((idle_timeout + check_interval * 4 + 30) / 0.01)
        for _ in range(polls):  # bounded: well past the last deadline
            _, listed = client.call("GET", "/dra/api/claims")
            now = time.time()
            seen = {c["name"]: c for c in listed["claims"]}
            for name in names:
                if name in seen and seen[name]["idle_deadline"] is not None:
                    deadlines[name] = seen[name]["idle_deadline"]
                elif name not in seen and name not in delays and name in deadlines:
                    delays[name] = now - deadlines[name]
            if len(delays) == len(names):
                break
            time.sleep(0.01)
        reasons = {r.name: r.reason for r in Ledger(ledger).releases()}
        assert all(reasons.get(n) == "idle" for n in names), reasons
        return [delays[n] for n in names]


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return statistics.median(samples), cuts[98]


def rest_latency(
    tmp: Path, inventory: Path, kernels: int, claims: int, repeat: int
) -> dict[str, tuple[float, float]]:
    ledger_path = tmp / "rest.sqlite"
    ledger = Ledger(ledger_path)
    inv = resolve_inventory(str(inventory))
    base = Owner.current()
    user = getpass.getuser()
    for i in range(claims):
        owner = Owner(
            user=user,
            host=base.host,
            pid=base.pid,
            start_time=base.start_time,
            kernel_id=f"fake-kernel-{i % kernels:02d}",
        )
        LocalBackend(inv, ledger, owner).allocate(_claim())
    assert len(ledger.read_claims()) == claims
    out: dict[str, tuple[float, float]] = {}
    with server(tmp, inventory, ledger_path, idle_timeout=3600, check_interval=1.0) as client:

        def timed(method: str, path: str, body: Any = None, status: int = 200) -> float:
            start = time.perf_counter()
            code, answer = client.call(method, path, body)
            elapsed = time.perf_counter() - start
            assert code == status, (code, answer)
            return elapsed

        for _ in range(10):  # warm up (inventory resolved on first use)
            timed("GET", "/dra/api/devices")
        listed = client.call("GET", "/dra/api/claims")[1]["claims"]
        assert len(listed) == claims, len(listed)
        samples: dict[str, list[float]] = {
            "GET claims": [],
            "GET devices": [],
            "POST claims + DELETE": [],
        }
        for _ in range(repeat):
            samples["GET claims"].append(timed("GET", "/dra/api/claims"))
            samples["GET devices"].append(timed("GET", "/dra/api/devices"))
            start = time.perf_counter()
            code, claim = client.call("POST", "/dra/api/claims", {"gpu": 1})
            assert code == 201, claim
            code, _ = client.call("DELETE", f"/dra/api/claims/{claim['name']}")
            assert code == 204
            samples["POST claims + DELETE"].append(time.perf_counter() - start)
        for key, values in samples.items():
            p50, p99 = percentiles(values)
            out[key] = (p50 * 1000, p99 * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--claims", type=int, default=5, help="idle claims (and kernels)")
    parser.add_argument("--check-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--idle-timeout", type=float, default=3.0, help="seconds")
    parser.add_argument("--repeat", type=int, default=200, help="requests per REST figure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory(prefix="dra-bench-server-") as name:
        tmp = Path(name)
        inventory = tmp / "inventory.yaml"
        slices = [nvidia.hgx_node(f"node-{i:02d}") for i in range(NODES)]
        inventory.write_text(yaml.safe_dump_all(slices), encoding="utf-8")

        delays = idle_release(tmp, inventory, args.claims, args.check_interval, args.idle_timeout)
        latency = rest_latency(tmp, inventory, kernels=50, claims=100, repeat=args.repeat)

    target = args.check_interval + 1
    print(
        f"## Idle release (check_interval {args.check_interval:g} s, "
        f"idle_timeout {args.idle_timeout:g} s, {args.claims} claims of real kernels)\n"
    )
    print("| measure | seconds after the idle deadline |")
    print("|---|---|")
    print(f"| each claim | {', '.join(f'{d:.2f}' for d in delays)} |")
    print(f"| median | {statistics.median(delays):.2f} |")
    print(f"| max | {max(delays):.2f} (target ≤ {target:g}) |")
    print()
    print(f"## REST latency (100 claims of 50 kernel ids in the ledger, {args.repeat} requests)\n")
    print("| request | p50 ms | p99 ms |")
    print("|---|---|---|")
    for key, (p50, p99) in latency.items():
        print(f"| {key} | {p50:.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()

"""The daemon's GPU sampler on 8 GPUs x 50 processes, beside the metrics read it rests on,
measured side by side.

Run with ``.venv/bin/python -m benchmarks.bench_gpu_sampling`` (``make bench-gpu-sampling``).
NVML is the fake of the tests (``tests/fakes``: the one fake, at the hardware seam) with 8
H200s; 50 real processes of this benchmark (sleeping children) are listed on every GPU (400
rows, as a job using all 8 GPUs from 50 workers would be), 8 claims hold one GPU each. Each
round runs, alternating, ``--repeat`` times:

* **metrics read** (the baseline): one read of the 8 GPUs' metrics, what the daemon does
  for its ``metrics`` op anyway;
* **sampler tick**: one :meth:`GpuSampler.tick`: the processes listed, each mapped to its
  claim and user (``/proc``), each claim's GPU activity, the enforcement pass, the usage
  book written.

Prints a Markdown table: the CPU time (this process's) per call, p50 and p90, the tick over
the read, and the tick's share of one core at 1 Hz (the default ``gpu_sample_interval``).
Target (issue 26): <= 2 % of one core.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dra_jupyter.inventory.nvml import discover
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.metrics.nvml import NvmlSource
from dra_jupyter.service.access import Access
from dra_jupyter.service.gpus import GpuSampler
from dra_jupyter.service.policy import Policy
from dra_jupyter.types import Owner
from tests.fakes.fake_pynvml import FakeProcess, FakePynvml

GPUS = 8


def cpu_ms(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return (time.process_time() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=60)
    parser.add_argument("--processes", type=int, default=50)
    args = parser.parse_args()
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        for _ in range(args.processes)
    ]
    try:
        with tempfile.TemporaryDirectory(prefix="dra-bench-gpus-") as tmp:
            folder = Path(tmp)
            fake = FakePynvml(gpus=GPUS)
            rows = [FakeProcess(c.pid, memory=2**30, sm=60) for c in children]
            fake.processes = {index: list(rows) for index in range(GPUS)}
            inventory = discover(fake, node="bench", sysfs=folder / "no-sysfs")
            ledger = Ledger(folder / "ledger.sqlite")
            local = LocalBackend(inventory, ledger, Owner.current())
            from dra_jupyter.api import Session  # noqa: PLC0415

            session = Session(backend=local)
            held = [session.request(gpu=1, apply_env=False) for _ in range(GPUS)]
            policy = Policy(ledger=folder / "ledger.sqlite")
            sampler = GpuSampler(Access(policy), inventory, ledger, local)
            source = NvmlSource(inventory, fake)
            sampler._source = source  # the fake's NVML, as a test gives it
            keys = {row.device for c in held for row in c.devices}
            read: list[float] = []
            tick: list[float] = []
            for _ in range(args.repeat):
                read.append(cpu_ms(lambda: source.sample(keys, time.time())))
                tick.append(cpu_ms(lambda: sampler.tick(time.time())))
            listed = len(sampler.watch.uses)
    finally:
        for child in children:
            child.kill()
            child.wait()
    p50_read, p50_tick = statistics.median(read), statistics.median(tick)
    p90_read = statistics.quantiles(read, n=10)[-1]
    p90_tick = statistics.quantiles(tick, n=10)[-1]
    print(f"{GPUS} GPUs x {args.processes} processes ({listed} rows mapped), {args.repeat} rounds")
    print()
    print("| what | CPU p50 (ms) | CPU p90 (ms) | over the read | one core at 1 Hz |")
    print("|---|---|---|---|---|")
    print(f"| metrics read | {p50_read:.2f} | {p90_read:.2f} | 1.00 | {p50_read / 10:.2f} % |")
    print(
        f"| sampler tick | {p50_tick:.2f} | {p90_tick:.2f} | {p50_tick / p50_read:.2f} | "
        f"{p50_tick / 10:.2f} % |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

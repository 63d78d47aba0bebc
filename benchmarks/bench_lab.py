"""What the JupyterLab extension costs the server, and how soon a claim shows in its panel.

Run with ``.venv/bin/python -m benchmarks.bench_lab`` (the extension built: ``make
labextension``; part (b) needs Debian's chromium, as the browser tests do).

(a) **Refresh cost.** A real ``jupyter server`` with the extension, a simulated node of 8
H200 GPUs in MIG mode (``mig.h200_mig_node``: 8 GPUs and their 200 MIG placements in
``GET devices``) and 50 claims of a ``1g.18gb`` partition (made through ``POST
claims``). What the page asks each ``refreshInterval`` (5 s by default): the status bar
``GET claims``, and while the Devices panel is shown ``GET devices`` too (both with
``no_track_activity``).
``--repeat`` refreshes back to back over one kept-alive connection; the server process's
CPU time (utime + stime from ``/proc``) over them, per refresh; side by side, as many
``GET /api/status`` (jupyter_server's own smallest answer) as the baseline.

(b) **Claim to panel.** ``jupyter lab`` with the built extension and the simulated
``h200-8x``, the Devices panel shown in chromium (Playwright); seconds from making a claim
to its row in the panel: through ``POST claims`` (the server's ``claim_allocated`` event
makes the page refresh at once), and by another process on the ledger (no event: the next
poll, every ``refreshInterval``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_server import percentiles, server
from benchmarks.servers import cpu_seconds
from dra_jupyter.inventory import mig
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import Owner

CLAIMS = 50
PANEL = ".dra-DevicesPanel"


def refresh_cost(tmp: Path, repeat: int) -> list[tuple[str, int, float, float, float]]:
    """(what, requests per refresh, p50 ms, p99 ms, server CPU ms per refresh)."""
    ledger = tmp / "refresh.sqlite"
    inventory = tmp / "h200-mig-8.yaml"
    inventory.write_text(yaml.safe_dump_all(mig.h200_mig_node("mig-node", gpus=8)))
    with server(tmp, inventory, ledger, idle_timeout=3600, check_interval=30) as client:
        for _ in range(CLAIMS):
            code, answer = client.call("POST", "/dra/api/claims", {"mig": "1g.18gb"})
            assert code == 201, answer
        code, listed = client.call("GET", "/dra/api/claims")
        assert code == 200 and len(listed["claims"]) == CLAIMS, listed
        pid = client.pid
        q = "?no_track_activity=1"
        kinds: dict[str, list[str]] = {
            "baseline: GET /api/status": ["/api/status"],
            "status bar: GET claims": [f"/dra/api/claims{q}"],
            "panel: GET claims + GET devices": [f"/dra/api/claims{q}", f"/dra/api/devices{q}"],
        }
        for paths in kinds.values():  # warm up
            for path in paths:
                client.call("GET", path)
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        cpu = dict.fromkeys(kinds, 0.0)
        for _ in range(repeat):  # interleaved, so that the load of the machine is shared
            for kind, paths in kinds.items():
                before, start = cpu_seconds(pid), time.perf_counter()
                for path in paths:
                    code, _ = client.call("GET", path)
                    assert code == 200, path
                samples[kind].append(time.perf_counter() - start)
                cpu[kind] += cpu_seconds(pid) - before
        out = []
        for kind, paths in kinds.items():
            p50, p99 = percentiles(samples[kind])
            out.append((kind, len(paths), p50 * 1000, p99 * 1000, cpu[kind] / repeat * 1000))
        return out


def claim_to_panel(tmp: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds from a claim to its row in the shown Devices panel, per way of claiming."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, running_lab  # noqa: PLC0415
    from tests.lab.conftest import BUILD, NAME, lab_argv  # noqa: PLC0415

    extensions = tmp / "labextensions"
    extensions.mkdir()
    (extensions / NAME).symlink_to(BUILD, target_is_directory=True)
    lab_tmp = tmp / "lab"
    lab_tmp.mkdir()
    out: dict[str, list[float]] = {"POST claims (event)": [], "another process (poll)": []}
    with running_lab(lab_tmp, lab_argv(lab_tmp, extensions)) as lab, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{lab.url}/lab?reset&token={lab.token}")
        page.locator('.jp-SideBar li[data-id="dra-jupyter-devices"]').click()
        page.locator(f"{PANEL} tr.dra-device").first.wait_for(timeout=60_000)
        backend = LocalBackend(resolve_inventory("h200-8x"), Ledger(lab.ledger), Owner.current())

        def timed(make: Callable[[], str]) -> float:
            start = time.perf_counter()
            name = make()
            page.locator(f'{PANEL} [data-claim="{name}"]').wait_for(timeout=60_000)
            elapsed = time.perf_counter() - start
            lab.api("DELETE", f"/dra/api/claims/{name}")
            page.locator(f'{PANEL} [data-claim="{name}"]').wait_for(
                state="detached", timeout=60_000
            )
            return elapsed

        def by_rest() -> str:
            name: str = lab.api("POST", "/dra/api/claims", {"gpu": 1})["name"]
            return name

        def by_ledger() -> str:
            return backend.allocate(_gpu_claim()).name

        for _ in range(rounds):
            out["POST claims (event)"].append(timed(by_rest))
            out["another process (poll)"].append(timed(by_ledger))
        browser.close()
    return out


def _gpu_claim() -> dict[str, Any]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=200, help="refreshes of each kind")
    parser.add_argument("--rounds", type=int, default=10, help="claims of each way, part (b)")
    parser.add_argument("--interval", type=float, default=5.0, help="the refreshInterval (s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rows = refresh_cost(tmp, args.repeat)
        print(
            f"## Refresh cost (8 H200 in MIG mode, {CLAIMS} claims, {args.repeat} refreshes each)\n"
        )
        print("| refresh | requests | p50 ms | p99 ms | server CPU ms | % of a core at 1 per "
              f"{args.interval:g} s |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for kind, n, p50, p99, cpu in rows:
            share = cpu / (args.interval * 1000) * 100
            print(f"| {kind} | {n} | {p50:.1f} | {p99:.1f} | {cpu:.1f} | {share:.2f} |")
        base = rows[0][4] or float("nan")
        ratios = ", ".join(f"{k}: {c / base:.1f}x" for k, _, _, _, c in rows[1:])
        print(f"\nServer CPU per refresh against the baseline's: {ratios}.")
        print(
            f"Panel refreshes answered per second (one connection, p50): {1000 / rows[2][2]:.0f}\n"
        )
        times = claim_to_panel(tmp, args.rounds)
        print(f"## Claim to panel ({args.rounds} claims each, refreshInterval 5 s)\n")
        print("| claim made | median s | max s |")
        print("|---|---|---|")
        for kind, values in times.items():
            print(f"| {kind} | {statistics.median(values):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()

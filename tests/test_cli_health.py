"""``dra-jupyter health``: the record of the GPUs taken out, as a table and JSON, and
``health --watch``, the machine's watcher for the embedded ledger, run as a real process
on the fake NVML of two captured H200s (the one fake, at the hardware seam): an XID 79 is
in the ledger soon (within a generous 30 s for a loaded CI machine; the latency itself is
``benchmarks/bench_health.py``'s), the holder's claim is released after the grace (0 here) with
words naming the GPU, a second watcher is refused, SIGTERM stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_jupyter.inventory.nvml import discover
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import Owner
from tests.fakes.fake_pynvml import FakePynvml, pynvml, write_health, write_world
from tests.local.worker import claim_for
from tests.test_cli_local import run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DRA_JUPYTER_BACKEND", "local")
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_an_empty_record_says_so() -> None:
    empty = run("health")
    assert (empty.code, empty.out) == (0, "no GPU was taken out of service in the health record\n")
    assert json.loads(run("health", "-o", "json").out) == []
    assert run("health", "gpu-3").out == "gpu-3: nothing in the health record\n"
    unknown = run("health", "gpu-99")
    assert unknown.code == 2 and "not a device of this inventory" in unknown.err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["health", "--grace", "10"], "error: health --grace: goes with --watch"),
        (["health", "gpu-2", "--poll", "1"], "error: health --poll: goes with --watch"),
    ],
)
def test_a_watch_flag_without_watch_is_refused(argv: list[str], words: str) -> None:
    refused = run(*argv)
    assert (refused.code, refused.out) == (2, "")
    assert refused.err.startswith(words) and refused.err.count("\n") == 1


def test_watch_needs_nvml_devices() -> None:
    refused = run("health", "--watch")
    assert refused.code == 2
    assert "not read through NVML: nothing to watch" in refused.err


def watcher(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    world = tmp_path / "world.json"
    write_world(world, {})
    if not (tmp_path / "health.json").exists():
        write_health(tmp_path / "health.json", {})
    argv = [sys.executable, "-m", "tests.fakes.nvml_daemon", "2", str(world), "health"]
    argv += ["--watch", "--inventory", "nvml", "--ledger", str(tmp_path / "ledger.sqlite")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_watch_takes_a_gpu_out_and_releases_its_holder(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    inventory = discover(FakePynvml(gpus=2))  # what the watcher's process reads
    me = Owner.current()
    held = LocalBackend(inventory, ledger, me).allocate(claim_for(inventory, {"gpu": 1}))
    gpu = held.device_keys[0].rsplit("/", 1)[1]
    index = int(gpu.removeprefix("gpu-")) - int(FakePynvml().capture.device["minor"])
    proc = watcher(tmp_path, "--grace", "0")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("watching 2 GPUs for ")
        second = watcher(tmp_path)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 3 and "a health watcher runs already" in err
        xid = [index, pynvml.nvmlEventTypeXidCriticalError, 79]
        write_health(tmp_path / "health.json", {"events": [xid]})
        start = time.monotonic()
        while not ledger.health_events():
            assert time.monotonic() - start < 30, "no health event within 30 s"
            time.sleep(0.02)
        (event,) = ledger.health_events()
        assert (event.device, event.value, event.claims) == (
            held.device_keys[0],
            "79",
            ((held.name, me.user),),
        )
        line = proc.stdout.readline()  # the next enforce, within a second
        assert line == f"released {held.name} ({me.user}): device-failed\n"
        ended = ledger.released(held.name)
        assert ended is not None and ended.message == (
            f"{gpu} was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    table = run("health", "--ledger", str(tmp_path / "ledger.sqlite"))
    assert table.code == 0
    head, row = table.out.splitlines()
    assert head.split() == ["time", "device", "taint", "effect", "meaning", "claims"]
    assert f"{held.device_keys[0]}  gpu.nvidia.com/xid=79  NoExecute  the GPU fell off" in row
    assert row.endswith(f"{held.name} ({me.user})")
    data = json.loads(run("health", "-o", "json").out)
    assert data[0]["claims"] == [{"name": held.name, "user": me.user}]


def test_the_systemd_unit_stops_on_what_a_restart_cannot_mend() -> None:
    """Without NVML ``health --watch`` exits 3 (a flag it refuses: 2); the unit must not
    restart it every 5 s forever, and says how to point ExecStart at the environment's."""
    unit = (ROOT / "deploy" / "dra-jupyter-health.service").read_text()
    service = unit.split("\n[Service]\n", 1)[1].split("\n[", 1)[0]
    settings = dict(
        line.split("=", 1) for line in service.splitlines() if line and not line.startswith("#")
    )
    assert settings["Restart"] == "on-failure"
    assert set(settings["RestartPreventExitStatus"].split()) == {"2", "3"}
    assert "command -v dra-jupyter" in unit and "ExecStart=\n" in unit.replace("#   ", "")
    no_nvml = run("health", "--watch", "--inventory", "nvml")
    assert no_nvml.code == 3, no_nvml.err
    assert run("health", "--watch", "--poll", "0", "--inventory", "h200-8x").code == 2

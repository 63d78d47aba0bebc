"""Background runs from a real kernel on one machine: the run keeps its devices while its
kernel restarts, and ``%dra runs``, ``%dra logs``, ``%dra cancel`` and ``%%dra run`` find
and drive it from the restarted kernel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.magics.conftest import TIMEOUT, Kernel, plain, start_kernel

INVENTORY = "h200-8x"
KERNEL_ID = "0b5e2d7c-run-test"  # as a Jupyter server with the extension would set it


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = start_kernel(tmp_path / "ledger.sqlite", INVENTORY, KERNEL_ID)
    try:
        yield k
    finally:
        k.client.stop_channels()
        k.manager.shutdown_kernel(now=True)
        for run in here(tmp_path).runs():
            run.cancel()


def here(tmp_path: Path) -> Session:
    """This (the test) process's session on the kernel's ledger."""
    return Session(Settings(ledger=tmp_path / "ledger.sqlite", inventory=INVENTORY))


def test_a_run_keeps_its_devices_while_its_kernel_restarts(kernel: Kernel, tmp_path: Path) -> None:
    kernel.ok(
        "import dra_jupyter as dra\n"
        "mine = dra.request(gpu=1)\n"
        "r = dra.run(['python', '-c', 'import time; print(\"step 1\", flush=True); "
        "time.sleep(120)'], gpu=2, name='train')\n"
    )
    session = here(tmp_path)
    held = {r.name: r for r in session.backend.claims()}
    assert len(held) == 2
    [run_claim] = [r for r in held.values() if r.owner.kernel_id is None]  # the run's own
    assert [r.owner.kernel_id for r in held.values() if r is not run_claim] == [KERNEL_ID]
    kernel.manager.restart_kernel(now=True)
    kernel.client.wait_for_ready(timeout=TIMEOUT)
    # the kernel's claim went with its process; the run's stays with the run
    deadline = time.monotonic() + TIMEOUT
    while len(session.backend.claims()) != 1:
        assert time.monotonic() < deadline, "the kernel's own claim is reclaimed"
        time.sleep(0.05)
    assert [r.name for r in session.backend.claims()] == [run_claim.name]
    kernel.ok("%load_ext dra_jupyter")
    listed = plain(kernel.ok("%dra runs").result)
    assert "train" in listed and "Running" in listed
    assert kernel.complete("%dra logs tr")["matches"] == ["train"]  # run names complete
    assert kernel.ok("%dra logs train").stdout == "step 1\n"
    kept = kernel.ok("%dra release --all")  # only the run's claim is held: kept, and said so
    assert kept.stdout == "dra: released nothing: the claims you hold belong to your runs\n"
    assert kept.stderr.startswith(f"dra: kept claim {run_claim.name} of run train: ")
    assert len(kept.stderr.splitlines()) == 1  # one line, no source line of IPython's
    assert kernel.ok("%dra cancel train").stdout == "dra: run train is cancelled\n"
    assert session.backend.claims() == []
    assert kernel.ok("import dra_jupyter as dra; print(dra.runs()[0].status.phase)").stdout == (
        "Cancelled\n"
    )


def test_a_run_cell_runs_in_the_background_and_its_logs_follow(kernel: Kernel) -> None:
    kernel.ok(
        "%%dra run gpu=1 name=cell-run\nimport os\nprint('on', os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    followed = kernel.ok("%dra logs cell-run --follow").stdout
    assert followed.startswith("on GPU-")
    # as a cell's last line, a followed log is shown once (streamed), with no Out[] after it
    shown = kernel.ok("import dra_jupyter as dra\n[r] = dra.runs()\nr.logs(follow=True)")
    assert shown.stdout == followed and shown.results() == []
    # a status reads as lines, not as a dataclass of epoch seconds
    status = plain(kernel.ok("r.wait('1m')").result)
    assert status.startswith("<RunStatus cell-run: Succeeded on gpu-") and "exit code 0>" in status
    assert "Succeeded" in plain(kernel.ok("%dra runs").result)
    error = kernel.run("%dra cancel nope")
    assert [line for line in error.error_lines() if line.strip()] == [
        "dra cancel: no run nope; dra.runs() lists yours"
    ]

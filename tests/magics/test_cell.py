"""``%%dra``: a claim held for exactly the cell's duration, released after success, an
exception or an interrupt; its environment applied during the cell and put back after."""

from __future__ import annotations

import getpass
import re

from dra_jupyter.types import claim_prefix
from tests.magics.conftest import Kernel, kernel_fixture, plain, printed, waiting

module_kernel = kernel_fixture("h200-8x")

SENTINEL = (
    "import os\n"
    "os.environ['CUDA_VISIBLE_DEVICES'] = 'before'\n"
    "os.environ.pop('NVIDIA_VISIBLE_DEVICES', None)"
)
ENV_NOW = "print(os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('NVIDIA_VISIBLE_DEVICES'))"


def test_the_claim_lives_exactly_as_long_as_the_cell(kernel: Kernel) -> None:
    kernel.ok(SENTINEL)
    out = kernel.ok(
        "%%dra gpu=2 same=pcieRoot\n"
        "import dra_jupyter as dra\n"
        "[held] = dra.claims()\n"
        "print(held.claim, held.devices)\n"
        "print(os.environ['CUDA_VISIBLE_DEVICES'].count('GPU-'), "
        "os.environ['NVIDIA_VISIBLE_DEVICES'] == os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "40 + 2"
    )
    held, visible = out.stdout.splitlines()
    name, devices = held.split(" ", 1)
    assert re.fullmatch(rf"{claim_prefix(getpass.getuser())}-cell-[0-9a-f]{{6}}", name)
    assert devices.count("gpu-") == 2
    assert visible.split() == ["2", "True"]
    assert out.result == "42"  # the cell's last value is shown as in any cell
    assert kernel.claims() == []
    assert kernel.ok(ENV_NOW).stdout.split() == ["before", "None"]


def test_the_claim_is_released_when_the_cell_raises(kernel: Kernel) -> None:
    kernel.ok(SENTINEL)
    out = kernel.run("%%dra gpu=1 name=failing-cell\nprint('ran')\n1 / 0")
    assert out.status == "error"
    assert out.stdout == "ran\n"
    first, second = out.errors
    assert first["ename"] == "ZeroDivisionError"  # the cell's own traceback, as usual
    assert "1 / 0" in plain("\n".join(first["traceback"]))
    assert second["traceback"][0].endswith(
        "%%dra: the cell raised ZeroDivisionError; claim failing-cell was released\x1b[0m"
    )
    assert kernel.claims() == []
    assert kernel.ok(ENV_NOW).stdout.split() == ["before", "None"]


def test_the_claim_is_released_when_the_cell_is_interrupted(kernel: Kernel) -> None:
    kernel.ok(SENTINEL)
    running = kernel.start(
        "%%dra gpu=4 name=interrupted-cell\nimport time\nprint('holding', flush=True)\n"
        "time.sleep(600)",
        printed("holding"),
    )
    [held] = kernel.claims()  # seen from this process: the cell holds it now
    assert held.name == "interrupted-cell"
    out = running.interrupt()
    assert out.status == "error"
    first, second = out.errors
    assert first["ename"] == "KeyboardInterrupt"
    assert (
        "%%dra: the cell was interrupted; claim interrupted-cell was released"
        in (second["traceback"][0])
    )
    assert kernel.claims() == []
    assert kernel.ok(ENV_NOW).stdout.split() == ["before", "None"]


def test_a_bad_cell_line_runs_nothing_and_holds_nothing(kernel: Kernel) -> None:
    out = kernel.run("%%dra gpu=99\nprint('must not run')")
    assert out.status == "error"
    assert out.stdout == ""
    assert [line for e in out.errors for line in e["traceback"]] == [
        "\x1b[31m%%dra gpu=99: gpu=99 exceeds the limit of 32 devices per claim; "
        "split the work over several claims\x1b[0m"
    ]
    out = kernel.run("%%dra lease=2h apply_env=false\nprint('must not run')")
    assert out.stdout == ""
    assert "%%dra: unknown keyword 'apply_env'" in out.error_lines()[0]
    assert kernel.claims() == []


def test_a_cell_never_releases_a_claim_it_did_not_make(kernel: Kernel) -> None:
    kernel.ok("mine = %dra request gpu=1 name=mine")
    out = kernel.run("%%dra gpu=1 name=mine\nprint('must not run')")
    assert out.status == "error"
    assert out.stdout == ""
    [line] = out.error_lines()
    assert "mine" in line and "exists" in line, line
    assert [r.name for r in kernel.claims()] == ["mine"]  # still the user's


def test_a_busy_cell_fails_at_once_or_waits_in_line_until_interrupted(kernel: Kernel) -> None:
    kernel.ok("c = %dra request gpu=8")
    holder = kernel.ok("print(c.name)").stdout.strip()
    out = kernel.run("%%dra gpu=1\nprint('must not run')")
    assert out.status == "error"
    assert out.stdout == ""
    assert "the devices are busy" in out.error_lines()[0]
    running = kernel.start("%%dra gpu=1 timeout=10m\nprint('must not run')", waiting)
    out = running.interrupt()
    assert out.stdout == ""
    assert out.error_lines() == [
        "%%dra gpu=1 timeout=10m: interrupted; %dra status lists your claims"
    ]
    assert [r.name for r in kernel.claims()] == [holder]


def test_a_cell_with_top_level_await_is_refused_before_claiming(kernel: Kernel) -> None:
    out = kernel.run(
        "%%dra gpu=1 memory=80Gi\nimport asyncio\nawait asyncio.sleep(0)\nprint('ran')"
    )
    assert out.stdout == ""
    assert out.error_lines() == [
        "%%dra: this cell uses top-level await, which IPython cannot run under a cell magic; "
        "hold the devices inside the cell: with dra.request(gpu=1, memory='80Gi') as claim: ..."
    ]
    assert kernel.claims() == []

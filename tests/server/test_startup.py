"""Devices a server gets as it starts (c.DRAExtensionApp.startup_request, what the hub's
spawner passes): claimed by the server for its user, their environment the server's and its
kernels', reported to a file, active while its kernels run cells, released when the server
stops; a refusal stops the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from tests.server.conftest import start_extensions
from tests.server.test_kernels import started_kernel
from tests.server.test_rest import extension

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 120  # seconds a server may take to start and stop (never a timing asserted)


@pytest.fixture
def report_path(tmp_path: Path) -> Path:
    return tmp_path / "startup.json"


@pytest.fixture(autouse=True)
def environment() -> Iterator[None]:
    """The server runs in this process and puts the claim's environment into os.environ:
    put it back afterwards."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


@pytest.fixture
def dra_config(report_path: Path) -> dict[str, Any]:
    return {
        "check_interval": 0.2,
        "startup_request": json.dumps({"gpu": 2}),
        "startup_lease": "1h",
        "startup_report": str(report_path),
    }


async def test_the_server_starts_with_its_devices_and_gives_them_back(
    jp_serverapp: Any, ledger: Ledger, report_path: Path
) -> None:
    await start_extensions(jp_serverapp)
    [record] = ledger.read_claims()
    assert record.owner.pid == os.getpid() and record.owner.kernel_id is None
    assert len(record.device_keys) == 2 and record.lease_expires is not None
    outcome = json.loads(report_path.read_text())
    visible = outcome["env"]["CUDA_VISIBLE_DEVICES"]
    assert outcome == {
        "ok": True,
        "claim": record.name,
        "devices": record.device_keys,
        "env": {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible},
    }
    assert len(visible.split(",")) == 2 and visible.startswith("GPU-")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == visible
    printed: list[dict[str, Any]] = []
    async with started_kernel(jp_serverapp) as kernel:
        reply = await kernel.client.execute_interactive(
            "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])",
            timeout=120,
            output_hook=printed.append,
        )
        assert reply["content"]["status"] == "ok"
        await extension(jp_serverapp).check()  # a cell ran: the claim was active
        [kept] = ledger.read_claims()
        assert kept.last_activity > record.last_activity
    assert visible in "".join(m["content"].get("text", "") for m in printed)
    await jp_serverapp.extension_manager.stop_all_extensions()
    assert ledger.read_claims() == []
    assert [(r.name, r.reason) for r in ledger.releases()] == [(record.name, "server-stop")]


@pytest.mark.parametrize(
    ("request_text", "kind", "message"),
    [
        ('{"gpu": 9}', "NeverPossibleError", "asks for 9 GPU devices;"),
        ("gpu=1", "InvalidInputError", "is not JSON"),
        ('{"gpus": 1}', "InvalidInputError", "unknown keyword 'gpus'"),
    ],
)
def test_a_refused_request_stops_the_server_saying_why(
    tmp_path: Path, request_text: str, kind: str, message: str
) -> None:
    report = tmp_path / "startup.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]]),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "DRA_JUPYTER_STARTUP_REQUEST": request_text,
        "DRA_JUPYTER_STARTUP_REPORT": str(report),
        "DRA_JUPYTER_BACKEND": "local",
        "DRA_JUPYTER_LEDGER": str(tmp_path / "ledger.sqlite"),
        "DRA_JUPYTER_INVENTORY": "h200-8x",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--port=0",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.jpserver_extensions=dra_jupyter=True",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    outcome = json.loads(report.read_text())
    assert outcome["ok"] is False and outcome["type"] == kind
    assert message in outcome["message"] and "\n" not in outcome["message"]
    assert message in done.stderr
    assert Ledger(tmp_path / "ledger.sqlite").read_claims() == []

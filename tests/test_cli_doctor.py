"""``dra-jupyter doctor``: which backend a user's sessions get and why, where the claims
are kept, the devices, and other users' processes on the GPUs (the fake NVML, the one
fake, lists a real process of this test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dra_jupyter.cli.doctor import findings
from dra_jupyter.cli.main import main
from dra_jupyter.inventory.nvml import discover
from dra_jupyter.settings import Settings
from tests.fakes.fake_pynvml import FakeProcess, FakePynvml


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("DRA_JUPYTER_BACKEND", "DRA_JUPYTER_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DRA_JUPYTER_SOCKET", str(tmp_path / "no-socket"))
    monkeypatch.setenv("DRA_JUPYTER_SERVICE_CONFIG", str(tmp_path / "no-service.toml"))
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    return tmp_path


def doctor(*argv: str) -> tuple[int, str]:
    from io import StringIO  # noqa: PLC0415

    out, err = StringIO(), StringIO()
    code = main(["doctor", *argv], out, err)
    assert err.getvalue() == ""
    return code, out.getvalue()


def test_the_embedded_default_says_its_ledger_is_the_users_own(clean: Path) -> None:
    code, text = doctor("--inventory", "h200-8x")
    assert code == 0
    assert text.splitlines() == [
        "backend: local (no service is installed here, so the embedded one)",
        f"ledger: {clean / 'ledger.sqlite'} (your own: other users of this machine have "
        "theirs, and neither sees the other's claims)",
        "devices: 8x NVIDIA H200 (HGX): 2 NUMA nodes, 4 PCIe roots (simulated)",
        "GPU processes: none to see (a simulated inventory)",
    ]


def test_an_installed_service_that_does_not_answer_is_a_problem(clean: Path) -> None:
    (clean / "no-service.toml").write_text("")  # the policy file: the service is installed
    code, text = doctor("-o", "json", "--inventory", "h200-8x")
    assert code == 0
    found = {f["topic"]: f for f in json.loads(text)}
    assert found["backend"]["text"].startswith("backend: service (the service is installed")
    assert found["service"]["problem"] is True
    assert "does not answer" in found["service"]["text"]
    assert "ledger" not in found  # the service keeps the claims, not a ledger of the user's
    assert found["devices"]["problem"] is True  # what the service would say: not read


def test_another_users_process_on_a_gpu_is_said_with_what_to_do(
    clean: Path, tmp_path: Path
) -> None:
    fake = FakePynvml(gpus=2)
    inventory = discover(fake, node="n1", sysfs=tmp_path / "no-sysfs")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake.processes[1] = [FakeProcess(child.pid, memory=2**30, sm=50)]
        settings = Settings.from_env()
        # as seen by another uid than this process's: the child is another user's
        found = findings(settings, uid=os.getuid() + 4242, inventory=inventory, nvml=fake)
        [gpus] = [f for f in found if f.topic == "gpu-processes"]
        assert gpus.problem
        assert "GPU processes of other users: " in gpus.text
        assert "1 on gpu-1" in gpus.text
        assert "run the shared-machine service" in gpus.text
        # as this user: nobody else's
        mine = findings(settings, inventory=inventory, nvml=fake)
        assert mine[-1].text == "GPU processes: none of other users"
    finally:
        child.kill()
        child.wait()

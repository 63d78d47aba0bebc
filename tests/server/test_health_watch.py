"""The Jupyter server watches the GPUs of the embedded ledger itself, with the fake NVML of
two captured H200s at the hardware seam (the real server, ledger and watcher otherwise): a
GPU that falls off the bus is taken out, its holder is told (``device_unhealthy``) and,
with no grace, released with reason ``device-failed``; while the server watches, a second
watcher for its ledger is refused, and once it stops another may start."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.errors import UnavailableError
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.watcher import lock_for
from tests.fakes.fake_pynvml import FakePynvml
from tests.server.conftest import Fetch, eventually, start_extensions
from tests.server.test_rest import extension


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
    """Two captured H200s as ``pynvml``, and no grace for a GPU taken out NoExecute; a
    fixture the server's comes after (the inventory is read as it starts)."""
    fake = FakePynvml(gpus=2, mig=[False, False])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("DRA_JUPYTER_HEALTH_GRACE", "0")
    return fake


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"inventory": "nvml", "check_interval": 0.2, "health_interval": 0.2}


async def test_the_server_takes_a_failing_gpu_out_and_tells_its_holder(
    fake_nvml: FakePynvml, jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, ledger_path: Path
) -> None:
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)
    assert app._watcher is not None
    with (
        pytest.raises(UnavailableError, match="a health watcher runs already"),
        lock_for(ledger_path),
    ):
        pass
    r = await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps({"gpu": 1}))
    claim = json.loads(r.body)
    [device] = claim["devices"]
    index = int(device.rsplit("-", 1)[1]) - int(fake_nvml.capture.device["minor"])
    fake_nvml.fall_off_bus(index)
    await eventually(lambda: any(r.name == claim["name"] for r in ledger.releases()))
    [released] = [r for r in ledger.releases() if r.name == claim["name"]]
    assert released.reason == "device-failed"
    assert [t.device for t in ledger.taints() if t.key == "gpu.nvidia.com/xid"] == [device]

    await app.stop_extension()  # the watcher stops with the server: another may start
    with lock_for(ledger_path):
        pass

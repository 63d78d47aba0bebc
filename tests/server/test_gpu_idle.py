"""GPU-aware idle release on a real server and real kernels, with the GPUs of the fake NVML
(the one fake, at the hardware seam): the kernel's real pid is listed on its claim's GPU.

The inventory is the fake's, written as a file of ResourceSlices so that the kernels (other
processes, with the real, absent NVML) allocate from the same devices; the server's sampler
reads the fake. Assertions are on states, events and the ledger, never on durations."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.inventory.nvml import discover
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.metrics.nvml import NvmlSource
from dra_jupyter.server.app import DRAExtensionApp
from dra_jupyter.server.claim_events import GPU_PROCESS
from tests.fakes.fake_pynvml import FakeProcess, FakePynvml
from tests.server.conftest import Events, Fetch, eventually, release_announced, start_extensions
from tests.server.test_kernels import REQUEST, started_kernel
from tests.server.test_rest import extension

NODE = "gpu-idle-node"


@pytest.fixture
def fake() -> FakePynvml:
    return FakePynvml(gpus=2)


@pytest.fixture
def inventory_file(tmp_path: Path, fake: FakePynvml) -> Path:
    found = discover(fake, node=NODE, sysfs=tmp_path / "no-sysfs")
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(found.slices)}))
    return path


@pytest.fixture
def gpu_config() -> dict[str, Any]:
    return {}


@pytest.fixture
def dra_config(inventory_file: Path, gpu_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "inventory": str(inventory_file),
        "check_interval": 0.1,
        "metrics_interval": 0.1,
        "gpu_window": 1.0,
        **gpu_config,
    }


@pytest.fixture
def jp_server_config(ledger_path: Path, dra_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {"ledger": str(ledger_path), **dra_config},
    }


async def sampling_the_fake(jp_serverapp: Any, fake: FakePynvml) -> DRAExtensionApp:
    app = extension(jp_serverapp)
    app.metrics.use(NvmlSource(app.service.inventory(), fake))
    await start_extensions(jp_serverapp)
    return app


async def gpu_of(jp_fetch: Fetch, name: str) -> dict[str, Any]:
    claim = json.loads((await jp_fetch("dra", "api", "claims", name)).body)
    gpu: dict[str, Any] = claim["gpu"]
    return gpu


async def until(jp_fetch: Fetch, name: str, state: str) -> dict[str, Any]:
    """The claim's ``gpu`` once its state is ``state``."""
    seen: dict[str, Any] = {}

    async def check() -> bool:
        seen.update(await gpu_of(jp_fetch, name))
        return bool(seen["state"] == state)

    for _ in range(300):
        if await check():
            return seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"claim {name}: GPU not {state}, last {seen}")


@pytest.mark.parametrize("gpu_config", [{"idle_timeout": 1.0, "idle_warning": 0.5}])
async def test_an_idle_cell_on_a_busy_gpu_is_not_idle(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, fake: FakePynvml, events: Events
) -> None:
    await sampling_the_fake(jp_serverapp, fake)
    async with started_kernel(jp_serverapp) as kernel:
        pid = jp_serverapp.kernel_manager.get_kernel(kernel.id).provisioner.process.pid
        # the kernel's own process keeps its GPU at 93% (a background thread, say), from
        # the start (whichever GPU it gets; on the other, it is nobody's claim's)
        for index in (0, 1):
            fake.processes[index] = [FakeProcess(pid, memory=2**30, sm=93)]
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        assert record.owner.pid == pid
        index = int(record.device_keys[0].rsplit("-", 1)[1])
        gpu = await until(jp_fetch, record.name, "active")
        assert gpu["text"] == "GPU busy: 93%"
        assert gpu["utilization"] == 93.0
        # well past idle_timeout with no cell run: kept, its deadline paused
        await asyncio.sleep(3 * 1.0)
        assert [r.name for r in ledger.read_claims()] == [record.name]
        claim = json.loads((await jp_fetch("dra", "api", "claims", record.name)).body)
        assert claim["busy"] is False  # no cell runs
        assert claim["idle_deadline"] >= time.time() + 0.5
        assert not any(kind == "claim_released" for kind, _ in events)
        # the GPU goes quiet: idle_timeout later the claim goes, for idleness
        fake.processes[index] = [FakeProcess(record.owner.pid, memory=2**30, sm=0)]

        def released() -> bool:
            """the claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released)
        assert [r.reason for r in ledger.releases() if r.name == record.name] == ["idle"]

        # the server's readings went to the usage book: seconds of a working GPU, then idle
        # (the sampler's tick that saw it quiet may write after the release: to the claim's
        # last interval, as add_activity does)
        def interval() -> Any:
            [found] = [i for i in ledger.usage(0.0, time.time()) if i.claim == record.name]
            return found

        await eventually(lambda: interval().idle_s > 0)
        assert interval().active_s >= 1.0, interval()


@pytest.mark.parametrize(
    "gpu_config", [{"idle_timeout": 3600.0, "idle_warning": 0.5, "gpu_idle_timeout": 1.0}]
)
async def test_a_blocked_cell_on_an_idle_gpu_is_gpu_idle_and_released_only_when_asked(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, fake: FakePynvml, events: Events
) -> None:
    app = await sampling_the_fake(jp_serverapp, fake)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        kernel.client.execute("import time; time.sleep(600)")  # blocked: busy, GPU unused

        async def busy() -> bool:
            claim = json.loads((await jp_fetch("dra", "api", "claims", record.name)).body)
            return claim["busy"] is True

        for _ in range(300):
            if await busy():
                break
            await asyncio.sleep(0.1)
        gpu = await until(jp_fetch, record.name, "idle")
        assert gpu["text"].startswith("GPU idle for ")
        assert gpu["utilization"] == 0.0  # the captured GPU's utilisation
        await asyncio.sleep(1.0)  # shown, not released: release_gpu_idle is off
        assert [r.name for r in ledger.read_claims()] == [record.name]

        app.release_gpu_idle = True

        def released() -> bool:
            """the claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released)
        assert [r.reason for r in ledger.releases() if r.name == record.name] == ["gpu-idle"]
        gone = json.loads((await jp_fetch("dra", "api", "claims", record.name)).body)
        assert gone["released"]["reason"] == "gpu-idle"
        assert gone["released"]["message"] == "its GPU was not used for 1 s (release_gpu_idle)"
        assert ("claim_released", "gpu-idle") in [(k, d.get("reason")) for k, d in events]


@pytest.mark.parametrize(
    "gpu_config",
    [
        {
            "idle_timeout": 3600.0,
            "idle_warning": 1.0,
            "gpu_idle_timeout": 2.0,
            "release_gpu_idle": True,
        }
    ],
)
async def test_a_gpu_idle_release_is_warned_of_first(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger, fake: FakePynvml, events: Events
) -> None:
    await sampling_the_fake(jp_serverapp, fake)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()

        def released() -> bool:
            """the claim is released and that is announced"""
            return not ledger.read_claims() and release_announced(events, record.name)

        await eventually(released)
        mine = [(k, d) for k, d in events if d["claim"] == record.name]
        assert [k for k, _ in mine] == ["claim_allocated", "idle_warning", "claim_released"]
        assert mine[1][1]["gpu_idle"] is True
        assert mine[2][1]["reason"] == "gpu-idle"


async def test_without_a_gpu_signal_idle_is_as_before(
    jp_serverapp: Any, jp_fetch: Fetch, ledger: Ledger
) -> None:
    """No NVML: the server reads the inventory file's devices with the simulated source,
    which is no GPU signal; the claim's GPU is unknown, and says so."""
    await start_extensions(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        await asyncio.sleep(0.5)  # a few samples
        gpu = await gpu_of(jp_fetch, record.name)
        assert gpu == {
            "state": "unknown",
            "utilization": None,
            "since": None,
            "text": "no GPU signal",
        }


async def test_a_process_on_a_gpu_no_claim_holds_is_said_once(
    jp_serverapp: Any, ledger: Ledger, fake: FakePynvml
) -> None:
    """The user's kernel also uses the GPU its claim does not hold (a context that outlived
    a release, say): the server says so once, on the event bus (the lab shows it)."""
    said: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        said.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=GPU_PROCESS, listener=listen)
    await sampling_the_fake(jp_serverapp, fake)
    async with started_kernel(jp_serverapp) as kernel:
        pid = jp_serverapp.kernel_manager.get_kernel(kernel.id).provisioner.process.pid
        await kernel.run(REQUEST)
        (record,) = ledger.read_claims()
        held = int(record.device_keys[0].rsplit("-", 1)[1])
        other = 1 - held
        fake.processes[held] = [FakeProcess(pid, memory=2**30, sm=10)]
        fake.processes[other] = [FakeProcess(pid, memory=3 * 2**30, sm=10)]
        await eventually(lambda: len(said) == 1)
        [event] = said
        assert (event["pid"], event["action"], event["deadline"]) == (pid, "report", None)
        assert event["device"].endswith(f"/gpu-{other}")
        assert event["memory_used"] == 3 * 2**30
        assert event["message"].startswith(f"Your process {pid} (")
        assert f"3.0 GiB) uses gpu-{other}, which none of your claims holds" in event["message"]
        assert event["message"].endswith("end it, or request the device.")
        await asyncio.sleep(1.0)  # ten more samples: said once while it lasts
        assert len(said) == 1

"""The daemon's GPU sampler, on the fake NVML (the one fake, at the hardware seam; here in
the daemon's process, its processes read from a file the test writes): whose is each
process on each GPU, what each user is shown of them, GPU activity that keeps a claim from
the idle limit, and GPU-idle release. Real daemon, real Unix users, real processes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.fakes.fake_pynvml import FakeProcess, write_world
from tests.service.accounts import (
    Child,
    Service,
    User,
    raw_connect,
    read_line,
    run_as,
    service,
    wait_for,
)
from tests.service.test_isolation import admin_policy, live, released
from tests.service.test_limits import detached

FAST = "gpu_sample_interval = 0.1\ngpu_window = 1\n"


@contextmanager
def nvml_service(tmp_path: Path, policy: str) -> Iterator[tuple[Service, Path]]:
    """The daemon on 2 fake H200s, and the file of the processes NVML lists on them."""
    world = tmp_path / "world.json"
    write_world(world, {})
    tmp_path.chmod(0o755)
    with service(
        policy, inventory="nvml", launcher=("-m", "tests.fakes.nvml_daemon", "2", str(world))
    ) as svc:
        yield svc, world


def metrics_answer() -> dict[str, Any]:
    """The metrics op's answer, as this user."""
    sock = raw_connect(Path(os.environ["DRA_JUPYTER_SOCKET"]))
    try:
        sock.sendall(b'{"v": 1, "id": 1, "op": "metrics"}\n')
        answer = read_line(sock)
    finally:
        sock.close()
    assert answer["ok"] is True, answer
    result: dict[str, Any] = answer["result"]
    return result


def index_of(device: str) -> str:
    return device.rsplit("-", 1)[1]  # gpu.nvidia.com/<node>/gpu-<index>


def holding(user: User, svc: Service) -> tuple[Child, str]:
    """A process of ``user`` that holds a claim of one GPU (until finished); its device."""

    def claim() -> Any:
        from dra_jupyter.api import Session  # noqa: PLC0415
        from dra_jupyter.settings import Settings  # noqa: PLC0415

        c = Session(Settings.from_env()).request(gpu=1, apply_env=False)
        (result,) = c.allocation["devices"]["results"]
        return f"{result['driver']}/{result['pool']}/{result['device']}"

    child = Child(user, svc.env(), claim, hold=True)
    answer = child.result()
    assert "ok" in answer, answer
    return child, str(answer["ok"])


def test_each_process_on_a_gpu_is_its_claims_or_nobodys_and_users_see_their_own(
    users: dict[str, User], tmp_path: Path
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    with nvml_service(tmp_path, admin_policy(users, FAST)) as (svc, world):
        holder, device = holding(alice, svc)
        stray = Child(bob, svc.env(), os.getpid, hold=True)  # holds nothing
        try:
            bob_pid = stray.result()["ok"]
            write_world(
                world,
                {
                    index_of(device): [
                        FakeProcess(holder.pid, memory=40 * 2**30, sm=93),
                        FakeProcess(bob_pid, memory=2**30, sm=0),  # on alice's GPU
                    ]
                },
            )

            def listed() -> bool:
                rows = run_as(carol, svc.env(), metrics_answer)["ok"]["processes"]
                return rows is not None and len(rows) == 2

            wait_for("the sampler lists both processes", listed)
            rows = {
                r["pid"]: r for r in run_as(carol, svc.env(), metrics_answer)["ok"]["processes"]
            }
            mine = rows[holder.pid]
            assert (mine["device"], mine["user"], mine["claim"]) == (
                device,
                alice.name,
                f"{alice.name}-1",
            )
            assert (mine["memory_used"], mine["utilization"]) == (40 * 2**30, 93.0)
            assert mine["command"] and mine["since"] > 0
            assert (rows[bob_pid]["user"], rows[bob_pid]["claim"]) == (bob.name, "none")
            # alice sees her process, and that someone else's is on her GPU, not whose
            seen = run_as(alice, svc.env(), metrics_answer)["ok"]["processes"]
            assert sorted((r["pid"], r["user"], r["claim"]) for r in seen) == [
                (0, "another user", "none"),
                (holder.pid, alice.name, f"{alice.name}-1"),
            ]
            # bob sees his own stray process, and none of alice's
            seen = run_as(bob, svc.env(), metrics_answer)["ok"]["processes"]
            assert sorted((r["pid"], r["user"], r["claim"]) for r in seen) == [
                (0, "another user", "another user's"),
                (bob_pid, bob.name, "none"),
            ]
        finally:
            stray.finish()
            holder.finish()


def test_an_active_gpu_keeps_its_claim_from_the_idle_limit_and_an_idle_one_goes(
    users: dict[str, User], tmp_path: Path
) -> None:
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(
        users, FAST + 'gpu_idle_timeout = 1\nrelease_gpu_idle = true\n[limits]\nidle = "2s"\n'
    )
    with nvml_service(tmp_path, policy) as (svc, world):
        worker, device = holding(alice, svc)
        sleeper, _quiet = holding(bob, svc)
        try:
            write_world(world, {index_of(device): [FakeProcess(worker.pid, sm=93)]})

            def bob_released() -> bool:
                return f"{bob.name}-1" in released(svc)

            # bob's GPU runs nothing: GPU-idle, released with that reason
            wait_for("bob's GPU-idle claim is released", bob_released)
            assert released(svc)[f"{bob.name}-1"] == "gpu-idle"
            # alice's GPU works: her claim outlives the idle limit (2 s) many times over
            assert [c["name"] for c in live(svc)] == [f"{alice.name}-1"]
            time.sleep(4.0)  # two idle limits: a wait before a check, nothing measured
            assert [c["name"] for c in live(svc)] == [f"{alice.name}-1"]
            # her GPU stops: it goes too (the idle limit or GPU-idle, whichever comes first)
            write_world(world, {index_of(device): [FakeProcess(worker.pid, sm=0)]})
            wait_for("alice's claim is released", lambda: not live(svc))
            assert released(svc)[f"{alice.name}-1"] in ("idle", "gpu-idle")
        finally:
            sleeper.finish()
            worker.finish()


def test_without_nvml_nothing_changes(users: dict[str, User]) -> None:
    alice = users["alice"]
    with service(admin_policy(users, FAST)) as svc:  # the simulated h200-8x
        run_as(alice, svc.env(), lambda: detached().request(gpu=1, lease=600, apply_env=False).name)
        assert run_as(alice, svc.env(), metrics_answer)["ok"]["processes"] is None
        assert len(live(svc)) == 1

"""The daemon's GPU sampler, on the fake NVML (the one fake, at the hardware seam; here in
the daemon's process, its processes read from a file the test writes): whose is each
process on each GPU, what each user is shown of them, GPU activity that keeps a claim from
the idle limit, and GPU-idle release. Real daemon, real Unix users, real processes."""

from __future__ import annotations

import os
import signal
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
    cli,
    raw_connect,
    read_line,
    run_as,
    service,
    wait_for,
)
from tests.service.test_isolation import admin_policy, live, released
from tests.service.test_limits import detached
from tests.service.test_usage import my_book

GIB = 2**30
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
            # the sampler's readings are in the usage book: alice's GPU worked for seconds,
            # bob's never did
            book = {i["claim"]: i for i in run_as(alice, svc.env(), my_book)["ok"]}
            assert book[f"{alice.name}-1"]["active_s"] >= 2, book
            [bobs] = run_as(bob, svc.env(), my_book)["ok"]
            assert bobs["active_s"] == 0 and bobs["idle_s"] > 0, bobs
        finally:
            sleeper.finish()
            worker.finish()


def test_without_nvml_nothing_changes(users: dict[str, User]) -> None:
    alice = users["alice"]
    with service(admin_policy(users, FAST)) as svc:  # the simulated h200-8x
        run_as(alice, svc.env(), lambda: detached().request(gpu=1, lease=600, apply_env=False).name)
        assert run_as(alice, svc.env(), metrics_answer)["ok"]["processes"] is None
        assert len(live(svc)) == 1


def stray_of(user: User, svc: Service, *, ignore_term: bool = False) -> Child:
    """A process of ``user`` that holds no claim (until finished or killed)."""

    def start() -> int:
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return os.getpid()

    child = Child(user, svc.env(), start, hold=True)
    assert child.result()["ok"] == child.pid
    return child


def rows_of(user: User, svc: Service) -> dict[int, dict[str, Any]]:
    rows = run_as(user, svc.env(), metrics_answer)["ok"]["processes"] or []
    return {r["pid"]: r for r in rows}


def test_a_process_on_a_gpu_its_user_does_not_hold_is_reported_to_them_and_admins(
    users: dict[str, User], tmp_path: Path
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    with nvml_service(tmp_path, admin_policy(users, FAST)) as (svc, world):
        holder, device = holding(alice, svc)
        stray = stray_of(bob, svc)
        try:
            # after alice's claim, bob's job still holds 40 GiB of her GPU
            write_world(world, {index_of(device): [FakeProcess(stray.pid, memory=40 * GIB)]})

            def reported() -> bool:
                row = rows_of(bob, svc).get(stray.pid)
                return row is not None and row["enforce"] is not None

            wait_for("bob's process is reported", reported)
            row = rows_of(bob, svc)[stray.pid]
            assert (row["user"], row["claim"], row["memory_used"]) == (bob.name, "none", 40 * GIB)
            assert row["enforce"]["action"] == "report" and row["enforce"]["sigterm"] is None
            assert row["command"] and row["since"] > 0
            assert rows_of(carol, svc)[stray.pid]["enforce"]["action"] == "report"  # an admin
            assert stray.pid not in rows_of(alice, svc)  # alice: another user's, no pid
            told = run_as(bob, svc.env(), lambda: cli(["claims"]))["ok"]
            assert told["code"] == 0
            assert f"dra-jupyter claims: your process {stray.pid} (" in told["err"]
            assert "40.0 GiB) since " in told["err"]
            assert f"uses {device}, which you do not hold; reported to the admins\n" in told["err"]
            assert (
                "your process" not in run_as(alice, svc.env(), lambda: cli(["claims"]))["ok"]["err"]
            )
            log = svc.log.read_text()
            assert f"enforce: pid {stray.pid} of {bob.name} (" in log
            assert f"dry run: with mode terminate, pid {stray.pid} would get SIGTERM" in log
            assert stray_alive(stray)
        finally:
            stray.finish()
            holder.finish()


def stray_alive(child: Child) -> bool:
    done, _ = os.waitpid(child.pid, os.WNOHANG)
    return done == 0


def killed_by(child: Child) -> int | None:
    """The signal that ended ``child`` (reaped here), None while it runs."""
    done, status = os.waitpid(child.pid, os.WNOHANG)
    if done == 0:
        return None
    child.pid = 0  # reaped: never signalled again
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1


def test_terminate_kills_after_the_grace_and_never_an_admins_process(
    users: dict[str, User], tmp_path: Path
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    policy = admin_policy(
        users, FAST + '[enforce]\nmode = "terminate"\ngrace = 0.5\nkill_after = 0.5\n'
    )
    with nvml_service(tmp_path, policy) as (svc, world):
        holder, device = holding(alice, svc)
        stubborn = stray_of(bob, svc, ignore_term=True)  # SIGTERM is not enough
        polite = stray_of(bob, svc)
        admin = stray_of(carol, svc)
        stubborn_pid, polite_pid = stubborn.pid, polite.pid  # killed_by reaps, and forgets
        try:
            write_world(
                world,
                {
                    index_of(device): [
                        FakeProcess(holder.pid, sm=50),  # alice's, on her claim: left alone
                        FakeProcess(stubborn.pid, memory=GIB),
                        FakeProcess(admin.pid, memory=GIB),
                    ],
                    "1": [FakeProcess(polite.pid, memory=GIB)],  # a GPU nobody holds
                },
            )
            signals: dict[str, int | None] = {}

            def ended() -> bool:
                for name, child in (("stubborn", stubborn), ("polite", polite)):
                    if signals.get(name) is None:
                        signals[name] = killed_by(child)
                return None not in (signals.get("stubborn"), signals.get("polite"))

            wait_for("bob's processes are ended", ended)
            assert signals == {"stubborn": signal.SIGKILL, "polite": signal.SIGTERM}
            assert stray_alive(admin)  # carol is an admin: reported, never signalled
            assert stray_alive(holder)
            log = svc.log.read_text()
            assert f"enforce: SIGTERM to pid {stubborn_pid} of {bob.name}" in log
            assert f"enforce: SIGKILL to pid {stubborn_pid} of {bob.name}" in log
            assert f"enforce: SIGTERM to pid {polite_pid} of {bob.name}" in log
            assert f"SIGKILL to pid {polite_pid}" not in log  # it went at SIGTERM
            assert f"SIGTERM to pid {admin.pid}" not in log
            assert f"enforce: pid {admin.pid} of {carol.name} (" in log  # reported
            assert f"enforce: dry run: pid {admin.pid} of {carol.name} (" in log  # exempt
        finally:
            for child in (stubborn, polite, admin, holder):
                child.finish()

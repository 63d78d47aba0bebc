"""The daemon's health watcher, on the fake NVML (the one fake, at the hardware seam; in the
daemon's process, its health read from a file the test writes): a GPU that falls off the
bus is taken out within 2 s, its holder's claim is released (``health_grace = 0`` here)
with words naming the GPU, nobody gets it afterwards, every user reads the record
(another user's claim unnamed), and an admin, only, puts it back. Real daemon, real Unix
users, real processes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.fakes.fake_pynvml import FakePynvml, pynvml, write_health
from tests.service.accounts import User, cli, run_as, service, wait_for
from tests.service.test_gpus import holding, index_of, nvml_service
from tests.service.test_isolation import admin_policy, live, read, released


def record() -> Any:
    return [e.to_dict() for e in Session(Settings.from_env()).health_record("h").health_events()]


def untaint(gpu: str) -> Any:
    gone = Session(Settings.from_env()).tainting("untaint").untaint(gpu, "gpu.nvidia.com/xid")
    return [gone.user, gone.removed_by]


def request(gpus: int) -> Any:
    c = Session(Settings.from_env()).request(gpu=gpus, apply_env=False)
    return c.allocation["devices"]["results"][0]["device"]


def taint(gpu: str) -> str:
    tainting = Session(Settings.from_env()).tainting("taint")
    return tainting.taint(gpu, "NoExecute", "test", "dra-jupyter/admin").device


def test_an_admins_noexecute_releases_the_holder_on_simulated_devices(
    users: dict[str, User],
) -> None:
    """No NVML, so no health watcher in the daemon: an admin's NoExecute taint releases its
    holder after the grace all the same (``health_grace = 0`` here), with words naming the
    GPU and the taint."""
    alice, carol = users["alice"], users["carol"]
    with service(admin_policy(users, "health_grace = 0\n")) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", "nb"]))
        assert made["ok"]["code"] == 0, made
        [claim] = live(svc)
        [gpu] = claim["devices"]  # its name in the allocation: gpu-N
        tainted = run_as(carol, svc.env(), lambda: taint(gpu))
        assert "ok" in tainted, tainted
        name = f"{alice.name}-nb"
        wait_for("the claim is released", lambda: released(svc).get(name) == "device-failed")
        ((message,),) = read(svc, f"SELECT message FROM releases WHERE name = '{name}'")
        assert message == f"{gpu} was taken out (dra-jupyter/admin: test)"


def test_a_gpu_off_the_bus_is_taken_out_its_holder_released_and_the_record_kept(
    users: dict[str, User], tmp_path: Path
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    base = int(FakePynvml().capture.device["minor"])
    policy = admin_policy(users, "health_grace = 0\nhealth_poll_interval = 1\n")
    with nvml_service(tmp_path, policy) as (svc, _world):
        holder, device = holding(alice, svc)
        try:
            gpu = f"gpu-{index_of(device)}"
            xid = [int(index_of(device)) - base, pynvml.nvmlEventTypeXidCriticalError, 79]
            write_health(tmp_path / "health.json", {"events": [xid]})
            start = time.monotonic()
            wait_for(
                "the ledger holds the event", lambda: bool(read(svc, "SELECT 1 FROM health_events"))
            )
            assert time.monotonic() - start < 2.0
            name = f"{alice.name}-1"
            wait_for("the claim is released", lambda: released(svc).get(name) == "device-failed")
            ((message,),) = read(svc, f"SELECT message FROM releases WHERE name = '{name}'")
            assert (
                message == f"{gpu} was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)"
            )
            # nobody gets the GPU: bob gets the other one, and two are never possible now
            other = run_as(bob, svc.env(), lambda: request(1))
            assert other["ok"] != gpu, other
            too_many = run_as(bob, svc.env(), lambda: request(2))
            assert too_many["error"] == "NeverPossibleError", too_many
            # the record: the admin sees whose claim it hit, bob that someone's was
            (seen,) = run_as(carol, svc.env(), record)["ok"]
            assert (seen["device"].rsplit("/", 1)[1], seen["value"], seen["effect"]) == (
                gpu,
                "79",
                "NoExecute",
            )
            assert seen["claims"] == [{"name": name, "user": alice.name}]
            (bobs,) = run_as(bob, svc.env(), record)["ok"]
            assert bobs["claims"] == [{"name": "", "user": "another user"}]
            assert [e["meaning"] for e in run_as(alice, svc.env(), record)["ok"]] == [
                "the GPU fell off the bus"
            ]
            # only an admin puts it back; then it is given again
            refused = run_as(bob, svc.env(), lambda: untaint(gpu))
            assert refused["error"] == "ForbiddenError", refused
            back = run_as(carol, svc.env(), lambda: untaint(gpu))
            assert back["ok"] == ["health watcher", carol.name]
            assert "ok" in run_as(bob, svc.env(), lambda: request(2))
        finally:
            holder.finish()

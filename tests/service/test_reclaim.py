"""Reclaim under pressure on the real service, with real Unix users and processes: alice's
idle claims give way to bob's request, warned at once with bob's context, released after
the grace; her Keep is honoured once and refused the second time in one clear line."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.settings import Settings
from dra_jupyter.types import ReclaimNotice
from tests.service.accounts import DEADLINE, Child, User, cli, run_as, service, wait_for
from tests.service.test_isolation import admin_policy, read

GRACE = 3  # seconds from the warning to the release (reclaim_grace), short for the test


def notices(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[ReclaimNotice]:
    """Every notice in force, as root (an admin) reads them."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    backend = Session(Settings.from_env()).backend
    assert isinstance(backend, ServiceBackend)
    try:
        return backend.notices()
    finally:
        backend.channel.close()


def hold() -> Any:
    """alice's process holds the whole machine in two claims, then does nothing."""
    session = Session(Settings.from_env())
    made = [session.request(gpu=4, apply_env=False) for _ in range(2)]
    return [[c.name, c._record.device_keys] for c in made]


def wait_in_line() -> Any:
    """bob asks for one GPU and waits for it."""
    claim = Session(Settings.from_env()).request(gpu=1, timeout=60, apply_env=False)
    return {"name": claim.name, "devices": claim._record.device_keys}


def keep(name: str) -> Any:
    """The Keep of a warning (what the card's button and ``backend.touch`` send)."""
    return Session(Settings.from_env()).backend.touch(name, time.time())


def test_idle_claims_give_way_to_a_waiter_and_keep_is_bounded(
    users: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(users, f"reclaim_grace = {GRACE}\nreclaim_idle = 0.1\n")
    with service(policy) as svc:
        env = svc.env()

        holder = Child(alice, env, hold, hold=True)
        waiter: Child | None = None
        try:
            (first, first_devices), (second, _) = holder.result()["ok"]
            assert notices(monkeypatch, env) == []  # nobody waits: nothing is reclaimed

            asked = time.time()
            waiter = Child(bob, env, wait_in_line)
            found: list[ReclaimNotice] = []

            def warned() -> bool:
                found[:] = notices(monkeypatch, env)
                return bool(found)

            wait_for("alice is warned", warned)
            [notice] = found  # the fewest that free one GPU: one claim, idle the longest
            assert notice.claim == first
            assert notice.waiter == bob.name and notice.what == "1× NVIDIA H200"
            assert notice.deadline - asked <= GRACE + 1.0  # warned within 1 s of the request
            assert notice.message.startswith(
                f"{bob.name} is waiting for 1× NVIDIA H200; your {first}, idle for "
            )
            assert re.search(r"will be released in 0:0[0-3]$", notice.message)  # as read
            assert notice.keeps_left == 1
            event = f"reclaim: to {alice.name}: {bob.name} is waiting for 1× NVIDIA H200; "
            assert event + f"your {first}" in svc.log.read_text()  # the service's event
            listed = run_as(alice, env, lambda: cli(["claims"]))["ok"]  # a shell tells her too
            assert (
                f"dra-jupyter claims: {bob.name} is waiting for 1× NVIDIA H200; your {first}"
                in listed["err"]
            )

            kept_at = time.time()
            assert run_as(alice, env, lambda: keep(first)) == {
                "ok": True
            }  # the one Keep under pressure
            refused = run_as(alice, env, lambda: keep(first))
            assert refused["error"] == "KeepRefusedError"
            assert refused["message"].startswith(
                f"claim {first}: Keep refused: {bob.name} is waiting for 1× NVIDIA H200, "
                "and the 1 Keep allowed while someone waits is used (keeps_under_pressure); "
                "it will be released in "
            )
            assert "\n" not in refused["message"]

            got = waiter.result()
            assert "ok" in got, got
            [(reason, message, released)] = read(
                svc, f"SELECT reason, message, time FROM releases WHERE name = '{first}'"
            )
            assert reason == "fair-share"
            assert message.startswith(f"released for {bob.name}, who waited for 1× NVIDIA H200")
            assert released >= kept_at + GRACE - 0.5  # the Keep postponed it by the grace
            [device] = got["ok"]["devices"]
            assert device in first_devices  # bob got one of the GPUs alice gave way with
            live = [row[0] for row in read(svc, "SELECT name FROM claims")]
            assert second in live and first not in live  # only what bob needed was taken
            assert notices(monkeypatch, env) == []  # bob served: no warning left
        finally:
            if waiter is not None:
                waiter.kill()
            holder.finish()


def test_the_line_is_served_by_fair_share_and_says_why(users: dict[str, User]) -> None:
    """alice used the whole machine a while ago, bob never: bob, who asked second, is
    served first, and alice reads why she stands behind (another user, visibility own)."""
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    with service(admin_policy(users)) as svc:
        env = svc.env()

        def use() -> Any:  # alice holds the whole machine a few seconds, then gives it back
            claim = Session(Settings.from_env()).request(gpu=8, apply_env=False)
            start = time.time()
            wait_for("alice used the machine a while", lambda: time.time() >= start + 2)
            claim.release()
            return True

        assert run_as(alice, env, use) == {"ok": True}

        def shell(user: User, *argv: str) -> int:
            done = run_as(user, env, lambda: cli(list(argv)))
            assert "ok" in done, done
            code: int = done["ok"]["code"]
            return code

        assert shell(carol, "request", "gpu=1", "--name", "one") == 0  # carol fills the machine
        assert shell(carol, "request", "gpu=7", "--name", "rest") == 0

        def ask() -> Any:
            return Session(Settings.from_env()).request(gpu=1, timeout=60, apply_env=False).name

        def line() -> Any:  # since: seconds since the epoch, a moment ago
            return [
                [w.owner.user, w.position, w.why, 0 <= time.time() - w.since < DEADLINE]
                for w in Session(Settings.from_env()).waiting()
            ]

        first = Child(alice, env, ask)
        second: Child | None = None
        try:
            wait_for("alice waits", lambda: svc.log.read_text().count("waits in line") == 1)
            second = Child(bob, env, ask, hold=True)  # holds what it gets
            wait_for("bob waits", lambda: svc.log.read_text().count("waits in line") == 2)
            seen = run_as(alice, env, line)["ok"]
            assert [row[:2] for row in seen] == [["another user", 1], [alice.name, 2]]
            assert [row[3] for row in seen] == [True, True]
            assert seen[0][2] == "first in line"
            assert seen[1][2].startswith(
                "behind another user, who has used less of their share (0 GPU-s against your "
            )
            shown = run_as(alice, env, lambda: cli(["waiting"]))["ok"]["out"].splitlines()
            assert shown[0] == "1. another user: 1 gpu.nvidia.com (first in line)"
            assert shown[1].startswith(f"2. {alice.name}: 1 gpu.nvidia.com (behind another user, ")
            assert shell(carol, "release", "one") == 0
            assert second.result()["ok"] == f"{bob.name}-1"  # bob first: he used less
            assert not first.answered()  # alice still waits: one GPU was freed
            assert shell(carol, "release", "rest") == 0
            assert "ok" in first.result()
        finally:
            first.kill()
            if second is not None:
                second.finish()


def test_with_reclaim_off_a_waiter_waits_out_its_timeout(users: dict[str, User]) -> None:
    """``reclaim = false``: alice's idle claims are neither warned nor released for bob,
    whose wait runs out (as before fair share: only the idle limit releases)."""
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(users, "reclaim = false\nreclaim_idle = 0.1\n")
    with service(policy) as svc:
        env = svc.env()
        holder = Child(alice, env, hold, hold=True)
        try:
            (first, _), (second, _) = holder.result()["ok"]

            def wait_briefly() -> Any:
                return Session(Settings.from_env()).request(gpu=1, timeout=3, apply_env=False)

            refused = run_as(bob, env, wait_briefly)
            assert refused["error"] == "BusyError", refused
            assert "reclaim:" not in svc.log.read_text()  # on, it warns as bob starts to wait
            live = {row[0] for row in read(svc, "SELECT name FROM claims")}
            assert live == {first, second}
        finally:
            holder.finish()


def test_a_busy_holder_is_passed_over_and_only_its_user_may_say_so(
    users: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``activity`` op: bob's report on alice's claim counts for nothing (as a claim
    that does not exist); alice's says her first claim's kernel runs a cell, so bob's wait
    warns her other claim, though the first has been idle longer; no Keep was used."""
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(users, "reclaim_grace = 60\nreclaim_idle = 0.1\n")
    with service(policy) as svc:
        env = svc.env()
        holder = Child(alice, env, hold, hold=True)
        waiter: Child | None = None
        try:
            (first, _), (second, _) = holder.result()["ok"]

            def busy(name: str) -> Any:
                backend = Session(Settings.from_env()).backend
                assert isinstance(backend, ServiceBackend)
                return backend.activity(name=name, busy=True)

            assert run_as(bob, env, lambda: busy(first)) == {"ok": 0}  # not his to say
            assert run_as(alice, env, lambda: busy(first)) == {"ok": 1}
            waiter = Child(bob, env, wait_in_line)
            found: list[ReclaimNotice] = []

            def warned() -> bool:
                found[:] = notices(monkeypatch, env)
                return bool(found)

            wait_for("alice is warned", warned)
            [notice] = found
            assert notice.claim == second  # the busy one is passed over
            assert notice.keeps_left == 1  # a report is no Keep
        finally:
            if waiter is not None:
                waiter.kill()
            holder.finish()

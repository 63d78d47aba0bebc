"""The policy's limits as a real daemon enforces them on real users: MIG slices, leases
(longest, default), idle claims of a process, the per-user rate and queue. Each refusal is
one line that names the limit and where it comes from."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.server.claims import Caller, ClaimService
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import Child, User, run_as, service, wait_for
from tests.service.test_isolation import (
    admin_policy,
    error_of,
    live,
    read,
    released,
    sweep_until_released,
)


def session() -> Session:
    return Session(Settings.from_env())


def detached() -> Session:
    """A session whose claims no process holds (as the CLI's): they outlive the child."""
    return Session(Settings.from_env(), owner=replace(Owner.current(), pid=0, start_time=None))


def test_mig_slices_are_limited(users: dict[str, User]) -> None:
    bob = users["bob"]
    policy = admin_policy(users, "[limits]\nmig = 1\n")
    with service(policy, inventory="h200-mig") as svc:

        def ask() -> list[str]:
            s = detached()
            first = s.request(mig="1g.18gb", lease=600, apply_env=False)
            return [
                first.name,
                error_of(lambda: s.request(mig="1g.18gb", apply_env=False)),
                error_of(lambda: s.request(mig="1g.18gb", apply_env=False)),
            ]

        answer = run_as(bob, svc.env(), ask)
        assert "ok" in answer, answer
        first, second, third = answer["ok"]
        assert first == f"{bob.name}-1"
        assert (
            second
            == third
            == (
                f"LimitError: user {bob.name}: limit 1 MIG slice (default), holds 1; "
                "the request needs 1 more"
            )
        )


def test_a_share_of_a_gpu_is_limited(users: dict[str, User]) -> None:
    """``gpu_share``: the shares (consumable capacity) a user holds, summed in percent of
    one H200's memory (143771Mi), across GPUs; another user's shares do not count."""
    alice, bob = users["alice"], users["bob"]
    group = bob.name  # his user-private group
    policy = admin_policy(users, f'[limits]\ngpu_share = "80%"\n[groups.{group}]\ngpu_share = 50\n')
    with service(policy, inventory="h200-shared") as svc:

        def ask() -> list[str]:
            s = detached()
            made = [s.request(gpu=1, share="57508Mi", lease=600, apply_env=False).name]  # 40%
            made.append(error_of(lambda: s.request(gpu=1, share="28754Mi", apply_env=False)))
            made.append(s.request(gpu=1, share="14377Mi", lease=600, apply_env=False).name)
            made.append(error_of(lambda: s.request(gpu=1, share="1Gi", apply_env=False)))
            return made

        answer = run_as(bob, svc.env(), ask)
        assert "ok" in answer, answer
        first, twenty, ten, more = answer["ok"]
        assert (first, ten) == (f"{bob.name}-1", f"{bob.name}-2")  # 40% + 10%: at the limit
        assert twenty == (
            f"LimitError: user {bob.name}: limit 50% of a GPU (group {group}), holds 40%; "
            "the request needs 20% more"
        )
        assert more == (
            f"LimitError: user {bob.name}: limit 50% of a GPU (group {group}), holds 50%; "
            "the request needs 0.7% more"
        )

        def alices() -> list[str]:  # her own limit (the default, 80%): bob's shares are his
            s = detached()
            return [
                s.request(gpu=1, share="57508Mi", lease=600, apply_env=False).name,
                error_of(lambda: s.request(gpu=1, share="60000Mi", apply_env=False)),
            ]

        mine, over = run_as(alice, svc.env(), alices)["ok"]
        assert mine == f"{alice.name}-1"
        assert over == (
            f"LimitError: user {alice.name}: limit 80% of a GPU (default), holds 40%; "
            "the request needs 41.7% more"
        )
        assert sorted(c["name"] for c in live(svc)) == [
            f"{alice.name}-1",
            f"{bob.name}-1",
            f"{bob.name}-2",
        ]


def test_the_longest_lease_the_default_lease_and_the_longest_wait(users: dict[str, User]) -> None:
    bob = users["bob"]
    group = bob.name  # his user-private group
    policy = admin_policy(
        users,
        f'[limits]\nlease_default = "30m"\nwait_max = "1m"\n[groups.{group}]\nlease_max = "1h"\n',
    )
    with service(policy) as svc:

        def ask() -> dict[str, Any]:
            s = detached()
            return {
                "name": s.request(gpu=1).name,  # no lease named: the default
                "too long": error_of(lambda: s.request(gpu=1, lease="2h")),
                "waits too long": error_of(lambda: s.request(gpu=1, timeout="2h")),
            }

        answer = run_as(bob, svc.env(), ask)["ok"]
        assert answer["waits too long"] == (
            f"LimitError: user {bob.name}: limit 1m of waiting in line (default); pass a "
            "shorter timeout"
        )
        assert answer["too long"] == (
            f"LimitError: user {bob.name}: limit 1h lease (group {group}); a lease of 2h "
            "asked; pass a shorter lease"
        )
        [(created, expires)] = read(svc, "SELECT created, lease_expires FROM claims")
        assert expires - created == 1800


def test_an_idle_claim_of_a_process_is_released_and_a_kept_one_is_not(
    users: dict[str, User],
) -> None:
    alice = users["alice"]
    policy = admin_policy(users, '[limits]\nidle = "2s"\n')
    with service(policy) as svc:

        def hold() -> str:
            return session().request(gpu=1, name="idle").name

        holder = Child(alice, svc.env(), hold, hold=True)
        try:
            name = f"{alice.name}-idle"  # a user's names are their own (visibility own)
            assert holder.result() == {"ok": name}
            leased = run_as(alice, svc.env(), lambda: detached().request(gpu=1, lease=600).name)
            wait_for("the idle claim is released", lambda: released(svc).get(name) == "idle")
            assert [c["name"] for c in live(svc)] == [leased["ok"]]  # lives by its lease
        finally:
            holder.kill()


def test_a_claim_the_daemon_releases_is_announced_by_the_jupyter_server(
    users: dict[str, User],
) -> None:
    """A claim of a server's kernel that the daemon releases (here: idle, by the policy)
    comes out of the server's sweep as released, with the daemon's reason: the server
    emits its ``released`` event and its GET claims/{name} says why, as for a release of
    its own. Only once, however often it sweeps."""
    alice = users["alice"]
    policy = admin_policy(users, '[limits]\nidle = "2s"\n')
    with service(policy) as svc:

        def server() -> Any:
            claims = ClaimService(Settings.from_env(), live_kernels=list)
            caller = Caller(user=alice.name)
            made = claims.create(caller, {"gpu": 1})
            sweep_until_released(claims, caller)
            for _ in range(3):
                claims.claims(caller)
            announced = []
            while not claims.released.empty():
                record, reason = claims.released.get_nowait()
                announced.append([record.name, reason])
            record, gone = claims.claim_or_released(caller, made.name)
            return {
                "made": made.name,
                "announced": announced,
                "card": [record.name, gone.reason if gone else None],
            }

        answer = run_as(alice, svc.env(), server)
        assert "ok" in answer, answer
        name = answer["ok"]["made"]
        assert answer["ok"]["announced"] == [[name, "idle"]]
        assert answer["ok"]["card"] == [name, "idle"]
        assert released(svc).get(name) == "idle"
        # the daemon's words, kept in the ledger for whoever asks later (its own idle limit)
        assert read(svc, f"SELECT message FROM releases WHERE name = '{name}'") == [
            ("idle for 2s",)
        ]


def test_a_kernels_claim_the_daemon_reclaims_is_announced_by_the_jupyter_server(
    users: dict[str, User],
) -> None:
    """A claim a kernel of the server made (held by the kernel's process) that the daemon
    releases when that process ends (``kernel-shutdown``) is announced by the server too."""
    alice = users["alice"]
    with service(admin_policy(users)) as svc:

        def server() -> Any:
            to_kernel_r, to_kernel_w = os.pipe()
            from_kernel_r, from_kernel_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the kernel: makes its claim, then ends when told
                code = 1
                try:
                    owner = replace(Owner.current(), kernel_id="k-1")
                    made = Session(Settings.from_env(), owner=owner).request(gpu=1)
                    os.write(from_kernel_w, made.name.encode() + b"\n")
                    os.read(to_kernel_r, 1)
                    code = 0
                finally:
                    os._exit(code)
            name = os.read(from_kernel_r, 256).decode().strip()
            claims = ClaimService(Settings.from_env(), live_kernels=lambda: ["k-1"])
            caller = Caller(user=alice.name)
            seen = [r.name for r in claims.claims(caller)]  # a sweep: the server sees it
            os.write(to_kernel_w, b"x")  # the kernel ends: its pidfd tells the daemon
            os.waitpid(pid, 0)
            deadline = time.monotonic() + 60  # a bound, not a timing
            while claims.released.empty() and time.monotonic() < deadline:
                claims.claims(caller)
                time.sleep(0.1)
            announced = []
            while not claims.released.empty():
                record, reason = claims.released.get_nowait()
                announced.append([record.name, reason])
            return {"name": name, "seen": seen, "announced": announced}

        answer = run_as(alice, svc.env(), server)
        assert "ok" in answer, answer
        name = answer["ok"]["name"]
        assert answer["ok"]["seen"] == [name]
        assert answer["ok"]["announced"] == [[name, "kernel-shutdown"]]


def test_a_users_rate_and_queue_are_bounded(users: dict[str, User]) -> None:
    bob, carol = users["bob"], users["carol"]
    policy = admin_policy(users, "requests_per_second = 0.001\nburst = 5\nqueue_per_user = 1\n")
    with service(policy) as svc:

        def many() -> list[str]:
            s = session()
            return [error_of(s.backend.claims) for _ in range(7)]

        answers = run_as(bob, svc.env(), many)["ok"]
        assert answers[:5] == ["no error"] * 5
        assert answers[5] == (
            f"LimitError: user {bob.name}: limit 0.001 requests per second "
            "(requests_per_second); slow down and try again"
        )
        others = run_as(carol, svc.env(), lambda: [c.name for c in session().backend.claims()])
        assert others == {"ok": []}  # another user's budget is their own


def test_one_user_waits_in_line_at_most_queue_per_user_times(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users, "queue_per_user = 1\n")) as svc:
        made = run_as(alice, svc.env(), lambda: detached().request(gpu=8, lease=600).name)
        assert made["ok"]

        def wait() -> str:
            return error_of(lambda: session().request(gpu=1, timeout=60))

        first = Child(bob, svc.env(), wait)
        try:
            wait_for("bob waits in line", lambda: "waits in line" in svc.log.read_text())
            second = run_as(bob, svc.env(), wait)
            assert second["ok"] == (
                f"LimitError: user {bob.name}: limit 1 requests waiting in line "
                "(queue_per_user), has 1; wait for those first"
            )
        finally:
            first.kill()


def test_a_request_without_a_lease_gets_the_longest_allowed(users: dict[str, User]) -> None:
    bob = users["bob"]
    with service(admin_policy(users, '[limits]\nlease_max = "1h"\n')) as svc:
        made = run_as(bob, svc.env(), lambda: detached().request(gpu=1).name)
        assert made["ok"] == f"{bob.name}-1"
        [(created, expires)] = read(svc, "SELECT created, lease_expires FROM claims")
        assert expires - created == 3600

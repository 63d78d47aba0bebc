"""Background runs under a real ``dra-jupyter service``, started by real Unix users: each
run's launcher is its claim's holder (the daemon knows its pid through SO_PEERCRED), so the
user's limits apply to runs as to any client, and the daemon reclaims a run's claim when
its launcher is killed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from dra_jupyter.types.runs import Run
from tests.hub.access import REPO, reachable
from tests.service.accounts import User, cli, run_as, service, wait_for
from tests.service.test_isolation import admin_policy, error_of, live, released

SLEEPER = ["python", "-c", "import time; print('started', flush=True); time.sleep(120)"]


def user_env(svc_env: dict[str, str], user: User, state: Path) -> dict[str, str]:
    """The service's socket, the user's own ledger (the book of their runs), this checkout."""
    folder = state / user.name
    folder.mkdir(mode=0o700)
    os.chown(folder, user.uid, user.gid)
    return {
        **svc_env,
        "DRA_JUPYTER_LEDGER": str(folder / "ledger.sqlite"),
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]]),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


def start_two() -> list[Any]:
    """A run of 2 GPUs (the limit), then one more GPU (over it)."""
    s = Session(Settings.from_env())
    run = s.run(SLEEPER, gpu=2, name="train")
    assert isinstance(run, Run)  # one machine's
    more = error_of(lambda: s.run(SLEEPER, gpu=1, name="more"))
    status = run.status
    return [run.name, status.phase, list(status.claims), more]


def cancel_all() -> list[str]:
    s = Session(Settings.from_env())
    found = s.runs()
    for run in found:
        run.cancel()
    return [f"{r.name} {r.status.phase}" for r in found]


def launcher_of(pid: int) -> tuple[int, list[bytes]]:
    """The uid and the command line of a process."""
    uid = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    return uid, Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:4]


def test_runs_of_two_users_hold_their_claims_within_their_limits(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(users, "[limits]\ngpus = 2\n")
    with reachable([alice, bob], "dra_jupyter.runner"), service(policy) as svc:
        envs = {u.name: user_env(svc.env(), u, svc.root) for u in (alice, bob)}
        answers = {u.name: run_as(u, envs[u.name], start_two) for u in (alice, bob)}
        for user in (alice, bob):
            name, phase, claims, more = answers[user.name]["ok"]
            assert (name, phase) == ("train", "Running")
            assert more.startswith(f"LimitError: user {user.name}: limit 2 GPUs"), more
            # the daemon's holder is the run's launcher, a process of that user, which
            # outlived the process that started it
            [held] = [c for c in live(svc) if c["name"] == claims[0]]
            assert held["owner"]["user"] == user.name and len(held["devices"]) == 2
            assert launcher_of(held["owner"]["pid"]) == (
                user.uid,
                [b"-m", b"dra_jupyter.runner", b"--detach"],
            )
        assert sorted(c["owner"]["user"] for c in live(svc)) == [alice.name, bob.name]
        # alice cancels hers from a new process; bob's launcher is killed
        assert run_as(alice, envs[alice.name], cancel_all)["ok"] == [
            "train Cancelled",
            "more Failed",
        ]
        [bobs] = [c for c in live(svc) if c["owner"]["user"] == bob.name]
        os.kill(bobs["owner"]["pid"], signal.SIGKILL)
        wait_for("the daemon reclaims the killed run's claim", lambda: live(svc) == [])
        ended = released(svc)
        assert ended[bobs["name"]] == "reclaimed"


def start_one() -> list[Any]:
    s = Session(Settings.from_env())
    run = s.run(SLEEPER, gpu=1, name="train")
    assert isinstance(run, Run)
    wait_for("the command started", lambda: run.logs() == "started\n")
    [row] = s.claims().rows
    return [run.status.claims[0], row.kernel]


def ended_run() -> list[Any]:
    [run] = Session(Settings.from_env()).runs()
    wait_for("the run ends once its claim is gone", lambda: run.status.done)
    return [run.status.phase, run.status.message]


def test_an_admin_releasing_a_runs_claim_stops_the_run(users: dict[str, User]) -> None:
    alice, carol = users["alice"], users["carol"]
    with reachable([alice], "dra_jupyter.runner"), service(admin_policy(users)) as svc:
        env = user_env(svc.env(), alice, svc.root)
        claim, holder = run_as(alice, env, start_one)["ok"]
        assert holder == "run train"  # dra.claims() says whose it is
        done = run_as(carol, svc.env(), lambda: cli(["release", claim]))["ok"]
        assert done["code"] == 0, done
        # the launcher reads its claim from the daemon (no ring reaches it from there)
        phase, message = run_as(alice, env, ended_run)["ok"]
        assert phase == "Failed"
        assert message.startswith(
            f"run train: its claim {claim} was released by an admin (admin); the command "
            "was stopped"
        )
        assert live(svc) == []

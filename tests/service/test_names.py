"""Claim names under ``visibility = "own"``: a user's names are their own (``nb`` is
``<user>-nb``), so another user's live claim reads, by every op that takes a name (release,
keep, record, request with a name), exactly as a name never used; an admin's release of
another user's claim says who; and a clean stop of the daemon leaves no socket behind."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import User, cli, run_as, service, wait_for
from tests.service.test_isolation import admin_policy, live, released


def outcome(call: Any) -> str:
    """What ``call()`` returned, or the error it raised, as text."""
    try:
        return str(call())
    except Exception as err:
        return f"{type(err).__name__}: {err}"


def detached() -> Session:
    return Session(Settings.from_env(), owner=replace(Owner.current(), pid=0, start_time=None))


def test_another_users_claim_reads_as_a_name_never_used(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", "nb"]))
        assert made["ok"]["code"] == 0, made
        held = f"{alice.name}-nb"  # alice's nb, as the daemon names it
        assert [c["name"] for c in live(svc)] == [held]
        free = f"{alice.name}-never"

        def probe(name: str) -> dict[str, Any]:
            s = detached()
            backend = s.backend
            out = {
                "cli release": cli(["release", name]),
                "release": outcome(lambda: backend.release(name)),
                "keep": outcome(lambda: backend.touch(name, 0.0)),
                "record": outcome(lambda: backend.record(name)),
                "ended": outcome(lambda: backend.ended(name)),
                "released at": outcome(lambda: backend.released_at(name)),
            }
            made = s.request(gpu=1, name=name, lease=600, apply_env=False)
            out["request"] = made.name
            s.release(made.name)
            return {k: str(v).replace(name, "NAME") for k, v in out.items()}

        taken = run_as(bob, svc.env(), lambda: probe(held))
        never = run_as(bob, svc.env(), lambda: probe(free))
        assert "ok" in taken, taken
        assert taken == never
        said = taken["ok"]
        assert "no claim named 'NAME'" in said["cli release"]
        assert said["release"] == said["keep"] == "False"
        assert said["record"] == said["ended"] == said["released at"] == "None"
        assert said["request"] == f"{bob.name}-NAME"  # his own, free: allocated
        # and alice's claim is untouched, hers to release by the name she gave it
        assert [c["name"] for c in live(svc)] == [held]
        gone = run_as(alice, svc.env(), lambda: cli(["release", "nb"]))["ok"]
        assert gone == {"code": 0, "out": "released: nb\n", "err": ""}
        assert released(svc)[held] == "user"


def test_an_admins_release_tells_the_owner_who(users: dict[str, User]) -> None:
    alice, carol = users["alice"], users["carol"]
    with service(admin_policy(users)) as svc:
        name = f"{alice.name}-nb"
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", name]))
        assert made["ok"]["code"] == 0, made
        done = run_as(carol, svc.env(), lambda: cli(["release", name]))["ok"]
        assert done == {"code": 0, "out": f"released: {name}\n", "err": ""}

        def told() -> Any:
            ended = Session(Settings.from_env()).backend.ended(name)
            return None if ended is None else [ended.reason, ended.message]

        assert run_as(alice, svc.env(), told) == {
            "ok": ["admin", f"released by admin {carol.name}"]
        }


def test_a_clean_stop_leaves_no_socket(users: dict[str, User]) -> None:
    with service(admin_policy(users)) as svc:
        assert svc.socket.exists()
        svc.stop()  # SIGTERM
        assert not svc.socket.exists()
        svc.start()
        assert svc.process is not None
        svc.process.send_signal(signal.SIGINT)
        svc.process.wait(60)
        assert not svc.socket.exists()
        svc.start()  # and it starts again where it was
        wait_for("the daemon answers again", svc.socket.exists)

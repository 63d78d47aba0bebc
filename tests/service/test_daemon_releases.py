"""Releases the daemon makes, as a Jupyter server (``ClaimService`` on the service backend)
reports them: each once, with the daemon's words and time."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.server.claims import Caller, ClaimService
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import User, run_as, service, wait_for
from tests.service.test_isolation import admin_policy, read, sweep_until_released


def test_a_claim_the_daemon_idles_reads_back_with_its_words_and_time(
    users: dict[str, User],
) -> None:
    """The server's card of a claim the daemon released as idle says what the daemon said
    (``idle for 2s``, its own limit, not the server's) and when the daemon released it."""
    alice = users["alice"]
    policy = admin_policy(users, '[limits]\nidle = "2s"\n')
    with service(policy) as svc:

        def server() -> Any:
            claims = ClaimService(Settings.from_env(), live_kernels=list)
            caller = Caller(user=alice.name)
            made = claims.create(caller, {"gpu": 1})
            sweep_until_released(claims, caller)
            _record, gone = claims.claim_or_released(caller, made.name)
            assert gone is not None
            return {"made": made.name, "message": gone.message, "time": gone.time}

        answer = run_as(alice, svc.env(), server)
        assert "ok" in answer, answer
        name = answer["ok"]["made"]
        [(message, when)] = read(svc, f"SELECT message, time FROM releases WHERE name = '{name}'")
        assert message == "idle for 2s"
        assert (answer["ok"]["message"], answer["ok"]["time"]) == (message, when)


def test_a_claim_adopt_releases_is_announced_once(
    users: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel's claim whose lease ran out when the server adopts it (before the daemon's
    tick, once a second, released it) is released by the adopt and announced then: not
    once more by the server's next sweeps. (Tried until the adopt came first: a bound, not
    a timing.)"""
    with service(admin_policy(users)) as svc:
        for key, value in svc.env().items():
            monkeypatch.setenv(key, value)
        kernel = replace(Owner.current(), kernel_id="k-1")  # held by this process
        session = Session(Settings.from_env(), owner=kernel)
        claims = ClaimService(Settings.from_env(), live_kernels=lambda: ["k-1"])
        caller = Caller(user=kernel.user)
        try:
            for _ in range(20):
                made = session.request(gpu=1, lease=1, apply_env=False)
                assert [r.name for r in claims.claims(caller)] == [made.name]  # seen
                expires = made._record.lease_expires
                assert expires is not None
                wait_for("the lease ran out", lambda: time.time() > expires + 0.02)  # noqa: B023
                assert claims.adopt_kernel_claims("k-1") == []
                if not claims.released.empty():
                    break  # the adopt released it (else the daemon's tick did: again)
                claims.claims(caller)
                while not claims.released.empty():
                    claims.released.get_nowait()
            else:
                pytest.fail("the daemon's tick released the claim before every adopt")
            for _ in range(3):
                claims.claims(caller)  # sweeps, as a board's polls make
            announced = []
            while not claims.released.empty():
                gone, reason = claims.released.get_nowait()
                announced.append([gone.name, reason])
        finally:
            for backend in (session.backend, claims.backend):
                backend.channel.close()  # type: ignore[attr-defined]  # a ServiceBackend
        assert announced == [[made.name, "expired"]]


def test_a_released_claim_is_told_to_its_owner_and_admins_only(users: dict[str, User]) -> None:
    """The ``record`` op's ``released`` (the claim as it was, why, the words): to its owner
    and an admin; another user learns nothing of it, not even when it ended."""
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    with service(admin_policy(users)) as svc:

        def make() -> Any:
            session = Session(Settings.from_env(), owner=replace(Owner.current(), pid=0))
            made = session.request(gpu=1, name="alice-nb", lease=600, apply_env=False)
            made.release()
            return made.name

        name = f"{alice.name}-alice-nb"  # a user's names are their own (visibility own)
        assert run_as(alice, svc.env(), make) == {"ok": name}

        def ask() -> Any:
            backend = Session(Settings.from_env()).backend
            ended = backend.ended(name)
            return [
                None if ended is None else [ended.record.name, ended.reason],
                backend.released_at(name) is not None,
            ]

        assert run_as(alice, svc.env(), ask) == {"ok": [[name, "user"], True]}
        assert run_as(carol, svc.env(), ask) == {"ok": [[name, "user"], True]}
        assert run_as(bob, svc.env(), ask) == {"ok": [None, False]}

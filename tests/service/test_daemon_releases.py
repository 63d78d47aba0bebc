"""Releases the daemon makes, as a Jupyter server (``ClaimService`` on the service backend)
reports them: each once, with the daemon's words and time."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from dra_jupyter.api import Session
from dra_jupyter.server.service import Caller, ClaimService
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import User, service, wait_for
from tests.service.test_isolation import admin_policy


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

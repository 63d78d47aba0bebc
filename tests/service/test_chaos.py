"""16 processes of two users request, keep and release at random on one service while a
controller SIGKILLs random clients, and the daemon itself, for a bounded time. Checked
throughout: no device is held twice and no user over their limit; afterwards: every claim
of a dead process is reclaimed and the ledger passes SQLite's integrity check.

Bounded in count and in time; seeded (a failure names its seed); no timing is asserted.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections import Counter

from dra_jupyter.api import Session
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.settings import Settings
from tests.service.accounts import Child, Service, User, service, wait_for
from tests.service.test_isolation import admin_policy, live, read

WORKERS = 16
LIMIT = 3  # GPUs per user
CHAOS_SECONDS = 8.0
STEPS = 400  # a worker's most operations


def work(seed: int) -> int:
    """Random operations until killed (or STEPS done); the number done."""
    rng = random.Random(seed)
    session = Session(Settings.from_env())
    held: list[str] = []
    done = 0
    for _ in range(STEPS):
        try:
            roll = rng.random()
            if roll < 0.5 or not held:
                held.append(session.backend.allocate(_claim(session, rng), checked=True).name)
            elif roll < 0.8:
                session.backend.release(held.pop(rng.randrange(len(held))))
            else:
                session.backend.touch(rng.choice(held), time.time())
            done += 1
        except DraJupyterError:
            time.sleep(0.02)  # busy, over the limit, or the daemon restarting
    return done


def _claim(session: Session, rng: random.Random) -> dict[str, object]:
    return session.build({"gpu": rng.choice((1, 1, 2))})


def check(svc: Service, users: tuple[User, User], seen: Counter[str]) -> None:
    claims = live(svc)
    devices = [d for c in claims for d in c["devices"]]
    assert len(devices) == len(set(devices)), f"a device held twice: {claims}"
    per_user = Counter(c["owner"]["user"] for c in claims for _ in c["devices"])
    for user in users:
        assert per_user[user.name] <= LIMIT, f"{user.name} over the limit: {claims}"
    seen["checks"] += 1
    seen["claims"] += len(claims)


def test_random_work_under_kill_9_of_clients_and_daemon(users: dict[str, User]) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users, f"[limits]\ngpus = {LIMIT}\n")) as svc:
        workers = [
            Child((alice, bob)[i % 2], svc.env(), functools.partial(work, seed + i))
            for i in range(WORKERS)
        ]
        seen: Counter[str] = Counter()
        try:
            end = time.monotonic() + CHAOS_SECONDS
            while time.monotonic() < end:
                time.sleep(rng.uniform(0.1, 0.4))
                check(svc, (alice, bob), seen)
                if rng.random() < 0.2:
                    svc.kill()  # SIGKILL, mid-work
                    seen["daemon kills"] += 1
                    svc.start()
                    check(svc, (alice, bob), seen)
                else:
                    rng.choice(workers).kill()  # SIGKILL (again, maybe: a no-op then)
                    seen["client kills"] += 1
        finally:
            for w in workers:
                w.kill()
        wait_for(f"every dead process's claim is reclaimed (seed {seed})", lambda: live(svc) == [])
        assert read(svc, "PRAGMA integrity_check") == [("ok",)]
        reasons = Counter(r for (r,) in read(svc, "SELECT reason FROM releases"))
        assert seen["checks"] > 0 and reasons["user"] > 0, (seed, seen, reasons)
        assert reasons["reclaimed"] > 0, (seed, seen, reasons)

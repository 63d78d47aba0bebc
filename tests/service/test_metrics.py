"""The devices' metrics, read once per machine: the daemon reads its source (here the
simulated one) and serves the same samples to every client, so N Jupyter servers do not
each read NVML; the service backend's metrics source is the daemon's."""

from __future__ import annotations

import time
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.service.client import ServiceMetrics
from dra_jupyter.settings import Settings
from tests.service.accounts import User, run_as, service
from tests.service.test_isolation import admin_policy, live
from tests.service.test_limits import detached


def metrics() -> dict[str, Any]:
    """What the service backend's metrics source gives this user."""
    source = Session(Settings.from_env()).backend.metrics_source()
    assert isinstance(source, ServiceMetrics)
    samples = source.sample((), time.time())
    return {
        "name": source.name,
        "simulated": source.simulated,
        "reads": source.reads,
        "samples": [s.to_dict() for s in samples],
    }


def test_two_users_get_the_samples_of_one_read(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    # one read serves every client for an hour: nothing here depends on how fast it runs
    policy = admin_policy(users, "metrics_max_age = 3600\n")  # in [service]
    with service(policy) as svc:
        held = run_as(  # a claim that outlives the child (as the CLI's)
            alice, svc.env(), lambda: detached().request(gpu=1, lease=600, apply_env=False).name
        )
        assert held == {"ok": f"{alice.name}-1"}, held
        first = run_as(alice, svc.env(), metrics)["ok"]
        second = run_as(bob, svc.env(), metrics)["ok"]
        assert first == second  # the same samples, the same read
        assert first["reads"] == 1  # the daemon read its source once, for both
        assert (first["name"], first["simulated"]) == ("service (simulated)", True)
        samples = {s["device"]: s for s in first["samples"]}
        assert len(samples) == 8 and all(s["simulated"] for s in samples.values())
        # what is held works (the simulated source knows, from the daemon's ledger)
        [claim] = live(svc)
        [device] = [d for d in samples if d.endswith(f"/{claim['devices'][0]}")]
        assert samples[device]["utilization"] >= 30
        assert sum(1 for s in samples.values() if s["utilization"] == 0) == 7

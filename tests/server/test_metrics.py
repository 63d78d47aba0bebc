"""GET /dra/api/metrics on a real server: simulated-labelled values, a bounded history,
filters, errors, and no activity. No timings are asserted: the tests wait for samples."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.server.conftest import Fetch, eventually, start_extensions
from tests.server.test_rest import deny_dra_config, extension, post  # noqa: F401  # fixture

LENGTH = 4


@pytest.fixture
def dra_config() -> dict[str, Any]:
    return {"check_interval": 0.2, "metrics_interval": 0.05, "metrics_history": LENGTH}


async def metrics(jp_fetch: Fetch, **params: str) -> Any:
    r = await jp_fetch("dra", "api", "metrics", params=params)
    return json.loads(r.body)


async def test_simulated_metrics_with_a_bounded_history(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    claim = json.loads((await post(jp_fetch, {"gpu": 1})).body)
    (held,) = claim["devices"]
    await start_extensions(jp_serverapp)
    app = extension(jp_serverapp)

    def full() -> bool:
        """every device has a full history"""
        return all(
            len(app.metrics.history.series(k)) == LENGTH for k in app.metrics.history.devices()
        )

    await eventually(lambda: len(app.metrics.history.devices()) == 8 and full())
    for _ in range(3):  # more samples never make a longer history
        body = await metrics(jp_fetch)
        assert {len(d["history"]["time"]) for d in body["devices"]} == {LENGTH}
    assert body["source"] == "simulated"
    assert body["simulated"] is True
    assert body["problem"] == ""
    assert (body["interval"], body["length"]) == (0.05, LENGTH)
    assert (body["idle_timeout"], body["idle_warning"]) == (3600.0, 300.0)
    devices = {d["device"]: d for d in body["devices"]}
    names = [
        d["device"] for d in json.loads((await jp_fetch("dra", "api", "devices")).body)["devices"]
    ]
    assert sorted(devices) == sorted(names)
    for key, d in devices.items():
        current = d["current"]
        assert current["memory_total"] == 143771 * 2**20
        if key == held:
            assert 30 <= current["utilization"] <= 90
        else:
            assert current["utilization"] == 0.0
        times = d["history"]["time"]
        assert times == sorted(times)

    two = await metrics(jp_fetch, history="2", device=held)
    assert [d["device"] for d in two["devices"]] == [held]
    assert len(two["devices"][0]["history"]["utilization"]) == 2
    none = await metrics(jp_fetch, history="0")
    assert {len(d["history"]["time"]) for d in none["devices"]} == {0}


async def test_current_values_without_a_history(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    """metrics_interval 0 turns the history off; the current values are read on request
    (here the extension's periodic work is not even started)."""
    body = await metrics(jp_fetch)
    assert len(body["devices"]) == 8
    assert all(d["current"] is not None for d in body["devices"])
    assert all(d["history"]["time"] == [] for d in body["devices"])


async def test_bad_history_is_400(jp_fetch: Fetch) -> None:
    r = await jp_fetch("dra", "api", "metrics", params={"history": "lots"}, raise_error=False)
    assert r.code == 400
    assert "whole number" in json.loads(r.body)["message"]


async def test_metrics_are_not_activity(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    settings = jp_serverapp.web_app.settings
    before = settings.get("api_last_activity")
    await metrics(jp_fetch)
    await metrics(jp_fetch, history="1")
    assert settings.get("api_last_activity") == before


@pytest.mark.usefixtures("deny_dra_config")
async def test_metrics_need_authorization(jp_fetch: Fetch) -> None:
    r = await jp_fetch("dra", "api", "metrics", raise_error=False)
    assert r.code == 403

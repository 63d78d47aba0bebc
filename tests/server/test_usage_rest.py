"""GET /dra/api/metrics/prometheus on a real server: the usage counters of claims made and
released over REST (a MIG instance, a whole GPU, two users) are their GPU-equivalent
seconds, read from the book's rows, and what dra.usage says of the same ledger."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dra_jupyter.api import Session
from dra_jupyter.identity import request_user
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.inventory.simulated import from_file
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.server.claims import Caller
from dra_jupyter.types import Owner
from tests.server.conftest import Fetch
from tests.server.test_rest import extension


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    objects = [*mig.h200_mig_node("n1", gpus=2), *nvidia.device_classes()]
    path.write_text(yaml.safe_dump_all(objects))
    return path


@pytest.fixture  # overrides the folder's: two MIG-capable H200s
def jp_server_config(
    ledger_path: Path, dra_config: dict[str, Any], inventory_file: Path
) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"dra_jupyter": True}},
        "DRAExtensionApp": {
            "ledger": str(ledger_path),
            "inventory": str(inventory_file),
            **dra_config,
        },
    }


def counters(text: str, name: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[sample.labels["user"]] = found.get(sample.labels["user"], 0) + sample.value
    return found


async def test_the_counters_are_the_gpu_seconds_of_the_books_rows(
    jp_fetch: Fetch, jp_serverapp: Any, ledger_path: Path, inventory_file: Path
) -> None:
    app = extension(jp_serverapp)
    me = request_user(None)
    r = await jp_fetch("dra", "api", "claims", method="POST", body=json.dumps({"mig": "1g.18gb"}))
    small = json.loads(r.body)["name"]
    whole = await app.call(app.service.create, Caller("bob"), {"gpu": 1})
    r = await jp_fetch("dra", "api", "claims", small, method="DELETE")
    assert r.code == 204
    await app.call(app.service.release, Caller("bob"), whole.name)

    r = await jp_fetch("dra", "api", "metrics", "prometheus")
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.body.decode()
    ledger = Ledger(ledger_path)
    rows = {i.claim: i for i in ledger.usage(0, 1e12)}
    assert {n: i.reason for n, i in rows.items()} == {small: "user", whole.name: "user"}
    assert rows[small].gpus == pytest.approx(16 / 140, abs=1e-6)  # its part of the GPU
    assert rows[whole.name].gpus == 1.0
    expected = {
        rows[small].user: (rows[small].end - rows[small].start) * 16 / 140,  # type: ignore[operator]
        "bob": rows[whole.name].end - rows[whole.name].start,  # type: ignore[operator]
    }
    assert rows[small].user == me
    held = counters(text, "dra_jupyter_held_gpu_seconds_total")
    assert held == pytest.approx(expected, rel=0.01)
    local = LocalBackend(from_file(inventory_file), ledger, Owner(me, socket.gethostname(), 0))
    frame = Session(backend=local).usage(since="1d").set_index("user")
    assert frame["gpu_seconds"].to_dict() == pytest.approx(held, rel=1e-6)
    unknown = counters(text, "dra_jupyter_unknown_gpu_seconds_total")
    assert unknown == pytest.approx(held)  # no sampler reported: all of it unknown
    gauges = {
        (s.labels["state"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "dra_jupyter_devices"
    }
    assert gauges.get("held", 0) == 0 and gauges["free"] > 0

    # the lab panel's: the caller's own usage, and GPU-hours per day
    r = await jp_fetch("dra", "api", "usage", params={"since": "2d"})
    usage = json.loads(r.body)
    assert usage["user"] == me
    assert usage["gpu_seconds"] == pytest.approx(expected[me], rel=0.01)
    assert usage["idle_share"] is None  # no sampler reported
    assert len(usage["daily_gpu_hours"]) == 2
    assert sum(usage["daily_gpu_hours"]) == pytest.approx(expected[me] / 3600, rel=0.01)

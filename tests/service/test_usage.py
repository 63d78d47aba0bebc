"""The usage book on the service, with real Unix users and the real daemon: claims of known
lengths (a MIG instance of alice's, a whole GPU of bob's) give their GPU-equivalent seconds
(read from the book's rows: no sleeps); an admin sees every user and a user themself; the
DataFrame, the command line's CSV and the Prometheus port (parsed with prometheus_client's
parser) say the same."""

from __future__ import annotations

import csv
import io
import urllib.request
from pathlib import Path
from typing import Any

import pandas  # noqa: F401  # imported as root: the children (the test users) use it
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import dra_jupyter.accounting.frame  # noqa: F401  # the same
from dra_jupyter.api import Session
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.settings import Settings
from tests.helpers import free_port
from tests.service.accounts import User, cli, run_as, service
from tests.service.test_isolation import admin_policy
from tests.service.test_limits import detached

MIG_GPUS = 16 / 140  # an H200's 1g.18gb: 16 GiB of its 140 GiB


def hold_and_release(spec: dict[str, Any]) -> str:
    """Make a claim (no process holds it) and release it: one closed interval."""
    claim = detached().request(lease=600, apply_env=False, **spec)
    assert claim.release()
    return claim.name


def my_usage() -> list[dict[str, Any]]:
    frame = Session(Settings.from_env()).usage(since="1d")
    return [{"user": r["user"], "gpu_seconds": r["gpu_seconds"]} for r in frame.to_dict("records")]


def my_book() -> list[dict[str, Any]]:
    book = Session(Settings.from_env()).usage_book("1d")
    return [i.to_dict() for i in book.intervals]


def test_two_users_gpu_seconds_agree_everywhere(users: dict[str, User], tmp_path: Path) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    inventory = tmp_path / "inventory.yaml"  # two MIG-capable H200s (read by the daemon)
    inventory.write_text(
        yaml.safe_dump_all([*mig.h200_mig_node("n1", gpus=2), *nvidia.device_classes()])
    )
    port = free_port()
    policy = admin_policy(users, f"prometheus_port = {port}\n")
    with service(policy, inventory=str(inventory)) as svc:
        small = run_as(alice, svc.env(), lambda: hold_and_release({"mig": "1g.18gb"}))
        whole = run_as(bob, svc.env(), lambda: hold_and_release({"gpu": 1}))
        assert "ok" in small and "ok" in whole, (small, whole)

        # the admin reads every user's intervals; their lengths are what the rows say
        book = run_as(carol, svc.env(), my_book)["ok"]
        rows = {i["claim"]: i for i in book}
        assert set(rows) == {small["ok"], whole["ok"]}
        assert rows[small["ok"]]["devices"][0]["gpus"] == pytest.approx(MIG_GPUS, abs=1e-6)
        assert (rows[small["ok"]]["user"], rows[whole["ok"]]["user"]) == (alice.name, bob.name)
        assert {i["reason"] for i in book} == {"user"}
        assert alice.name in rows[small["ok"]]["groups"]  # its primary group, first
        expected = {
            alice.name: (rows[small["ok"]]["end"] - rows[small["ok"]]["start"]) * MIG_GPUS,
            bob.name: rows[whole["ok"]]["end"] - rows[whole["ok"]]["start"],
        }

        # a user sees themself only
        mine = run_as(alice, svc.env(), my_usage)["ok"]
        assert [r["user"] for r in mine] == [alice.name]
        assert mine[0]["gpu_seconds"] == pytest.approx(expected[alice.name], rel=0.01)

        # the admin's DataFrame, CSV, and the Prometheus port agree
        every = {r["user"]: r["gpu_seconds"] for r in run_as(carol, svc.env(), my_usage)["ok"]}
        assert every == pytest.approx(expected, rel=0.01)
        out = run_as(carol, svc.env(), lambda: cli(["usage", "--since", "1d", "-o", "csv"]))
        assert out["ok"]["code"] == 0, out
        table = {
            r["user"]: float(r["gpu_seconds"])
            for r in csv.DictReader(io.StringIO(out["ok"]["out"]))
        }
        assert table == pytest.approx(every, rel=1e-9)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as answer:
            text = answer.read().decode()
        held: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "dra_jupyter_held_gpu_seconds_total":
                    user = sample.labels["user"]
                    held[user] = held.get(user, 0.0) + sample.value
        assert held == pytest.approx(expected, rel=0.01)

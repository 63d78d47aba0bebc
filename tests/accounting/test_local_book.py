"""The usage book of the embedded backend end to end: claims of known lengths (a MIG
instance, whole GPUs) on a real ledger, ended by every way a claim ends (its user, idle, a
lease, a holder gone), give the GPU-equivalent seconds they held; the DataFrame, the
command line's CSV and JSON and the Prometheus counters say the same. The clock is the
backend's, injected: no sleeps."""

from __future__ import annotations

import csv
import io
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dra_jupyter.accounting.prometheus import exposition
from dra_jupyter.api import Session
from dra_jupyter.cli.main import main
from dra_jupyter.errors import DraJupyterWarning
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.inventory.simulated import from_file
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import Owner

MIG_GPUS = 16 / 140  # an H200's 1g.18gb: 16 GiB of its 140 GiB


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    """Two H200s on one node, MIG-capable (each a whole GPU or MIG instances)."""
    path = tmp_path / "inventory.yaml"
    path.write_text(
        yaml.safe_dump_all([*mig.h200_mig_node("n1", gpus=2), *nvidia.device_classes()])
    )
    return path


def owner(user: str, pid: int = 0) -> Owner:
    return Owner(user=user, host=socket.gethostname(), pid=pid)


def gone_pid() -> int:
    """The pid of a process that has exited (a holder that is gone)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_claims_of_known_lengths_give_their_gpu_seconds_everywhere(
    tmp_path: Path, inventory_file: Path
) -> None:
    t0 = time.time() - 20_000  # in the past: the command line's window (now) covers it all
    clock = Clock(t0)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    local = LocalBackend(from_file(inventory_file), ledger, owner("alice"), clock=clock)
    alice, bob = Session(backend=local), Session(backend=local.with_owner(owner("bob")))
    small = alice.request(mig="1g.18gb", apply_env=False)  # t0 .. t0+3600, released by alice
    clock.now = t0 + 600
    whole = bob.request(gpu=1, apply_env=False)  # t0+600 .. t0+2400, released as idle
    clock.now = t0 + 1000
    leased = alice.request(mig="1g.18gb", lease=900, apply_env=False)  # ends by its lease
    gone = local.with_owner(owner("carol", gone_pid()))
    orphan = Session(backend=gone).request(mig="1g.18gb", apply_env=False)  # holder gone
    assert local.add_activity(whole.name, 1200, 600, 0, 9000)
    clock.now = t0 + 2400
    swept = local.sweep(lambda r: "idle" if r.name == whole.name else None, clock.now, ())
    assert {(r.name, why) for r, why in swept.released} == {
        (whole.name, "idle"),
        (leased.name, "expired"),
        (orphan.name, "reclaimed"),
    }
    clock.now = t0 + 3600
    assert small.release()
    book = {i.claim: i for i in local.usage_book(86400).intervals}
    assert {  # and who released it: its user by name, else dra-jupyter by a rule (None)
        n: (i.start - t0, i.end - t0 if i.end else None, i.reason, i.released_by)
        for n, i in book.items()
    } == {
        small.name: (0, 3600, "user", "alice"),
        whole.name: (600, 2400, "idle", None),
        leased.name: (1000, 2400, "expired", None),  # released when swept, after its lease
        orphan.name: (1000, 2400, "reclaimed", None),
    }
    mig_seconds = MIG_GPUS * (3600 + 1400 + 1400)
    expected = {"alice": MIG_GPUS * (3600 + 1400), "bob": 1800.0, "carol": MIG_GPUS * 1400}

    frame = alice.usage(since="1d").set_index("user")
    assert frame["gpu_seconds"].to_dict() == pytest.approx(expected, rel=0.01)
    assert frame.loc["bob", "active_gpu_seconds"] == pytest.approx(1200)
    assert frame.loc["bob", "idle_share"] == pytest.approx(1 / 3)
    assert frame.loc["bob", "energy_j"] == pytest.approx(9000)
    by_device = alice.usage(since="1d", by="device")
    assert by_device["gpu_seconds"].sum() == pytest.approx(1800 + mig_seconds, rel=0.01)

    out = io.StringIO()
    argv = ["usage", "--since", "1d", "--ledger", str(ledger.path)]
    assert main([*argv, "--inventory", str(inventory_file), "-o", "csv"], out) == 0
    rows = {r["user"]: r for r in csv.DictReader(io.StringIO(out.getvalue()))}
    assert {u: float(r["gpu_seconds"]) for u, r in rows.items()} == pytest.approx(
        expected, rel=0.01
    )
    out = io.StringIO()
    assert (
        main([*argv, "--inventory", str(inventory_file), "-o", "json", "--by", "claim"], out) == 0
    )
    claims = {r["claim"]: r for r in json.loads(out.getvalue())}
    assert claims[whole.name]["gpu_seconds"] == pytest.approx(1800)
    assert claims[small.name]["gpu_seconds"] == pytest.approx(MIG_GPUS * 3600, rel=0.01)

    text = exposition(alice.usage_snapshot).decode()
    held = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dra_jupyter_held_gpu_seconds_total":
                held[sample.labels["user"]] = sample.value
                assert sample.labels["model"] == "NVIDIA H200"
            if (
                sample.name == "dra_jupyter_active_gpu_seconds_total"
                and sample.labels["user"] == "bob"
            ):
                assert sample.value == pytest.approx(1200)
            if sample.name == "dra_jupyter_devices":
                assert sample.labels["state"] == "free"  # every claim ended
    assert held == pytest.approx(expected, rel=0.01)
    assert held == pytest.approx(frame["gpu_seconds"].to_dict(), rel=1e-9)


def test_an_open_claim_counts_up_to_now_and_activity_of_no_claim_is_refused(
    tmp_path: Path, inventory_file: Path
) -> None:
    clock = Clock(50_000.0)
    local = LocalBackend(
        from_file(inventory_file), Ledger(tmp_path / "l.sqlite"), owner("alice"), clock=clock
    )
    claim = Session(backend=local).request(gpu=2, apply_env=False)
    clock.now += 600
    (row,) = Session(backend=local).usage(since="5m").to_dict("records")
    assert row["gpu_seconds"] == pytest.approx(2 * 300)  # the last 5 minutes of 2 GPUs
    assert row["unknown_gpu_seconds"] == pytest.approx(600)  # no sampler reported
    assert not local.add_activity("nobody-1", 1, 1)
    tick = [(claim.name, 300.0, 0.0, 0.0, None), ("gone-1", 1.0, 0.0, 0.0, 1.0)]
    assert local.ledger.add_activities(tick) == [True, False]  # one transaction
    assert local.add_activity(claim.name, 300, 0, 0, None)
    (row,) = Session(backend=local).usage(since="1h").to_dict("records")
    assert (row["active_gpu_seconds"], row["energy_j"]) == pytest.approx((1200, 0))


def test_a_damaged_claim_moved_aside_ends_its_interval(
    tmp_path: Path, inventory_file: Path
) -> None:
    clock = Clock(10_000.0)
    ledger = Ledger(tmp_path / "l.sqlite")
    local = LocalBackend(from_file(inventory_file), ledger, owner("alice"), clock=clock)
    claim = Session(backend=local).request(gpu=1, apply_env=False)
    with ledger.transaction() as tx:
        tx.execute("UPDATE claims SET allocation = 'not json' WHERE name = ?", (claim.name,))
    with pytest.warns(DraJupyterWarning, match="is damaged"), ledger.transaction() as tx:
        assert Ledger.claims(tx) == []  # moved aside
    (interval,) = ledger.usage(0, 1e12)
    assert (interval.claim, interval.reason) == (claim.name, "damaged")
    assert interval.end is not None and interval.end >= interval.start


def test_the_usage_command_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    ledger = str(tmp_path / "l.sqlite")
    assert main(["usage", "--since", "1y", "--ledger", ledger], out, err) == 2
    assert err.getvalue() == (
        "error: since: '1y' is not a duration; write e.g. '90s', '5m', '1h30m' or seconds\n"
    )
    out = io.StringIO()
    assert main(["usage", "--ledger", ledger, "--inventory", "h200-8x"], out) == 0
    assert out.getvalue() == "no GPU was held in this window\n"

"""Taints an admin puts on devices by hand, in the ledger: the allocator then never hands the
device to a new claim (as kube-scheduler would with the same DeviceTaintRule), explain
names the taint, untaint puts the device back, and who and when stay recorded."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_jupyter.errors import InvalidInputError, NeverPossibleError, NotFoundError
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.model.admintaints import DEFAULT_KEY, rule_name
from tests.local.test_ledger import INVENTORY, claim, owner

GPU0 = "gpu.nvidia.com/n1/gpu-0"
ME = pwd.getpwuid(os.getuid()).pw_name


def backend(path: Path, user: str = "alice", now: float = 1000.0) -> LocalBackend:
    return LocalBackend(INVENTORY, Ledger(path), owner(user), clock=lambda: now)


def test_a_tainted_device_is_never_allocated_until_untainted(tmp_path: Path) -> None:
    admin = backend(tmp_path / "l.sqlite")
    made = admin.taint("gpu-0", "NoSchedule", "fan failing", DEFAULT_KEY)
    assert (made.device, made.key, made.effect, made.reason) == (
        GPU0,
        DEFAULT_KEY,
        "NoSchedule",
        "fan failing",
    )
    assert (made.user, made.uid, made.added) == (ME, os.getuid(), 1000.0)
    # another process of the machine (another backend on the same file) sees it
    user = backend(tmp_path / "l.sqlite", "bob")
    held = [user.allocate(claim({"gpu": 1})) for _ in range(7)]
    assert GPU0 not in {k for r in held for k in r.device_keys}
    with pytest.raises(NeverPossibleError) as never:
        user.allocate(claim({"gpu": 8}))
    assert f"{DEFAULT_KEY}=fan:NoSchedule" not in str(
        never.value
    )  # a reason with spaces is no value
    assert f"(DeviceTaintRule {rule_name(GPU0, DEFAULT_KEY)})" in str(never.value)
    for r in held:
        user.release(r.name)
    gone = admin.untaint("gpu-0", DEFAULT_KEY)
    assert (gone.removed, gone.removed_by, gone.removed_uid) == (1000.0, ME, os.getuid())
    assert len(user.allocate(claim({"gpu": 8})).device_keys) == 8


def test_noexecute_keeps_new_claims_off_and_leaves_the_holder(tmp_path: Path) -> None:
    admin = backend(tmp_path / "l.sqlite")
    holder = admin.allocate(claim({"gpu": 8}))
    admin.taint(GPU0, "NoExecute", "xid-79", "health/xid")
    assert admin.record(holder.name) is not None  # the holder keeps it: reported, not ended
    admin.release(holder.name)
    again = admin.allocate(claim({"gpu": 7}))
    assert GPU0 not in again.device_keys
    rule = admin.inventory().taint_rules[0]
    assert rule["spec"]["taint"] == {"key": "health/xid", "effect": "NoExecute", "value": "xid-79"}
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com",
        "pool": "n1",
        "device": "gpu-0",
    }


def test_an_admins_noexecute_releases_the_holder_after_the_grace_on_simulated_devices(
    tmp_path: Path,
) -> None:
    """No NVML, no health watcher: the backend itself releases the claims on a device an
    admin tainted NoExecute once the grace is over (what the Jupyter server's health check
    and the service's tick call), with words naming the device and the taint."""
    admin = backend(tmp_path / "l.sqlite")
    holder = admin.allocate(claim({"gpu": 1}))
    other = admin.allocate(claim({"gpu": 1}))
    [device] = holder.device_keys
    admin.taint(device, "NoExecute", "test", DEFAULT_KEY)  # at 1000.0
    assert admin.release_taken_out(300.0, 1299.0) == []  # time to save work
    assert admin.record(holder.name) is not None
    released = admin.release_taken_out(300.0, 1300.0)
    assert [(r.name, why) for r, why in released] == [(holder.name, "device-failed")]
    assert admin.record(holder.name) is None
    assert admin.record(other.name) is not None  # its device was not taken out
    ended = admin.ended(holder.name)
    assert ended is not None and ended.reason == "device-failed"
    assert ended.message == f"{device.rsplit('/', 1)[-1]} was taken out ({DEFAULT_KEY}: test)"


def test_noschedule_and_an_untainted_device_release_nobody(tmp_path: Path) -> None:
    admin = backend(tmp_path / "l.sqlite")
    held = admin.allocate(claim({"gpu": 2}))
    first, second = held.device_keys
    admin.taint(first, "NoSchedule", "fan", DEFAULT_KEY)
    admin.taint(second, "NoExecute", "test", DEFAULT_KEY)
    admin.untaint(second, DEFAULT_KEY)
    assert admin.release_taken_out(0.0, 10_000.0) == []
    assert admin.record(held.name) is not None


def test_the_history_keeps_who_and_when(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    backend(path, now=10.0).taint("gpu-1", "NoSchedule", "fan", DEFAULT_KEY)
    backend(path, now=20.0).untaint("gpu-1", DEFAULT_KEY)
    backend(path, now=30.0).taint("gpu-1", "NoExecute", "fan again", DEFAULT_KEY)
    live = backend(path).taints()
    assert [(t.reason, t.added, t.removed) for t in live] == [("fan again", 30.0, None)]
    every = Ledger(path).taints(history=True)
    assert [(t.reason, t.user, t.added, t.removed_by, t.removed) for t in every] == [
        ("fan", ME, 10.0, ME, 20.0),
        ("fan again", ME, 30.0, None, None),
    ]


def test_bad_input_is_refused_in_one_line(tmp_path: Path) -> None:
    admin = backend(tmp_path / "l.sqlite")
    admin.taint("gpu-0", "NoSchedule", "fan", DEFAULT_KEY)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: admin.taint("gpu-0", "NoSchedule", "again", DEFAULT_KEY), "has the taint"),
        (lambda: admin.taint("gpu-0", "None", "x", DEFAULT_KEY), "is not NoSchedule or NoExecute"),
        (lambda: admin.taint("gpu-1", "NoSchedule", " ", DEFAULT_KEY), "--reason is empty"),
        (lambda: admin.taint("gpu-1", "NoSchedule", "x", "Bad Key!"), "--key 'Bad Key!'"),
        (lambda: admin.taint("gpu-99", "NoSchedule", "x", DEFAULT_KEY), "'gpu-99' is not a device"),
    ]
    for call, words in cases:
        with pytest.raises(InvalidInputError) as bad:
            call()
        assert words in str(bad.value) and "\n" not in str(bad.value)
    with pytest.raises(NotFoundError, match="gpu-1 has no taint"):
        admin.untaint("gpu-1", DEFAULT_KEY)
    assert [t.reason for t in admin.taints()] == ["fan"]  # nothing else was written

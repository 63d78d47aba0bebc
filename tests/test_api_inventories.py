"""The Python API on every bundled simulated inventory, as a notebook user meets it.

For each inventory of :func:`dra_jupyter.inventory.simulated.names`, through
``Session(Settings(ledger=..., inventory=name))``: the device table, one device of the
inventory's kind with the environment its runtime reads, ``gpu="all"``, the one-line hints
for requests that can never be met, waiting (``timeout``) and leases. Then MIG on
``h200-mig``, the module-level API (``dra.configure``, ``dra.request(apply_env=True)``), and
:func:`resolve_inventory`.

Nothing here sleeps on purpose except the bounded waits for a lease to run out.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import dra_jupyter as dra
from dra_jupyter import api
from dra_jupyter.api import Claim, Session
from dra_jupyter.errors import (
    AllocationError,
    ClaimNotFoundError,
    DraJupyterError,
    DraJupyterWarning,
    InvalidInputError,
    NeverPossibleError,
)
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.resolve import DEFAULT_SIMULATED, resolve_inventory
from dra_jupyter.kernel.environment import ProcessEnvironment
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.settings import Settings
from dra_jupyter.tables import DeviceRow
from dra_jupyter.types import Waiting
from tests.helpers import local

Wire = dict[str, Any]

NAMES = simulated.names()
VISIBLE = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
)
SENTINEL = "untouched"
POLL = 0.02  # seconds between attempts while a request waits
LEASE_WAIT = 5.0  # the longest a test waits for a lease to run out


@dataclass(frozen=True)
class Expect:
    """What a user gets on one bundled inventory."""

    kind: str  # the request keyword for one device: gpu, tpu or mig
    value: int | str  # its value: 1, or a MIG profile
    full: str  # the keyword of whole devices (gpu or tpu)
    fulls: int  # how many whole devices there are
    model: str  # the model the device table shows
    env: str  # the variable that names the device to its runtime ("" for none)


EXPECT = {
    "h200-8x": Expect("gpu", 1, "gpu", 8, "NVIDIA H200", "CUDA_VISIBLE_DEVICES"),
    "h100-8x": Expect("gpu", 1, "gpu", 8, "NVIDIA H100 80GB HBM3", "CUDA_VISIBLE_DEVICES"),
    "h200-mig": Expect("mig", "3g.71gb", "gpu", 1, "NVIDIA H200", ""),
    "h200-shared": Expect("gpu", 1, "gpu", 8, "NVIDIA H200", "CUDA_VISIBLE_DEVICES"),
    "workstation-4gpu": Expect(
        "gpu", 1, "gpu", 4, "NVIDIA RTX 6000 Ada Generation", "CUDA_VISIBLE_DEVICES"
    ),
    "tpu-v5e-8": Expect("tpu", 1, "tpu", 8, "v5litepod", "TPU_VISIBLE_CHIPS"),
    "mi300x-8": Expect("gpu", 1, "gpu", 8, "AMD_Instinct_MI300X_OAM", "ROCR_VISIBLE_DEVICES"),
}


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No setting, ledger, default session or device variable of the machine leaks in or out."""
    for name in (
        "DRA_JUPYTER_LEDGER",
        "DRA_JUPYTER_INVENTORY",
        "DRA_JUPYTER_STRATEGY",
        "DRA_JUPYTER_POLL_INTERVAL",
        "DRA_JUPYTER_KERNEL_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name in VISIBLE:  # recorded, so that monkeypatch restores them whatever a test sets
        monkeypatch.setenv(name, SENTINEL)
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: None)
    monkeypatch.setattr(api._Default, "session", None)
    # the process's device environment starts empty for each test (a claim a test leaves
    # held would name its devices in the next test's environment)
    monkeypatch.setattr(ProcessEnvironment, "_process", None)


def make_session(tmp_path: Path, inventory: str) -> Session:
    return Session(Settings(ledger=tmp_path / "l.sqlite", inventory=inventory, poll_interval=POLL))


@pytest.fixture(params=NAMES)
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    s = make_session(tmp_path, request.param)
    yield s
    s.release_all()


def expect(session: Session) -> Expect:
    return EXPECT[session.inventory.name]


def one(session: Session, **extra: Any) -> Claim:
    e = expect(session)
    return session.request(apply_env=False, **kw(e.kind, e.value), **extra)


def kw(keyword: str, value: Any) -> dict[str, Any]:
    """``{keyword: value}``, to pass as ``**kw(...)`` next to typed keywords."""
    return {keyword: value}


def every_device(session: Session) -> dict[str, Wire]:
    """driver/pool/device → the device as its ResourceSlice publishes it."""
    return {
        f"{s['spec']['driver']}/{s['spec']['pool']['name']}/{d['name']}": d
        for s in session.inventory.slices
        for d in s["spec"].get("devices") or ()
    }


def attr(device: Mapping[str, Any], name: str) -> Any:
    value = device.get("attributes", {}).get(name)
    return next(iter(value.values())) if value else None


def states(session: Session) -> dict[str, DeviceRow]:
    return {row.device: row for row in session.devices()}


def full_devices(session: Session) -> list[str]:
    """The whole GPUs or TPU chips of the inventory (not MIG partitions)."""
    return [
        name
        for name, d in every_device(session).items()
        if attr(d, "type") in ("gpu", "amdgpu") or name.startswith("tpu.google.com/")
    ]


def wait_until(condition: Callable[[], bool], limit: float = LEASE_WAIT) -> bool:
    """Poll ``condition`` until it holds or ``limit`` seconds pass (bounded in count too)."""
    deadline = time.monotonic() + limit
    for _ in range(int(limit / 0.02) + 1):
        if condition():
            return True
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return condition()


def one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message, message
    return message


# --- every inventory -------------------------------------------------------------------------


def test_every_bundled_inventory_has_expectations() -> None:
    assert sorted(EXPECT) == sorted(NAMES)


def test_devices_lists_every_device_and_says_simulated(session: Session) -> None:
    table = session.devices()
    devices = every_device(session)
    assert [row.device for row in table] == list(devices)
    assert "SIMULATED" in table.title
    assert str(table).splitlines()[0] == table.title
    assert "SIMULATED" in table._repr_html_()
    assert {row.state for row in table} == {"free"}
    assert {row.holder for row in table} == {""}
    assert expect(session).model in {row.model for row in table}
    assert set(session.inventory.nodes) == {row.node for row in table}
    assert len(full_devices(session)) == expect(session).fulls


def test_one_device_its_environment_and_release(session: Session) -> None:
    e = expect(session)
    claim = one(session)
    [row] = claim.devices
    device = every_device(session)[row.device]
    if e.kind == "mig":
        assert attr(device, "profile") == e.value
        assert row.kind == "mig"
        # a partition not created yet has no UUID; a simulated one gets a stand-in
        ident = claim.env["CUDA_VISIBLE_DEVICES"]
        assert re.fullmatch(r"MIG-[0-9a-f-]{36}", ident)
        assert claim.env == {"CUDA_VISIBLE_DEVICES": ident, "NVIDIA_VISIBLE_DEVICES": ident}
    elif row.device.startswith("gpu.nvidia.com/"):
        uuid = attr(device, "uuid")
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", uuid)
        assert claim.env == {"CUDA_VISIBLE_DEVICES": uuid, "NVIDIA_VISIBLE_DEVICES": uuid}
    elif row.device.startswith("gpu.amd.com/"):
        card = str(attr(device, "cardIndex"))
        assert claim.env == {"ROCR_VISIBLE_DEVICES": card, "HIP_VISIBLE_DEVICES": card}
    else:
        assert row.device.startswith("tpu.google.com/")
        assert claim.env == {"TPU_VISIBLE_CHIPS": str(attr(device, "index"))}
    assert (e.env in claim.env) == bool(e.env)

    shown = states(session)[row.device]
    assert shown.state == ("shared" if device.get("allowMultipleAllocations") else "held")
    assert shown.holder == f"{claim.name} ({session.owner.user})"
    assert [r.claim for r in session.claims()] == [claim.name]
    assert claim.state == "allocated"

    assert claim.release()
    assert claim.state == "released"
    assert {r.state for r in session.devices()} == {"free"}
    assert len(session.claims()) == 0
    with pytest.raises(ClaimNotFoundError, match=f"^no claim {claim.name} "):
        session.release(claim.name)


def test_shared_gpus_take_claims_by_memory_and_by_share(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-shared")
    model = "NVIDIA H200"
    first = session.request(apply_env=False, share="60Gi", model=model)
    second = session.request(apply_env=False, share="60Gi")
    [a], [b] = first.devices, second.devices
    assert a.device == b.device  # packed onto one GPU, not spread over two
    assert first.env == second.env
    assert states(session)[a.device].state == "shared"
    assert states(session)[a.device].holder == (
        f"{first.name} ({session.owner.user}), {second.name} ({session.owner.user})"
    )
    third = session.request(apply_env=False, share="60Gi")  # 120Gi of 140Gi are taken
    assert third.devices[0].device != a.device
    smalls = [session.request(apply_env=False, share="1Gi") for _ in range(2)]
    # the GPU of the first two takes two more claims, then its 4 shares are gone
    assert [s.devices[0].device for s in smalls] == [a.device, a.device]
    fifth = session.request(apply_env=False, share="1Gi")
    assert fifth.devices[0].device != a.device
    whole = session.request(apply_env=False, gpu=6)  # a plain request takes all the memory
    assert {r.device for r in whole.devices}.isdisjoint({a.device, third.devices[0].device})
    with pytest.raises(AllocationError, match="busy"):
        session.request(apply_env=False, gpu=1)
    session.release_all()
    assert {r.state for r in session.devices()} == {"free"}


def test_release_by_name_and_release_all(session: Session) -> None:
    first, second = one(session, name="first"), one(session, name="second")
    assert {r.claim for r in session.claims()} == {"first", "second"}
    assert session.release("first")
    assert [r.claim for r in session.claims()] == ["second"]
    assert session.release_all() == ["second"]
    assert {r.state for r in session.devices()} == {"free"}
    assert first.state == second.state == "released"


def test_all_takes_every_whole_device(session: Session) -> None:
    e = expect(session)
    claim = session.request(apply_env=False, **kw(e.full, "all"))
    held = sorted(r.device for r in claim.devices)
    assert held == sorted(full_devices(session))
    assert len(held) == e.fulls
    if e.env or e.kind == "mig":
        name = e.env or "CUDA_VISIBLE_DEVICES"
        assert len(claim.env[name].split(",")) == e.fulls
    with pytest.raises(AllocationError, match="busy"):
        session.request(apply_env=False, **kw(e.full, 1))
    claim.release()
    assert len(session.request(apply_env=False, **kw(e.full, 1)).devices) == 1


def test_nvidia_uuids_match_the_devices(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h100-8x")
    claim = session.request(gpu=3, apply_env=False)
    devices = every_device(session)
    uuids = [attr(devices[r.device], "uuid") for r in claim.devices]
    assert sorted(claim.env["CUDA_VISIBLE_DEVICES"].split(",")) == sorted(uuids)
    assert claim.env["NVIDIA_VISIBLE_DEVICES"] == claim.env["CUDA_VISIBLE_DEVICES"]


# --- requests that can never be met: one line in the user's terms ----------------------------


def impossible(session: Session, **spec: Any) -> str:
    with pytest.raises(AllocationError) as caught:
        session.request(apply_env=False, **spec)
    return one_line(caught.value)


def test_unknown_model_lists_the_models(session: Session) -> None:
    e = expect(session)
    message = impossible(session, **kw(e.full, 1), model="NoSuchModel")
    assert "no device of model 'NoSuchModel'" in message
    assert f"the models are {e.model} ({e.fulls})" in message


@pytest.mark.parametrize("name", [n for n in NAMES if EXPECT[n].full == "gpu"])
def test_too_much_memory_names_the_largest(tmp_path: Path, name: str) -> None:
    session = make_session(tmp_path, name)
    message = impossible(session, gpu=1, memory="100Ti")
    found = re.fullmatch(
        r"dra\.request: no device with memory >= 100Ti; the largest is (\S+) \((\S+)\)", message
    )
    assert found, message
    memory = {
        n.rsplit("/", 1)[1]: Quantity.parse(d["capacity"]["memory"]["value"])
        for n, d in every_device(session).items()
        if n in full_devices(session)
    }
    assert memory[found[2].rsplit("/", 1)[1]] == max(memory.values())


@pytest.mark.parametrize("name", [n for n in NAMES if EXPECT[n].full == "gpu"])
def test_largest_memory_shown_is_below_what_was_asked(tmp_path: Path, name: str) -> None:
    """Asking for just more than the largest device has must not read as a contradiction
    (``no device with memory >= 48Gi; the largest is 48.0Gi``)."""
    session = make_session(tmp_path, name)
    largest = max(
        Quantity.parse(d["capacity"]["memory"]["value"]).value
        for d in every_device(session).values()
        if "memory" in (d.get("capacity") or {})
    )
    asked = f"{int(largest / 2**20) + 1}Mi"  # 1Mi more than the largest device has
    message = impossible(session, gpu=1, memory=asked)
    found = re.search(r"the largest is (\S+) ", message)
    assert found, message
    shown = Quantity.parse(found[1]).value
    assert shown < Quantity.parse(asked).value, message


def test_workstation_48gi_is_not_said_to_be_available(tmp_path: Path) -> None:
    session = make_session(tmp_path, "workstation-4gpu")  # RTX 6000 Ada: 49140Mi < 48Gi
    message = impossible(session, gpu=1, memory="48Gi")
    assert "no device with memory >= 48Gi" in message
    assert "the largest is 48.0Gi" not in message, message


def test_more_devices_than_exist(session: Session) -> None:
    e = expect(session)
    message = impossible(session, **kw(e.full, e.fulls + 1))
    assert f"asks for {e.fulls + 1} {e.full.upper()} devices" in message
    assert f"has {e.fulls}" in message


def test_unknown_mig_profile_lists_the_profiles(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-mig")
    message = impossible(session, mig="9g.999gb")
    assert "no MIG profile '9g.999gb'" in message
    profiles = Counter(
        attr(d, "profile") for d in every_device(session).values() if attr(d, "type") == "mig"
    )
    for profile, n in profiles.items():
        assert f"{profile} ({n})" in message
    assert "3g.71gb (2)" in message


def test_more_mig_slices_than_exist(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-mig")
    with pytest.raises(AllocationError):
        session.request(mig="7g.141gb", count=2, apply_env=False)


ABSENT_KINDS = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in NAMES
    for kind in ("gpu", "tpu", "mig")
    if not (
        kind == EXPECT[name].kind
        or kind == EXPECT[name].full
        or (kind == "gpu" and EXPECT[name].full == "gpu")
    )
]


@pytest.mark.parametrize(("name", "kind"), ABSENT_KINDS)
def test_kind_the_machine_lacks(tmp_path: Path, name: str, kind: str) -> None:
    """``tpu=1`` on a GPU machine (or ``gpu=1`` on a TPU host) can never be met: a one-line
    AllocationError (exit code 1 in the CLI) that says so, not a schema error."""
    session = make_session(tmp_path, name)
    value = "1g.18gb" if kind == "mig" else 1
    message = impossible(session, **kw(kind, value))
    assert f"no {kind.upper()} devices on" in message, message


# --- waiting and leases ----------------------------------------------------------------------


def test_timeout_waits_then_says_busy(session: Session) -> None:
    """A fake clock that the backend's sleep advances: the wait is exact and takes no time."""
    now = [1_000_000.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    local(session).clock = lambda: now[0]
    local(session).sleep = sleep
    local(session).poll_interval = 30.0
    e = expect(session)
    everything = session.request(apply_env=False, **kw(e.full, "all"))
    waits: list[Waiting] = []
    with pytest.raises(AllocationError) as caught:
        session.request(apply_env=False, timeout="5m", on_wait=waits.append, **kw(e.kind, e.value))
    message = str(caught.value)
    assert message.startswith("the devices are busy after waiting 300s;"), message
    assert everything.name in message  # who holds the devices
    assert [w.waited for w in waits] == [30.0 * k for k in range(10)]
    assert {(w.position, w.timeout) for w in waits} == {(1, 300.0)}
    # the request left the queue: the next one of its shape is first in line
    everything.release()
    assert len(session.request(apply_env=False, **kw(e.kind, e.value)).devices) == 1


def test_timeout_waits_in_real_time(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-8x")
    session.request(gpu="all", apply_env=False)
    with pytest.raises(AllocationError, match="busy"):
        session.request(gpu=1, timeout=0.1, apply_env=False)


def test_timeout_zero_fails_at_once(session: Session) -> None:
    e = expect(session)
    session.request(apply_env=False, **kw(e.full, "all"))
    waits: list[Waiting] = []
    with pytest.raises(AllocationError, match="busy"):
        session.request(apply_env=False, on_wait=waits.append, **kw(e.kind, e.value))
    assert waits == []


def test_bad_timeout_and_lease(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-8x")
    with pytest.raises(InvalidInputError, match="timeout"):
        session.request(gpu=1, timeout="soon", apply_env=False)
    with pytest.raises(InvalidInputError, match="lease"):
        session.request(gpu=1, lease="-5m", apply_env=False)
    assert len(session.claims()) == 0


def test_claims_show_the_lease(session: Session) -> None:
    leased = one(session, lease="1h")
    [row] = session.claims()
    assert row.claim == leased.name
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row.lease_expires)
    leased.release()
    unleased = one(session)
    assert [r.lease_expires for r in session.claims()] == [""]
    unleased.release()


def test_lease_expiry_releases(session: Session) -> None:
    claim = one(session, lease=0.2)
    assert wait_until(lambda: len(session.claims()) == 0), "the lease did not end the claim"
    assert claim.state == "released"
    assert {r.state for r in session.devices()} == {"free"}


def test_a_waiting_request_gets_the_devices_when_a_lease_ends(tmp_path: Path) -> None:
    session = make_session(tmp_path, "workstation-4gpu")
    session.request(gpu="all", lease=0.2, apply_env=False)
    claim = session.request(gpu=4, timeout=LEASE_WAIT, apply_env=False)
    assert len(claim.devices) == 4


# --- MIG on h200-mig -------------------------------------------------------------------------


@pytest.fixture
def mig(tmp_path: Path) -> Iterator[Session]:
    s = make_session(tmp_path, "h200-mig")
    yield s
    s.release_all()


def gpu_row(session: Session) -> DeviceRow:
    [row] = [r for r in session.devices().rows if r.kind == "gpu"]
    return row


def test_two_3g_slices_fit_and_a_third_is_busy(mig: Session) -> None:
    a = mig.request(mig="3g.71gb", apply_env=False)
    b = mig.request(mig="3g.71gb", apply_env=False)
    assert len({r.device for r in (*a.devices, *b.devices)}) == 2
    with pytest.raises(AllocationError) as caught:
        mig.request(mig="3g.71gb", apply_env=False)
    message = str(caught.value)
    assert "busy" in message
    assert a.name in message
    assert b.name in message
    a.release()
    assert len(mig.request(mig="3g.71gb", apply_env=False).devices) == 1


def test_a_held_slice_blocks_the_full_gpu(mig: Session) -> None:
    assert gpu_row(mig).state == "free"
    part = mig.request(mig="1g.18gb", apply_env=False)
    shown = states(mig)
    assert gpu_row(mig).state == "blocked"
    assert gpu_row(mig).holder == ""
    [held] = [r for r in shown.values() if r.state == "held"]
    assert held.mig_profile == "1g.18gb"
    assert held.holder == f"{part.name} ({mig.owner.user})"
    with pytest.raises(AllocationError) as caught:
        mig.request(gpu=1, apply_env=False)
    assert "busy" in str(caught.value)
    assert part.name in str(caught.value)
    part.release()
    assert gpu_row(mig).state == "free"
    whole = mig.request(gpu=1, apply_env=False)
    assert gpu_row(mig).state == "held"
    assert {r.state for r in mig.devices() if r.kind == "mig"} == {"blocked"}
    with pytest.raises(AllocationError, match="busy"):
        mig.request(mig="1g.18gb", apply_env=False)
    whole.release()


def test_full_gpu_of_the_mig_inventory_has_its_uuid(mig: Session) -> None:
    claim = mig.request(gpu=1, apply_env=False)
    [row] = claim.devices
    uuid = attr(every_device(mig)[row.device], "uuid")
    assert claim.env["CUDA_VISIBLE_DEVICES"] == uuid


# --- the module-level API: configure and apply_env -------------------------------------------


def test_configure_switches_the_default_session(tmp_path: Path) -> None:
    first = dra.configure(inventory="tpu-v5e-8", ledger=str(tmp_path / "a.sqlite"))
    assert api.default_session() is first
    assert "TPU v5e" in dra.devices().title
    claim = dra.request(tpu=2, apply_env=False)
    assert [r.claim for r in dra.claims()] == [claim.name]
    assert (tmp_path / "a.sqlite").exists()

    second = dra.configure(inventory="mi300x-8", ledger=str(tmp_path / "b.sqlite"))
    assert api.default_session() is second
    assert "MI300X" in dra.devices().title
    assert len(dra.claims()) == 0  # another ledger
    assert dra.request(gpu=1, apply_env=False).env["ROCR_VISIBLE_DEVICES"] == "0"
    assert dra.release_all() != []

    dra.configure(inventory="tpu-v5e-8", ledger=str(tmp_path / "a.sqlite"))
    assert dra.claim(claim.name).name == claim.name  # claims stay in their ledger
    assert dra.release(claim.name)


def test_configure_accepts_a_path_and_an_inventory_object(tmp_path: Path) -> None:
    dra.configure(inventory=simulated.load("h100-8x"), ledger=tmp_path / "p.sqlite")
    assert "H100" in dra.devices().title
    assert (tmp_path / "p.sqlite").exists()


def test_configure_rejects_an_unknown_strategy(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="strategy 'fastest'"):
        dra.configure(strategy="fastest", ledger=str(tmp_path / "l.sqlite"))


def test_configure_with_an_unknown_inventory_fails_on_first_use(tmp_path: Path) -> None:
    dra.configure(inventory="nope", ledger=str(tmp_path / "l.sqlite"))
    with pytest.raises(InvalidInputError, match="inventory 'nope' is not known"):
        dra.devices()


def test_apply_env_sets_the_process_environment(tmp_path: Path) -> None:
    dra.configure(inventory="h200-8x", ledger=str(tmp_path / "l.sqlite"))
    claim = dra.request(gpu=2)  # apply_env=True is the default
    assert claim.notes == []
    for name, value in claim.env.items():
        assert os.environ[name] == value
    assert os.environ["CUDA_VISIBLE_DEVICES"].count("GPU-") == 2
    assert os.environ["ROCR_VISIBLE_DEVICES"] == SENTINEL  # only the vendor's variables


@pytest.mark.parametrize(
    ("name", "spec", "variable", "value"),
    [
        ("mi300x-8", {"gpu": 2}, "HIP_VISIBLE_DEVICES", "0,1"),
        ("tpu-v5e-8", {"tpu": 4}, "TPU_VISIBLE_CHIPS", "0,1,2,3"),
    ],
)
def test_apply_env_per_vendor(
    tmp_path: Path, name: str, spec: Wire, variable: str, value: str
) -> None:
    dra.configure(inventory=name, ledger=str(tmp_path / "l.sqlite"))
    claim = dra.request(apply_env=True, **spec)
    assert sorted(os.environ[variable].split(",")) == sorted(value.split(","))
    assert os.environ[variable] == claim.env[variable]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL


def test_a_simulated_mig_claim_has_an_environment(tmp_path: Path) -> None:
    dra.configure(inventory="h200-mig", ledger=str(tmp_path / "l.sqlite"))
    claim = dra.request(mig="3g.71gb", apply_env=True)  # filterwarnings=error: no warning
    assert claim.notes == []
    assert claim.env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == claim.env["CUDA_VISIBLE_DEVICES"]


def test_apply_env_warning_points_at_the_users_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook shows the warning's file and line: it must be the user's cell, not
    dra_jupyter/__init__.py (which ``dra.request`` passes through)."""
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: "libcuda.so")
    dra.configure(inventory="h200-8x", ledger=str(tmp_path / "l.sqlite"))
    with pytest.warns(DraJupyterWarning) as caught:
        dra.request(gpu=1)
    assert [w.filename for w in caught] == [__file__]


def test_apply_env_warns_when_cuda_is_already_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: "libcuda.so")
    dra.configure(inventory="h200-8x", ledger=str(tmp_path / "l.sqlite"))
    with pytest.warns(DraJupyterWarning, match="libcuda.so is already loaded"):
        claim = dra.request(gpu=1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == claim.env["CUDA_VISIBLE_DEVICES"]


def test_no_warning_without_apply_env(tmp_path: Path) -> None:
    dra.configure(inventory="h200-mig", ledger=str(tmp_path / "l.sqlite"))
    claim = dra.request(mig="3g.71gb", apply_env=False)  # filterwarnings=error: none may come
    assert claim.notes == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL


def test_the_warning_class_is_part_of_the_package_api() -> None:
    """``warnings.filterwarnings("ignore", category=dra.DraJupyterWarning)`` must work."""
    assert getattr(dra, "DraJupyterWarning", None) is DraJupyterWarning
    assert issubclass(DraJupyterWarning, UserWarning)


# --- choosing the inventory ------------------------------------------------------------------


def nvml_present() -> bool:
    return ctypes.util.find_library("nvidia-ml") is not None or any(
        Path(p).exists()
        for p in ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1")
    )


def test_auto_without_an_nvidia_driver_is_the_simulated_default() -> None:
    if nvml_present():
        pytest.skip("this machine has an NVIDIA driver: auto reads the real GPUs")
    inventory = resolve_inventory("auto")
    assert inventory.name == DEFAULT_SIMULATED == NAMES[0]
    assert inventory.simulated
    assert inventory.source == f"simulated:{DEFAULT_SIMULATED}"
    [note] = inventory.warnings
    assert note.startswith("no GPUs found through NVML")
    assert "libnvidia-ml" in note


def test_nvml_without_an_nvidia_driver_is_a_clear_error() -> None:
    if nvml_present():
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(DraJupyterError) as caught:
        resolve_inventory("nvml")
    assert "NVML" in one_line(caught.value)


def test_unknown_inventory_lists_the_choices() -> None:
    with pytest.raises(InvalidInputError) as caught:
        resolve_inventory("nope")
    message = one_line(caught.value)
    assert "'nope'" in message
    for choice in ("auto", "nvml", *NAMES):
        assert choice in message


@pytest.mark.parametrize("name", NAMES)
def test_bundled_name_resolves(name: str) -> None:
    inventory = resolve_inventory(name)
    assert inventory.name == name
    assert inventory.simulated
    assert inventory.warnings == ()


def test_yaml_file_of_slices(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(yaml.safe_dump_all(list(simulated.load("mi300x-8").slices)), encoding="utf-8")
    inventory = resolve_inventory(str(path))
    assert inventory.simulated
    assert inventory.source == f"file:{path}"
    assert [c["metadata"]["name"] for c in inventory.device_classes] == ["gpu.amd.com"]
    session = make_session(tmp_path, str(path))
    assert "SIMULATED" in session.devices().title
    assert str(path) in session.devices().title
    assert len(session.devices()) == 8
    claim = session.request(gpu=2, same="numaNode", apply_env=False)
    assert len(claim.env["ROCR_VISIBLE_DEVICES"].split(",")) == 2


def test_yaml_file_with_classes(tmp_path: Path) -> None:
    source = simulated.load("h200-mig")
    path = tmp_path / "mig.yml"
    path.write_text(yaml.safe_dump_all([*source.device_classes, *source.slices]), encoding="utf-8")
    session = make_session(tmp_path, str(path))
    assert len(session.request(mig="3g.71gb", count=2, apply_env=False).devices) == 2


def test_missing_yaml_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        resolve_inventory(str(tmp_path / "missing.yaml"))
    message = one_line(caught.value)
    assert "missing.yaml" in message
    assert "cannot read" in message


ARCHITECTURE = 'device.attributes["gpu.nvidia.com"].architecture == '


def test_a_selector_with_a_value_in_the_wrong_case_gets_the_right_one(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-8x")
    with pytest.raises(NeverPossibleError) as caught:
        session.request(gpu=1, selector=ARCHITECTURE + '"hopper"', apply_env=False)
    assert str(caught.value) == (
        'dra.request: no device has architecture == "hopper": CEL compares strings exactly, '
        'and the value here is "Hopper"; write architecture == "Hopper"'
    )
    with pytest.raises(NeverPossibleError, match=r'the values here are "Hopper" \(8\)$'):
        session.request(gpu=1, selector=ARCHITECTURE + "'Ampere'", apply_env=False)
    claim = session.request(gpu=1, selector=ARCHITECTURE + '"Hopper"', apply_env=False)
    assert claim.state == "allocated"


# --- explain in the user's words (issue 14, item 12) -----------------------------------------


def test_a_held_slice_is_named_as_the_part_of_the_gpu_it_takes(mig: Session) -> None:
    """Not ``shared counters ... used up: gpu-0-counter-set (memory-slice-6, ..., +3 more)``."""
    part = mig.request(mig="1g.18gb", apply_env=False)
    with pytest.raises(AllocationError) as caught:
        mig.request(gpu=1, apply_env=False)
    message = str(caught.value)
    assert (
        "request gpu: the free GPU is blocked by partitions in use, 1 needed: the memory slices "
        f"and other parts of gpu-0 are taken by claim {part.name}\n"
    ) in message, message
    assert "counter" not in message, message
    assert "+" not in message, message
    part.release()
    whole = mig.request(gpu=1, apply_env=False)
    with pytest.raises(AllocationError) as caught:
        mig.request(mig="3g.71gb", apply_env=False)
    assert f"gpu-0 is taken whole by claim {whole.name}" in str(caught.value)


def test_a_mig_profile_too_few_of_names_the_keyword(mig: Session) -> None:
    """Not ``selector #0 ("device.attributes['gpu.nvidia.com'].profile == ...") rejects 23``."""
    with pytest.raises(NeverPossibleError) as caught:
        mig.request(mig="3g.71gb", count=3, apply_env=False)
    message = str(caught.value)
    assert (
        'request mig: mig="3g.71gb" matches only 2 of the 25 MIG devices (the others are '
        "1g.18gb (7), 1g.18gb+me (7), 1g.35gb (4), 2g.35gb (3) and 2 more), 3 needed"
    ) in message, message
    assert "selector #" not in message and "rejects" not in message, message


def test_explain_names_the_model_and_what_the_gpus_are(tmp_path: Path) -> None:
    from dra_jupyter.api.verdict import explain_request  # noqa: PLC0415

    session = make_session(tmp_path, "h200-8x")
    lines = str(explain_request(session, {"gpu": 1, "model": "H100"})).splitlines()
    assert lines[1] == (
        "node gpu-node-1: request gpu: "
        'model="h100" matches none of the 8 GPUs (they are NVIDIA H200), 1 needed'
    )
    selector = ARCHITECTURE + '"Blackwell"'
    lines = str(explain_request(session, {"gpu": 1, "selector": selector})).splitlines()
    assert lines[1].endswith(
        'request gpu: selector architecture == "Blackwell" matches none of the 8 GPUs '
        "(they are Hopper), 1 needed"
    )


def test_a_share_that_is_too_big_says_what_is_left(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-shared")
    session.request(gpu=8, share="100Gi", apply_env=False)
    with pytest.raises(AllocationError) as caught:
        session.request(gpu=1, share="60Gi", apply_env=False)
    assert (
        "request gpu: 0 of the 8 GPUs not held by others have memory >= 60Gi left to share, "
        "1 needed; the most left is 40.4Gi of memory (gpu-0)\n"
    ) in str(caught.value)
    session.release_all()


def test_same_that_cannot_hold_names_the_keyword(tmp_path: Path) -> None:
    session = make_session(tmp_path, "h200-8x")
    with pytest.raises(NeverPossibleError) as caught:
        session.request(gpu=3, same="pcieRoot", apply_env=False)
    assert (
        'node gpu-node-1: same="pcieRoot" (matchAttribute '
        "resource.kubernetes.io/pcieRoot): at most 2 of the devices that could be used have "
        "the same pcieRoot (pci0000:15), 3 needed"
    ) in str(caught.value)

"""The Python API on the local backend: ``Session.request`` and ``Claim``, tables, YAML, and
one clear message for each kind of bad input."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dra_jupyter import api
from dra_jupyter.api import Claim, Session
from dra_jupyter.errors import (
    AllocationError,
    ClaimNotFoundError,
    DraJupyterWarning,
    ForbiddenError,
    InvalidInputError,
    SelectorError,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kernel.environment import ProcessEnvironment
from dra_jupyter.settings import Settings
from dra_jupyter.tables import ClaimRow, DeviceRow
from dra_jupyter.types import Owner, claim_prefix
from tests.helpers import local
from tests.local.worker import gpu_inventory, partitionable_inventory

Wire = dict[str, Any]
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
SENTINEL = "untouched"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests write os.environ: give them variables that monkeypatch restores afterwards,
    and a process without CUDA loaded, whatever the machine."""
    for name in ENV_NAMES:
        monkeypatch.setenv(name, SENTINEL)
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: None)
    # the process's device environment starts empty for each test (a claim a test leaves
    # held would name its devices in the next test's environment)
    monkeypatch.setattr(ProcessEnvironment, "_process", None)


def make_session(tmp_path: Path, inventory: Inventory, user: str | None = None) -> Session:
    owner = None
    if user is not None:
        me = Owner.current()
        owner = dataclasses.replace(me, user=user)
    return Session(Settings(ledger=tmp_path / "ledger.sqlite"), inventory=inventory, owner=owner)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = make_session(tmp_path, gpu_inventory())
    yield s
    s.release_all()


@pytest.fixture
def mig_session(tmp_path: Path) -> Iterator[Session]:
    s = make_session(tmp_path, partitionable_inventory())
    yield s
    s.release_all()


def results(claim: Claim) -> list[Wire]:
    found: list[Wire] = claim.allocation["devices"]["results"]
    return found


def uuids(session: Session, claim: Claim) -> list[str]:
    """The GPU UUIDs of a claim's devices, in the order of its allocation results."""
    by_name = {
        d["name"]: d["attributes"]["uuid"]["string"]
        for s in session.inventory.slices
        for d in s["spec"].get("devices", [])
        if "uuid" in d["attributes"]
    }
    return [by_name[r["device"]] for r in results(claim)]


def validate(obj: Wire) -> str:
    with warnings.catch_warnings():
        # kubernetes-validate and its jsonschema stack may deprecate their own APIs; only
        # those are silenced, everything else stays an error
        warnings.filterwarnings(
            "ignore",
            category=DeprecationWarning,
            module=r"(kubernetes_validate|jsonschema|referencing)(\.|$)",
        )
        return str(kubernetes_validate.validate(obj, "1.36.0", strict=True))


# --- request, release, context manager --------------------------------------------------------


def test_request_and_release(session: Session) -> None:
    claim = session.request(gpu=2, apply_env=False)
    assert claim.state == "allocated"
    assert claim.name == f"{claim_prefix(session.owner.user)}-1"
    assert [r.device for r in claim.devices] == [
        f"gpu.nvidia.com/n1/{r['device']}" for r in results(claim)
    ]
    assert {r.state for r in claim.devices} == {"held"}
    assert [r.claim for r in session.claims()] == [claim.name]
    assert session.claim(claim.name).name == claim.name
    assert claim.release()
    assert not claim.release()
    assert claim.state == "released"
    assert len(session.claims()) == 0
    with pytest.raises(ClaimNotFoundError, match=f"claim {claim.name} does not exist"):
        session.claim(claim.name)


def test_nobody_waits_in_line(session: Session) -> None:
    assert session.waiting() == []


def test_context_manager_releases(session: Session) -> None:
    with session.request(gpu=8, apply_env=False, name="everything") as claim:
        assert "<Claim everything: gpu-0, " in repr(claim)
        with pytest.raises(AllocationError, match="held by everything"):
            session.request(gpu=1, apply_env=False)
    assert claim.state == "released"
    assert repr(claim).endswith("(released)>")
    assert len(session.request(gpu=8, apply_env=False).devices) == 8


def test_state_follows_a_release_by_the_system(session: Session) -> None:
    fake_now = [1_000_000.0]
    local(session).clock = lambda: fake_now[0]
    claim = session.request(gpu=1, apply_env=False, lease="10m")
    assert claim.to_dict()["metadata"]["name"] == claim.name
    assert claim.state == "allocated"
    fake_now[0] += 600
    assert claim.state == "released"  # the lease ran out
    assert not claim.release()


def test_release_all_and_other_users(tmp_path: Path) -> None:
    inventory = gpu_inventory()
    alice = make_session(tmp_path, inventory, user="alice")
    bob = make_session(tmp_path, inventory, user="bob")
    a1 = alice.request(gpu=1, apply_env=False)
    a2 = alice.request(gpu=2, apply_env=False)
    b1 = bob.request(gpu=1, apply_env=False)
    assert [r.claim for r in bob.claims(all_users=True)] == [a1.name, a2.name, b1.name]
    assert {r.user for r in bob.claims(all_users=True)} == {"alice", "bob"}
    with pytest.raises(ForbiddenError, match=f"claim {a1.name} belongs to user alice"):
        bob.release(a1.name)
    assert alice.release_all() == [a1.name, a2.name]
    assert [r.claim for r in alice.claims(all_users=True)] == [b1.name]


# --- the environment --------------------------------------------------------------------------


def test_env_lists_gpu_uuids_in_result_order(session: Session) -> None:
    session.request(gpu=1, apply_env=False)  # so that the next one is not simply gpu-0..
    claim = session.request(gpu=3, apply_env=False)
    expected = uuids(session, claim)
    assert len(expected) == 3
    assert all(u.startswith("GPU-") for u in expected)
    assert claim.env == {name: ",".join(expected) for name in ENV_NAMES}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL  # apply_env=False


def test_apply_env_into_a_dict(session: Session) -> None:
    claim = session.request(gpu=2, apply_env=False)
    target = {"HOME": "/somewhere", "CUDA_VISIBLE_DEVICES": "0"}
    assert claim.apply_env(target) == []
    assert target == {"HOME": "/somewhere", **claim.env}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL


def test_request_applies_env_to_this_process(session: Session) -> None:
    claim = session.request(gpu=2)
    assert claim.notes == []
    for name in ENV_NAMES:
        assert os.environ[name] == ",".join(uuids(session, claim))


def test_runtime_already_loaded_is_a_warning(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: "libcuda.so")
    with pytest.warns(DraJupyterWarning, match="libcuda.so is already loaded in this process"):
        claim = session.request(gpu=1)
    assert len(claim.notes) == 1
    assert os.environ["CUDA_VISIBLE_DEVICES"] == claim.env["CUDA_VISIBLE_DEVICES"]


def test_runtime_already_loaded_is_said_once_with_what_to_do(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.claim, "accelerator_runtime_loaded", lambda: "libcuda.so")
    with pytest.warns(DraJupyterWarning) as caught:
        first = session.request(gpu=1)
    [warning] = caught
    text = str(warning.message)
    assert "apply to the processes it starts from now on, not to itself" in text
    assert "Restart kernel with these devices" in text
    second = session.request(gpu=1)  # filterwarnings=error: no second warning
    assert second.notes == []
    first.release()  # a release changes the environment: nothing said again
    assert os.environ["CUDA_VISIBLE_DEVICES"] == second.env["CUDA_VISIBLE_DEVICES"]


def test_a_simulated_partition_has_a_stand_in_identity(mig_session: Session) -> None:
    """As a simulated GPU has a stand-in GPU-... UUID, a simulated MIG partition has a
    MIG-... one: its environment reads like a real claim's, with nothing to warn about."""
    first = mig_session.request(mig="1g.10gb")  # filterwarnings=error: no warning
    second = mig_session.request(mig="1g.10gb")
    [one], [two] = (c.env["CUDA_VISIBLE_DEVICES"].split(",") for c in (first, second))
    assert one.startswith("MIG-") and two.startswith("MIG-") and one != two
    assert first.notes == second.notes == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == f"{one},{two}"
    assert mig_session.claim(first.name).env == first.env  # the same partition, the same id


def test_a_partition_not_created_on_real_hardware_is_left_out(tmp_path: Path) -> None:
    """A MIG partition the driver offers but has not created has no UUID yet: nothing is
    guessed, and the user reads why."""
    real = dataclasses.replace(partitionable_inventory(), simulated=False)
    session = make_session(tmp_path, real)
    try:
        with pytest.warns(DraJupyterWarning, match=r"gpu\.nvidia\.com/p1/\S+ has no identity"):
            claim = session.request(mig="1g.10gb")
        assert claim.env == {}
        assert "a MIG partition the driver has not created" in claim.notes[0]
        assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL
    finally:
        session.release_all()


# --- tables -----------------------------------------------------------------------------------


def test_tables_and_pandas(session: Session) -> None:
    claim = session.request(gpu=2, apply_env=False, lease="1h")
    claims = session.claims()
    frame = claims.to_pandas()
    assert list(frame.columns) == [f.name for f in dataclasses.fields(ClaimRow)]
    assert frame["claim"].tolist() == [claim.name]
    assert frame["devices"].tolist() == [", ".join(r["device"] for r in results(claim))]
    assert frame["lease_expires"].tolist() != [""]

    devices = session.devices()
    assert devices.title == "test (SIMULATED)"
    table = devices.to_pandas()
    assert list(table.columns) == [f.name for f in dataclasses.fields(DeviceRow)]
    assert len(table) == 8
    assert table["state"].value_counts().to_dict() == {"free": 6, "held": 2}
    assert set(table["model"]) == {"NVIDIA H200"}
    assert set(table.loc[table["state"] == "held", "holder"]) == {
        f"{claim.name} ({session.owner.user})"
    }
    text = str(devices)
    assert text.startswith("test (SIMULATED)\ndevice")
    assert "<table>" in devices._repr_html_()


def test_partition_blocks_its_gpu(mig_session: Session) -> None:
    claim = mig_session.request(mig="2g.20gb", apply_env=False)
    [held] = results(claim)
    gpu = held["device"].split("-mig-")[0]
    states = {r.device.rsplit("/", 1)[1]: r.state for r in mig_session.devices()}
    assert states[held["device"]] == "held"
    assert states[gpu] == "blocked"  # the whole GPU needs the slices the partition holds
    overlapping = [d for d, s in states.items() if d.startswith(gpu + "-") and s == "blocked"]
    assert len(overlapping) == 2  # the two 1g partitions on the same memory slices
    assert sum(s == "free" for s in states.values()) == len(states) - 4
    frame = mig_session.devices().to_pandas()
    assert set(frame["mig_profile"]) == {"", "1g.10gb", "2g.20gb"}


def test_empty_table_keeps_its_columns(session: Session) -> None:
    assert list(session.claims().to_pandas().columns) == [
        f.name for f in dataclasses.fields(ClaimRow)
    ]


# --- YAML -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [{"gpu": 2}, {"gpu": 2, "same": "pcieRoot", "memory": "80Gi", "model": "H200"}],
    ids=["plain", "constrained"],
)
def test_yaml_is_a_valid_resource_claim(session: Session, spec: Wire) -> None:
    claim = session.request(apply_env=False, **spec)
    obj = yaml.safe_load(claim.to_yaml())
    assert obj == claim.to_dict()
    assert validate(obj) == "1.36"
    assert obj["kind"] == "ResourceClaim"
    assert obj["metadata"]["labels"]["dra-jupyter/user"] == session.owner.user
    assert obj["status"]["allocation"]["devices"]["results"] == results(claim)


def test_yaml_of_a_partition_is_valid(mig_session: Session) -> None:
    claim = mig_session.request(mig="1g.10gb", count=2, same="parentUUID", apply_env=False)
    obj = yaml.safe_load(claim.to_yaml())
    assert validate(obj) == "1.36"
    assert obj["spec"]["devices"]["constraints"] == [
        {"matchAttribute": "gpu.nvidia.com/parentUUID"}
    ]


# --- bad input: one clear message each --------------------------------------------------------

GPU_CASES: list[tuple[Wire, type[Exception], str]] = [
    (
        {"model": "A100"},
        AllocationError,
        "dra.request: no device of model 'A100' on test (simulated); "
        "the models are NVIDIA H200 (8)",
    ),
    (
        {"memory": "200Gi"},
        AllocationError,
        "dra.request: no device with memory >= 200Gi; the largest is 140.4Gi (n1/gpu-0)",
    ),
    (
        {"gpu": 9},
        AllocationError,
        "dra.request: asks for 9 GPU devices; test (simulated) has 8",
    ),
    (
        {"gpu": -1},
        InvalidInputError,
        "dra.request: gpu must be a positive number of devices (or 'all'), not -1",
    ),
    (
        {"count": -2},
        InvalidInputError,
        "dra.request: count must be a positive number of devices (or 'all'), not -2",
    ),
    (
        {"gpu": 1, "colour": "red"},
        InvalidInputError,
        "dra.request: unknown keyword 'colour'; use gpu, tpu, mig, count, memory, model, "
        "selector, share, interval, threads, pinned_memory, device_class, same, distinct, "
        "alternatives, timeout, lease, name, apply_env, on_wait, reserve, restart, join",
    ),
    (
        {"gpuu": 1},
        InvalidInputError,
        "dra.request: unknown keyword 'gpuu' (did you mean gpu?); use gpu, tpu, mig, count, "
        "memory, model, selector, share, interval, threads, pinned_memory, device_class, same, "
        "distinct, alternatives, timeout, lease, name, apply_env, on_wait, reserve, restart, join",
    ),
    (
        {"gpu": 1, "timeout": "soon"},
        InvalidInputError,
        "timeout: 'soon' is not a duration; write e.g. '90s', '5m', '1h30m' or seconds",
    ),
    (
        {"gpu": 1, "lease": -5},
        InvalidInputError,
        "lease: must be more than 0, got -5; ask for e.g. '1h'",
    ),
    # the longest lease and wait, and nothing that is not finite (issue #18)
    (
        {"gpu": 1, "lease": "31d"},
        InvalidInputError,
        "lease: '31d' is longer than the longest lease, 30d; ask for at most 30d, and "
        "request again when it ends",
    ),
    (
        {"gpu": 1, "lease": 1e300},
        InvalidInputError,
        "lease: 1e+300 is longer than the longest lease, 30d; ask for at most 30d, and "
        "request again when it ends",
    ),
    (
        {"gpu": 1, "lease": float("nan")},
        InvalidInputError,
        "lease: expected a duration of at most 30d, such as '5m' or 300 (seconds), not nan",
    ),
    (
        {"gpu": 1, "lease": [60]},
        InvalidInputError,
        "lease: expected a duration of at most 30d, such as '5m' or 300 (seconds), not [60]",
    ),
    (
        {"gpu": 1, "lease": "0s"},
        InvalidInputError,
        "lease: must be more than 0, got '0s' (the claim would end at once); ask for e.g. '1h'",
    ),
    (
        {"gpu": 1, "timeout": "25h"},
        InvalidInputError,
        "timeout: '25h' is longer than the longest wait, 24h; wait at most 24h, then retry",
    ),
    (
        {"gpu": 1, "timeout": float("inf")},
        InvalidInputError,
        "timeout: inf is longer than the longest wait, 24h; wait at most 24h, then retry",
    ),
    (
        {"gpu": 1, "model": "H" * 65},
        InvalidInputError,
        "dra.request: model: at most 64 characters (a device attribute's string is at most "
        "that), not 'HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHH…' (65 "
        "characters)",
    ),
]


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    GPU_CASES,
    ids=[f"{i}-{'-'.join(c[0])}" for i, c in enumerate(GPU_CASES)],
)
def test_bad_input_gives_one_clear_message(
    session: Session, spec: Wire, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        session.request(apply_env=False, **spec)
    assert str(info.value) == message
    assert len(session.claims(all_users=True)) == 0


def test_malformed_selector(session: Session) -> None:
    with pytest.raises(SelectorError) as info:
        session.request(selector="device.attributes['gpu.nvidia.com'].uuid ==", apply_env=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "ResourceClaim default/new-request, spec.devices.requests[0].exactly.selectors[0]: "
        "syntax error"
    )
    assert len(session.claims(all_users=True)) == 0


def test_unknown_mig_profile(mig_session: Session) -> None:
    with pytest.raises(AllocationError) as info:
        mig_session.request(mig="3g.71gb", apply_env=False)
    assert str(info.value) == (
        "dra.request: no MIG profile '3g.71gb' on test partitionable node (simulated); "
        "the profiles are 1g.10gb (32), 2g.20gb (16)"
    )
    assert len(mig_session.claims(all_users=True)) == 0


def test_the_environment_is_the_union_of_what_the_process_holds(session: Session) -> None:
    """Issue: a second request replaced the first's devices, a release left its GPU named
    (free for anyone to take), and nothing put the variables back."""
    big = session.request(gpu=2)
    small = session.request(gpu=1)
    for name in ENV_NAMES:
        assert os.environ[name] == ",".join(uuids(session, big) + uuids(session, small))
    small.release()
    for name in ENV_NAMES:
        assert os.environ[name] == ",".join(uuids(session, big))
    big.release()
    for name in ENV_NAMES:
        assert os.environ[name] == SENTINEL  # what it was before the first claim


def test_a_with_block_and_release_by_name_give_the_environment_back(session: Session) -> None:
    held = session.request(gpu=1)
    with session.request(gpu=2) as block:
        assert os.environ["CUDA_VISIBLE_DEVICES"].split(",") == (
            uuids(session, held) + uuids(session, block)
        )
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(uuids(session, held))
    session.release(held.name)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL


def test_a_claim_released_elsewhere_leaves_the_environment_at_the_next_request(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's idle release, the card's button or a lease end a claim behind this
    process's back: the next request no longer names its devices."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    gone = session.request(gpu=1)
    local(session).release(gone.name, "idle", any_owner=True)  # as the server would
    kept = session.request(gpu=1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(uuids(session, kept))
    kept.release()
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # unset before, unset again


def test_a_released_claims_devices_show_their_state_now(session: Session) -> None:
    """Issue: ``c.devices`` after a release still showed them held by the claim."""
    claim = session.request(gpu=2, apply_env=False)
    assert {r.state for r in claim.devices} == {"held"}
    assert all(claim.name in r.holder for r in claim.devices)
    claim.release()
    rows = list(claim.devices)
    assert len(rows) == 2
    assert {r.state for r in rows} == {"free"}
    assert all(r.holder == "" for r in rows)


def test_a_release_through_another_claim_object_gives_the_environment_back(
    session: Session,
) -> None:
    """``dra.claim(name).release()`` is another Claim object of the same claim."""
    claim = session.request(gpu=1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(uuids(session, claim))
    assert session.claim(claim.name).release()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == SENTINEL
    assert claim.state == "released"


def test_a_refused_release_leaves_the_claim_held(tmp_path: Path) -> None:
    """Another user's release is refused: their Claim object must not say released, nor
    the owner's devices leave anyone's environment."""
    alice = make_session(tmp_path, gpu_inventory(), user="alice")
    bob = make_session(tmp_path, gpu_inventory(), user="bob")
    mine = alice.request(gpu=1)
    theirs = bob.claim(mine.name)
    with pytest.raises(ForbiddenError):
        theirs.release()
    assert theirs.state == "allocated"
    with pytest.raises(ForbiddenError):
        theirs.release()  # refused again, not "already released"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(uuids(alice, mine))
    assert mine.release()


def test_a_session_and_an_explanation_read_as_text(session: Session) -> None:
    """What ``dra.configure()`` and ``claim.explain()`` show in a notebook: no raw reprs."""
    from IPython.lib.pretty import pretty  # noqa: PLC0415

    text = repr(session)
    assert text.startswith("<dra Session: local backend, inventory ")
    assert f"ledger {session.settings.ledger}" in text and "strategy topology" in text
    claim = session.request(gpu=1)
    shown = pretty(claim.explain())  # type: ignore[no-untyped-call]
    assert shown.startswith("Claims are allocatable on node ")
    assert "Explanation(" not in shown and "NodeReport(" not in shown


def test_a_gpu_another_users_process_uses_is_said_when_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two users of one machine each with their own ledger: NVML lists the other's process
    on the GPU this session was just given, and the user reads why and what to do. The
    fake NVML (the one fake) lists a real process of this test; it is "another user's" by
    this session's uid, as seen here."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from dra_jupyter.inventory.nvml import discover  # noqa: PLC0415
    from dra_jupyter.metrics.nvml import NvmlSource  # noqa: PLC0415
    from dra_jupyter.metrics.recorder import Recorder  # noqa: PLC0415
    from tests.fakes.fake_pynvml import FakeProcess, FakePynvml  # noqa: PLC0415

    fake = FakePynvml(gpus=1)
    inventory = discover(fake, node="n1", sysfs=tmp_path / "no-sysfs")
    session = make_session(tmp_path, inventory)
    session.__dict__["metrics"] = Recorder(NvmlSource(inventory, fake))  # the fake's NVML
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake.processes[0] = [FakeProcess(other.pid, memory=2**30, sm=50)]
        with monkeypatch.context() as patched, pytest.warns(DraJupyterWarning) as caught:
            patched.setattr(os, "getuid", lambda: 4242)  # this session's user: not root
            claim = session.request(gpu=1, apply_env=False)
        [note] = claim.notes
        assert note == str(caught[0].message)
        assert note.startswith(
            f"claim {claim.name}: gpu-0 is in use by another user's process (root's pid "
            f"{other.pid}) whose claim this session cannot see"
        )
        assert note.endswith("`dra-jupyter doctor` says more")
        claim.release()
        again = session.request(gpu=1, apply_env=False)  # this user's own: nothing to say
        assert again.notes == []
        again.release()
    finally:
        other.kill()
        other.wait()

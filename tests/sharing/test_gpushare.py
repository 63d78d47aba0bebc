"""A GPU shared by its driver on a cluster (:mod:`dra_jupyter.sharing.gpushare`):
``dra.request(share="mps", threads=25, ...)`` → the claim's ``spec.devices.config`` in
exactly the shape NVIDIA's driver decodes (``resource.nvidia.com/v1beta1`` ``GpuConfig`` /
``MigDeviceConfig``, the fields of ``dra-drivers.md`` §1.6 and nothing else); every wrong
keyword is refused before anything is made, in one line that names it and what is allowed.
``share="20Gi"`` still asks for a part of a device's capacity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.api import Session
from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.inventory.nvidia import consumable_shares, device_classes, hgx_node
from dra_jupyter.settings import Settings
from dra_jupyter.sharing.gpushare import GpuSharing, pinned_memory_problem
from dra_jupyter.verdicts import no_shared_device, sharing_hint

Wire = dict[str, Any]
CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")

# The fields the driver's Go types have (api/nvidia.com/resource/v1beta1): strict decoding
# refuses any other, so a config may hold only these.
GPU_CONFIG_FIELDS = {"apiVersion", "kind", "sharing"}
SHARING_FIELDS = {"strategy", "timeSlicingConfig", "mpsConfig"}
MPS_FIELDS = {
    "defaultActiveThreadPercentage",
    "defaultPinnedDeviceMemoryLimit",
    "defaultPerDevicePinnedMemoryLimit",
    "multiUser",
}


def nvidia(kind: str, sharing: Wire) -> Wire:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "sharing": sharing}


def config(requests: list[str], parameters: Wire) -> Wire:
    return {"requests": requests, "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}


CONFIG_CASES: list[tuple[str, Wire, list[Wire]]] = [
    (
        "time-slicing",
        {"gpu": 1, "share": "time-slicing"},
        [config(["gpu"], nvidia("GpuConfig", {"strategy": "TimeSlicing"}))],
    ),
    (
        "time-slicing with an interval (gpu-test5's)",
        {"gpu": 1, "share": "time-slicing", "interval": "long"},
        [
            config(
                ["gpu"],
                nvidia(
                    "GpuConfig",
                    {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                ),
            )
        ],
    ),
    (
        "other spellings of the strategy and the interval",
        {"gpu": 1, "share": "TimeSlicing", "interval": "Short"},
        [
            config(
                ["gpu"],
                nvidia(
                    "GpuConfig",
                    {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}},
                ),
            )
        ],
    ),
    (
        "mps without limits",
        {"share": "mps"},
        [config(["gpu"], nvidia("GpuConfig", {"strategy": "MPS"}))],
    ),
    (
        "mps with limits (gpu-test5's)",
        {"gpu": 1, "share": "MPS", "threads": 50, "pinned_memory": "10Gi"},
        [
            config(
                ["gpu"],
                nvidia(
                    "GpuConfig",
                    {
                        "strategy": "MPS",
                        "mpsConfig": {
                            "defaultActiveThreadPercentage": 50,
                            "defaultPinnedDeviceMemoryLimit": "10Gi",
                        },
                    },
                ),
            )
        ],
    ),
    (
        "as the magic writes them (text)",
        {"gpu": 1, "share": "mps", "threads": "25%", "pinned_memory": "1024Mi"},
        [
            config(
                ["gpu"],
                nvidia(
                    "GpuConfig",
                    {
                        "strategy": "MPS",
                        "mpsConfig": {
                            "defaultActiveThreadPercentage": 25,
                            "defaultPinnedDeviceMemoryLimit": "1Gi",
                        },
                    },
                ),
            )
        ],
    ),
    (
        "mps on a MIG partition: MigDeviceConfig",
        {"mig": "1g.18gb", "share": "mps", "threads": 100},
        [
            config(
                ["mig"],
                nvidia(
                    "MigDeviceConfig",
                    {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 100}},
                ),
            )
        ],
    ),
    (
        "each alternative its own config",
        {"alternatives": [{"mig": "3g.71gb", "share": "mps"}, {"gpu": 1, "share": "time-slicing"}]},
        [
            config(["devices/option-1"], nvidia("MigDeviceConfig", {"strategy": "MPS"})),
            config(["devices/option-2"], nvidia("GpuConfig", {"strategy": "TimeSlicing"})),
        ],
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [pytest.param(s, e, id=n) for n, s, e in CONFIG_CASES]
)
def test_sharing_keywords_make_the_drivers_config(spec: Wire, expected: list[Wire]) -> None:
    made = build_claim("c", spec, classes=CLASSES)
    configs = made["spec"]["devices"]["config"]
    assert configs == expected
    for entry in configs:  # only fields the driver's strict decoding knows
        parameters = entry["opaque"]["parameters"]
        assert set(parameters) <= GPU_CONFIG_FIELDS
        assert set(parameters["sharing"]) <= SHARING_FIELDS
        assert set(parameters["sharing"].get("mpsConfig", {})) <= MPS_FIELDS
        assert set(parameters["sharing"].get("timeSlicingConfig", {})) <= {"interval"}


def test_share_as_a_quantity_still_asks_for_capacity() -> None:
    made = build_claim("c", {"gpu": 1, "share": "20Gi"}, classes=CLASSES)
    devices = made["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "20Gi"}}
    assert "config" not in devices


def test_without_share_a_claim_has_no_config() -> None:
    assert "config" not in build_claim("c", {"gpu": 2}, classes=CLASSES)["spec"]["devices"]


# (case, keywords, what the one line must say)
REFUSALS: list[tuple[str, Wire, str]] = [
    (
        "unknown strategy",
        {"gpu": 1, "share": "spacepartitioning"},
        "share='spacepartitioning' is not a way to share a GPU; use share='time-slicing' or "
        "share='mps'",
    ),
    (
        "unknown strategy in an alternative",
        {"alternatives": [{"gpu": 1, "share": "mig"}]},
        "alternatives[0]: share='mig' is not a way",
    ),
    (
        "threads above 100",
        {"share": "mps", "threads": 101},
        "threads=101 must be a whole percentage of the GPU's compute threads from 1 to 100",
    ),
    ("threads below 1", {"share": "mps", "threads": 0}, "threads=0 must be a whole percentage"),
    (
        "negative threads",
        {"share": "mps", "threads": "-5"},
        "threads='-5' must be a whole percentage",
    ),
    (
        "threads a fraction",
        {"share": "mps", "threads": 12.5},
        "threads=12.5 must be a whole percentage",
    ),
    ("threads a word", {"share": "mps", "threads": "half"}, "threads='half'"),
    (
        "pinned memory not a quantity",
        {"share": "mps", "pinned_memory": "lots"},
        "pinned_memory='lots' must be an amount of device memory of at least 1Mi",
    ),
    (
        "pinned memory under a MiB",
        {"share": "mps", "pinned_memory": "512Ki"},
        "pinned_memory='512Ki' must be an amount",
    ),
    (
        "time-slicing on MIG",
        {"mig": "1g.18gb", "share": "time-slicing"},
        "share='time-slicing' does not apply to a MIG partition",
    ),
    (
        "interval on MIG",
        {"mig": "1g.18gb", "share": "time-slicing", "interval": "long"},
        "does not apply to a MIG partition",
    ),
    (
        "unknown interval",
        {"share": "time-slicing", "interval": "forever"},
        "interval='forever' is not a time-slice length; use default, short, medium, long",
    ),
    (
        "interval with mps",
        {"share": "mps", "interval": "short"},
        "interval= is a limit of share='time-slicing', not of share='mps'",
    ),
    (
        "threads with time-slicing",
        {"share": "time-slicing", "threads": 50},
        "threads= is a limit of share='mps', not of share='time-slicing'",
    ),
    (
        "a limit without share",
        {"gpu": 1, "threads": 50},
        "threads=50 is a limit of a shared GPU; give share='mps' with it",
    ),
    (
        "a limit with a capacity share",
        {"gpu": 1, "share": "20Gi", "interval": "short"},
        "interval='short' is a limit of a shared GPU; give share='time-slicing'",
    ),
    (
        "a driver we have no config for",
        {"device_class": "gpu.example.com", "share": "mps"},
        "sharing config is known only for the driver gpu.nvidia.com",
    ),
    ("AMD's GPUs", {"gpu": 1, "share": "time-slicing"}, "not for device class 'gpu.amd.com'"),
]


@pytest.mark.parametrize(("spec", "says"), [pytest.param(s, w, id=n) for n, s, w in REFUSALS])
def test_a_wrong_sharing_keyword_is_one_line_naming_it(spec: Wire, says: str) -> None:
    classes = ("gpu.amd.com",) if "gpu.amd.com" in says else CLASSES  # a cluster of AMD GPUs
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", spec, classes=classes)
    message = str(caught.value)
    assert message.startswith("dra.request: "), message
    assert "\n" not in message
    assert says in message, message


def test_pinned_memory_above_the_devices_memory_is_refused() -> None:
    sharing = GpuSharing("mps", pinned_memory="200Gi")
    problem = pinned_memory_problem(sharing, 141 * 2**30, "GPU here")
    assert problem == (
        "pinned_memory='200Gi' is more than the memory of any GPU here (141Gi at most); "
        "give at most 141Gi"
    )
    assert pinned_memory_problem(sharing, 200 * 2**30, "GPU here") is None
    assert pinned_memory_problem(GpuSharing("mps", threads=5), 2**30, "GPU here") is None


def test_pinned_memory_is_checked_against_the_devices_the_request_may_get() -> None:
    h200 = simulated.load("h200-8x")  # 143771Mi each (simulated)
    assert sharing_hint({"gpu": 1, "share": "mps", "pinned_memory": "143771Mi"}, h200) is None
    too_much = sharing_hint({"gpu": 1, "share": "mps", "pinned_memory": "141Gi"}, h200)
    assert too_much is not None
    assert too_much.startswith("pinned_memory='141Gi' is more than the memory of any GPU on ")
    assert too_much.endswith("(143771Mi at most); give at most 143771Mi")
    mig = simulated.load("h200-mig")
    profile = sharing_hint({"mig": "1g.18gb", "share": "mps", "pinned_memory": "20Gi"}, mig)
    assert profile is not None
    assert "MIG 1g.18gb partition" in profile
    alternative = {"alternatives": [{"gpu": 1}, {"gpu": 1, "share": "mps", "pinned_memory": "1Ti"}]}
    assert sharing_hint(alternative, h200) is not None
    assert sharing_hint({"gpu": 1, "share": "mps", "threads": 5}, h200) is None


def test_one_machine_refuses_a_driver_shared_gpu_before_anything_is_made(tmp_path: Path) -> None:
    session = Session(
        Settings(ledger=tmp_path / "ledger.sqlite"), inventory=simulated.load("h200-8x")
    )
    with pytest.raises(InvalidInputError) as caught:
        session.request(gpu=1, share="mps", threads=25)
    message = str(caught.value)
    assert message.startswith("dra.request: share='mps' asks a cluster's GPU driver"), message
    assert "\n" not in message
    assert len(session.claims()) == 0  # nothing was made
    with pytest.raises(InvalidInputError, match=r"pinned_memory='1Ti' is more than"):
        session.request(gpu=1, share="mps", pinned_memory="1Ti")


def test_a_share_of_memory_where_no_device_allows_several_claims_is_one_line() -> None:
    """``share="20Gi"`` asks for a part of a device that several claims hold at once
    (``allowMultipleAllocations``); where no device of the request's class allows it (the
    scheduler would give a whole device), it is refused, naming share= and what to do."""
    h200, shared = simulated.load("h200-8x"), simulated.load("h200-shared")
    spec: Wire = {"share": "20Gi"}
    claim = build_claim("c", spec, classes=CLASSES)
    assert no_shared_device(spec, claim, shared) is None
    said = no_shared_device(spec, claim, h200)
    assert said == (
        "share='20Gi' asks for part of a device that several claims hold at once "
        "(allowMultipleAllocations), and no gpu.nvidia.com device on "
        f"{h200.description} (simulated) allows it; leave share= out for a whole device, or "
        "ask the driver to share one (share='time-slicing' or share='mps')"
    )
    mig: Wire = {"mig": "1g.18gb", "share": "5Gi"}  # no MIG device is shared by capacity
    assert no_shared_device(mig, build_claim("c", mig, classes=CLASSES), shared) is not None
    alternatives: Wire = {"alternatives": [{"gpu": 2}, {"gpu": 1, "share": "20Gi"}]}
    either = build_claim("c", alternatives, classes=CLASSES)
    assert no_shared_device(alternatives, either, shared) is None
    assert no_shared_device(alternatives, either, h200) is not None
    whole: Wire = {"gpu": 1}
    assert no_shared_device(whole, build_claim("c", whole, classes=CLASSES), h200) is None


def test_one_machine_shares_a_gpus_memory_only_where_a_device_allows_several_claims(
    tmp_path: Path,
) -> None:
    """On one machine as on Kubernetes: ``share="20Gi"`` is a part of a device that several
    claims hold at once; where the inventory has such devices, several claims land on one
    device by its memory; where it has none, the request is refused in the cluster's one
    line (less the driver's strategies, which one machine has no driver for), never given a
    whole GPU without saying so."""
    shared = Session(
        Settings(ledger=tmp_path / "shared.sqlite"), inventory=simulated.load("h200-shared")
    )
    first, second = shared.request(share="20Gi"), shared.request(share="20Gi")
    assert [r.device for r in first.devices] == [r.device for r in second.devices]
    whole = simulated.load("h200-8x")
    session = Session(Settings(ledger=tmp_path / "whole.sqlite"), inventory=whole)
    with pytest.raises(InvalidInputError) as caught:
        session.request(gpu=1, share="20Gi")
    assert str(caught.value) == (
        "dra.request: share='20Gi' asks for part of a device that several claims hold at "
        "once (allowMultipleAllocations), and no gpu.nvidia.com device on "
        f"{whole.description} (simulated) allows it; leave share= out for a whole device"
    )
    assert len(session.claims()) == 0  # nothing was made
    assert len(session.request(gpu=1).devices) == 1  # a whole GPU, asked as one


def test_a_share_of_memory_never_gets_a_whole_ordinary_gpu_beside_shareable_ones() -> None:
    """Where some GPUs allow several claims and others do not, ``share="20Gi"`` carries the
    selector ``device.allowMultipleAllocations`` (upstream's CEL: false where a device does
    not say it), so neither kube-scheduler nor our allocator gives it a whole ordinary GPU
    (a capacity request alone is only a filter on a device that one claim holds)."""
    node = hgx_node("gpu-mixed-1")
    devices = node["spec"]["devices"]
    devices[4:] = [consumable_shares(d, 4) for d in devices[4:]]  # gpu-0..3 ordinary
    spec: Wire = {"share": "20Gi"}
    claims = [build_claim(f"c{i}", spec, classes=CLASSES) for i in range(3)]
    [request] = claims[0]["spec"]["devices"]["requests"]
    assert {"cel": {"expression": "device.allowMultipleAllocations"}} in request["exactly"][
        "selectors"
    ]
    allocator = Allocator([node], device_classes(), [], "first-fit")
    found = allocator.allocate(claims)
    assert found is not None
    assert {r.device.device for a in found for r in a.results} == {"gpu-4"}  # one shared GPU
    plain = allocator.allocate([build_claim("p", {"gpu": 1}, classes=CLASSES)])
    assert plain is not None
    assert plain[0].results[0].device.device == "gpu-0"  # a whole GPU is still any GPU

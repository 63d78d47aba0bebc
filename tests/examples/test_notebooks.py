"""The example notebooks, executed in real kernels against simulated inventories; the tests
read what each notebook showed and check it against the ledger."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dra_jupyter.local.ledger import Ledger
from tests.examples.notebooks import (
    EXAMPLES,
    execute,
    html,
    kernel_env,
    read,
    streams,
    text,
    widget_models,
)

UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.mark.pure
def test_every_example_is_tested_and_saved_without_outputs() -> None:
    names = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
    assert names == [
        "01-quickstart.ipynb",
        "02-multi-gpu-topology.ipynb",
        "03-mig-and-sharing.ipynb",
        "04-idle-release.ipynb",  # run under the server extension: tests/server
        "05-training-run.ipynb",
    ]
    for name in names:
        for c in read(name).cells:
            if c.cell_type == "code":
                assert c.outputs == [], f"{name}: saved with outputs"
                assert c.metadata.get("tags"), f"{name}: a code cell without a tag to test it by"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Ledger]:
    tmp = tmp_path_factory.mktemp("quickstart")
    nb = execute("01-quickstart.ipynb", kernel_env(tmp / "ledger.sqlite"), tmp)
    return nb, Ledger(tmp / "ledger.sqlite")


def test_quickstart_shows_the_simulated_devices(quickstart: tuple[Any, Ledger]) -> None:
    nb, _ = quickstart
    shown = html(nb, "devices")
    assert "SIMULATED" in shown
    assert shown.count("gpu.nvidia.com/gpu-node-1/gpu-") == 8
    assert shown.count("<td>free</td>") == 8


def test_quickstart_claim_env_reaches_the_kernel_and_its_children(
    quickstart: tuple[Any, Ledger],
) -> None:
    nb, ledger = quickstart
    env = text(nb, "env")
    [uuid] = set(re.findall(UUID, env))  # CUDA_ and NVIDIA_VISIBLE_DEVICES
    out = streams(nb, "use", "stdout").splitlines()
    assert out == [f"this kernel: {uuid}", f"a script   : {uuid}"]
    held = text(nb, "held")
    assert held.count("gpu.nvidia.com/gpu-node-1/gpu-") == 1
    released = [r for r in ledger.releases() if r.reason == "user"]
    assert released, "the notebook released its claims"
    assert "(none)" in text(nb, "release")


def test_quickstart_magics(quickstart: tuple[Any, Ledger]) -> None:
    nb, ledger = quickstart
    assert widget_models(nb, "board"), "%dra devices shows the live board"
    status = text(nb, "magic-request")
    names = {r.name for r in ledger.releases()}
    assert any(name in status for name in names), "%dra status names the claim"
    inside = streams(nb, "cell-magic", "stdout").strip()
    assert re.fullmatch(rf"inside the cell: {UUID},{UUID}", inside)
    assert "(none)" in text(nb, "after-cell")
    error = text(nb, "error")
    assert "Traceback" not in error
    assert len(error.strip().splitlines()) == 1
    assert error.strip().endswith(  # what was asked, and what exists
        "dra request gpu=9: asks for 9 GPU devices; "
        "8x NVIDIA H200 (HGX): 2 NUMA nodes, 4 PCIe roots (simulated) has 8\x1b[0m"
    )
    assert ledger.read_claims() == []


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Ledger]:
    tmp = tmp_path_factory.mktemp("topology")
    nb = execute("02-multi-gpu-topology.ipynb", kernel_env(tmp / "ledger.sqlite"), tmp)
    return nb, Ledger(tmp / "ledger.sqlite")


def rows(shown: str) -> list[list[str]]:
    """The data rows of a DataFrame's text form."""
    return [line.split()[1:] for line in shown.splitlines()[1:] if line.strip()]


def test_topology_keeps_devices_together(topology: tuple[Any, Ledger]) -> None:
    nb, ledger = topology
    pair = rows(text(nb, "pair"))
    assert len(pair) == 2
    assert len({r[2] for r in pair}) == 1, "two GPUs without a constraint share a PCIe root"
    four = rows(text(nb, "four"))
    assert len(four) == 4
    assert len({r[1] for r in four}) == 1, "same=numaNode: one NUMA node"
    one = rows(text(nb, "one"))
    devices = [r[0] for r in one + pair + four]
    assert len(set(devices)) == 7
    assert ledger.read_claims() == []


def test_topology_explains_busy_and_impossible(topology: tuple[Any, Ledger]) -> None:
    nb, _ = topology
    busy, never = text(nb, "explain-busy"), text(nb, "explain-never")
    assert "Traceback" not in busy + never
    assert busy.startswith("gpu=8: cannot be met now")
    assert "1 of the 8 matching GPUs are free, 8 needed" in busy
    assert never.startswith(
        "gpu=2 memory=200Gi: can never be met here: no device with memory >= 200Gi; "
        "the largest is 140.4Gi (gpu-node-1/gpu-0)"
    )
    assert "kind: ResourceClaim" in text(nb, "yaml")
    assert "matchAttribute: resource.kubernetes.io/pcieRoot" in text(nb, "yaml")


@pytest.fixture(scope="module")
def mig(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("mig")
    return execute("03-mig-and-sharing.ipynb", kernel_env(tmp / "unused.sqlite"), tmp)


def test_mig_small_slice_keeps_the_large_placement_open(mig: Any) -> None:
    small = text(mig, "one-g")
    assert "1g.18gb" in small
    assert "mig-1g18gb-19-0" not in small, "slice 0 is the only 4g placement"
    assert "4g.71gb" in text(mig, "four-g")
    for tag in ("explain-3g", "explain-whole"):
        said = text(mig, tag)
        assert "cannot be met now" in said, said
        assert "Traceback" not in said
    states = text(mig, "states")
    assert re.search(r"held\s+2", states), states


def test_shares_pack_onto_one_gpu(mig: Any) -> None:
    assert "True" in text(mig, "same-env")
    shared = rows(text(mig, "shared"))
    assert len(shared) == 1 and shared[0][1] == "shared"


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Ledger]:
    tmp = tmp_path_factory.mktemp("training")
    nb = execute("05-training-run.ipynb", kernel_env(tmp / "ledger.sqlite"), tmp)
    return nb, Ledger(tmp / "ledger.sqlite")


def test_training_run_starts_follows_and_ends(training: tuple[Any, Ledger]) -> None:
    nb, ledger = training
    assert re.fullmatch(
        r"<Run train-1: gpu\.nvidia\.com/gpu-node-1/gpu-\d, gpu\.nvidia\.com/gpu-node-1/gpu-\d "
        r"\((Running|Succeeded)\)>",
        text(nb, "start"),
    )
    assert re.match(r"(Running|Succeeded) \('gpu\.nvidia\.com/", text(nb, "status"))
    followed = streams(nb, "follow", "stdout").splitlines()
    assert re.fullmatch(rf"training on {UUID},{UUID}", followed[0])
    assert followed[1:] == ["epoch 1/3 loss 1.000", "epoch 2/3 loss 0.500", "epoch 3/3 loss 0.333"]
    assert text(nb, "ended") == "Succeeded (0,)\n"
    assert re.fullmatch(rf"Succeeded evaluating on {UUID}\n", text(nb, "function"))
    # every run's claim was released at its end (or its cancel), by the run's own launcher
    assert ledger.read_claims() == []
    assert "(none)" in text(nb, "claims")


def test_training_run_is_listed_then_cancelled(training: tuple[Any, Ledger]) -> None:
    nb, ledger = training
    listed = text(nb, "runs")
    for name, phase in [("train-1", "Succeeded"), ("eval-1", "Succeeded"), ("train-2", "Running")]:
        assert re.search(rf"^{name}\s+{phase}\s", listed, re.M), listed
    assert streams(nb, "cancel", "stdout") == "dra: run train-2 is cancelled\n"
    ended = {r.name: r.reason for r in ledger.releases()}
    assert sorted(ended.values()) == ["user"] * 3

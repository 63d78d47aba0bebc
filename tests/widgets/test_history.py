"""Utilisation history as DataFrames (simulated and NVML), device names, and what
``import dra_jupyter`` leaves unloaded."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest

import dra_jupyter as dra
from dra_jupyter import api
from dra_jupyter.api import Session
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory.nvml import discover
from dra_jupyter.metrics.history import FRAME_COLUMNS
from dra_jupyter.metrics.nvml import NvmlSource
from dra_jupyter.metrics.recorder import Recorder
from dra_jupyter.settings import Settings
from dra_jupyter.widgets import HistoryChart
from tests.fakes.fake_pynvml import FakePynvml, load_capture


def test_a_claims_history_is_its_devices_while_held(session: Session) -> None:
    claim = session.request(gpu=2, apply_env=False)
    try:
        frame = claim.history()
    finally:
        claim.release()
    assert list(frame.columns) == FRAME_COLUMNS
    assert set(frame["device"]) == set(claim._record.device_keys)
    assert frame["simulated"].all()
    assert (frame["utilization"] > 0).all()  # simulated load: the devices are held
    assert str(frame["time"].dtype) == "datetime64[ns, UTC]"
    # what a person reads: whole seconds, memory in GiB beside the bytes
    assert (frame["time"] == frame["time"].dt.floor("s")).all()
    assert (frame["memory_used_gib"] == (frame["memory_used"] / 2**30).round(1)).all()
    assert (frame["memory_total_gib"] == 140.4).all()


def test_a_released_claims_history_shows_when_it_was_held(session: Session) -> None:
    claim = session.request(gpu=1, apply_env=False)
    (key,) = claim._record.device_keys
    record = claim._record
    # a claim made 10 minutes ago (the ledger keeps what it was given), then released
    claim._record = replace(record, created=record.created - 600)
    claim.release()
    frame = claim.history()
    assert set(frame["device"]) == {key}
    assert len(frame) > 100  # every 5 s since it was made
    busy = frame["utilization"] > 0
    assert busy.iloc[:-3].all()  # held until the release...
    assert not busy.iloc[-1]  # ...idle after it (the last point is now)


def test_a_free_device_over_a_window(session: Session) -> None:
    frame = session.history("gpu-3", last="1m")
    assert len(frame) == 13  # every 5 s over a minute, both ends
    assert set(frame["device"]) == {"gpu.nvidia.com/gpu-node-1/gpu-3"}
    assert (frame["utilization"] == 0.0).all()
    assert frame["time"].is_monotonic_increasing
    assert session.history("gpu.nvidia.com/gpu-node-1/gpu-3", last="1m")["device"].nunique() == 1


def test_unknown_or_ambiguous_devices_are_one_clear_line(session: Session) -> None:
    with pytest.raises(InvalidInputError, match=r"'gpu-99' is not a device of this inventory"):
        session.history("gpu-99")
    with pytest.raises(InvalidInputError, match="not a duration"):
        session.history("gpu-0", last="a while")


def test_dra_history_uses_the_default_session(
    ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api._Default, "session", None)
    dra.configure(inventory="h200-8x", ledger=ledger_path)
    frame = dra.history(["gpu-0", "gpu-1"], last=10)
    assert isinstance(frame, pd.DataFrame)
    assert frame["device"].nunique() == 2


def test_nvml_history_is_what_this_process_sampled(tmp_path: Path) -> None:
    fake = FakePynvml(gpus=2)
    inventory = discover(fake, node="n", sysfs=tmp_path / "no-sysfs")
    session = Session(Settings(ledger=tmp_path / "ledger.sqlite"), inventory=inventory)
    session.__dict__["metrics"] = Recorder(NvmlSource(inventory, fake))  # the fake NVML
    first = session.history("gpu-1")
    second = session.history("gpu-1")
    assert len(first) == 1  # one sample per call: nothing was recorded before
    assert len(second) == 2
    captured = load_capture().device
    assert (second["memory_used"] == captured["memory"]["used"]).all()
    assert (second["temperature"] == captured["temp"]).all()
    assert not second["simulated"].any()


def test_import_loads_no_widget_kernel_nvml_or_pandas_module() -> None:
    code = (
        "import sys, dra_jupyter, dra_jupyter.api\n"
        "heavy = ('IPython', 'ipykernel', 'ipywidgets', 'anywidget', 'pandas', 'pynvml',"
        " 'dra_jupyter.widgets', 'dra_jupyter.metrics')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_history_chart_is_svg_with_a_line_per_device(session: Session) -> None:
    claim = session.request(gpu=2, apply_env=False)
    try:
        frame = session.history(["gpu-0", "gpu-1", "gpu-2"], last="2m")
    finally:
        claim.release()
    svg = HistoryChart(frame)._repr_svg_()
    root = ElementTree.fromstring(svg)  # well-formed
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert [line.findtext("{http://www.w3.org/2000/svg}title") for line in lines] == [
        f"gpu.nvidia.com/gpu-node-1/gpu-{i}" for i in range(3)
    ]
    assert all(len(line.get("points", "").split()) == 25 for line in lines)
    assert "SIMULATED" in svg
    empty = HistoryChart(frame.iloc[0:0])._repr_svg_()
    assert "no samples" in empty
    assert "SIMULATED" not in empty


@pytest.mark.parametrize("times", [[100.0, 160.0], [100.25, 160.5]])
def test_history_times_have_one_resolution_and_the_chart_spans_them(times: list[float]) -> None:
    """pandas reads whole seconds as datetime64[s] unless told: the frame must not depend
    on the values, and the chart's time axis must say 1 minute either way."""
    from dra_jupyter.metrics.base import Sample  # noqa: PLC0415
    from dra_jupyter.metrics.history import to_frame  # noqa: PLC0415

    frame = to_frame([Sample("d/p/gpu-0", t, utilization=50.0) for t in times])
    assert str(frame["time"].dtype) == "datetime64[ns, UTC]"
    svg = HistoryChart(frame).svg()
    assert "last 1.0 min" in svg

"""``dra-jupyter taint | untaint | taint --list``: an admin's taints on this machine's
devices from a shell (the local backend, a ledger of the test's own). Exit codes as
everywhere: 0 done, 2 invalid input or a taint that is not there (one line, ``error: ...``),
1 a request the taint makes impossible (explained, naming the taint)."""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

import pytest

from dra_jupyter.api import Session
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.outofservice import clock
from tests.test_cli_local import run

GPU0 = "gpu.nvidia.com/gpu-node-1/gpu-0"
ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture(autouse=True)
def local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DRA_JUPYTER_BACKEND", "local")
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_taint_explain_untaint(tmp_path: Path) -> None:
    held = run("request", "gpu=8", "--name", "big")
    assert held.code == 0, held.err
    made = run("taint", "gpu-0", "--effect", "NoSchedule", "--reason", "fan failing")
    assert made.code == 0, made.err
    assert made.out.startswith(
        f"tainted {GPU0}: dra-jupyter/admin:NoSchedule ('fan failing') by {ME}"
    )
    assert (
        f"held now by claim big ({ME}): work on it may fail, and no new claim gets it; "
        "the claim keeps it until moved or released\n"
    ) in made.out
    assert run("release", "big").code == 0
    listed = json.loads(run("taint", "--list", "-o", "json").out)
    assert [(t["device"], t["effect"], t["reason"], t["user"]) for t in listed] == [
        (GPU0, "NoSchedule", "fan failing", ME)
    ]
    refused = run("request", "gpu=8")
    assert refused.code == 1
    assert "dra-jupyter/admin:NoSchedule (DeviceTaintRule dra-jupyter-gpu-0-" in refused.err
    explained = run("explain", "gpu=8")
    assert "marked by a taint the request does not tolerate: dra-jupyter/admin:NoSchedule" in (
        explained.out
    )
    gone = run("untaint", "gpu-0")
    assert (gone.code, gone.out) == (
        0,
        f"untainted {GPU0}: dra-jupyter/admin:NoSchedule ('fan failing'; put by {ME}, "
        f"removed by {ME}); it is in use again\n",
    )
    assert run("taint", "--list").out == "no device is tainted by hand\n"
    history = run("taint", "--list", "--history")
    assert "removed_by" in history.out and "fan failing" in history.out
    assert run("request", "gpu=8").code == 0


def test_noexecute_tells_the_holder_when_its_claim_is_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the CLI says of a NoExecute taint's holders is what happens (the grace, then a
    release) and what JupyterLab and the notebook say: the same words, the same clock time,
    and who releases it: without the service, a Jupyter server or ``health --watch``; with
    neither running the claim is held past its grace until one starts (issue 42, item 1)."""
    monkeypatch.setenv("DRA_JUPYTER_HEALTH_GRACE", "600")
    assert run("request", "gpu=8", "--name", "big").code == 0
    made = run("taint", "gpu-0", "--effect", "NoExecute", "--reason", "test")
    assert made.code == 0, made.err
    [taint] = json.loads(run("taint", "--list", "-o", "json").out)
    at = clock(taint["added"] + 600)
    assert made.out.endswith(
        f"held now by claim big ({ME}): it cannot be used: save what you can now, the claim "
        f"will be released at {at} (by this machine's Jupyter server or dra-jupyter health "
        "--watch; with neither running, when one starts)\n"
    )
    assert len(made.out.splitlines()) == 2
    assert "keeps the device" not in made.out


def test_noexecute_with_nothing_running_releases_when_a_watcher_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grace over, no server, service or watcher running: the claim is still held
    (what the CLI says), and the first check of one that starts releases it."""
    monkeypatch.setenv("DRA_JUPYTER_HEALTH_GRACE", "0")
    assert run("request", "gpu=8", "--name", "big").code == 0
    made = run("taint", "gpu-0", "--effect", "NoExecute", "--reason", "test")
    assert "with neither running, when one starts" in made.out
    time.sleep(0.1)
    assert [c["claim"] for c in json.loads(run("claims", "-o", "json").out)] == ["big"]
    backend = Session().backend  # what a server's first health check does at its start
    assert isinstance(backend, LocalBackend)
    assert [r.name for r, _ in backend.release_taken_out(0.0)] == ["big"]
    assert json.loads(run("claims", "-o", "json").out) == []


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["taint", "gpu-0", "--effect", "NoSchedule"], "taint: give DEVICE --effect"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", ""], "--reason is empty"),
        (["taint", "gpu-9", "--effect", "NoSchedule", "--reason", "x"], "'gpu-9' is not a device"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", "x", "--key", "a b"], "--key"),
        (["taint", "--list", "gpu-0"], "taint --list: takes no DEVICE"),
        (["untaint", "gpu-0"], "untaint: gpu.nvidia.com/gpu-node-1/gpu-0 has no taint"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", "a\nb"], "control character"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", "a\x1b[2Jb"], "'\\x1b'"),
        (["taint", "--history"], "taint --history: goes with --list"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(argv: list[str], words: str) -> None:
    result = run(*argv)
    assert result.code == 2
    assert result.err.startswith("error: ") and words in result.err
    assert result.err.count("\n") == 1


def test_an_effect_argparse_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    result = run("taint", "gpu-0", "--effect", "Evict", "--reason", "x", capsys=capsys)
    assert result.code == 2
    assert result.err == (
        "error: dra-jupyter taint: --effect 'Evict' is not one of NoSchedule, NoExecute; "
        "see 'dra-jupyter taint --help'\n"
    )


def test_a_taint_shows_one_form_its_value_only_where_it_is_one() -> None:
    """``key=value:Effect`` in taint, devices and taint --list; JSON's value is the taint's."""
    fan = run("taint", "gpu-4", "--effect", "NoExecute", "--reason", "fan")
    assert "dra-jupyter/admin=fan:NoExecute ('fan')" in fan.out
    run("taint", "gpu-5", "--effect", "NoSchedule", "--reason", "fan failing")
    devices = {r["device"]: r for r in json.loads(run("devices", "-o", "json").out)}
    gpu4, gpu5 = (devices[GPU0.replace("gpu-0", f"gpu-{n}")] for n in (4, 5))
    assert gpu4["taints"] == "dra-jupyter/admin=fan:NoExecute"
    assert gpu5["taints"] == "dra-jupyter/admin:NoSchedule"
    listed = run("taint", "--list").out
    assert "dra-jupyter/admin=fan:NoExecute" in listed and "dra-jupyter/admin:NoSchedule" in listed
    values = [t["value"] for t in json.loads(run("taint", "--list", "-o", "json").out)]
    assert values == ["fan", ""]


def test_a_tainted_device_is_shown_tainted_not_free() -> None:
    run("taint", "gpu-2", "--effect", "NoSchedule", "--reason", "fan")
    states = {r["device"]: r["state"] for r in json.loads(run("devices", "-o", "json").out)}
    assert states[GPU0.replace("gpu-0", "gpu-2")] == "tainted"
    assert states[GPU0] == "free"
    assert "tainted" in run("devices").out


def test_a_taint_of_a_whole_gpu_covers_its_mig_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """h200-mig: one GPU published whole and as 25 MIG placements on one counter set."""
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-mig")
    made = run("taint", "gpu-0", "--effect", "NoExecute", "--reason", "xid 79")
    assert made.code == 0, made.err
    assert "gpu-0 and its 25 partitions:" in made.out and "do not get them" in made.out
    refused = run("request", "mig=1g.18gb")
    assert refused.code == 1, refused.out
    # the GPU's rule, which untaint takes away, once for the 7 slices; not a rule per slice
    rule = made.out.split("(DeviceTaintRule ", 1)[1].split(")", 1)[0]
    assert f"dra-jupyter/admin:NoExecute (DeviceTaintRule {rule}) (7 devices)" in refused.err
    assert "gpu-0-mig-" not in refused.err
    rows = json.loads(run("devices", "-o", "json").out)
    assert {r["state"] for r in rows} == {"tainted"}
    assert all(r["taints"] == "dra-jupyter/admin:NoExecute" for r in rows)
    listed = json.loads(run("taint", "--list", "-o", "json").out)
    assert len(listed) == 1  # one taint, by the admin, on the GPU
    gone = run("untaint", "gpu-0")
    assert "gpu-0 and its 25 partitions:" in gone.out and "they are in use again" in gone.out
    assert run("request", "mig=1g.18gb").code == 0


def test_a_taint_of_a_partition_leaves_the_gpu_and_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-mig")
    rows = json.loads(run("devices", "-o", "json").out)
    part = next(r["device"] for r in rows if r["kind"] == "mig")
    made = run("taint", part, "--effect", "NoSchedule", "--reason", "bad")
    assert made.code == 0 and "partition" not in made.out
    states = {r["device"]: r["state"] for r in json.loads(run("devices", "-o", "json").out)}
    assert [d for d, s in states.items() if s == "tainted"] == [part]


def test_a_busy_request_counts_one_device_as_one() -> None:
    run("taint", "gpu-0", "--effect", "NoSchedule", "--reason", "fan")
    refused = run("request", "gpu=8")
    assert "(DeviceTaintRule dra-jupyter-gpu-0-" in refused.err
    assert "(1 device)" in refused.err and "(1 devices)" not in refused.err

"""``dra-jupyter taint | untaint | taint --list``: an admin's taints on this machine's
devices from a shell (the local backend, a ledger of the test's own). Exit codes as
everywhere: 0 done, 2 invalid input or a taint that is not there (one line, ``error: ...``),
1 a request the taint makes impossible (explained, naming the taint)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

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
        f"tainted {GPU0}: dra-jupyter/admin='fan failing':NoSchedule by {ME}"
    )
    assert "held now by claim big" in made.out  # reported; the claim keeps the device
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
        f"untainted {GPU0}: dra-jupyter/admin='fan failing':"
        f"NoSchedule by {ME}; it is in use again\n",
    )
    assert run("taint", "--list").out == "no device is tainted by hand\n"
    history = run("taint", "--list", "--history")
    assert "removed_by" in history.out and "fan failing" in history.out
    assert run("request", "gpu=8").code == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["taint", "gpu-0", "--effect", "NoSchedule"], "taint: give DEVICE --effect"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", ""], "--reason is empty"),
        (["taint", "gpu-9", "--effect", "NoSchedule", "--reason", "x"], "'gpu-9' is not a device"),
        (["taint", "gpu-0", "--effect", "NoSchedule", "--reason", "x", "--key", "a b"], "--key"),
        (["taint", "--list", "gpu-0"], "taint --list: takes no DEVICE"),
        (["untaint", "gpu-0"], "untaint: gpu.nvidia.com/gpu-node-1/gpu-0 has no taint"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(argv: list[str], words: str) -> None:
    result = run(*argv)
    assert result.code == 2
    assert result.err.startswith("error: ") and words in result.err
    assert result.err.count("\n") == 1


def test_an_effect_argparse_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    result = run("taint", "gpu-0", "--effect", "Evict", "--reason", "x", capsys=capsys)
    assert result.code == 2 and "invalid choice: 'Evict'" in result.err

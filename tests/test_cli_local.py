"""``dra-jupyter devices | request | claims | release``: the local backend from a shell.

Through :func:`dra_jupyter.cli.main` with the settings in the environment
(``DRA_JUPYTER_LEDGER``, ``DRA_JUPYTER_INVENTORY``) or in flags (``--ledger``,
``--inventory``), and through the installed console script for what must outlive the
process. Exit codes: 0 done, 1 busy or impossible (stderr says why, never a traceback),
2 invalid input, an unknown or another user's claim (one line, ``error: ...``), 3 the
ledger (or another service) cannot be used, 4 an internal error (a bug: with a traceback).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.api import Session
from dra_jupyter.cli import main
from dra_jupyter.cli.main import COMMANDS
from dra_jupyter.inventory import simulated
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_of
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.test_claimspec import validate

Wire = dict[str, Any]

EXPORT = re.compile(r"^export ([A-Z_]+)=(\S+)$", re.MULTILINE)
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fresh ledger and the 8x H200 inventory, through the environment; returns the ledger."""
    ledger = tmp_path / "ledger.sqlite"
    for name in ("DRA_JUPYTER_STRATEGY", "DRA_JUPYTER_KERNEL_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(ledger))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    monkeypatch.setenv("DRA_JUPYTER_POLL_INTERVAL", "0.02")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return ledger


def run(*argv: str, capsys: pytest.CaptureFixture[str] | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    stderr = err.getvalue()
    if capsys is not None:  # argparse writes its usage errors to sys.stderr
        stderr += capsys.readouterr().err
    assert "Traceback" not in stderr
    return Result(code, out.getvalue(), stderr)


def uuids() -> dict[str, str]:
    """device name → GPU UUID on the h200-8x inventory."""
    inv = simulated.load("h200-8x")
    return {
        d["name"]: d["attributes"]["uuid"]["string"]
        for s in inv.slices
        for d in s["spec"]["devices"]
    }


def request_json(*argv: str) -> Wire:
    result = run("request", *argv, "-o", "json")
    assert result.code == 0, result.err
    document: Wire = json.loads(result.out)
    return document


def claims_json(*argv: str) -> list[Wire]:
    result = run("claims", "-o", "json", *argv)
    assert result.code == 0, result.err
    rows: list[Wire] = json.loads(result.out)
    return rows


# --- devices ---------------------------------------------------------------------------------


def test_devices_lists_every_device() -> None:
    result = run("devices")
    assert result.code == 0
    assert result.err == ""
    lines = result.out.splitlines()
    assert lines[0] == "8x NVIDIA H200 (HGX): 2 NUMA nodes, 4 PCIe roots (SIMULATED)"
    assert lines[1].split() == [
        "device",
        "kind",
        "model",
        "memory",
        "mig_profile",
        "node",
        "numa_node",
        "pcie_root",
        "state",
        "holder",
        "taints",
    ]
    for name in uuids():
        assert f"gpu.nvidia.com/gpu-node-1/{name} " in result.out
    assert len(lines) == 2 + 8


def test_devices_json() -> None:
    rows = json.loads(run("devices", "-o", "json").out)
    assert len(rows) == 8
    assert {r["state"] for r in rows} == {"free"}
    assert rows[0] == {
        "device": "gpu.nvidia.com/gpu-node-1/gpu-0",
        "kind": "gpu",
        "model": "NVIDIA H200",
        "memory": "140.4Gi",
        "mig_profile": "",
        "node": "gpu-node-1",
        "numa_node": "0",
        "pcie_root": "pci0000:15",
        "state": "free",
        "holder": "",
        "taints": "",
    }


# --- request ---------------------------------------------------------------------------------


def test_request_prints_the_devices_and_the_exports() -> None:
    result = run("request", "gpu=2", "same=pcieRoot", "--name", "pair")
    assert result.code == 0, result.err
    assert result.err == ""
    lines = result.out.splitlines()
    assert lines[0] == "claim pair"
    devices = re.findall(r"^gpu\.nvidia\.com/gpu-node-1/(\S+) .* held +pair \(", result.out, re.M)
    assert len(devices) == 2
    exports = dict(EXPORT.findall(result.out))
    expected = ",".join(uuids()[d] for d in devices)
    assert exports == {"CUDA_VISIBLE_DEVICES": expected, "NVIDIA_VISIBLE_DEVICES": expected}
    assert lines[-2:] == [f"export {k}={v}" for k, v in exports.items()]


def test_request_json_parses() -> None:
    document = request_json("gpu=1", "memory=100Gi", "model=h200", "--name", "big")
    assert set(document) == {"claim", "env"}
    claim = document["claim"]
    validate(claim)
    assert claim["metadata"]["name"] == "big"
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == "gpu.nvidia.com"
    assert document["env"]["CUDA_VISIBLE_DEVICES"] == uuids()[result["device"]]


def test_request_of_each_kind(tmp_path: Path) -> None:
    tpu = request_json("tpu=2", "--inventory", "tpu-v5e-8", "--ledger", str(tmp_path / "t"))
    assert tpu["env"] == {"TPU_VISIBLE_CHIPS": "0,1"}
    amd = request_json("gpu=all", "--inventory", "mi300x-8", "--ledger", str(tmp_path / "a"))
    assert len(amd["env"]["ROCR_VISIBLE_DEVICES"].split(",")) == 8
    mig = request_json(
        "mig=3g.71gb", "count=2", "--inventory", "h200-mig", "--ledger", str(tmp_path / "m")
    )
    assert len(mig["claim"]["status"]["allocation"]["devices"]["results"]) == 2
    # simulated MIG partitions have stand-in MIG-... UUIDs, as simulated GPUs have GPU-...
    assert [u[:4] for u in mig["env"]["CUDA_VISIBLE_DEVICES"].split(",")] == ["MIG-", "MIG-"]


def test_request_does_not_set_the_environment_of_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "untouched")
    assert run("request", "gpu=1").code == 0
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "untouched"


# --- claims and release ----------------------------------------------------------------------


def test_claims_lists_the_claim_with_its_lease() -> None:
    assert run("request", "gpu=1", "--name", "short", "--lease", "10m").code == 0
    assert run("request", "gpu=1", "--name", "default-lease").code == 0
    rows = claims_json()
    assert [r["claim"] for r in rows] == ["short", "default-lease"]
    for row in rows:
        assert STAMP.fullmatch(row["lease_expires"]), row
        assert row["devices"].startswith("gpu-")
    text = run("claims")
    assert text.code == 0
    assert text.out.splitlines()[0].split() == [
        "claim",
        "user",
        "kernel",
        "devices",
        "created",
        "last_activity",
        "lease_expires",
    ]
    assert re.search(
        r"^short .*" + STAMP.pattern + r".*" + STAMP.pattern + r".*" + STAMP.pattern, text.out, re.M
    )
    assert claims_json("--all") == rows


def test_claims_when_there_are_none() -> None:
    assert claims_json() == []
    assert run("claims").out == "(none)\n"


def test_waiting_when_nobody_waits() -> None:
    assert run("waiting").out == "nobody waits\n"
    assert json.loads(run("waiting", "-o", "json").out) == []


def test_release_by_name() -> None:
    run("request", "gpu=1", "--name", "one")
    run("request", "gpu=1", "--name", "two")
    result = run("release", "one")
    assert result.code == 0
    assert result.out == "released: one\n"
    assert [r["claim"] for r in claims_json()] == ["two"]
    rows = json.loads(run("devices", "-o", "json").out)
    assert [r["holder"].split()[0] for r in rows if r["state"] == "held"] == ["two"]


def test_release_all() -> None:
    for name in ("a", "b", "c"):
        assert run("request", "gpu=2", "--name", name).code == 0
    result = run("release", "--all")
    assert result.code == 0
    assert result.out == "released: a, b, c\n"
    assert claims_json() == []
    assert run("release", "--all").out == "released: nothing\n"


def test_release_of_an_unknown_name_says_not_found() -> None:
    """What was released on stdout; the unknown name on stderr, one line, exit 2 (an
    unknown claim, as the errors table says; 1 is only for 'no allocation exists')."""
    run("request", "gpu=1", "--name", "real")
    result = run("release", "real", "ghost")
    assert (result.code, result.out) == (2, "released: real\n")
    assert result.err == "error: release: no claim named 'ghost' (already released?)\n"
    only = run("release", "no-such-claim")
    assert (only.code, only.out) == (2, "")
    assert only.err == "error: release: no claim named 'no-such-claim' (already released?)\n"


def test_release_needs_names_or_all() -> None:
    result = run("release")
    assert result.code == 2
    assert result.err == "error: release: name the claims to release, or pass --all\n"


# --- busy and impossible: exit code 1 --------------------------------------------------------


def test_busy_is_exit_1_and_names_the_holder() -> None:
    assert run("request", "gpu=all", "--name", "everything").code == 0
    result = run("request", "gpu=1")
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith("the devices are busy")
    assert "everything" in result.err
    assert not result.err.startswith("error:")


def test_busy_says_the_flag_that_waits() -> None:
    assert run("request", "gpu=all").code == 0
    result = run("request", "gpu=1")
    assert "pass --timeout 10m to wait in line" in result.err
    assert "timeout='10m'" not in result.err


def test_explain_takes_keywords_as_the_magic_does() -> None:
    never = run("explain", "gpu=9")
    assert never.code == 0, never.err  # a question answered: 0 whatever the answer
    assert never.out.startswith("gpu=9: can never be met here: ")
    assert run("request", "gpu=9").code == 1  # what acts fails: 1
    now = run("explain", "gpu=2", "same=pcieRoot")
    assert now.out.startswith("gpu=2 same=pcieRoot: can be met now on gpu-node-1: "), now.out
    assert run("request", "gpu=7").code == 0
    later = run("explain", "gpu=2", "-o", "json")
    verdict = json.loads(later.out)
    assert verdict["answer"] == "later"
    assert verdict["headline"].endswith("pass --timeout 10m to wait in line")
    assert len(verdict["held_now"]) == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("explain",), "give a request as KEY=VALUE keywords"),
        (("explain", "gpu=1", "-f", "objects.yaml"), "not both"),
        (("explain", "gpu"), "explain: 'gpu' is not KEY=VALUE"),
        (("explain", "gpu=two"), "explain: gpu='two' is not a number"),
    ],
)
def test_explain_without_a_request_is_exit_2(argv: tuple[str, ...], words: str) -> None:
    result = run(*argv)
    assert result.code == 2
    assert words in result.err
    assert result.err.startswith("error: ")


def test_release_of_an_unknown_name_in_python_says_no_claim() -> None:
    import dra_jupyter as dra  # noqa: PLC0415
    from dra_jupyter import api  # noqa: PLC0415
    from dra_jupyter.errors import ClaimNotFoundError  # noqa: PLC0415

    dra.configure()  # this test's ledger
    try:
        with pytest.raises(ClaimNotFoundError, match=r"^no claim nope \(already released\?\)"):
            dra.release("nope")
    finally:
        api._Default.session = None


def test_timeout_waits_then_says_busy() -> None:
    run("request", "gpu=all")
    result = run("request", "gpu=1", "--timeout", "0.2")
    assert result.code == 1
    assert "busy" in result.err


def test_timeout_gets_the_devices_when_a_lease_ends() -> None:
    assert run("request", "gpu=all", "--lease", "0.2").code == 0
    result = run("request", "gpu=8", "--timeout", "5s")
    assert result.code == 0, result.err
    assert len(EXPORT.findall(result.out)[0][1].split(",")) == 8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("gpu=9",), "dra.request: asks for 9 GPU devices; "),
        (("memory=1Ti",), "dra.request: no device with memory >= 1Ti; the largest is 140.4Gi"),
        (("model=B200",), "dra.request: no device of model 'B200'"),
        (("mig=1g.10gb",), "dra.request: no MIG devices on "),
        (("tpu=1",), "dra.request: no TPU devices on "),
    ],
    ids=["too many", "too much memory", "unknown model", "no MIG", "no TPU"],
)
def test_impossible_is_exit_1_with_one_line(argv: tuple[str, ...], message: str) -> None:
    result = run("request", *argv)
    assert (result.code, result.err.count("\n")) == (1, 1), result.err
    assert result.err.startswith(message), result.err
    assert result.out == ""


# --- bad input: exit code 2, one line --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (("request", "gpu"), "'gpu' is not KEY=VALUE"),
        (("request", "=2"), "'=2' is not KEY=VALUE"),
        (("request", "gpu=two"), "gpu='two' is not a number"),
        (("request", "count=1.5"), "count='1.5'"),
        (("request", "gpu=0"), "gpu must be a positive number"),
        (("request", "gpu=2", "tpu=1"), "give one of gpu, tpu"),
        (("request", "colour=red"), "unknown keyword 'colour'"),
        (("request", "gpu=1", "memory=lots"), "memory='lots' is not a quantity"),
        (("request", "gpu=2", "same=root"), "same='root' is not an attribute"),
        (("request", "gpu=1", "--timeout", "5q"), "--timeout: '5q' is not a duration"),
        (("request", "gpu=1", "--timeout=-1"), "--timeout"),
        (("request", "gpu=1", "--lease", "soon"), "lease: 'soon' is not a duration"),
        (
            ("request", "gpu=1", "--lease", "31d"),
            "--lease: '31d' is longer than the longest lease, 30d",
        ),
        (("request", "gpu=1", "--lease", "1000000000000d"), "the longest lease, 30d"),
        (("request", "gpu=1", "--lease", "0"), "--lease: must be more than 0"),
        (("request", "gpu=1", "--lease", "-5m"), "--lease: must be more than 0, got '-5m'"),
        (("request", "gpu=1", "--timeout", "-1m"), "--timeout: must not be negative"),
        (
            ("request", "gpu=1", "--timeout", "25h"),
            "--timeout: '25h' is longer than the longest wait, 24h",
        ),
        (("request", "gpu=1", "model=" + "H" * 65), "model: at most 64 characters"),
        (
            ("request", "gpu=1", "selector=" + "(" * 99 + "true" + ")" * 99),
            "nests more than 96 levels deep",
        ),
        (("request", "gpu=1", "selector=device.driver =="), "syntax error"),
        (("devices", "--inventory", "nope"), "inventory 'nope' is not known"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(argv: tuple[str, ...], names: str) -> None:
    result = run(*argv)
    assert result.code == 2, result
    assert result.out == ""
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1, result.err
    assert names in result.err
    assert claims_json() == []


def test_bad_timeout_holds_nothing() -> None:
    assert run("request", "gpu=8", "--timeout", "forever").code == 2
    assert run("request", "gpu=8").code == 0


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ("request",),
            "error: dra-jupyter request: missing KEY=VALUE; see 'dra-jupyter request --help'",
        ),
        (
            ("request", "gpu=1", "-o", "yaml"),
            "error: dra-jupyter request: -o/--output 'yaml' is not one of text, json; "
            "see 'dra-jupyter request --help'",
        ),
        (
            ("claims", "--bogus"),
            "error: dra-jupyter claims: no option --bogus; see 'dra-jupyter claims --help'",
        ),
        (("nonsense",), "error: dra-jupyter: no command 'nonsense'; see 'dra-jupyter --help'"),
        (
            ("reqest", "gpu=1"),
            "error: dra-jupyter: no command 'reqest'; did you mean 'request'? "
            "(see 'dra-jupyter --help')",
        ),
        (
            ("allocate",),
            "error: dra-jupyter allocate: missing -f/--filename; see 'dra-jupyter allocate --help'",
        ),
        (
            ("allocate", "-f", "x.yaml", "--strategy", "topolgy"),
            "error: dra-jupyter allocate: --strategy 'topolgy' is not one of first-fit, topology; "
            "did you mean 'topology'? (see 'dra-jupyter allocate --help')",
        ),
    ],
    ids=[
        "no KEY=VALUE",
        "bad output",
        "unknown flag",
        "unknown command",
        "a typo",
        "no -f",
        "a choice",
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: tuple[str, ...], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse's refusals as every other error: one line with the fix, not its usage
    wrapped over three lines and then the problem (issue 42, item 17)."""
    result = run(*argv, capsys=capsys)
    assert result.code == 2
    assert result.err == line + "\n"


# --- flags override the environment ----------------------------------------------------------


def test_flags_override_the_environment(tmp_path: Path, settings: Path) -> None:
    other = tmp_path / "elsewhere" / "other.sqlite"
    result = run("request", "tpu=1", "--inventory", "tpu-v5e-8", "--ledger", str(other))
    assert result.code == 0, result.err
    assert dict(EXPORT.findall(result.out)) == {"TPU_VISIBLE_CHIPS": "0"}
    assert other.exists()
    assert claims_json() == []  # the environment's ledger holds nothing
    [row] = claims_json("--ledger", str(other), "--inventory", "tpu-v5e-8")
    assert row["devices"] == "accel0"
    devices = run("devices", "--inventory", "tpu-v5e-8", "--ledger", str(other))
    assert devices.out.startswith("Google TPU v5e host: 8 chips, topology 2x4 (SIMULATED)\n")
    assert devices.out.count(" held ") == 1


def test_inventory_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "mi300x-8")
    assert run("devices").out.startswith("8x AMD Instinct MI300X")
    result = run("request", "gpu=2", "same=numaNode")
    assert dict(EXPORT.findall(result.out)).keys() == {
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
    }


# --- a claim outlives the command that made it -----------------------------------------------


def console_script() -> str:
    found = Path(sys.executable).with_name("dra-jupyter")
    if found.exists():
        return str(found)
    on_path = shutil.which("dra-jupyter")
    if on_path is None:
        pytest.fail("the dra-jupyter console script is not installed (make install)")
    return on_path


def test_a_claim_survives_the_process_that_made_it(tmp_path: Path, settings: Path) -> None:
    env = {
        **os.environ,
        "DRA_JUPYTER_LEDGER": str(settings),
        "DRA_JUPYTER_INVENTORY": "h200-8x",
    }
    script = console_script()
    made = subprocess.run(
        [script, "request", "gpu=2", "--lease", "10m", "--name", "kept", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    document = json.loads(made.stdout)
    assert document["claim"]["metadata"]["name"] == "kept"

    listed = subprocess.run(
        [script, "claims", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["claim"] == "kept"
    assert STAMP.fullmatch(row["lease_expires"])
    # and this process sees it too, holding the devices
    busy = run("request", "gpu=7")
    assert busy.code == 1
    assert "kept" in busy.err
    assert run("release", "kept").out == "released: kept\n"


def test_console_script_exit_codes(settings: Path) -> None:
    env = {**os.environ, "DRA_JUPYTER_LEDGER": str(settings), "DRA_JUPYTER_INVENTORY": "h200-8x"}
    script = console_script()
    codes = {}
    for argv in (["request", "gpu=1"], ["request", "gpu=9"], ["request", "gpu=x"]):
        done = subprocess.run(
            [script, *argv], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert "Traceback" not in done.stderr
        codes[argv[1]] = done.returncode
    assert codes == {"gpu=1": 0, "gpu=9": 1, "gpu=x": 2}


@pytest.mark.parametrize("name", ["DRA_JUPYTER_POLL_INTERVAL", "DRA_JUPYTER_IDLE_TIMEOUT"])
def test_a_setting_in_seconds_that_is_not_a_number(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "soon")
    result = run("claims")
    assert result.code == 2
    assert result.err.strip() == f"error: {name} must be a number of seconds, 0 or more, not 'soon'"


def test_a_ledger_that_cannot_be_read_is_exit_3(settings: Path) -> None:
    settings.write_text("not a database, and long enough to be read as a header " * 20)
    result = run("claims")
    assert result.code == 3  # unavailable, not the user's input
    assert result.err.startswith(f"error: ledger {settings}: cannot open it as a SQLite database")
    assert len(result.err.splitlines()) == 1


def test_an_internal_error_is_exit_4_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> int:
        raise RuntimeError("boom")

    monkeypatch.setitem(COMMANDS, "claims", broken)
    err = io.StringIO()
    result = Result(main(["claims"], io.StringIO(), err), "", err.getvalue())
    assert result.code == 4
    assert "Traceback (most recent call last)" in result.err
    assert result.err.splitlines()[-1] == (
        "internal error (a bug in dra-jupyter, not in your input): RuntimeError: boom; "
        "please report it with the traceback above"
    )


def test_under_jupyterhub_the_hub_user_owns_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """One identity: JUPYTERHUB_USER (what the hub puts in the server's environment) owns
    what the CLI makes; another hub user can neither see nor release it."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    made = run("request", "gpu=1", "-o", "json")
    assert made.code == 0, made.err
    name = json.loads(made.out)["claim"]["metadata"]["name"]
    assert name.startswith("alice-")
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    assert name not in run("claims").out
    refused = run("release", name)
    assert refused.code == 2
    assert (
        refused.err == f"error: claim {name} belongs to user alice; only its owner can release it\n"
    )
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    assert run("release", name).code == 0


# --- what the CLI says of the line, of the user's own claims and of its keywords --------------


def _wait_in_line(ledger: Path, user: str, spec: dict[str, Any], now: float) -> None:
    """A waiter in the ledger's line, as a request with a timeout puts it there: alive (this
    process), of ``user``, for ``spec``."""
    owner = dataclasses.replace(Owner.current(), user=user)
    claim = Session(Settings.from_env(), owner=owner).build(spec)
    book = Ledger(ledger)
    with book.transaction() as conn:
        book.enqueue(conn, shape_of(claim), owner, now)


def test_waiting_says_each_request_in_its_words_its_place_and_why(settings: Path) -> None:
    _wait_in_line(settings, "alice", {"gpu": 2}, 1.0)
    _wait_in_line(settings, "bob", {"gpu": 1, "memory": "80Gi", "same": "pcieRoot"}, 2.0)
    _wait_in_line(settings, "carol", {"gpu": 2}, 3.0)
    rows = json.loads(run("waiting", "-o", "json").out)
    assert [(r["position"], r["user"], r["what"]) for r in rows] == [
        (1, "alice", "gpu=2"),
        (1, "bob", "gpu=1, memory='80Gi', same=pcieRoot"),
        (2, "carol", "gpu=2"),
    ]
    assert rows[0]["why"].startswith("first in line")
    assert rows[2]["why"] == "behind alice's same request, made earlier"
    assert "2. carol: gpu=2 (behind alice's same request, made earlier)" in run("waiting").out


def test_busy_names_the_command_that_releases_the_users_shell_claims() -> None:
    assert run("request", "gpu=8", "--lease", "2m", "--name", "all8").code == 0
    busy = run("request", "gpu=1")
    assert busy.code == 1
    assert "dra-jupyter release all8" in busy.err
    assert "this process" not in busy.err and "dra.release" not in busy.err
    assert "held by all8 (8)" in busy.err and "default/all8" not in busy.err


def test_a_keyword_given_twice_is_refused() -> None:
    refused = run("request", "gpu=1", "gpu=2")
    assert (refused.code, refused.out) == (2, "")
    assert refused.err == (
        "error: request: 'gpu' is given twice; give each keyword once (the last would not "
        "silently win)\n"
    )
    assert claims_json() == []


def test_a_killed_cli_waiter_leaves_the_line(settings: Path) -> None:
    """A ``request --timeout`` killed while it waits (SIGTERM: no clean-up of its own) gives
    up its place: the CLI's claims live by their lease, not its pid, but its place in line
    is the waiting process's. Before, the place stayed for good and a later request of the
    same devices was refused as busy (number 2 in the queue) on a free machine."""
    assert run("request", "gpu=all", "--lease", "1h").code == 0
    waiter = subprocess.Popen(
        [sys.executable, "-m", "dra_jupyter.cli", "request", "gpu=1", "--timeout", "10m"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "gpu=1" not in run("waiting").out:
            assert time.monotonic() < deadline, "the CLI waiter never took its place"
            time.sleep(0.1)
    finally:
        waiter.terminate()
        waiter.wait(timeout=30)
    assert run("release", "--all").code == 0
    result = run("request", "gpu=1")  # the killed waiter's place is gone: served at once
    assert result.code == 0, result.err
    assert "gpu=1" not in run("waiting").out

"""Background runs on one machine (``dra.run`` on the embedded ledger): real launcher
processes, real commands, a real ledger on a temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from IPython.lib.pretty import pretty

from dra_jupyter.api import Session
from dra_jupyter.errors import (
    BusyError,
    DraJupyterWarning,
    InvalidInputError,
    NeverPossibleError,
    NotFoundError,
)
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.settings import Settings
from dra_jupyter.types import process_start_time
from dra_jupyter.types.runs import Run, RunStatus, TailedRun, log_tail

INVENTORY = "h200-8x"
BOUND = 60.0  # seconds: a bound for a stuck process, not a measured time
SLEEPER = ["python", "-c", "import time; print('started', flush=True); time.sleep(120)"]


def settings(ledger: Path) -> Settings:
    return Settings(ledger=ledger, inventory=INVENTORY, backend="local", poll_interval=0.05)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session(settings(tmp_path / "ledger.sqlite"))
    try:
        yield s
    finally:
        for run in s.runs():
            run.cancel()


def until(check: Any, what: str) -> None:
    """Wait for ``check()`` to be true (a bound, not a timing)."""
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0] in ("Z", "X")


def start(session: Session, command: Any, **keywords: Any) -> Run:
    """``session.run``, which on one machine is a :class:`Run` of dra_jupyter.types.runs."""
    run = session.run(command, **keywords)
    assert isinstance(run, Run)
    return run


def needs_a_path(path: str, mode: str = "r") -> None:
    """A function a run cannot call without arguments."""


def child_pid(status: RunStatus) -> int:
    return int(status.processes[0].name.removeprefix("pid "))


def test_a_run_has_its_devices_writes_its_log_and_releases_at_its_end(session: Session) -> None:
    run = start(
        session,
        ["python", "-c", "import os; print('sees', os.environ['CUDA_VISIBLE_DEVICES'])"],
        gpu=1,
    )
    status = run.wait(BOUND)
    assert (status.phase, status.exit_codes) == ("Succeeded", (0,))
    assert len(status.devices) == 1 and status.claims
    assert status.started is not None and status.ended is not None
    [device] = status.devices
    [uuid] = [
        d["attributes"]["uuid"]["string"]
        for d in session.inventory.slices[0]["spec"]["devices"]
        if device.endswith(f"/{d['name']}")
    ]
    assert run.logs() == f"sees {uuid}\n"
    assert session.backend.claims() == []  # released by the launcher before its end
    ended = session.backend.ended(status.claims[0])
    assert ended is not None and ended.reason == "user"


def test_a_failing_command_is_failed_with_its_exit_code(session: Session) -> None:
    run = start(session, ["python", "-c", "import sys; print('oops'); sys.exit(3)"], gpu=1)
    status = run.wait(BOUND)
    assert (status.phase, status.exit_codes) == ("Failed", (3,))
    assert status.message == f"run {run.name}: exit code 3"
    # said once, in words: the run's name and the code not repeated (issue 42, item 7)
    head, row = str(status).splitlines()
    assert head == f"run {run.name}: Failed: exit code 3"
    assert row.endswith(", exit code 3, 0 restarts") and run.name not in row, row
    assert " with gpu.nvidia.com/" not in row and f"/{status.devices[0].rsplit('/')[-1]}" in row
    assert repr(status).endswith("\n  exit code 3>") and repr(status).count("exit code") == 1
    assert run.logs() == "oops\n"


def test_the_claim_is_the_launchers_not_this_process(session: Session) -> None:
    run = start(session, SLEEPER, gpu=2, name="train-1")
    assert run.name == "train-1"
    until(lambda: run.logs() == "started\n", "the command started")
    [record] = session.backend.claims()
    assert record.owner.pid != os.getpid() and record.owner.kernel_id is None
    assert record.name == run.status.claims[0]
    cmdline = Path(f"/proc/{record.owner.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:5] == [b"-m", b"dra_jupyter.runner", b"--detach", b"train-1"]  # launcher
    assert record.owner.start_time == process_start_time(record.owner.pid)


def test_cancel_stops_the_command_and_releases_the_claim(session: Session) -> None:
    run = start(session, SLEEPER, gpu=1)
    until(lambda: run.logs() == "started\n", "the command started")
    child = child_pid(run.status)
    run.cancel()
    status = run.status
    assert status.phase == "Cancelled" and status.message == f"run {run.name}: cancelled"
    assert status.exit_codes == (-signal.SIGTERM,)
    # in words: cancelled once, the signal by its name, not "exit code -15" (issue 42, item 7)
    head, row = str(status).splitlines()
    assert head == f"run {run.name}: Cancelled" and "stopped by SIGTERM," in row, row
    assert repr(status).endswith("\n  stopped by SIGTERM>") and "-15" not in repr(status)
    assert gone(child)
    assert session.backend.claims() == []
    run.cancel()  # ended already: nothing to do
    assert run.status == status


def test_sigkill_of_the_launcher_releases_the_claim_and_stops_the_command(
    session: Session,
) -> None:
    run = start(session, SLEEPER, gpu=1)
    until(lambda: run.logs() == "started\n", "the command started")
    [record] = session.backend.claims()
    child = child_pid(run.status)
    os.kill(record.owner.pid, signal.SIGKILL)
    until(lambda: gone(child), "the command dies with its launcher")
    until(lambda: session.backend.claims() == [], "the claim of a gone holder is reclaimed")
    ended = session.backend.ended(record.name)
    assert ended is not None and ended.reason == "reclaimed"
    status = run.status
    assert status.phase == "Failed" and "ended without recording the end" in status.message


def test_a_lease_ends_the_run(session: Session) -> None:
    run = start(session, SLEEPER, gpu=1, lease="1s")
    status = run.wait(BOUND)
    assert status.phase == "Failed"
    assert status.message.startswith(f"run {run.name}: its lease of 1s ended")
    assert session.backend.claims() == []


def test_a_busy_machine_refuses_at_once_or_the_run_waits_in_line(session: Session) -> None:
    held = session.request(gpu=8, apply_env=False)
    try:
        with pytest.raises(BusyError):
            session.run(SLEEPER, gpu=1, timeout=0)
        [failed] = session.runs()
        assert failed.status.phase == "Failed"
        # with a timeout it waits in line; cancelled there, it never starts
        waiting = start(session, SLEEPER, gpu=1, timeout="1m")
        status = waiting.status
        assert status.phase == "Pending" and status.message.startswith("waiting for devices")
        waiting.cancel()
        assert waiting.status.phase == "Cancelled" and waiting.status.exit_codes == ()
        assert waiting.logs() == ""
        run = start(session, SLEEPER, gpu=1, timeout="1m")
        first = run.status
        assert first.phase == "Pending"
    finally:
        held.release()
    until(lambda: run.status.phase == "Running", "the run gets the freed devices")
    assert [r.name for r in session.backend.claims()] == list(run.status.claims)


def test_runs_from_a_fresh_process_finds_and_cancels_it(session: Session, tmp_path: Path) -> None:
    run = start(session, SLEEPER, gpu=1)
    code = (
        "import dra_jupyter as dra\n"
        f"dra.configure(backend='local', ledger={str(tmp_path / 'ledger.sqlite')!r}, "
        f"inventory={INVENTORY!r})\n"
        "[r] = dra.runs()\n"
        "print(r.name, r.status.phase)\n"
        "r.cancel()\n"
        "print(r.status.phase)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert done.stdout.split() == [run.name, "Running", "Cancelled"]
    assert run.status.phase == "Cancelled"
    assert session.backend.claims() == []
    with pytest.raises(NotFoundError, match=r"^no run nope; dra\.runs\(\) lists yours$"):
        session.find_run("nope")


@pytest.mark.parametrize(
    ("command", "keywords", "message"),
    [
        (["true"], {"nodes": 0}, "dra.run: nodes=0 is not a number of machines"),
        (["true"], {"nodes": 2}, "dra.run: nodes=2 spreads a run over several machines"),
        (
            ["true"],
            {"same": "zone"},
            "dra.run: same='zone' keeps the pods of a multi-node run on nodes that share "
            "topology.kubernetes.io/zone; this machine runs one process: leave it out",
        ),
        (lambda: None, {}, "dra.run: pass a named function (def ...), not a lambda"),
        (["python", 3], {}, "dra.run: item 1 of the command list is int 3, not a string"),
        (None, {}, "dra.run: give the command to run"),
        (["no-such-program-x"], {}, "dra.run: the program 'no-such-program-x' is not found"),
        (["true"], {"image": "x"}, "dra.run: image= applies to pods on Kubernetes"),
        (["true"], {"gpus": 1}, "dra.run: unknown keyword 'gpus'"),
        (["true"], {"name": "Bad Name"}, "dra.run: name='Bad Name' is not a run name"),
        (["true"], {"lease": "-1h"}, "lease: must be more than 0"),
        (["true"], {"gpu": 9}, "dra.run: asks for 9 GPU devices"),  # never possible
        (["true"], {"gpu": "x"}, "dra.run: gpu must be a positive number"),  # said as dra.run
        (42, {}, "dra.run: the command is int 42; a command is an argv list of strings"),
        ({"a": 1}, {}, "dra.run: the command is dict {'a': 1}; a command is an argv list"),
        (b"echo hi", {}, "dra.run: the command is bytes b'echo hi'; a command is an argv"),
        (needs_a_path, {}, "dra.run: needs_a_path() is called without arguments, but it needs"),
        (["true"], {"start_timeout": "1m"}, "dra.run: start_timeout= applies to pods on"),
        (["true"], {"start_timeout": None}, "dra.run: start_timeout= applies to pods on"),
    ],
)
def test_bad_input_is_one_line_and_makes_nothing(
    session: Session, tmp_path: Path, command: Any, keywords: dict[str, Any], message: str
) -> None:
    with pytest.raises((InvalidInputError, NeverPossibleError)) as caught:
        session.run(command, gpu=keywords.pop("gpu", 1), **keywords)
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text
    assert session.runs() == []
    assert Ledger(tmp_path / "ledger.sqlite").read_claims() == []
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dra-jupyter ARGS`` in a process of its own on the test's ledger."""
    env = {
        **os.environ,
        "DRA_JUPYTER_BACKEND": "local",
        "DRA_JUPYTER_LEDGER": str(tmp_path / "ledger.sqlite"),
        "DRA_JUPYTER_INVENTORY": INVENTORY,
    }
    return subprocess.run(
        [sys.executable, "-m", "dra_jupyter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


def test_a_claim_released_by_its_user_elsewhere_stops_the_run_no_double_booking(
    session: Session, tmp_path: Path
) -> None:
    run = start(session, SLEEPER, gpu=8)
    until(lambda: run.logs() == "started\n", "the command started")
    child = child_pid(run.status)
    [claim] = run.status.claims
    done = cli(tmp_path, "release", claim)  # another process, by the claim's name
    assert done.returncode == 0, done.stderr
    until(lambda: run.status.done, "the run ends once its claim is gone")
    status = run.status
    assert status.phase == "Cancelled"
    assert status.message == (
        f"run {run.name}: its claim {claim} was released by its user (user); the command was "
        "stopped, as its devices are no longer the run's"
    )
    assert status.exit_codes == (-signal.SIGTERM,)
    assert gone(child)
    # the devices are free for the next claim, and used by nobody else
    with session.request(gpu=8, apply_env=False) as again:
        assert len(again.allocation["devices"]["results"]) == 8


def test_a_device_failure_release_fails_the_run_saying_why(session: Session) -> None:
    run = start(session, SLEEPER, gpu=1)
    until(lambda: run.logs() == "started\n", "the command started")
    [claim] = run.status.claims
    assert session.backend.release(claim, "device-failed", any_owner=True)  # after the grace
    until(lambda: run.status.done, "the run ends once its claim is gone")
    status = run.status
    assert status.phase == "Failed"
    assert status.message.startswith(
        f"run {run.name}: its claim {claim} was released by its device's NoExecute taint, "
        "when the grace ran out (device-failed); the command was stopped"
    )
    assert gone(child_pid(status))


def test_release_all_leaves_a_runs_claim_and_claims_name_its_run(
    session: Session, tmp_path: Path
) -> None:
    run = start(session, SLEEPER, gpu=1, name="train-2")
    until(lambda: run.logs() == "started\n", "the command started")
    [claim] = run.status.claims
    [row] = session.claims().rows
    assert (row.claim, row.kernel) == (claim, "run train-2")
    assert "run train-2" in cli(tmp_path, "claims").stdout
    mine = session.request(gpu=1, apply_env=False)
    with pytest.warns(DraJupyterWarning) as caught:
        assert session.release_all() == [mine.name]
    [warning] = caught
    assert str(warning.message).startswith(
        f"kept claim {claim} of run train-2: a run's claim goes with its run; cancel the run"
    )
    done = cli(tmp_path, "release", "--all")  # the command line says it in one line too
    assert done.returncode == 0 and done.stdout == "released: nothing\n"
    assert done.stderr.startswith(f"warning: kept claim {claim} of run train-2")
    assert len(done.stderr.splitlines()) == 1
    assert run.status.phase == "Running"
    assert [r.name for r in session.backend.claims()] == [claim]


def test_wait_takes_a_duration_and_returns_the_running_status_when_time_runs_out(
    session: Session,
) -> None:
    run = start(session, SLEEPER, gpu=1)
    until(lambda: run.logs() == "started\n", "the command started")
    status = run.wait(timeout="1s")
    assert status.phase == "Running" and not status.done
    with pytest.raises(InvalidInputError, match=r"^run\.wait: timeout: 'soon' is not a dur"):
        run.wait(timeout="soon")


def test_logs_follow_writes_the_output_and_returns_none(
    session: Session, capsys: pytest.CaptureFixture[str]
) -> None:
    run = start(session, ["python", "-c", "print('one'); print('two')"], gpu=1)
    assert run.logs(follow=True) is None  # a cell's Out[] would show it a second time
    assert capsys.readouterr().out == "one\ntwo\n"
    assert run.logs() == "one\ntwo\n"


def test_a_status_reads_as_lines_with_clock_times(session: Session) -> None:
    run = start(session, ["python", "-c", "pass"], gpu=1, name="quick")
    status = run.wait(BOUND)
    text = repr(status)
    started = time.strftime("%H:%M:%S", time.localtime(status.started))
    ended = time.strftime("%H:%M:%S", time.localtime(status.ended))
    device = status.devices[0].rsplit("/", 1)[-1]
    assert text.splitlines()[0] == f"<RunStatus quick: Succeeded on {device}"
    assert f"started {started}, ended {ended}" in text and "exit code 0>" in text
    assert "created=" not in text and "." not in text.split("created ")[1].split(",")[0]
    assert pretty(status) == text  # type: ignore[no-untyped-call]  # IPython


class WholeLogs:
    """A run that reads its output only whole (as a cluster's pod logs): no log_tail."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def logs(self, follow: bool = False, rank: int | None = None) -> str:
        return self.run.logs()


def test_the_end_of_a_long_log_is_read_from_its_end_or_cut_from_all_of_it(
    session: Session,
) -> None:
    run = start(session, ["python", "-c", "for i in range(5000): print('line', i)"], gpu=1)
    assert run.wait(BOUND).phase == "Succeeded"
    whole = run.logs()
    assert isinstance(run, TailedRun)  # one machine's: read from the file's end
    text, cut = log_tail(run, 100)
    assert cut and whole.endswith(text) and len(text.encode()) <= 100
    assert text.startswith("line ")  # whole lines: the one cut at the start is left out
    assert log_tail(cast(Run, WholeLogs(run)), 100) == (text, True)
    assert log_tail(run, len(whole)) == log_tail(cast(Run, WholeLogs(run)), 10**6) == (whole, False)


def test_each_users_logs_have_a_folder_of_their_own_and_names_say_whose(tmp_path: Path) -> None:
    """A ledger several users share: ``runs/`` is open to all (sticky), each user's logs in
    a folder only they may open; a run name another user took says so (before: one 0700
    ``runs/`` of whoever came first, so the second user's run failed with a traceback)."""
    from dra_jupyter.local.ledger import Ledger  # noqa: PLC0415
    from dra_jupyter.local.runs import RunBook  # noqa: PLC0415

    book = RunBook(Ledger(tmp_path / "ledger.sqlite"))
    alice = book.create("alice", {"argv": ["true"]}, name="train")
    bob = book.create("bob", {"argv": ["true"]})
    assert alice.log == tmp_path / "runs" / "alice" / "train.log"
    assert bob.log.parent == tmp_path / "runs" / "bob"
    assert (tmp_path / "runs").stat().st_mode & 0o7777 == 0o1777
    assert {(tmp_path / "runs" / u).stat().st_mode & 0o777 for u in ("alice", "bob")} == {0o700}
    with pytest.raises(InvalidInputError, match=r"^dra\.run: a run named train exists already, "):
        book.create("bob", {"argv": ["true"]}, name="train")
    with pytest.raises(InvalidInputError, match=r"^dra\.run: a run named train exists already; "):
        book.create("alice", {"argv": ["true"]}, name="train")

"""``dra-jupyter demo --service`` (the second part of ``make demo``), run as root the way
``make demo`` runs it: a real daemon, two temporary Unix users, all of it gone afterwards."""

from __future__ import annotations

import io
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dra_jupyter.cli.demo_service import USERS, run_service_demo

REPO = Path(__file__).resolve().parents[2]


def _daemons_of(folder: str) -> list[int]:
    """Processes whose command line names the demo's folder (its daemon)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if folder in argv:
                pids.append(int(entry.name))
    return pids


def test_the_service_demo_serves_two_users_and_leaves_nothing_behind() -> None:
    if os.geteuid() != 0:
        pytest.skip("the service demo of several users makes real Unix users: run it as root")
    for name in USERS:
        with pytest.raises(KeyError):
            pwd.getpwnam(name)  # another run's users would stop the demo
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]])}
    done = subprocess.run(
        [sys.executable, "-m", "dra_jupyter.cli", "demo", "--service"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    ada, bo = USERS
    assert re.search(rf"{ada} #1 \(pid \d+\) request 2 -> {ada}-1 on gpu-\d, gpu-\d\n", out)
    assert re.search(rf"{bo} #1 \(pid \d+\) request 2 -> {bo}-1 on gpu-\d, gpu-\d\n", out)
    assert (
        f"    LimitError: user {ada}: limit 2 GPUs (default), holds 2; the request needs 1 more\n"
        in out
    )
    assert f"    ClaimNotFoundError: no claim {ada}-1 (already released?)" in out
    # each sees their own claim by name, the other's devices as held by another user
    assert f"{ada}-1: gpu-" in out and "(held by another user)" in out
    assert re.search(rf"the service reclaimed {ada}-1 \d+\.\d\ds after its process exited", out)
    assert re.search(rf"{ada} #2 \(pid \d+\) request 2 -> {ada}-2 on", out)  # room again
    [folder] = re.findall(r"^folder (/tmp/dra-demo-service-\S+);", out, re.M)
    assert out.rstrip().endswith(f"stopped the service and removed {folder}")
    assert f"removed the Unix user {ada}\n" in out and f"removed the Unix user {bo}\n" in out
    for name in USERS:
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
    assert not Path(folder).exists()
    assert _daemons_of(folder) == []


def test_the_service_demo_of_one_user_shows_the_limit_over_their_processes() -> None:
    """What a user who is not root sees (here root, as one user): two processes of one user,
    the limit over both, the reclaim, and that several users need root."""
    out = io.StringIO()
    assert run_service_demo(out, several_users=False) == 0, out.getvalue()
    text = out.getvalue()
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert "made the Unix user" not in text
    assert f"(the limit is per user: {me}'s processes together)\n" in text
    assert (
        f"    LimitError: user {me}: limit 2 GPUs (default), holds 2; the request needs 1 more\n"
        in text
    )
    assert re.search(rf"the service reclaimed {me}-1 \d+\.\d\ds after its process exited", text)
    assert "showing several users needs root" in text
    [folder] = re.findall(r"^folder (/tmp/dra-demo-service-\S+);", text, re.M)
    assert not Path(folder).exists()
    assert _daemons_of(folder) == []

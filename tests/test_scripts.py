"""A plain script's user error ends it with one line, as in IPython and the CLI (issue 42,
item 11: `dra.run` with no kubeconfig printed 41 lines of chained tracebacks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure


def script(tmp_path: Path, text: str, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(text)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DRA_JUPYTER_", "KUBE"))}
    environ.update(
        HOME=str(tmp_path),
        DRA_JUPYTER_LEDGER=str(tmp_path / "ledger.sqlite"),
        DRA_JUPYTER_INVENTORY="h200-8x",
        **env,
    )
    return subprocess.run(
        [sys.executable, *flags, str(path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )


def test_a_user_error_is_one_line_naming_the_scripts_line(tmp_path: Path) -> None:
    done = script(tmp_path, "import dra_jupyter as dra\n\ndra.request(gpu=1, memroy='80Gi')\n")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"{tmp_path / 'train.py'}:3: InvalidInputError: dra.request: ")
    assert "memroy" in done.stderr and "Traceback" not in done.stderr


def test_no_kubeconfig_is_said_as_such(tmp_path: Path) -> None:
    """No KUBECONFIG and no ~/.kube/config: one line that says so, not 'invalid kube-config'
    and the chained ConfigException."""
    done = script(
        tmp_path,
        "import dra_jupyter as dra\ndra.run(['true'], gpu=1, image='python:3')\n",
        DRA_JUPYTER_BACKEND="kubernetes",
    )
    assert done.stderr == (
        f"{tmp_path / 'train.py'}:2: ClusterError: no kubeconfig: KUBECONFIG is unset and "
        "~/.kube/config does not exist; set KUBECONFIG or DRA_JUPYTER_KUBECONFIG "
        "(the CLI: --kubeconfig PATH)\n"
    )


def test_dev_mode_and_bugs_keep_their_traceback(tmp_path: Path) -> None:
    """``python -X dev`` shows a user error's traceback; anything else is not ours to hide."""
    user = script(
        tmp_path, "import dra_jupyter as dra\ndra.request(gpu=1, memroy='1Gi')\n", "-X", "dev"
    )
    assert user.stderr.startswith("Traceback (most recent call last):")
    bug = script(tmp_path, "import dra_jupyter\n1 / 0\n")
    assert "Traceback (most recent call last):" in bug.stderr
    assert bug.stderr.rstrip().endswith("ZeroDivisionError: division by zero")

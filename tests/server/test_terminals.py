"""``dra-jupyter`` in JupyterLab's terminals: the shell command the server gives them puts
the environment's scripts first on PATH, also after a login shell's profile set PATH anew
(Debian's /etc/profile does)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.server.terminals import scripts_folder, terminal_command
from tests.server.conftest import start_extensions

PROFILE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def typed_in(command: list[str], line: str, home: Path) -> str:
    """What the terminal's shell prints for ``line``, typed in, with a PATH and HOME of a
    fresh login (nothing of this test's environment)."""
    done = subprocess.run(
        command,
        input=f"{line}\nexit\n",
        capture_output=True,
        text=True,
        env={"PATH": PROFILE_PATH, "HOME": str(home), "TERM": "dumb"},
        timeout=60,
        check=False,
    )
    return done.stdout


async def test_a_terminal_finds_dra_jupyter(jp_serverapp: Any, tmp_path: Path) -> None:
    await start_extensions(jp_serverapp)
    command = jp_serverapp.terminado_settings["shell_command"]
    found = typed_in(command, "command -v dra-jupyter", tmp_path)
    assert found.strip().splitlines()[-1] == str(scripts_folder() / "dra-jupyter")


def test_as_a_login_shell_too(tmp_path: Path) -> None:
    """/etc/profile runs first (and sets PATH on Debian); the scripts still come first."""
    command = terminal_command("/bin/bash", scripts_folder(), login=True, current={})
    assert command is not None and command[:2] == ["/bin/bash", "-l"]
    found = typed_in(command, "command -v dra-jupyter", tmp_path)
    assert found.strip().splitlines()[-1] == str(scripts_folder() / "dra-jupyter")


@pytest.mark.parametrize(
    ("shell", "current"),
    [("/usr/bin/fish", {}), ("/bin/bash", {"shell_command": ["/bin/zsh"]})],
    ids=["not POSIX", "the admin's shell"],
)
def test_left_alone(shell: str, current: dict[str, Any]) -> None:
    assert terminal_command(shell, scripts_folder(), login=True, current=current) is None

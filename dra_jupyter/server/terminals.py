"""The command line in JupyterLab's terminals: ``dra-jupyter`` on their PATH.

JupyterLab's terminals are login shells when the server has no terminal of its own (a hub
spawns it, ``make lab`` runs it under make), and a login shell reads ``/etc/profile``,
which on Debian sets PATH anew: the folder of the server's Python scripts (a virtualenv's
``bin``, where ``dra-jupyter`` is) is gone, and so is the command. Unless the admin chose
the terminals' shell (``ServerApp.terminado_settings["shell_command"]``), the terminal's
shell is started as before, then puts that folder first on PATH and becomes the
interactive shell the user types in (``exec SHELL -i``: it reads ``~/.bashrc`` as a
terminal's shell does).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

POSIX_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})  # they read `export PATH`


def scripts_folder() -> Path:
    """Where this environment's console scripts are (``dra-jupyter`` among them)."""
    return Path(sysconfig.get_path("scripts"))


def terminal_command(
    shell: str, scripts: Path, *, login: bool, current: Mapping[str, Any]
) -> list[str] | None:
    """The terminals' shell command with ``scripts`` first on PATH; None where it cannot
    be said for ``shell`` (not a POSIX shell) or is said already (``current``: the
    server's terminado_settings, which name a shell command of the admin's)."""
    if "shell_command" in current or os.name == "nt":
        return None
    if Path(shell).name not in POSIX_SHELLS:
        return None
    folder = shlex.quote(str(scripts))
    script = f'PATH={folder}:"$PATH"; export PATH; exec {shlex.quote(shell)} -i'
    return [shell, *(["-l"] if login else []), "-c", script]


def put_scripts_on_terminal_path(terminado_settings: MutableMapping[str, Any]) -> bool:
    """Set the terminals' shell command (see the module's docstring); True if it was set.
    Login or not, as jupyter_server_terminals chooses: a login shell unless the server
    runs in a terminal."""
    shell = os.environ.get("SHELL") or shutil.which("sh") or "/bin/sh"
    command = terminal_command(
        shell, scripts_folder(), login=not sys.stdout.isatty(), current=terminado_settings
    )
    if command is None:
        return False
    terminado_settings["shell_command"] = command
    return True

"""Kernel specs a spawner gives the server as it starts: a JupyterHub profile whose devices
go to the kernels, not to the server ("GPU kernels only", ``dra_kernels_only`` of
:mod:`dra_jupyter.hub.kubespawner`), passes the kernel spec that runs a kernel in a pod of
its own with those devices (the ``dra-kubernetes`` provisioner) this way:

* ``$DRA_JUPYTER_KERNEL_SPECS``: a JSON object of kernel specs by name, each what a
  ``kernel.json`` holds (``{"dra-h200-x1": {"argv": [...], "display_name": ..., ...}}``);
* ``$DRA_JUPYTER_DEFAULT_KERNEL``: the name of the one that new notebooks start with.

Why the environment and not files: the hub cannot write into the server's pod, and an init
container or a postStart hook would need a shell and a shared volume. The specs are written
here to a folder of their own (a temporary one, not the user's home, which outlives this
server and its profile) that goes first in the kernel spec manager's ``kernel_dirs``, and
removed when the server stops. Specs that are not specs stop the server, saying which and
why: a server that quietly lacks its GPU kernel would leave its user wondering where the
devices went.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dra_jupyter.errors import InvalidInputError, shown

SPECS_ENV = "DRA_JUPYTER_KERNEL_SPECS"
DEFAULT_ENV = "DRA_JUPYTER_DEFAULT_KERNEL"
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # jupyter_client's kernel names, bounded


def parse_specs(text: str) -> dict[str, dict[str, Any]]:
    """The kernel specs of ``$DRA_JUPYTER_KERNEL_SPECS``; InvalidInputError naming the
    spec and what is wrong with it."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise InvalidInputError(
            f"${SPECS_ENV}: not JSON; expected an object of kernel specs by name"
        ) from err
    if not isinstance(value, dict):
        raise InvalidInputError(
            f"${SPECS_ENV}: expected an object of kernel specs by name, not {shown(value)}"
        )
    for name, spec in value.items():
        where = f"${SPECS_ENV}: kernel spec {shown(name)}"
        if NAME.fullmatch(name) is None:
            raise InvalidInputError(
                f"{where}: a kernel's name is lower-case letters, digits, '.', '_' and '-'"
            )
        if not isinstance(spec, dict):
            raise InvalidInputError(f"{where}: expected a kernel.json object, not {shown(spec)}")
        argv = spec.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise InvalidInputError(f"{where}: argv must be a list of strings")
        if not isinstance(spec.get("display_name"), str):
            raise InvalidInputError(f"{where}: display_name must be a string")
    return value


def write_specs(specs: dict[str, dict[str, Any]]) -> Path:
    """A new folder with ``<name>/kernel.json`` for each spec (what ``kernel_dirs`` lists)."""
    folder = Path(tempfile.mkdtemp(prefix="dra-kernelspecs-"))
    for name, spec in specs.items():
        (folder / name).mkdir()
        text = json.dumps(spec, indent=1, ensure_ascii=False) + "\n"
        (folder / name / "kernel.json").write_text(text, encoding="utf-8")
    return folder


def install(serverapp: Any, environ: Mapping[str, str]) -> Path | None:
    """Give ``serverapp`` the specs of ``environ`` (see the module) and make the default
    one its kernel manager's default kernel; the folder written (None: no specs given)."""
    text = environ.get(SPECS_ENV, "")
    if not text:
        return None
    specs = parse_specs(text)
    default = environ.get(DEFAULT_ENV, "")
    if default and default not in specs:
        raise InvalidInputError(
            f"${DEFAULT_ENV}={shown(default)} is none of the kernel specs given in "
            f"${SPECS_ENV} ({', '.join(specs) or 'none'})"
        )
    folder = write_specs(specs)
    ksm = serverapp.kernel_spec_manager
    ksm.kernel_dirs = [str(folder), *ksm.kernel_dirs]
    if default:
        serverapp.kernel_manager.default_kernel_name = default
    return folder


def remove(folder: Path | None) -> None:
    """The folder :func:`install` wrote, removed (the server stops)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)

"""Kernel specs a spawner gives the server in its environment ($DRA_JUPYTER_KERNEL_SPECS,
$DRA_JUPYTER_DEFAULT_KERNEL: a "GPU kernels only" profile of DRAKubeSpawner): listed by the
server, the named one its default kernel, removed when it stops; specs that are not specs
stop the server saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.hub import kubespawner
from dra_jupyter.server import givenspecs
from tests.server.conftest import Fetch

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 120  # seconds a server may take to start and stop (never a timing asserted)
REQUEST = {"gpu": 1, "model": "H200"}
SPECS = kubespawner.profile_kernel_specs(REQUEST, "h200-kernels", "One H200, in kernels")


@pytest.fixture(autouse=True)
def given(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What DRAKubeSpawner puts into the server's environment, before the server starts."""
    for key, value in kubespawner.kernels_env(SPECS).items():
        monkeypatch.setenv(key, value)
    yield


async def test_the_server_lists_the_given_spec_as_its_default_kernel(
    jp_serverapp: Any, jp_fetch: Fetch
) -> None:
    answer = json.loads((await jp_fetch("api", "kernelspecs")).body)
    assert answer["default"] == "dra-h200-kernels"
    spec = answer["kernelspecs"]["dra-h200-kernels"]["spec"]
    assert spec["display_name"] == "Python 3 \u00b7 One H200, in kernels"
    assert spec["metadata"]["kernel_provisioner"] == {
        "provisioner_name": "dra-kubernetes",
        "config": {"request": REQUEST},
    }
    assert spec["interrupt_mode"] == "message"
    assert "python3" in answer["kernelspecs"]  # the server's own kernel is still there
    [folder] = [
        Path(d) for d in jp_serverapp.kernel_spec_manager.kernel_dirs if "dra-kernelspecs-" in d
    ]
    assert folder.is_dir()
    await jp_serverapp.extension_manager.stop_all_extensions()
    assert not folder.exists()  # a temporary folder: nothing of it outlives the server


@pytest.mark.pure
def test_the_spawners_names_are_the_servers() -> None:
    assert kubespawner.KERNEL_SPECS_ENV == givenspecs.SPECS_ENV
    assert kubespawner.DEFAULT_KERNEL_ENV == givenspecs.DEFAULT_ENV


@pytest.mark.pure
@pytest.mark.parametrize(
    ("text", "default", "message"),
    [
        ("gpu=1", "", "not JSON"),
        ("[]", "", "expected an object of kernel specs by name"),
        ('{"Big Name": {"argv": ["python"], "display_name": "x"}}', "", "a kernel's name is"),
        ('{"dra-x": "kernel.json"}', "", "expected a kernel.json object"),
        ('{"dra-x": {"display_name": "x"}}', "", "argv must be a list of strings"),
        ('{"dra-x": {"argv": ["python"]}}', "", "display_name must be a string"),
        ('{"dra-x": {"argv": ["python"], "display_name": "x"}}', "dra-y", "is none of"),
    ],
)
def test_specs_that_are_not_specs_are_refused_saying_which(
    text: str, default: str, message: str
) -> None:
    server = SimpleNamespace(kernel_spec_manager=SimpleNamespace(kernel_dirs=[]))
    environ = {givenspecs.SPECS_ENV: text, givenspecs.DEFAULT_ENV: default}
    with pytest.raises(InvalidInputError, match=message):
        givenspecs.install(server, environ)
    assert server.kernel_spec_manager.kernel_dirs == []  # nothing written


@pytest.mark.pure
def test_no_specs_given_changes_nothing() -> None:
    server = SimpleNamespace(kernel_spec_manager=SimpleNamespace(kernel_dirs=["/k"]))
    assert givenspecs.install(server, {}) is None
    assert server.kernel_spec_manager.kernel_dirs == ["/k"]


def test_a_server_given_broken_specs_does_not_start(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]]),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "DRA_JUPYTER_BACKEND": "local",
        "DRA_JUPYTER_LEDGER": str(tmp_path / "ledger.sqlite"),
        "DRA_JUPYTER_INVENTORY": "h200-8x",
        givenspecs.SPECS_ENV: '{"dra-x": {"argv": "python"}}',
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--port=0",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.jpserver_extensions=dra_jupyter=True",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "kernel spec 'dra-x': argv must be a list of strings" in done.stderr

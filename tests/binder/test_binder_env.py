"""binder/: the mybinder environment, built the way repo2docker builds it from the binder/
files alone, in a fresh virtualenv (no system site packages, so a missing requirement
fails), on a copy of the repository's tracked files; then the example notebooks run
through binder/start in that environment's kernel, on the simulated devices, and JupyterLab
starts through it as mybinder starts it.

The wheels are the network's part: every run would download the same ones again. They are
kept in a wheelhouse between runs, ``${XDG_CACHE_HOME:-~/.cache}/dra-jupyter/binder/`` (the
cache folder of the Kubernetes build, tests/k8s/k8sbuild.py), one for each content of
binder/requirements.txt, pyproject.toml's dependencies and the runtime's Python: made once
with ``pip wheel`` against the index (what mybinder's resolve would find), then installed
from with ``--no-index``, so a run costs the install and the test, not the downloads. A
wheelhouse older than :data:`WHEELS_MAX_AGE` is made again, so that the unpinned
dependencies follow the index; ``DRA_JUPYTER_BINDER_WHEELS=refresh`` makes it again now.

Slow the first time (pip and jlpm download what their caches lack; yarn's cache is used, as
on a developer's machine), and bounded: every step has a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.examples.notebooks import html, text
from tests.helpers import free_port
from tests.k8s.k8sbuild import locked  # one run at a time makes a wheelhouse

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = "01-quickstart.ipynb"
INSTALL_TIMEOUT = 900  # seconds for pip -r requirements.txt, and again for postBuild
RUN_TIMEOUT = 600  # seconds for the notebook, or for the server to answer
# what binder/start must select: the README's simulated 8x H200
INVENTORY = "8x NVIDIA H200 (HGX): 2 NUMA nodes, 4 PCIe roots"
WHEELS_MAX_AGE = 7 * 24 * 3600  # seconds: then the wheelhouse is made again from the index


@dataclass(frozen=True)
class BinderEnv:
    repo: Path  # the copy that postBuild ran in (repo2docker's working directory)
    venv: Path
    tmp: Path
    env: Mapping[str, str]  # what the image's processes see, before binder/start
    build_log: str  # postBuild's output

    def start(self, *argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """``binder/start ARGV...`` in the copy, as mybinder starts its server."""
        return subprocess.run(
            [str(self.repo / "binder" / "start"), *argv],
            check=False,
            cwd=self.repo,
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def execute(self, notebook: str) -> Any:
        """``binder/start jupyter execute examples/NOTEBOOK`` (nbclient, in the venv's
        kernel): the executed notebook; a cell that raises, unless it is tagged
        ``raises-exception``, fails it."""
        done = self.start(
            "jupyter", "execute", "--output=executed-{notebook_name}",
            f"--timeout={RUN_TIMEOUT}", f"examples/{notebook}",
            timeout=RUN_TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return nbformat.read(  # type: ignore[no-untyped-call]
            self.repo / "examples" / f"executed-{notebook}", as_version=4
        )


def tracked_copy(into: Path) -> Path:
    """The repository's tracked files as they are in the work tree (so nothing untracked
    or ignored, no build output, no node_modules, comes along), modes kept."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.is_file():  # deleted in the work tree, not yet in the index
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return into


def runtime_python() -> str:
    """The interpreter binder/runtime.txt asks for (``python-3.11``: ``python3.11``)."""
    wanted = (REPO / "binder" / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(\d+\.\d+)", wanted)
    assert match, f"binder/runtime.txt: {wanted!r} is not python-X.Y"
    found = shutil.which(f"python{match[1]}")
    assert found, f"binder/runtime.txt asks for {wanted}: no python{match[1]} on the PATH"
    return found


def image_env(tmp: Path, venv: Path) -> dict[str, str]:
    """This machine's environment as the image's: the venv's bin first, no other venv on
    the PATH, nothing of this checkout or this user's Python and Jupyter set-up (a user
    site, PYTHONPATH, config and data folders), no dra-jupyter or device variable. HOME
    stays, and with it pip's and yarn's caches (yarn fetches from its global mirror,
    ~/.yarn/berry/cache, what it has; node_modules is made of hard links into yarn's global
    store, ~/.yarn/berry/store, instead of copies: the same files, written once)."""
    drop = ("DRA_JUPYTER_", "JUPYTER", "IPYTHON", "PYTHON", "VIRTUAL_ENV", "CONDA")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop) and not k.endswith("_VISIBLE_DEVICES")
    }
    path = [
        p
        for p in env.get("PATH", os.defpath).split(os.pathsep)
        if p and not (Path(p).parent / "pyvenv.cfg").exists()
    ]
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), *path]),
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
        JUPYTER_DATA_DIR=str(tmp / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
        IPYTHONDIR=str(tmp / "ipython"),
        XDG_STATE_HOME=str(tmp / "state"),  # the ledger binder's default puts in $HOME
        YARN_NM_MODE="hardlinks-global",
    )
    return env


def run(argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> str:
    """Runs a build step; its output, or a failure that shows it. How long it took is
    printed (pytest -s shows it), never asserted."""
    began = time.monotonic()
    done = subprocess.run(
        argv,
        check=False,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    print(f"{' '.join(Path(a).name for a in argv)}: {time.monotonic() - began:.0f} s")
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}"
    return done.stdout


def wheel_requirements() -> list[str]:
    """What the image's pip installs: binder/requirements.txt's lines (comments dropped), then
    dra-jupyter's own dependencies (pyproject.toml), which postBuild's ``pip install .``
    adds."""
    lines = (REPO / "binder" / "requirements.txt").read_text().splitlines()
    pinned = [line.split("#", 1)[0].strip() for line in lines]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*filter(None, pinned), *project["dependencies"]]


def wheelhouse_dir(python: str) -> Path:
    """The wheelhouse of these requirements for this interpreter and machine."""
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    key = "\n".join([*wheel_requirements(), version, platform.machine()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dra-jupyter" / "binder" / f"wheels-{digest}"


def wheelhouse(python: str, env: Mapping[str, str], tmp: Path) -> Path:
    """A folder with a wheel of every distribution the image installs (but dra-jupyter,
    built from the copy): kept from an earlier run while it is complete and younger than
    :data:`WHEELS_MAX_AGE`, else made with ``pip wheel`` against the index (sdists built
    into wheels, so that installing needs no index at all)."""
    wheels = wheelhouse_dir(python)
    stamp = wheels / "complete"
    refresh = os.environ.get("DRA_JUPYTER_BINDER_WHEELS") == "refresh"
    with locked(wheels.with_name(wheels.name + ".lock")):
        if stamp.is_file() and not refresh and time.time() - stamp.stat().st_mtime < WHEELS_MAX_AGE:
            print(f"wheels: {wheels}, kept from an earlier run")
            return wheels
        requirements = tmp / "wheel-requirements.txt"
        requirements.write_text("\n".join(wheel_requirements()) + "\n")
        fresh = wheels.with_name(wheels.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        run(
            [python, "-m", "pip", "wheel", "-q", "-r", str(requirements), "-w", str(fresh)],
            cwd=tmp, env=env, timeout=INSTALL_TIMEOUT,
        )  # fmt: skip
        (fresh / "complete").write_text("\n".join(wheel_requirements()) + "\n")
        shutil.rmtree(wheels, ignore_errors=True)
        fresh.rename(wheels)
    return wheels


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BinderEnv]:
    tmp = tmp_path_factory.mktemp("binder")
    try:
        repo = tracked_copy(tmp / "repo")
        venv = tmp / "venv"
        run([runtime_python(), "-m", "venv", str(venv)], cwd=tmp, env=os.environ, timeout=120)
        env = image_env(tmp, venv)
        python = str(venv / "bin" / "python")
        # pip in both steps finds every wheel in the wheelhouse, and nothing on the index
        offline = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse(python, env, tmp))}
        # what repo2docker does with binder/: requirements.txt, then postBuild in the root
        run(
            [python, "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
            cwd=repo,
            env=offline,
            timeout=INSTALL_TIMEOUT,
        )
        log = run(
            [str(repo / "binder" / "postBuild")], cwd=repo, env=offline, timeout=INSTALL_TIMEOUT
        )
        yield BinderEnv(repo, venv, tmp, env, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a venv and a build: hundreds of MB


def test_postbuild_checks_the_installed_extensions(binder: BinderEnv) -> None:
    log = binder.build_log
    assert re.search(r"^ *dra_jupyter +\S*enabled", log, re.M), log
    assert "dra-jupyter-labextension v0.1.0" in log
    assert "binder/postBuild: dra-jupyter 0.1.0 is installed and enabled" in log
    # installed from the copy, not linked to it: the image runs the wheel's build
    shown = run(
        [str(binder.venv / "bin" / "python"), "-m", "pip", "show", "-f", "dra-jupyter"],
        cwd=binder.tmp,
        env=binder.env,
        timeout=60,
    )
    assert "share/jupyter/labextensions/dra-jupyter-labextension/package.json" in shown
    assert "Editable project location" not in shown
    # postBuild leaves no node_modules in the image
    assert not (binder.repo / "labextension" / "node_modules").exists()


def failed(nb: Any) -> list[list[str]]:
    """The tags of the code cells that showed an error."""
    return [
        c.metadata.get("tags", [])
        for c in nb.cells
        if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)
    ]


def test_quickstart_runs_on_the_simulated_devices(binder: BinderEnv) -> None:
    specs = json.loads(binder.start("jupyter", "kernelspec", "list", "--json", timeout=60).stdout)
    assert Path(specs["kernelspecs"]["python3"]["resource_dir"]).is_relative_to(binder.venv)
    nb = binder.execute(QUICKSTART)
    assert failed(nb) == [["error", "raises-exception"]], "only the cell showing a mistake fails"
    error = re.sub(r"\x1b\[[0-9;]*m", "", text(nb, "error")).strip()
    assert error.endswith(f"asks for 9 GPU devices; {INVENTORY} (simulated) has 8"), error
    shown = html(nb, "devices")
    assert "SIMULATED" in shown
    assert shown.count("gpu.nvidia.com/gpu-node-1/gpu-") == 8
    assert shown.count("<td>free</td>") == 8
    assert text(nb, "held").count("gpu.nvidia.com/gpu-node-1/gpu-") == 1
    assert "(none)" in text(nb, "after-cell")
    # binder's ledger: the default one, under $XDG_STATE_HOME (the image's home folder)
    assert (binder.tmp / "state" / "dra-jupyter" / "ledger.sqlite").is_file()


@pytest.mark.parametrize(
    "notebook",
    ["02-multi-gpu-topology.ipynb", "03-mig-and-sharing.ipynb", "04-idle-release.ipynb"],
)
def test_the_other_examples_run(binder: BinderEnv, notebook: str) -> None:
    """What tests/examples checks in detail, here only: they run in binder's environment."""
    nb = binder.execute(notebook)
    assert failed(nb) == []
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")


def get(url: str, token: str) -> Any:
    """A GET as a logged-in client makes it: JSON decoded, a page as text."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read().decode()
        kind = reply.headers.get_content_type()
    return json.loads(body) if kind == "application/json" else body


def test_lab_serves_the_extensions_on_the_simulated_devices(binder: BinderEnv) -> None:
    """JupyterLab as mybinder starts it (through binder/start, in the repository root):
    the server extension on the simulated inventory with binder's idle policy, and the
    page loads the lab extension and the widgets' front ends."""
    port, token = free_port(), secrets.token_hex(16)
    argv = [
        str(binder.repo / "binder" / "start"),
        "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    url = f"http://127.0.0.1:{port}"
    log_path = binder.tmp / "lab.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            argv, cwd=binder.repo, env=dict(binder.env), stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT
            while True:
                assert server.poll() is None, f"jupyter lab exited: {log_path.read_text()}"
                assert time.monotonic() < deadline, f"no answer: {log_path.read_text()}"
                try:
                    get(f"{url}/api/status", token)
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.2)
            devices = get(f"{url}/dra/api/devices", token)
            assert devices["simulated"] is True
            assert devices["inventory"] == INVENTORY
            assert [d["state"] for d in devices["devices"]] == ["free"] * 8
            metrics = get(f"{url}/dra/api/metrics", token)
            assert (metrics["source"], metrics["idle_timeout"], metrics["idle_warning"]) == (
                "simulated",
                120,
                60,
            )
            page = get(f"{url}/lab", token)
            found = re.search(r'<script id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)
            assert found, page[:2000]
            federated = {e["name"] for e in json.loads(found[1])["federated_extensions"]}
            assert {
                "dra-jupyter-labextension",
                "anywidget",
                "@jupyter-widgets/jupyterlab-manager",
            } <= federated
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

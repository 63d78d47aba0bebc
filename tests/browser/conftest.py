"""A real JupyterLab with the extension, and Debian's chromium driven by Playwright.

The server runs as a separate process (``jupyter lab``, as a user starts it) on a free
loopback port, with a temporary ledger and the simulated ``h200-8x``; chromium is the
Debian package (``make test`` installs it); Playwright never downloads a browser.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.helpers import free_port, running

CHROMIUM = os.environ.get("DRA_JUPYTER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_SECONDS = 60.0  # how long the server may take to answer before the test fails


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    ledger: Path

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A REST call to the server, as a logged-in client would make it."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as reply:
            text = reply.read().decode()
        return json.loads(text) if text else None


@contextmanager
def running_lab(
    tmp: Path, extra_argv: Sequence[str] = (), extra_env: Mapping[str, str] | None = None
) -> Iterator[Lab]:
    """``jupyter lab`` on a free loopback port with a fresh token, stopped on exit."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run 'make test' (it installs Debian's chromium)")
    root = tmp / "notebooks"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    settings = tmp / "lab-settings"
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))  # no "get news?" toast over the page
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "rt"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        **(extra_env or {}),
    )
    argv = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *extra_argv,
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    server = Lab(f"http://127.0.0.1:{port}", token, root, tmp / "ledger.sqlite")

    def ready() -> bool:
        server.api("GET", "/api/status")  # URLError, ConnectionError: OSErrors, not yet
        return True

    with running(
        argv, log=tmp / "lab.log", ready=ready, env=env, wait=START_SECONDS, what="jupyter lab"
    ):
        yield server


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab with the extension, its own ledger and the simulated h200-8x."""
    tmp = tmp_path_factory.mktemp("lab")
    extension = [
        f"--DRAExtensionApp.ledger={tmp / 'ledger.sqlite'}",
        "--DRAExtensionApp.inventory=h200-8x",
        "--DRAExtensionApp.check_interval=0.5",
    ]
    with running_lab(tmp, extension) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    try:
        yield page
    finally:
        # what the page showed and logged, kept for a failed test
        page.screenshot(path=str(screenshots_dir(tmp_path) / f"{request.node.name}.png"))
        (screenshots_dir(tmp_path) / f"{request.node.name}.console.txt").write_text(
            "\n".join(console)
        )
        context.close()


def screenshots_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$DRA_JUPYTER_SCREENSHOTS`` if set (to keep them), else tmp."""
    where = os.environ.get("DRA_JUPYTER_SCREENSHOTS")
    out = Path(where) if where else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


WAIT_MS = 60_000  # how long the page may take to show a state (a hang, not a timing)
# the board's rows that say "held", counted in the page
HELD = (
    "() => [...document.querySelectorAll('.dra-board tr')]"
    ".filter(r => r.textContent.includes('held')).length === {}"
)


KERNEL = "Python 3 (ipykernel)"  # the display name of the notebooks' kernel, python3


def open_notebook(page: Any, lab: Lab, name: str, cells: Sequence[str]) -> None:
    """Write a notebook of ``cells``, start its kernel session, open it in the page, and wait
    until the page is connected to that kernel and it is idle. The session exists first, so
    JupyterLab attaches to it rather than asking for a kernel; until it has attached, it
    counts the notebook as having no kernel, and a Run All then has each code cell start one
    in the session's place or ask which to start (JupyterLab's ``runCell``): a cell whose
    execution went to a kernel that was replaced never runs."""
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": KERNEL, "language": "python"}
    nbformat.write(nb, lab.root / name)  # type: ignore[no-untyped-call]
    session = {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    kernel = lab.api("POST", "/api/sessions", session)["kernel"]["id"]
    page.goto(f"{lab.url}/lab/tree/{name}?token={lab.token}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=WAIT_MS)
    # the status bar names the kernel and its state once the page has one and is connected
    # to it (not the toolbar's execution indicator: that says idle before there is a kernel)
    idle = re.compile(rf"^{re.escape(KERNEL)} \| Idle$")
    page.locator(".jp-StatusBar-TextItem").filter(has_text=idle).wait_for(timeout=WAIT_MS)
    kernels = [s["kernel"]["id"] for s in lab.api("GET", "/api/sessions") if s["path"] == name]
    assert kernels == [kernel], "JupyterLab gave the notebook another kernel than its session's"


def run_all_cells(page: Any) -> None:
    """Run > Run All Cells, as a user does, until every code cell has started (it shows
    ``[*]`` or its count instead of ``[ ]``). JupyterLab may ignore a click made while it
    still sets up the page; then click again, as long as no cell has started."""
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt")
    for attempt in range(WAIT_MS // 200):
        started = [p.strip() not in ("[ ]:", "") for p in prompts.all_inner_texts()]
        if started and all(started):
            return
        if not any(started) and attempt % 50 == 0:  # again every ~10 s while none has started
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        page.wait_for_timeout(200)
    raise AssertionError(f"not every cell started: {prompts.all_inner_texts()}")

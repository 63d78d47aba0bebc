"""A real JupyterLab with the extension, and Debian's chromium driven by Playwright.

The server runs as a separate process (``jupyter lab``, as a user starts it) on a free
loopback port, with a temporary ledger and the simulated ``h200-8x``; chromium is the
Debian package (``make test`` installs it); Playwright never downloads a browser.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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
START_TRIES = 600  # x 0.1 s: how long the server may take to answer before the test fails


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run 'make test' (it installs Debian's chromium)")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    ledger = tmp / "ledger.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    settings = tmp / "lab-settings"
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))  # no "get news?" toast over the page
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "rt"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
    )
    argv = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--DRAExtensionApp.ledger={ledger}", "--DRAExtensionApp.inventory=h200-8x",
        "--DRAExtensionApp.check_interval=0.5",
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Lab(f"http://127.0.0.1:{port}", token, root, ledger)
    try:
        for _ in range(START_TRIES):
            if proc.poll() is not None:
                raise AssertionError(f"jupyter lab exited: {(tmp / 'lab.log').read_text()}")
            try:
                server.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        else:
            raise AssertionError(f"jupyter lab did not answer: {(tmp / 'lab.log').read_text()}")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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

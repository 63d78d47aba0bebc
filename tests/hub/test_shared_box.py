"""JupyterHub on one shared GPU machine, for real: a JupyterHub (its configurable-http-proxy
from hub/proxy) whose DRALocalSpawner runs each server as its real Unix user, the real
``dra-jupyter service`` (the simulated h200-8x, 2 GPUs per user) and real users.

alice spawns through the form (logged in, the form's live counts read, the form posted),
bob through the REST API; each server's kernels see the devices of its claim, which the
service holds for that user; a second server of alice's over her limit fails with the
service's reason, a choice bob may not make is refused; stopping a server gives its devices
back. Every wait is bounded (the DEADLINE of tests/service); users, processes, ports and
folders are removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.kernel.environment import environment_for
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.types import ClaimRecord, Owner
from tests import kernelws
from tests.helpers import free_port
from tests.hub.access import reachable
from tests.service.accounts import DEADLINE, Service, User, service, unix_users, wait_for

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / "hub" / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
PASSWORD = secrets.token_hex(8)
TOKEN = secrets.token_hex(16)
POLICY = "[limits]\ngpus = 2\n"


@dataclass
class Hub:
    url: str  # the proxy's: http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The hub's REST API with the test service's token: (status, JSON answer)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/hub/api/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE) as r:
                text = r.read().decode()
                return r.status, json.loads(text) if text else None
        except urllib.error.HTTPError as err:
            with err:
                text = err.read().decode()
            return err.code, json.loads(text) if text.startswith("{") else text

    def server(self, user: User, name: str = "") -> dict[str, Any] | None:
        status, info = self.api("GET", f"users/{user.name}")
        assert status == 200, info
        found: dict[str, Any] | None = info["servers"].get(name)
        return found

    def wait_ready(self, user: User, name: str = "") -> None:
        def ready() -> bool:
            found = self.server(user, name)
            return found is not None and bool(found.get("ready"))

        wait_for(f"{user.name}'s server {name!r} is ready ({self.tail()})", ready, 2 * DEADLINE)

    def stop(self, user: User, name: str = "") -> None:
        path = f"users/{user.name}/server" + (f"s/{name}" if name else "")
        status, answer = self.api("DELETE", path)
        assert status in (202, 204), answer
        wait_for(f"{user.name}'s server {name!r} stopped", lambda: self.server(user, name) is None)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def hub_config(folder: Path, svc: Service, port: int, group: str, users: list[str]) -> str:
    return f"""
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(folder / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{folder / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(folder / "cookie_secret")!r}
c.JupyterHub.cleanup_servers = True
c.JupyterHub.allow_named_servers = True
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": {2 * DEADLINE}}}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {set(users)!r}
c.JupyterHub.services = [{{"name": "test", "api_token": {TOKEN!r}}}]
c.JupyterHub.load_roles = [
    {{
        "name": "test",
        "scopes": ["admin:users", "admin:servers", "access:servers", "list:users"],
        "services": ["test"],
    }}
]
c.JupyterHub.spawner_class = "dra_jupyter.hub.localspawner.DRALocalSpawner"
c.DRALocalSpawner.dra_socket = {str(svc.socket)!r}
c.Spawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.start_timeout = {2 * DEADLINE}
c.Spawner.http_timeout = {2 * DEADLINE}
c.DRAProfiles.rules = [
    {{"match": "h200-x8", "groups": [{group!r}]}},
    {{"match": "h200-*", "lease": "2h"}},
]
"""


@contextlib.contextmanager
def running_hub(folder: Path, svc: Service, group: str, users: list[str]) -> Iterator[Hub]:
    if not PROXY.exists():
        pytest.fail(f"{PROXY} is missing: run 'make test' (or 'make hub-proxy'), which installs it")
    port = free_port()
    (folder / "jupyterhub_config.py").write_text(hub_config(folder, svc, port, group, users))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    log = folder / "hub.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    hub = Hub(f"http://127.0.0.1:{port}", process, log)
    try:

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the hub exited: {hub.tail()}")
            with contextlib.suppress(OSError):
                return hub.api("GET", "")[0] == 200
            return False

        wait_for("the hub answers", answers, 2 * DEADLINE)
        yield hub
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the hub stops the servers (cleanup_servers)
            try:
                process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(DEADLINE)
        with contextlib.suppress(ProcessLookupError, ValueError, OSError):
            os.kill(int((folder / "proxy.pid").read_text()), signal.SIGKILL)  # if left


class Browser:
    """A user's session with the hub: logged in through its form, cookies kept."""

    def __init__(self, hub: Hub, user: User) -> None:
        self.hub = hub
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        page = self.get("/hub/login")
        self.post("/hub/login", {"username": user.name, "password": PASSWORD}, page)

    def get(self, path: str) -> str:
        with self.opener.open(f"{self.hub.url}{path}", timeout=DEADLINE) as r:
            text: str = r.read().decode()
            return text

    def post(self, path: str, fields: dict[str, str], page: str) -> str:
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page) or re.search(
            r'xsrf_token: "([^"]+)"',
            page,  # the page's script adds it to its forms
        )
        assert xsrf is not None, page[-2000:]
        body = urllib.parse.urlencode({**fields, "_xsrf": xsrf.group(1)}).encode()
        with self.opener.open(f"{self.hub.url}{path}", data=body, timeout=2 * DEADLINE) as r:
            text: str = r.read().decode()
            return text


def offered(form: str) -> dict[str, tuple[int, bool]]:
    """The form's choices: slug -> (available now, can be chosen)."""
    out = {}
    for match in re.finditer(r'data-available="(\d+)"><input [^>]*value="([^"]+)"([^>]*)>', form):
        out[match.group(2)] = (int(match.group(1)), "disabled" not in match.group(3))
    return out


@contextlib.contextmanager
def root_client(svc: Service) -> Iterator[ServiceBackend]:
    """The service as root sees it (every claim, its owner named)."""
    client = ServiceBackend(svc.socket, Owner.current())
    try:
        yield client
    finally:
        client.channel.close()


def visible_devices(client: ServiceBackend, record: ClaimRecord) -> str:
    results = record.allocation["devices"]["results"]
    return environment_for(results, client.inventory().slices).env["CUDA_VISIBLE_DEVICES"]


def in_kernel(hub: Hub, user: User, code: str) -> str:
    """What ``code`` prints in a new kernel of the user's server (through the proxy)."""
    base = f"/user/{user.name}/api/kernels"
    request = urllib.request.Request(
        f"{hub.url}{base}",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=DEADLINE) as r:
        kernel = json.loads(r.read())["id"]
    url = hub.url.replace("http://", "ws://") + f"{base}/{kernel}/channels"
    return asyncio.run(kernelws.execute(url, TOKEN, code, deadline=DEADLINE))


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, User]]:
    """alice, bob and carol (in the group that may take 8 GPUs), each with a home."""
    if os.geteuid() != 0:
        pytest.skip("the service tier makes real Unix users: run it as root (CI does)")
    homes = Path(f"/tmp/dra-hub-homes-{secrets.token_hex(4)}")
    homes.mkdir(mode=0o755)
    try:
        with unix_users("alice", "bob", "carol", admin_group="dsvgpu") as made:
            for short in ("alice", "bob", "carol"):
                user = made[short]
                home = homes / user.name
                home.mkdir(mode=0o700)
                os.chown(home, user.uid, user.gid)
                subprocess.run(
                    ["usermod", "-d", str(home), user.name], check=True, timeout=DEADLINE
                )
            yield made
    finally:
        shutil.rmtree(homes, ignore_errors=True)


def test_each_user_spawns_with_devices_within_their_limit(
    people: dict[str, User], tmp_path: Path
) -> None:
    alice, bob, group = people["alice"], people["bob"], people["_admin_group"].name
    folder = tmp_path / "hub"
    folder.mkdir()
    imports = (
        "dra_jupyter.hub.localspawner, dra_jupyter.server.app, jupyterhub.singleuser, ipykernel"
    )
    with (
        reachable([alice, bob, people["carol"]], imports) as opened,
        service(POLICY, inventory="h200-8x") as svc,
        running_hub(folder, svc, group, [u.name for u in (alice, bob, people["carol"])]) as hub,
        root_client(svc) as client,
    ):
        print("opened for the test users:", opened or "nothing")
        # alice: the form shows what can start now (8 idle GPUs), not what she may not take
        browser = Browser(hub, alice)
        form = browser.get("/hub/spawn")
        choices = offered(form)
        assert choices["none"] == (2**31 - 1, True)
        assert choices["h200-x1"] == (8, True) and choices["h200-x2"] == (4, True)
        assert "h200-x8" not in choices  # only the group's
        assert "lease 2h" in form
        browser.post("/hub/spawn", {"profile": "h200-x2"}, form)
        hub.wait_ready(alice)
        # bob: through the REST API
        status, answer = hub.api("POST", f"users/{bob.name}/server", {"profile": "h200-x1"})
        assert status in (201, 202), answer
        hub.wait_ready(bob)

        held = {r.owner.user: r for r in client.holders()}
        assert sorted(held) == sorted([alice.name, bob.name])
        assert len(held[alice.name].device_keys) == 2 and len(held[bob.name].device_keys) == 1
        assert not set(held[alice.name].device_keys) & set(held[bob.name].device_keys)
        assert held[alice.name].lease_expires is not None  # the rule's lease

        # each server's kernels see their own claim's devices
        code = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
        for user in (alice, bob):
            shown = in_kernel(hub, user, code).strip()
            assert shown == visible_devices(client, held[user.name]), user.name

        # the form (of a second server of alice's) counts what is left: 5 GPUs
        assert offered(browser.get(f"/hub/spawn/{alice.name}/second"))["h200-x1"] == (5, True)

        # over alice's limit (2 GPUs): the service's reason, one line
        status, answer = hub.api(
            "POST", f"users/{alice.name}/servers/second", {"profile": "h200-x1"}
        )
        assert status == 409, answer
        assert answer["message"] == (
            f"user {alice.name}: limit 2 GPUs (default), holds 2; the request needs 1 more"
        )
        assert hub.server(alice, "second") is None
        # a choice bob may not make
        status, answer = hub.api("POST", f"users/{bob.name}/servers/big", {"profile": "h200-x8"})
        assert status == 403, answer
        assert f"'h200-x8' is not one {bob.name} may choose" in answer["message"]
        status, answer = hub.api("POST", f"users/{bob.name}/servers/odd", {"profile": "../x"})
        assert status == 400, answer
        assert sorted(r.owner.user for r in client.holders()) == sorted([alice.name, bob.name])

        # stopping a server gives its devices back
        hub.stop(alice)
        wait_for(
            "alice's devices are back",
            lambda: [r.owner.user for r in client.holders()] == [bob.name],
        )
        hub.stop(bob)
        wait_for("every device is back", lambda: client.holders() == [])
        # the profile is ours to read: JupyterHub does not log it as an unhandled option
        assert "unhandled user_options" not in hub.log.read_text(errors="replace")

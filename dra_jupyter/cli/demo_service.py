"""``make demo``, second part: the shared-machine service serving many users.

``dra-jupyter demo --service`` makes a temporary folder, writes a small policy there (2
GPUs per user, each user sees only their own claims), and starts the real daemon
(``dra-jupyter service``, a subprocess) on a socket in it, on the simulated 8x H200 node.
Client processes then ask it for GPUs, and what each is told is printed:

* as root, two temporary Unix users (``dra-demo-ada``, ``dra-demo-bo``, made with
  ``useradd`` and removed at the end, also on an error or Ctrl-C) each run processes,
  forked from this one and dropped to the user (``initgroups``, ``setgid``, ``setuid``), so
  that the daemon sees their real credentials (``SO_PEERCRED``): each user gets 2 GPUs, a
  third request of the first is refused by the limit, the second user cannot release the
  first's claim (to them it is as one that does not exist), and a process that exits has
  its claim reclaimed at once;
* otherwise, the same with the one user this is: two processes, the limit over both, the
  reclaim; and a line saying that showing several users needs root.

Every step is bounded in time; the daemon is stopped and the folder removed at the end.
"""

from __future__ import annotations

import contextlib

# What the forked clients use, imported before they drop to their user (the interpreter's
# library and the venv may be under folders the demo's users cannot open).
import encodings.ascii
import encodings.idna
import encodings.latin_1
import encodings.utf_8
import json
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, TextIO

import dra_jupyter.api
import dra_jupyter.claimspec
import dra_jupyter.kernel.environment
import dra_jupyter.service.client
from dra_jupyter.backends import service_answers
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.settings import Settings

PRELOADED = (
    encodings.ascii,
    encodings.idna,
    encodings.latin_1,
    encodings.utf_8,
    dra_jupyter.claimspec,
    dra_jupyter.kernel.environment,
    dra_jupyter.service.client,
)
USERS = ("dra-demo-ada", "dra-demo-bo")
DEADLINE = 30.0  # seconds any one step may take
LIMIT = 2  # GPUs per user
POLICY = f"""visibility = "own"  # each user sees only their own claims
[limits]
gpus = {LIMIT}  # whole GPUs per user at once
"""


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


class DemoError(Exception):
    """A step of the demo did not go as it should (the demo exits 1)."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: clean up as on Ctrl-C


# --- the users ------------------------------------------------------------------------------


@contextlib.contextmanager
def demo_users(out: TextIO) -> Iterator[list[User]]:
    """The demo's users, made now and removed afterwards; a user of that name that exists
    already is refused (it is not ours to remove)."""
    made: list[User] = []
    try:
        for name in USERS:
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                raise DemoError(f"user {name} exists already: remove it (userdel {name})")
            subprocess.run(
                ["useradd", "-M", "-U", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
                timeout=DEADLINE,
            )
            entry = pwd.getpwnam(name)
            made.append(User(name, entry.pw_uid, entry.pw_gid))
            out.write(f"made the Unix user {name} (uid {entry.pw_uid})\n")
        yield made
    finally:
        for user in made:
            _remove_user(user)
            out.write(f"removed the Unix user {user.name}\n")


def _remove_user(user: User) -> None:
    """``userdel``, once no process of the user is left (those of the demo: killed)."""
    end = time.monotonic() + DEADLINE
    while True:
        done = subprocess.run(
            ["userdel", user.name], capture_output=True, timeout=DEADLINE, check=False
        )
        if done.returncode == 0 or time.monotonic() > end:
            break
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == user.uid:
                        os.kill(int(entry.name), signal.SIGKILL)
        time.sleep(0.1)
    if done.returncode != 0:
        raise DemoError(f"userdel {user.name}: {done.stderr.decode(errors='replace').strip()}")


# --- the daemon -----------------------------------------------------------------------------


class Daemon:
    """``dra-jupyter service`` in a subprocess, on a socket in ``root``."""

    def __init__(self, root: Path) -> None:
        self.socket = root / "socket"
        self.config = root / "service.toml"
        self.log = root / "service.log"
        ledger = root / "state" / "ledger.sqlite"
        self.config.write_text(
            f'[service]\nledger = "{ledger}"\ninventory = "h200-8x"\n{POLICY}', encoding="utf-8"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "dra_jupyter.cli", "service"),
                    *("--config", str(self.config), "--socket", str(self.socket)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches this process, which stops it
            )
        end = time.monotonic() + DEADLINE
        while not service_answers(self.socket):
            if self.process.poll() is not None or time.monotonic() > end:
                raise DemoError(f"the service did not start: {self.tail()}")
            time.sleep(0.05)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(DEADLINE)

    def env(self) -> dict[str, str]:
        return {"DRA_JUPYTER_BACKEND": "service", "DRA_JUPYTER_SOCKET": str(self.socket)}


# --- a client process -----------------------------------------------------------------------


def _serve(command: list[Any]) -> Any:
    """One command in a client process, on the service through the ordinary API."""
    session = _session()
    op = command[0]
    if op == "request":
        claim = session.request(gpu=command[1], lease=600, apply_env=False)
        return f"{claim.name} on {', '.join(d.device.rsplit('/', 1)[-1] for d in claim.devices)}"
    if op == "release":  # another user's claim is as one that does not exist
        session.release(command[1])
        return f"released {command[1]}"
    if op == "holders":
        return [
            f"{r.name}: {', '.join(k.rsplit('/', 1)[-1] for k in r.device_keys)} "
            f"(held by {r.owner.user})"
            for r in session.backend.holders()
        ]
    if op == "claims":
        return [r.name for r in session.backend.claims()]
    raise DemoError(f"unknown command {op}")


_SESSIONS: list[dra_jupyter.api.Session] = []


def _session() -> dra_jupyter.api.Session:
    if not _SESSIONS:
        _SESSIONS.append(dra_jupyter.api.Session(Settings.from_env()))
    return _SESSIONS[0]


def _write(fd: int, payload: Any) -> None:
    data = (json.dumps(payload) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


class Client:
    """A process forked from this one that runs as ``user`` (None: this user) and does what
    it is told, one command at a time, until it is told to exit."""

    _open: ClassVar[set[int]] = (
        set()
    )  # this process's ends of the clients' pipes (a child closes them)

    def __init__(self, label: str, user: User | None, env: dict[str, str]) -> None:
        self.label = label
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the demo
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo ends it
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                for fd in (self._cmd_w, self._out_r, *Client._open):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                if user is not None:
                    os.initgroups(user.name, user.gid)
                    os.setgid(user.gid)
                    os.setuid(user.uid)
                    os.environ.clear()
                    os.environ.update(
                        {"HOME": "/nonexistent", "USER": user.name, "LOGNAME": user.name}
                    )
                os.environ.update(env)
                with os.fdopen(cmd_r, "rb") as commands:
                    for line in commands:
                        if json.loads(line) == ["exit"]:
                            break
                        try:
                            _write(out_w, {"ok": _serve(json.loads(line))})
                        except DraJupyterError as err:
                            _write(out_w, {"error": f"{type(err).__name__}: {err}"})
                        except Exception as err:  # back to the demo, whole
                            _write(out_w, {"error": f"{err!r}: {traceback.format_exc()}"})
            except BaseException:  # the exit code says it
                code = 3
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(out_w)
        Client._open.update((self._cmd_w, self._out_r))
        self.pid = pid
        self._buffer = b""

    def ask(self, *command: Any) -> dict[str, Any]:
        _write(self._cmd_w, list(command))
        end = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._out_r], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(self._out_r, 1 << 16) if ready else b""
            if not chunk:
                raise DemoError(f"{self.label} (pid {self.pid}) gave no answer")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def exit(self) -> None:
        """Ends the process: it exits without releasing anything."""
        with contextlib.suppress(OSError):
            _write(self._cmd_w, ["exit"])
        for fd in (self._cmd_w, self._out_r):
            Client._open.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        end = time.monotonic() + DEADLINE
        while self.pid:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.pid = 0  # never signal a pid that may be another process's by now
            elif time.monotonic() > end:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self.pid = 0
            else:
                time.sleep(0.02)


# --- the demo -------------------------------------------------------------------------------


class Script:
    def __init__(self, out: TextIO, daemon: Daemon) -> None:
        self.out = out
        self.daemon = daemon
        self.clients: list[Client] = []

    def client(self, label: str, user: User | None) -> Client:
        client = Client(label, user, self.daemon.env())
        self.clients.append(client)
        self.out.write(f"\n{label}: process {client.pid} started\n")
        return client

    def step(self, client: Client, *command: Any, refused: bool = False) -> Any:
        shown = " ".join(str(c) for c in command)
        answer = client.ask(*command)
        if "ok" in answer and not refused:
            value = answer["ok"]
            if isinstance(value, list):
                self.out.write(f"{client.label} (pid {client.pid}) {shown}:\n")
                self.out.writelines(f"    {line}\n" for line in value or ["nothing"])
            else:
                self.out.write(f"{client.label} (pid {client.pid}) {shown} -> {value}\n")
            return value
        if "error" in answer and refused:
            self.out.write(f"{client.label} (pid {client.pid}) {shown} -> refused:\n")
            self.out.write(f"    {answer['error']}\n")
            return answer["error"]
        expected = "a refusal" if refused else "an answer"
        raise DemoError(f"{client.label} {shown}: expected {expected}, got {answer}")

    def reclaim(self, gone: Client, watcher: Client, name: str) -> None:
        start = time.monotonic()
        gone.exit()
        self.out.write(f"\n{gone.label}: process exited, holding {name} (not released)\n")
        while name in watcher.ask("claims").get("ok", [name]):
            if time.monotonic() - start > DEADLINE:
                raise DemoError(f"{name} was not reclaimed in {DEADLINE:g}s")
            time.sleep(0.02)
        took = time.monotonic() - start
        self.out.write(f"the service reclaimed {name} {took:.2f}s after its process exited\n")

    def close(self) -> None:
        for client in self.clients:
            client.exit()


def _many_users(script: Script, ada: User, bo: User) -> None:
    out = script.out
    a1 = script.client(f"{ada.name} #1", ada)
    first = script.step(a1, "request", LIMIT).split()[0]
    b1 = script.client(f"{bo.name} #1", bo)
    script.step(b1, "request", LIMIT)
    a2 = script.client(f"{ada.name} #2", ada)
    script.step(a2, "request", 1, refused=True)
    out.write(f"\n{bo.name} tries to release {ada.name}'s claim:\n")
    script.step(b1, "release", first, refused=True)
    out.write("\nholders, as each user sees them (visibility own):\n")
    script.step(a2, "holders")
    script.step(b1, "holders")
    script.reclaim(a1, a2, first)
    script.step(a2, "request", LIMIT)
    script.step(b1, "holders")


def _one_user(script: Script, me: str) -> None:
    out = script.out
    p1 = script.client(f"{me} #1", None)
    first = script.step(p1, "request", LIMIT).split()[0]
    p2 = script.client(f"{me} #2", None)
    out.write(f"(the limit is per user: {me}'s processes together)\n")
    script.step(p2, "request", 1, refused=True)
    script.step(p2, "holders")
    script.reclaim(p1, p2, first)
    script.step(p2, "request", LIMIT)
    script.step(p2, "holders")


def run_service_demo(out: TextIO, *, several_users: bool | None = None) -> int:
    """``dra-jupyter demo --service`` (the module docstring): 0 when every step went as it
    should, 1 otherwise (130 when interrupted). ``several_users``: whether to make the two
    users (None: when root)."""
    if several_users is None:
        several_users = os.geteuid() == 0
    previous = signal.signal(signal.SIGTERM, _stop)
    root = Path(tempfile.mkdtemp(prefix="dra-demo-service-"))
    root.chmod(0o755)  # the users reach the socket; the daemon makes state/ 0700
    daemon = Daemon(root)
    out.write(
        "\n=== the shared-machine service: one daemon, many users ===\n"
        f"folder {root}; policy {daemon.config}:\n"
        + "".join(f"    {line}\n" for line in daemon.config.read_text().splitlines())
    )
    try:
        with contextlib.ExitStack() as stack:
            users = stack.enter_context(demo_users(out)) if several_users else []
            daemon.start()
            stack.callback(daemon.stop)
            out.write(
                f"started: dra-jupyter service --config {daemon.config} "
                f"--socket {daemon.socket} (pid {daemon.process.pid if daemon.process else 0})\n"
            )
            script = Script(out, daemon)
            stack.callback(script.close)
            if users:
                _many_users(script, *users)
            else:
                _one_user(script, pwd.getpwuid(os.geteuid()).pw_name)
                out.write(
                    "\nshowing several users needs root (two temporary Unix users are made): "
                    "run 'sudo make demo' or 'sudo .venv/bin/dra-jupyter demo --service'\n"
                )
        out.write("\nstopped the service")
    except DemoError as err:
        out.write(f"\nthe service demo failed: {err}\nthe service's log:\n{daemon.tail()}\n")
        return 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the users are gone already (above)
        out.write(f"\ninterrupted: stopped the service and removed {root}\n")
        return 130
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    out.write(f" and removed {root}\n")
    return 0


__all__ = ["PRELOADED", "run_service_demo"]

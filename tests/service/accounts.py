"""Real Unix users, a real daemon, and processes that run as those users.

* :func:`unix_users`: users (and an admin group) made with ``useradd``/``groupadd`` and
  removed with ``userdel``/``groupdel`` afterwards, whatever happened (root only);
* :class:`Service`: ``dra-jupyter service`` as a subprocess, on a socket in a folder every
  user may reach, with its ledger in a folder only the daemon may open;
* :func:`run_as` / :class:`Child`: a function run in a forked process that has dropped to a
  user (``initgroups``, ``setgid``, ``setuid``): what the daemon sees is that user's real
  credentials. Forked rather than executed, so that the interpreter need not be one the
  user may run; what the function imports lazily must be importable by that user.

Every wait is bounded by a deadline; none asserts a timing.
"""

from __future__ import annotations

import contextlib

# What the children use, imported while still root (the interpreter's own library may be
# under a folder the test users cannot open).
import encodings.ascii
import encodings.idna
import encodings.latin_1
import encodings.utf_8
import io
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dra_jupyter.api
import dra_jupyter.claimspec
import dra_jupyter.cli
import dra_jupyter.kernel.environment
import dra_jupyter.service.client
import dra_jupyter.tables
from dra_jupyter.backends import service_answers

PRELOADED = (encodings.ascii, encodings.idna, encodings.latin_1, encodings.utf_8, sqlite3)

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0  # seconds any one step may take before the test fails (never a timing)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=DEADLINE)


@contextlib.contextmanager
def unix_users(*names: str, admin_group: str) -> Iterator[dict[str, User]]:
    """``names`` as real users (a random suffix keeps runs apart), the last one also in
    ``admin_group``; all removed afterwards."""
    tag = secrets.token_hex(3)
    group = f"{admin_group}{tag}"
    made: list[str] = []
    users: dict[str, User] = {}
    _run("groupadd", group)
    try:
        for i, short in enumerate(names):
            name = f"dsv{short}{tag}"
            extra = ["-G", group] if i == len(names) - 1 else []
            _run(
                "useradd", "-M", "-U", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", *extra, name
            )
            made.append(name)
            entry = pwd.getpwnam(name)
            users[short] = User(name, entry.pw_uid, entry.pw_gid)
        yield {**users, "_admin_group": User(group, 0, 0)}
    finally:
        for name in made:
            _remove_user(name)
        subprocess.run(["groupdel", group], capture_output=True, timeout=DEADLINE, check=False)


def _remove_user(name: str) -> None:
    """``userdel``, once no process of the user is left: those this test started and did not
    reap yet are killed, by pid (userdel refuses a user with processes)."""
    uid = pwd.getpwnam(name).pw_uid
    end = time.monotonic() + DEADLINE
    while True:
        done = subprocess.run(["userdel", name], capture_output=True, timeout=DEADLINE, check=False)
        if done.returncode == 0 or time.monotonic() > end:
            break
        for pid in _pids_of(uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # a child of this test left a zombie
        time.sleep(0.1)
    if done.returncode != 0:
        raise AssertionError(f"userdel {name}: {done.stderr.decode(errors='replace').strip()}")


def _pids_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def wait_for(what: str, check: Callable[[], bool], deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not so after {deadline:g}s")
        time.sleep(0.05)


class Service:
    """``dra-jupyter service`` in a subprocess (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        policy: str,
        args: tuple[str, ...] = (),
        inventory: str = "h200-8x",
        launcher: tuple[str, ...] = ("-m", "dra_jupyter.cli"),
    ) -> None:
        self.root = root
        self.launcher = launcher
        self.args = args
        self.inventory = inventory
        self.socket = root / "socket"
        self.ledger = root / "state" / "ledger.sqlite"
        self.config = root / "service.toml"
        self.log = root / "service.log"
        self.write_policy(policy)
        self.process: subprocess.Popen[bytes] | None = None

    def write_policy(self, policy: str) -> None:
        self.config.write_text(
            f'[service]\nledger = "{self.ledger}"\ninventory = "{self.inventory}"\n{policy}'
        )

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]])}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    *self.launcher,
                    "service",
                    "--config",
                    str(self.config),
                    "--socket",
                    str(self.socket),
                    *self.args,
                ],
                stdout=log,
                stderr=log,
                env=env,
                cwd=REPO,
            )
        wait_for("the service answers", self._answers)

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the service exited: {self.log.read_text()[-2000:]}")
        return service_answers(self.socket)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(DEADLINE)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(DEADLINE)

    def hup(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    def env(self) -> dict[str, str]:
        return {"DRA_JUPYTER_BACKEND": "service", "DRA_JUPYTER_SOCKET": str(self.socket)}


@contextlib.contextmanager
def service(
    policy: str = "",
    args: tuple[str, ...] = (),
    inventory: str = "h200-8x",
    launcher: tuple[str, ...] = ("-m", "dra_jupyter.cli"),
) -> Iterator[Service]:
    """``launcher``: what runs ``dra-jupyter`` (tests.fakes.nvml_daemon: on the fake NVML)."""
    root = Path(f"/tmp/dra-service-test-{secrets.token_hex(4)}")
    root.mkdir(mode=0o755)
    root.chmod(0o755)  # the users reach the socket; the daemon makes state/ 0700
    svc = Service(root, policy, args, inventory, launcher)
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- processes as a user -----------------------------------------------------------------------


def _become(user: User, env: dict[str, str]) -> None:
    os.initgroups(user.name, user.gid)
    os.setgid(user.gid)
    os.setuid(user.uid)
    os.environ.clear()
    os.environ.update({"HOME": "/nonexistent", "USER": user.name, "LOGNAME": user.name, **env})


def _reply(fd: int, payload: dict[str, Any]) -> None:
    data = (json.dumps(payload) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


class Child:
    """A forked process running ``fn()`` as ``user``; ``fn``'s value (JSON) or its error
    comes back through a pipe. ``hold`` keeps it alive after ``fn`` until :meth:`finish`."""

    def __init__(
        self, user: User, env: dict[str, str], fn: Callable[[], Any], *, hold: bool = False
    ) -> None:
        self._out_r, out_w = os.pipe()
        go_r, self._go_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                os.close(self._out_r)
                os.close(self._go_w)
                _become(user, env)
                try:
                    _reply(out_w, {"ok": fn()})
                except BaseException as err:  # all of it goes back
                    _reply(
                        out_w,
                        {
                            "error": type(err).__name__,
                            "message": str(err),
                            "traceback": traceback.format_exc(),
                        },
                    )
                if hold:
                    os.read(go_r, 1)
            except BaseException:
                code = 3
            finally:
                os._exit(code)
        os.close(out_w)
        os.close(go_r)
        self.pid = pid
        self._buffer = b""

    def result(self) -> dict[str, Any]:
        end = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            ready, _, _ = select.select([self._out_r], [], [], max(0.0, left))
            if not ready:
                self.kill()
                raise AssertionError(f"pid {self.pid} gave no answer in {DEADLINE:g}s")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise AssertionError(f"pid {self.pid} exited without an answer")
            self._buffer += chunk
        answer: dict[str, Any] = json.loads(self._buffer.split(b"\n", 1)[0])
        return answer

    def answered(self) -> bool:
        """Whether its answer has come (without waiting for it)."""
        if b"\n" in self._buffer:
            return True
        ready, _, _ = select.select([self._out_r], [], [], 0)
        return bool(ready)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._go_w, b"x")
        self._reap()

    def kill(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        end = time.monotonic() + DEADLINE
        while self.pid and time.monotonic() < end:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done = self.pid  # reaped already
            if done:
                self.pid = 0  # never signal a pid that may be another process's by now
                break
            time.sleep(0.02)
        for fd in (self._out_r, self._go_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def run_as(user: User, env: dict[str, str], fn: Callable[[], Any]) -> dict[str, Any]:
    """``fn()`` as ``user``: ``{"ok": value}`` or ``{"error": class name, "message": ...}``."""
    child = Child(user, env, fn)
    try:
        return child.result()
    finally:
        child.finish()


def cli(argv: list[str]) -> dict[str, Any]:
    """``dra-jupyter ARGV`` in this process: exit code, standard output and error."""
    out, err = io.StringIO(), io.StringIO()
    code = dra_jupyter.cli.main(argv, out, err)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def raw_connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(DEADLINE)
    sock.connect(str(path))
    return sock


def read_line(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise AssertionError(f"the connection closed without a line (had {data[:200]!r})")
        data += chunk
    answer: dict[str, Any] = json.loads(data.split(b"\n", 1)[0])
    return answer

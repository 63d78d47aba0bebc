"""Which backend a session gets: ``service`` when asked, and by ``auto`` or by default where the
service is installed (its socket or its policy file exists), whether it answers or not: a
session never falls back to a private ledger then; else the embedded backend. Opening it
connects to nothing yet; a daemon that does not answer is said in one line."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dra_jupyter.backends import open_backend, resolve_backend
from dra_jupyter.errors import UnavailableError
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import User, cli, run_as, service
from tests.service.test_isolation import admin_policy


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "socket"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    try:
        yield path
    finally:
        sock.close()


def settings(tmp_path: Path, **changes: object) -> Settings:
    base = Settings.from_env({"DRA_JUPYTER_LEDGER": str(tmp_path / "ledger.sqlite")})
    changes.setdefault("service_config", tmp_path / "no-service.toml")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_socket_comes_from_the_environment(tmp_path: Path) -> None:
    assert Settings.from_env({}).socket == Path("/run/dra-jupyter/socket")
    env = {"DRA_JUPYTER_SOCKET": str(tmp_path / "s"), "DRA_JUPYTER_BACKEND": "service"}
    chosen = Settings.from_env(env)
    assert (chosen.socket, chosen.backend) == (tmp_path / "s", "service")


def test_auto_picks_the_service_where_it_is_installed(tmp_path: Path, listening: Path) -> None:
    assert resolve_backend(settings(tmp_path, backend="auto", socket=listening), tmp_path) == (
        "service"
    )
    missing = tmp_path / "none"
    assert resolve_backend(settings(tmp_path, backend="auto", socket=missing), tmp_path) == "local"
    policy = tmp_path / "service.toml"
    policy.write_text("[service]\n")  # installed; its daemon restarting (no socket now)
    installed = settings(tmp_path, backend="auto", socket=missing, service_config=policy)
    assert resolve_backend(installed, tmp_path) == "service"


def test_a_socket_nobody_listens_on_is_the_service_all_the_same(tmp_path: Path) -> None:
    """The file of a daemon that was killed (bound, not listening): the service is
    installed, so a session is refused, not given a private ledger of all the GPUs."""
    path = tmp_path / "stale"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    chosen = settings(tmp_path, backend="auto", socket=path)
    assert resolve_backend(chosen, tmp_path) == "service"
    owner = Owner(user="me", host=socket.gethostname(), pid=0)
    with pytest.raises(UnavailableError, match=r"does not answer .*it may be restarting"):
        open_backend(chosen, owner).claims()


def test_the_default_is_the_service_where_it_is_installed(tmp_path: Path) -> None:
    env = {
        "DRA_JUPYTER_SOCKET": str(tmp_path / "socket"),
        "DRA_JUPYTER_SERVICE_CONFIG": str(tmp_path / "service.toml"),
    }
    assert Settings.from_env(env).backend == "local"
    (tmp_path / "service.toml").write_text("[service]\n")
    assert Settings.from_env(env).backend == "service"
    assert Settings.from_env({**env, "DRA_JUPYTER_BACKEND": "local"}).backend == "local"
    assert Settings.from_env({}).service_config == Path("/etc/dra-jupyter/service.toml")


def test_the_service_backend_opens_without_connecting(tmp_path: Path) -> None:
    owner = Owner(user="me", host=socket.gethostname(), pid=0)
    backend = open_backend(settings(tmp_path, backend="service", socket=tmp_path / "s"), owner)
    assert isinstance(backend, ServiceBackend)
    assert backend.capabilities.where == "the dra-jupyter service"
    with pytest.raises(UnavailableError, match=r"does not answer .*systemctl start dra-jupyter"):
        backend.claims()


def test_a_jupyter_server_on_the_service_gives_its_kernels_the_socket(tmp_path: Path) -> None:
    from dra_jupyter.server.app import DRAExtensionApp  # noqa: PLC0415
    from dra_jupyter.server.kernels import kernel_env  # noqa: PLC0415

    trait = DRAExtensionApp.class_traits()["backend"]
    assert "service" in getattr(trait, "values", ())
    chosen = settings(tmp_path, backend="service", socket=tmp_path / "s")
    env = kernel_env("k-1", chosen)
    assert env["DRA_JUPYTER_BACKEND"] == "service"
    assert env["DRA_JUPYTER_SOCKET"] == str(tmp_path / "s")
    assert "DRA_JUPYTER_LEDGER" not in env  # the daemon's ledger is nobody else's


def test_the_socket_folder_is_made_reachable_and_a_writable_one_is_refused(
    tmp_path: Path,
) -> None:
    from dra_jupyter.errors import InvalidInputError  # noqa: PLC0415
    from dra_jupyter.service.files import bind_socket  # noqa: PLC0415

    old = os.umask(0o077)  # as the daemon runs
    try:
        made = bind_socket(tmp_path / "run" / "socket")
    finally:
        os.umask(old)
    made.close()
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "run" / "socket").stat().st_mode) == 0o666
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(InvalidInputError, match="others could put their own socket there"):
        bind_socket(loose / "socket")


def test_the_readme_recipe_any_user_sees_the_service_and_none_falls_back(
    users: dict[str, User],
) -> None:
    """``dra-jupyter devices  # any user``: with nothing set but where the service lives
    (as /run/dra-jupyter/socket and /etc/dra-jupyter/service.toml are found by default),
    a user's CLI is the service's; while the daemon is down (a restart), it says so and
    exits 3, rather than giving the user a private ledger of every GPU."""
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        where = {
            "DRA_JUPYTER_SOCKET": str(svc.socket),
            "DRA_JUPYTER_SERVICE_CONFIG": str(svc.config),
        }
        made = run_as(alice, where, lambda: cli(["request", "gpu=2", "--name", "alice-nb"]))
        assert made["ok"]["code"] == 0, made
        seen = run_as(bob, where, lambda: cli(["devices"]))["ok"]
        assert seen["code"] == 0, seen
        assert seen["out"].count("another user") == 2  # alice's GPUs, held in the service
        svc.stop()
        down = run_as(bob, where, lambda: [cli(["devices"]), cli(["request", "gpu=8"])])["ok"]
    for answer in down:
        assert answer["code"] == 3, answer
        assert answer["err"].startswith(
            f"error: the dra-jupyter service at {svc.socket} does not answer"
        ), answer
        assert "it may be restarting: try again in a moment" in answer["err"]

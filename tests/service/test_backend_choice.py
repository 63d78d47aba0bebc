"""Which backend a session gets: ``service`` when asked, ``auto`` picks it only when something
answers on the socket (else the embedded backend, as before), and opening it connects to
nothing yet."""

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
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_socket_comes_from_the_environment(tmp_path: Path) -> None:
    assert Settings.from_env({}).socket == Path("/run/dra-jupyter/socket")
    env = {"DRA_JUPYTER_SOCKET": str(tmp_path / "s"), "DRA_JUPYTER_BACKEND": "service"}
    chosen = Settings.from_env(env)
    assert (chosen.socket, chosen.backend) == (tmp_path / "s", "service")


def test_auto_picks_the_service_when_its_socket_answers(tmp_path: Path, listening: Path) -> None:
    assert resolve_backend(settings(tmp_path, backend="auto", socket=listening), tmp_path) == (
        "service"
    )
    missing = tmp_path / "none"
    assert resolve_backend(settings(tmp_path, backend="auto", socket=missing), tmp_path) == "local"


def test_a_socket_nobody_listens_on_is_local(tmp_path: Path) -> None:
    path = tmp_path / "stale"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))  # the file of a daemon that was killed: bound, not listening
    sock.close()
    assert resolve_backend(settings(tmp_path, backend="auto", socket=path), tmp_path) == "local"


def test_the_service_backend_opens_without_connecting(tmp_path: Path) -> None:
    owner = Owner(user="me", host=socket.gethostname(), pid=0)
    backend = open_backend(settings(tmp_path, backend="service", socket=tmp_path / "s"), owner)
    assert isinstance(backend, ServiceBackend)
    assert backend.capabilities.where == "the dra-jupyter service"
    with pytest.raises(UnavailableError, match=r"does not answer .*set DRA_JUPYTER_BACKEND=local"):
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

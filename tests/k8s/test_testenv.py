"""The test environment's own promises: a failed build says what failed and where the log is;
the build recipe reads the staging modules from Kubernetes' go.mod; stop leaves nothing."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from tests.k8s import k8sbuild, testenv


def test_staging_modules_are_replaced_by_their_published_versions() -> None:
    go_mod = (
        "replace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n"
        ")\n"
    )
    assert k8sbuild.staging_replaces(go_mod, "v1.37.2") == [
        "k8s.io/api => k8s.io/api v0.37.2",
        "k8s.io/client-go => k8s.io/client-go v0.37.2",
    ]
    with pytest.raises(testenv.TestenvError, match="replaces no staging module"):
        k8sbuild.staging_replaces("module k8s.io/kubernetes\n", "v1.37.2")


def test_a_missing_go_toolchain_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(k8sbuild, "GO_FALLBACKS", ())
    with pytest.raises(testenv.TestenvError) as raised:
        k8sbuild.find_go()
    assert str(raised.value) == (
        "k8s-testenv build: the Go toolchain (1.26 or newer) is not installed; install it "
        "(e.g. to /usr/local/go) or put `go` on PATH, then run `scripts/k8s-testenv build`"
    )


def test_a_failed_build_names_the_step_and_the_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Kubernetes version the module proxy does not have: the real go command fails."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(k8sbuild, "KUBERNETES_VERSION", "v1.37.999")
    log = io.StringIO()
    with pytest.raises(testenv.TestenvError) as raised:
        testenv.build(log=log)
    message = str(raised.value)
    build_log = testenv.cache_dir() / "build.log"
    assert message.startswith(
        "k8s-testenv build: downloading k8s.io/kubernetes v1.37.999 failed (go exit code 1); "
        f"full log: {build_log}\n"
    )
    assert "v1.37.999" in message.splitlines()[-1]  # the tail of go's own output
    assert not testenv.is_built()
    assert log.getvalue().startswith("k8s-testenv: building Kubernetes v1.37.999")


def test_start_refuses_without_a_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(testenv.TestenvError, match=r"run `scripts/k8s-testenv build`"):
        testenv.start(tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_stop_leaves_nothing_listening(tmp_path: Path) -> None:
    """A control plane of its own (the session's keeps running): every port closes."""
    testenv.build()
    cluster = testenv.start(tmp_path / "state")
    ports = dict(cluster.ports)
    pids = [c.pid for c in cluster.components]
    assert testenv.stop(tmp_path / "state") is True  # as `scripts/k8s-testenv stop` does
    cluster.stop()  # reaps its children
    for name, port in ports.items():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"{name} still listens on {port}"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()
    assert testenv.stop(tmp_path / "state") is False

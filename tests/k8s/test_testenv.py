"""The test environment's own promises: a failed build says what failed and where the log is;
the build recipe reads the staging modules from Kubernetes' go.mod; stop leaves nothing."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.runs import gangs
from tests.k8s import k8sbuild, testenv


@pytest.mark.pure
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


@pytest.mark.pure
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


@pytest.mark.pure  # an empty cache: nothing is started
def test_start_refuses_without_a_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(testenv.TestenvError, match=r"run `scripts/k8s-testenv build`"):
        testenv.start(tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_stop_leaves_nothing_listening(tmp_path: Path) -> None:
    """A control plane of its own (the session's keeps running): every port closes. This
    one leaves the Workload API off (as Kubernetes does by default; the session's serves
    it): discovery says so, and a run of several pods would be no gang."""
    testenv.build()
    cluster = testenv.start(tmp_path / "state", workloads=False)
    assert cluster.get(f"/apis/{testenv.WORKLOAD_API}")[0] == 404
    with api_client(str(cluster.kubeconfig)) as api:
        assert gangs.served(api) is False
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


def _gone(pid: int) -> bool:
    """Whether the process has exited (a zombie no one reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_control_plane_started_for_a_test_run_dies_with_it(tmp_path: Path) -> None:
    """A process that started a control plane with ``die_with_parent`` (as the tests'
    session fixture does) is killed with SIGKILL, so it cannot stop anything: the kernel
    kills etcd, kube-apiserver, kube-controller-manager and kube-scheduler with it."""
    testenv.build()
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tests.k8s import testenv\n"
        "cluster = testenv.start(Path(sys.argv[1]), die_with_parent=True)\n"
        "print(' '.join(str(c.pid) for c in cluster.components), flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[2]
    pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "state")],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    ) as runner:
        try:
            assert runner.stdout is not None
            pids.extend(int(pid) for pid in runner.stdout.readline().split())
            assert len(pids) == 4 and not any(_gone(pid) for pid in pids)
        finally:
            runner.kill()
    deadline = time.monotonic() + 60
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if not _gone(pid)] == []

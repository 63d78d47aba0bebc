"""The README's "Try Kubernetes on one machine" recipe, run as written: its code block, as a
user runs it from the repository's root in a shell where the venv is not activated, starts
the control plane and a real node (``scripts/k8s-testenv start``), runs ``dra.run`` in a pod
of the kernel image, whose output is the GPU UUIDs the node's driver gave the container, and
stops both, leaving nothing on this machine. And what ``start`` chooses as its node.

The recipe's test starts a node of its own, and one node runs on a machine at a time: it runs
before every other test of the session (:func:`tests.k8s.nodefixtures.own_node_first`), so
before the session's node takes the machine's lock.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.k8s import kernelimage, nodeplugins, testenvcli
from tests.k8s import node as real_node
from tests.k8s.nodefixtures import needs_root
from tests.k8s.testenv import TestenvError
from tests.test_docs import FENCE, HEADING

ROOT = Path(__file__).resolve().parents[2]
SECTION = "Try Kubernetes on one machine"
RECIPE_TIMEOUT_S = 1500  # a guard against a hang only: a node start may wait 600 s for the lock
UUID = re.compile(r"GPU-[0-9a-f-]+")


def recipe(readme: Path = ROOT / "README.md") -> str:
    """The first fenced block of the README's section :data:`SECTION`."""
    lines = iter(readme.read_text(encoding="utf-8").splitlines())
    for line in lines:
        heading = HEADING.match(line)
        if heading and heading[2] == SECTION:
            break
    else:
        raise AssertionError(f"README.md has no section {SECTION!r}")
    for line in lines:
        if HEADING.match(line):
            raise AssertionError(f"README.md's {SECTION!r} has no code block")
        if FENCE.match(line):
            break
    block: list[str] = []
    for line in lines:
        if FENCE.match(line):
            return "\n".join(block) + "\n"
        block.append(line)
    raise AssertionError(f"README.md's {SECTION!r}: its code block never ends")


def user_environment(state_home: Path) -> dict[str, str]:
    """This process's environment as a user's shell has it, without the venv (not activated,
    not on PATH, no PYTHONPATH), and with the test environment's state under ``state_home``
    (its caches, the builds, stay where they are)."""
    venv_bin = (Path(sys.prefix) / "bin").resolve()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "KUBECONFIG")
        and not k.startswith("DRA_JUPYTER_")
    }
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and Path(p).resolve() != venv_bin)
    env["XDG_STATE_HOME"] = str(state_home)
    return env


@pytest.mark.pure
def test_the_recipe_is_the_real_nodes() -> None:
    """It starts the default node (no --node, no --run-pods), runs pods of the kernel image,
    publishes no slices (the node's driver does), and stops what it started."""
    commands = recipe()
    lines = [line for line in commands.splitlines() if line.strip()]
    assert "scripts/k8s-testenv start)" in lines[0]
    assert "--node" not in commands and "--run-pods" not in commands
    assert f"DRA_JUPYTER_IMAGE={kernelimage.KERNEL}" in commands
    assert "publish-slices" not in commands
    assert "dra.run(" in commands and "CUDA_VISIBLE_DEVICES" in commands
    assert lines[-1].split("#")[0].strip() == ".venv/bin/python scripts/k8s-testenv stop"


@pytest.mark.pure
@pytest.mark.parametrize(
    ("asked", "run_pods", "euid", "chosen"),
    [
        (None, False, 0, "real"),
        (None, False, 1000, "stand-in"),
        ("stand-in", False, 0, "stand-in"),
        (None, True, 0, "stand-in"),  # --run-pods: the stand-in, as before
        ("none", False, 0, "none"),
        ("real", False, 1000, "real"),  # asked for: node.start then says it needs root
    ],
)
def test_start_runs_a_real_node_where_the_machine_allows_it(
    asked: str | None, run_pods: bool, euid: int, chosen: str
) -> None:
    choice, why = testenvcli.node_choice(asked, run_pods, euid)
    assert choice == chosen
    if (asked, run_pods, euid) == (None, False, 1000):
        assert why == (
            "k8s-testenv: no real node: it needs root (mounts, cgroups, iptables) and this "
            "runs as uid 1000; the stand-in kubelet runs the pods as local processes instead"
        )
    else:
        assert why == ""


@pytest.mark.pure
def test_the_node_options_of_start() -> None:
    parse = testenvcli._parser().parse_args
    assert parse(["start"]).node is None
    assert parse(["start", "--node"]).node == "real"  # the flag of before: a real node
    assert parse(["start", "--node", "stand-in"]).node == "stand-in"
    assert parse(["start", "--run-pods"]).run_pods
    with pytest.raises(TestenvError, match=r"^k8s-testenv start: --run-pods is --node stand"):
        testenvcli.node_choice("real", True, 0)


@needs_root
def test_the_readmes_recipe_runs_its_pod_on_a_real_node() -> None:
    # a short path: containerd's sockets under the state directory must fit 104 characters
    with tempfile.TemporaryDirectory(prefix="recipe-", dir="/tmp") as state_home:
        _run_the_recipe(Path(state_home))


def _run_the_recipe(state_home: Path) -> None:
    before = real_node.Before.now()
    state_dir = state_home / "dra-jupyter" / "k8s-testenv"
    env = user_environment(state_home)
    try:
        done = subprocess.run(
            ["bash", "-e", "-c", recipe()],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=RECIPE_TIMEOUT_S,
            check=False,
        )
    finally:  # a recipe that failed before its stop: stopped all the same
        if (state_dir / "cluster.json").exists():
            subprocess.run(
                [".venv/bin/python", "scripts/k8s-testenv", "stop"], cwd=ROOT, env=env, check=False
            )
    said = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    print(f"\nthe README's recipe: {said}", file=sys.stderr)  # its timings, with -s
    assert done.returncode == 0, said
    assert f"k8s-testenv: node {real_node.NODE_NAME} (" in done.stderr, said
    assert f"images {kernelimage.KERNEL}" in done.stderr, said
    # the pod's output: the UUIDs of two GPUs the node's driver published
    resources, _ = nodeplugins.plugin_resources(real_node.NODE_NAME)
    published = {
        device["attributes"]["uuid"]["string"]
        for pool in resources["pools"].values()
        for s in pool["slices"]
        for device in s["devices"]
    }
    [line] = [line for line in done.stdout.splitlines() if UUID.search(line)]
    uuids = line.split(",")
    assert len(uuids) == 2 and len(set(uuids)) == 2, said
    assert set(uuids) <= published, said
    # the stop left nothing: not on this machine, not in the state directory
    assert real_node.leftovers(before, state_dir / "node") == []
    assert not (state_dir / "cluster.json").exists()
    assert not (state_dir / "node" / "node.json").exists()

"""Test tiers: every test gets exactly one of ``pure``, ``kernel``, ``server``, ``service``,
``browser``, ``k8s`` or ``gpu`` (registered in pyproject.toml), the most that it needs to run:

* ``pure``: nothing but this Python process (and plain Python subprocesses, temporary
  files, a ledger on them): no kernel, no server, no browser, no cluster, no root;
* ``kernel``: real IPython kernels (jupyter_client, nbclient);
* ``server``: a real jupyter_server with the extension (its kernels included);
* ``service``: a real ``dra-jupyter service`` daemon and real Unix users (made and removed
  by the tests: root, else they skip, saying so);
* ``browser``: JupyterLab in Debian's chromium, driven by Playwright;
* ``k8s``: the real control plane of tests/k8s (etcd, kube-apiserver, ...), or its build;
* ``gpu``: a real NVIDIA GPU (no test needs one yet: NVML is tested against a fake).

A test's tier is its own marker (``@pytest.mark.pure`` on a test that needs less than its
module), else the entry of :data:`TIERS` for its module, else for the nearest folder above
it. A test with no tier, or with two, fails the collection; so does a ``pure`` test that
uses a fixture that starts something (:data:`STARTERS`).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

from dra_jupyter.kernel.environment import ProcessEnvironment

# the control plane's fixtures (cluster, kubeconfig, api, published, namespace), for tests/k8s
# and tests/hub alike: one control plane a run; the real node's (node, node_api, node_namespace,
# node_kubeconfig): one node a run, on a control plane of its own
pytest_plugins = ["tests.k8s.fixtures", "tests.k8s.nodefixtures"]

TESTS = Path(__file__).resolve().parent
TIER_NAMES = ("pure", "kernel", "server", "service", "browser", "k8s", "gpu")

# Paths relative to tests/: a module's entry wins over its folder's. No entry for the root
# folder, so that a new folder or a new module at the top must be given a tier here.
TIERS = {
    "accounting": "pure",  # the usage book: its arithmetic, a local ledger's, its Prometheus text
    "allocator": "pure",
    # binder/ built in a fresh virtualenv (pip, jlpm), then the quickstart in its kernel
    # and JupyterLab through binder/start
    "binder": "kernel",
    "browser": "browser",
    "examples": "kernel",  # nbclient runs the example notebooks
    "hub": "pure",  # the spawn form's choices, counted on objects
    "hub/test_shared_box.py": "service",  # a real JupyterHub, the service, real Unix users
    "inventory": "pure",  # NVML through a fake pynvml
    "k8s": "k8s",
    "lab": "browser",  # the JupyterLab extension in chromium
    "lab/test_unit.py": "pure",  # its TypeScript unit tests, on node
    "k8s/test_simulate.py": "pure",  # the simulated nodes' objects, without a cluster
    "k8s/test_watch_streams.py": "pure",  # the reflector on scripted answers, no cluster
    "hub/test_kubespawner.py": "k8s",  # a real JupyterHub with DRAKubeSpawner on tests/k8s
    "hub/test_spawn_form_calls.py": "k8s",  # the same hub, its API calls counted
    "hub/test_shared_view.py": "k8s",  # the hub's shared view of the devices, a real hub
    "hub/test_spawn_form_view.py": "k8s",  # the spawn form from the shared view, a real hub
    "hub/test_spawn_progress.py": "pure",  # the spawn's device events, the pod edit
    "local": "pure",  # ledgers on temporary files, worker processes of plain Python
    "magics": "kernel",
    "magics/test_parsing.py": "pure",
    "metrics": "pure",
    "placement": "pure",
    "selectors": "pure",
    "sharing": "pure",  # fair share and reclaim under pressure, as tables
    "server": "server",
    "server/test_app_config.py": "pure",
    "server/test_writer.py": "pure",  # the writer thread alone, no server
    "server/test_moves.py": "pure",  # the kernel specs of a move, the note kernel
    "server/test_reclaims.py": "service",  # a server and its kernel on the service, bob
    "server/test_reclaim_notices.py": "pure",  # what the server tells, without a server
    "service": "service",
    "service/test_backend_choice.py": "pure",
    "service/test_enforce.py": "pure",  # the enforcer's decisions, signals recorded
    "service/test_policy.py": "pure",
    "service/test_args.py": "pure",  # what the daemon reads of its inventory
    "service/test_protocol.py": "pure",
    "widgets": "kernel",
    "widgets/test_arguments.py": "pure",
    "widgets/test_history.py": "pure",
    # the Go harness of the real allocator: built like tests/k8s's control plane
    "upstream": "k8s",
    "test_api_inventories.py": "pure",
    "test_asked.py": "pure",  # a kernel's question, on the simulated devices
    "test_claimspec.py": "pure",
    "test_cli.py": "pure",
    "test_cli_doctor.py": "pure",
    "test_cli_fuzz.py": "pure",
    "test_cli_local.py": "pure",
    "test_cli_health.py": "pure",  # the watcher as a plain Python process on the fake NVML
    "test_cli_taints.py": "pure",
    "test_docs.py": "pure",  # the docs' links and make targets
    "test_public.py": "pure",
    "test_settings.py": "pure",
    "test_shape.py": "pure",  # the package's shape: its root, module and class sizes, README
    "test_version.py": "pure",
}

# Fixtures that start a kernel, a server, a browser or a control plane: no pure test uses one.
STARTERS = {
    "kernel": "kernel",  # tests/widgets, tests/magics
    "module_kernel": "kernel",  # tests/magics
    "kube_kernel": "k8s",  # tests/k8s/test_run_magic.py
    "node_kernel": "k8s",  # tests/k8s/test_run_magic.py, on the real node
    "jp_serverapp": "server",  # pytest-jupyter, under jp_fetch too
    "browser": "browser",
    "page": "browser",
    "lab": "browser",
    "lab_without_extension": "browser",
    "idle_lab": "browser",  # tests/lab
    "built_extension": "browser",
    "cluster": "k8s",  # under kubeconfig, api, namespace, published
    "node": "k8s",  # the real node, under node_api, node_kubeconfig, node_namespace
}


def folder_tier(path: Path) -> str | None:
    """The tier of the test module at ``path`` from :data:`TIERS`, or None."""
    relative = path.resolve().relative_to(TESTS)
    for key in (relative, *relative.parents):
        tier = TIERS.get(key.as_posix())
        if tier is not None:
            return tier
    return None


def tier_problem(item: pytest.Item) -> str | None:
    """Gives ``item`` its tier marker; or says why it cannot have exactly one."""
    own = {m.name for m in item.iter_markers() if m.name in TIER_NAMES}
    if len(own) > 1:
        return f"has more than one tier: {', '.join(sorted(own))}"
    if own:
        [tier] = own
    else:
        found = folder_tier(item.path)
        if found is None:
            return "has no tier: mark it, or give its module or folder one in tests/conftest.py"
        tier = found
        item.add_marker(getattr(pytest.mark, tier))
    if tier == "pure":
        started = sorted(f for f in getattr(item, "fixturenames", ()) if f in STARTERS)
        if started:
            needs = ", ".join(f"{f} ({STARTERS[f]})" for f in started)
            return f"is pure but uses fixtures that start something: {needs}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Tiers are given as each module (or class) is collected, before ``-m`` selects by
    them; a problem is that module's collection error, which pytest-xdist's workers report
    as the plain run does (an exception from a hook would only crash a worker)."""
    report = yield
    if not report.passed:
        return report
    items = [node for node in report.result if isinstance(node, pytest.Item)]
    problems = [f"{item.nodeid} {problem}" for item in items if (problem := tier_problem(item))]
    if problems:
        return pytest.CollectReport(
            report.nodeid, "failed", "test tiers:\n  " + "\n  ".join(problems), []
        )
    return report


DEVICE_VARIABLES = (  # what a claim's devices set in a process (dra_jupyter.kernel.environment)
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
)


@pytest.fixture(autouse=True)
def fresh_device_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no claim held in this process's environment, and the device
    variables a test's ``dra.request`` sets here are put back after it: a claim one test
    left held named its devices in a later test's ``CUDA_VISIBLE_DEVICES`` (CI, once:
    ``test_request_does_not_set_the_environment_of_the_caller``)."""
    monkeypatch.setattr(ProcessEnvironment, "_process", None)
    for name in DEVICE_VARIABLES:  # noted as they are (set or not), put back after the test
        before = os.environ.get(name)
        monkeypatch.setenv(name, before or "")
        if before is None:
            monkeypatch.delenv(name)

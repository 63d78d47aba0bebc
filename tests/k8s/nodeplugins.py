"""The DRA kubelet plugins of a real node (:mod:`.node`), each registered with the kubelet over
the kubelet plugin protocol and publishing its node's ResourceSlices itself:

* the project's simulated GPU driver, ``tools/dra-sim-plugin``, as :data:`DRIVER`, with the
  simulated inventory's devices (:func:`plugin_resources`) and their DeviceClasses;
* upstream's DRA test driver (``k8s.io/kubernetes/test/e2e/dra/test-driver``, the kubelet
  plugin of Kubernetes' own e2e tests, built by :mod:`.nodebuild`), as :data:`TEST_DRIVER`,
  when the node is started with ``test_driver=True``: a second, independent driver. It
  publishes :data:`TEST_DRIVER_DEVICES` devices without attributes (``device-00``, ...) in
  a pool named after the node, and prepares a claim by writing a CDI spec
  (``<driver>-<claim uid>-<request>.json`` in the node's CDI directory) whose only edits are
  environment variables: ``user_<key>=<value>`` for each pair of the claim's opaque
  parameters of its driver (a JSON object of strings), ``admin_<key>`` for a class's, and
  ``claim_<claim>_<request>=true``. The test that uses it makes its DeviceClass
  (:func:`upstream_device_class`).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import TYPE_CHECKING, Any

from tests.k8s import nodebuild, testenv

if TYPE_CHECKING:
    from tests.k8s.node import Node

INVENTORY = "h200-8x"
DRIVER = "gpu.nvidia.com"
TEST_DRIVER = "test-driver.cdi.k8s.io"  # upstream's default --drivername, as its e2e tests use
TEST_DRIVER_DEVICES = 4  # upstream's default --num-devices


def plugin_resources(node: str, inventory: str = INVENTORY) -> tuple[dict[str, Any], list[Any]]:
    """The simulated driver's pools (its ``--resources`` file) for ``node``, from the
    simulated inventory's slices of driver :data:`DRIVER`; and the inventory's DeviceClasses."""
    from dra_jupyter.inventory import simulated  # noqa: PLC0415
    from dra_jupyter.kube.simulate import simulate, slice_for_node  # noqa: PLC0415

    cluster = simulate(simulated.load(inventory), 1)
    pools: dict[str, Any] = {}
    for original in cluster.slices:
        spec = original["spec"]
        if spec["driver"] != DRIVER or not spec.get("nodeName"):
            continue
        spec = slice_for_node(original, spec["nodeName"], node)["spec"]
        slice_ = {"devices": spec.get("devices", [])}
        if spec.get("sharedCounters"):
            slice_["sharedCounters"] = spec["sharedCounters"]
        pools.setdefault(spec["pool"]["name"], {"slices": []})["slices"].append(slice_)
    return {"pools": pools}, list(cluster.device_classes)


def upstream_device_class(name: str = TEST_DRIVER) -> dict[str, Any]:
    """A DeviceClass of every device of upstream's test driver (its example's selector)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{TEST_DRIVER}"'}}]},
    }


def upstream_cdi_spec_name(claim_uid: str, request: str) -> str:
    """The file name of the CDI spec the test driver writes for a claim's request."""
    return f"{TEST_DRIVER}-{claim_uid}-{request}.json"


def upstream_claim_variable(claim: str, request: str) -> str:
    """The variable the test driver sets to ``true`` for a claim's request."""
    return re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim}_{request}")


def start(node: Node, inventory: str, resource: Any, deadline: float, *, test_driver: bool) -> None:
    """The node's plugins (see the module), until each one's slices are published; ``resource``
    is a ``ResourceV1Api`` (untyped: wire dicts in, optional fields out)."""
    wanted = {DRIVER: _spawn_sim_plugin(node, inventory, resource)}
    if test_driver:
        wanted[TEST_DRIVER] = _spawn_test_driver(node)
    for driver, count in wanted.items():
        _wait_published(node, resource, driver, count, deadline)


def _spawn_sim_plugin(node: Node, inventory: str, resource: Any) -> int:
    """The simulated GPU driver, its DeviceClasses made; the number of devices it publishes."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    resources, classes = plugin_resources(node.name, inventory)
    resources_file = node.state_dir / "resources.json"
    resources_file.write_text(json.dumps(resources))
    for device_class in classes:
        with contextlib.suppress(ApiException):  # already there
            resource.create_device_class(device_class)
    kubelet_root = node.state_dir / "kubelet"
    testenv._spawn(
        node.procs,
        "dra-sim-plugin",
        [
            f"--kubeconfig={node.cluster.kubeconfig}",
            f"--node-name={node.name}",
            f"--driver-name={DRIVER}",
            f"--resources={resources_file}",
            f"--cdi-dir={node.cdi_dir}",
            f"--plugin-dir={kubelet_root / 'plugins' / DRIVER}",
            f"--registrar-dir={kubelet_root / 'plugins_registry'}",
        ],
        program=[str(nodebuild.plugin_binary())],
    )
    return sum(len(s["devices"]) for p in resources["pools"].values() for s in p["slices"])


def _spawn_test_driver(node: Node) -> int:
    """Upstream's test driver's ``kubelet-plugin`` command; the number of devices it publishes.
    Its client is the control plane's admin (as in upstream's e2e tests); KUBECONFIG, which
    it prefers to its flag, is set to the same file."""
    kubelet_root = node.state_dir / "kubelet"
    # it makes the directory of its socket's directory only (upstream's README makes this one)
    (kubelet_root / "plugins" / TEST_DRIVER).mkdir(parents=True, exist_ok=True)
    testenv._spawn(
        node.procs,
        "dra-test-driver",
        [
            f"--kubeconfig={node.cluster.kubeconfig}",
            f"--drivername={TEST_DRIVER}",
            "-v=3",  # its prepares and unprepares in its log
            "kubelet-plugin",
            f"--node-name={node.name}",
            f"--num-devices={TEST_DRIVER_DEVICES}",
            f"--cdi-dir={node.cdi_dir}",
            f"--datadir={kubelet_root / 'plugins'}",  # it adds its driver's name
            f"--plugin-registration-path={kubelet_root / 'plugins_registry'}",
        ],
        program=[
            "env",
            f"KUBECONFIG={node.cluster.kubeconfig}",
            str(nodebuild.bin_dir() / nodebuild.TEST_DRIVER),
        ],
    )
    return TEST_DRIVER_DEVICES


def _wait_published(node: Node, resource: Any, driver: str, wanted: int, deadline: float) -> None:
    def published() -> tuple[bool, str]:
        slices = resource.list_resource_slice(field_selector=f"spec.nodeName={node.name}")
        count = sum(len(s.spec.devices or ()) for s in slices.items if s.spec.driver == driver)
        return count == wanted, f"{count} of {wanted} devices published"

    testenv._wait(node.procs, f"the slices of {driver} on {node.name}", published, deadline)

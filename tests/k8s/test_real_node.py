"""A real node (tests/k8s/node.py): containerd, runc, the CNI bridge, the kubelet and the
project's simulated GPU driver speaking the kubelet plugin protocol. A pod with a claim runs
the busybox image there; its environment comes from the driver's CDI spec, its log through the
API server, its address from the bridge; stopping the node leaves nothing behind.

The node is the test run's (:mod:`tests.k8s.nodefixtures`: started once, on a control plane
of its own, stopped at the end of the session, when nothing may be left of it).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import ipaddress
import json
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from tests.k8s import images, nodebuild, nodeplugins
from tests.k8s import node as real_node
from tests.k8s.fixtures import wait_for
from tests.k8s.nodefixtures import needs_root


def _apis(api: client.ApiClient) -> tuple[Any, Any]:
    """The core and resource APIs, untyped: the tests send wire dicts and read optional
    fields they have just waited for."""
    return client.CoreV1Api(api), client.ResourceV1Api(api)


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": nodeplugins.DRIVER}}]
            }
        },
    }


def busybox_pod(name: str, claim_name: str, script: str) -> dict[str, Any]:
    """A pod of the busybox image with one claim; it sets no environment of its own."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "main",
                    "image": images.BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def device_uuids(node: real_node.Node) -> dict[str, str]:
    """``pool/device`` → the ``uuid`` attribute the driver published."""
    resources, _ = nodeplugins.plugin_resources(node.name)
    return {
        f"{pool}/{device['name']}": device["attributes"]["uuid"]["string"]
        for pool, spec in resources["pools"].items()
        for s in spec["slices"]
        for device in s["devices"]
    }


@pytest.mark.pure
def test_an_image_archive_is_an_oci_layout_naming_its_image(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF not really")
    first = images.write_archive(
        tmp_path / "a.tar", "example.test/x:1", [images.Entry("bin/x", program)], ["/bin/x"]
    )
    again = images.write_archive(
        tmp_path / "b.tar", "example.test/x:1", [images.Entry("bin/x", program)], ["/bin/x"]
    )
    assert first.read_bytes() == again.read_bytes()  # the same files, the same bytes
    with tarfile.open(first) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (manifest_ref,) = index["manifests"]
        assert manifest_ref["annotations"]["io.containerd.image.name"] == "example.test/x:1"
        blob = f"blobs/sha256/{manifest_ref['digest'].removeprefix('sha256:')}"
        manifest = json.load(tar.extractfile(blob))  # type: ignore[arg-type]
        (layer_ref,) = manifest["layers"]
        layer = tar.extractfile(f"blobs/sha256/{layer_ref['digest'].removeprefix('sha256:')}")
        with tarfile.open(fileobj=layer) as files:
            assert files.getnames() == ["bin", "bin/x"]
            assert files.extractfile("bin/x").read() == program.read_bytes()  # type: ignore[union-attr]


@pytest.mark.pure
def test_the_driver_publishes_the_simulated_inventory_for_the_real_node() -> None:
    resources, classes = nodeplugins.plugin_resources("node-x")
    (pool,) = resources["pools"]
    assert pool == "node-x"  # the simulated node's pool, renamed after the real one
    (slice_,) = resources["pools"][pool]["slices"]
    uuids = [d["attributes"]["uuid"]["string"] for d in slice_["devices"]]
    assert len(uuids) == 8
    assert len(set(uuids)) == 8
    assert all(u.startswith("GPU-") for u in uuids)
    assert nodeplugins.DRIVER in {c["metadata"]["name"] for c in classes}


@pytest.mark.pure
def test_the_node_cache_is_keyed_by_the_binaries_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache built before upstream's test driver joined the node's binaries is not this one:
    the node is built anew once (the Go build cache makes that cheap), never half-used."""
    now = nodebuild.cache_dir()
    assert nodebuild.TEST_DRIVER in nodebuild.BINARIES
    assert now.name.startswith(
        f"node-kubernetes-v1.37.2-containerd-{nodebuild.CONTAINERD_VERSION}-"
    )
    without = tuple(b for b in nodebuild.BINARIES if b != nodebuild.TEST_DRIVER)
    monkeypatch.setattr(nodebuild, "BINARIES", without)
    assert nodebuild.cache_dir() != now
    assert nodebuild.cache_dir().parent == now.parent


@pytest.mark.pure
def test_a_build_removes_the_node_caches_it_supersedes_and_nothing_else(tmp_path: Path) -> None:
    """The unkeyed cache of before and caches of other keys or versions go, with their lock
    files; the current one, another key's that a build holds (its lock), and everything not
    named as a node cache stay."""
    base = "node-kubernetes-v1.37.2-containerd-v2.4.2"
    current = tmp_path / f"{base}-6a75bb5d"
    old = [f"{base}", f"{base}.lock", f"{base}-0123abcd", f"{base}-0123abcd.lock"]
    old += ["node-kubernetes-v1.36.0-containerd-v2.1.0-89abcdef"]
    kept = [
        current.name,
        f"{current.name}.lock",
        f"{base}-feedbeef",  # a build of another checkout holds its lock
        f"{base}-feedbeef.lock",
        "kubernetes-v1.37.2-etcd-v3.6.16",
        "kubernetes-v1.37.2-etcd-v3.6.16.lock",
        "node-running.lock",
        f"{base}-6a75bb5d-copy",
        "jobset-v0.11.1",
    ]
    for name in old + kept:
        path = tmp_path / name
        if name.endswith(".lock"):
            path.write_text("")
        else:
            (path / "bin").mkdir(parents=True)
            (path / "bin" / "kubelet").write_text("")
    with (tmp_path / f"{base}-feedbeef.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        removed = nodebuild.prune(current, io.StringIO())
        assert sorted(p.name for p in removed) == sorted(old)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
        assert nodebuild.prune(current, io.StringIO()) == []  # nothing more: once was enough
    assert (current / "bin" / "kubelet").is_file()
    # its build done (the lock free), the other key's cache is superseded too
    assert [p.name for p in nodebuild.prune(current, io.StringIO())] == kept[2:4]


@needs_root
def test_upstreams_dra_test_driver_is_built_with_the_node() -> None:
    """``k8s.io/kubernetes/test/e2e/dra/test-driver`` of the pinned module, built beside the
    kubelet: its kubelet plugin command has the flags the node starts it with."""
    nodebuild.build()  # a no-op once built
    binary = nodebuild.bin_dir() / nodebuild.TEST_DRIVER
    assert nodebuild.TEST_DRIVER_PACKAGE == "k8s.io/kubernetes/test/e2e/dra/test-driver"

    def usage(*args: str) -> str:
        done = subprocess.run([str(binary), *args], check=True, capture_output=True, text=True)
        return done.stdout

    plugin = usage("kubelet-plugin", "--help")
    for flag in ("--node-name", "--num-devices", "--cdi-dir", "--datadir"):
        assert f"{flag} " in plugin, flag
    assert "--plugin-registration-path " in plugin
    shared = usage("--help")
    assert '--drivername string   Resource driver name. (default "test-driver.cdi.k8s.io")' in (
        shared
    )
    assert "--kubeconfig string" in shared


@pytest.mark.pure
def test_the_pod_network_stays_on_this_machine() -> None:
    (bridge,) = real_node.cni_conflist(Path("/ipam"))["plugins"]
    assert bridge["ipMasq"] is False  # no masquerade: nothing leaves through the host
    assert ipaddress.ip_network(real_node.POD_SUBNET).is_private
    config = real_node.kubelet_config(Path("/pki"), "192.0.2.2", 1, 2, "/run/x.sock")
    assert config["resolvConf"] == ""  # no DNS server for the pods
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"


@needs_root
def test_a_pod_with_a_claim_runs_on_the_real_node_with_the_drivers_environment(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    core, resource = _apis(node_api)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    pod = busybox_pod("env", "gpu", "env | sort; echo READY; sleep 600")
    assert "env" not in pod["spec"]["containers"][0]
    core.create_namespaced_pod(node_namespace, pod)

    def running() -> Any:
        obj = core.read_namespaced_pod("env", node_namespace)
        if obj.status.phase in ("Failed", "Succeeded"):
            raise AssertionError(f"the pod ended: {obj.status}")
        return obj if obj.status.phase == "Running" and obj.status.pod_ip else None

    pod_obj = wait_for("the pod Running on the real node", running, timeout=120)
    assert pod_obj.spec.node_name == node.name

    # the device the scheduler allocated, and its UUID as the driver published it
    allocation = resource.read_namespaced_resource_claim("gpu", node_namespace).status.allocation
    (result,) = allocation.devices.results
    assert result.driver == nodeplugins.DRIVER
    uuid = device_uuids(node)[f"{result.pool}/{result.device}"]

    # the log, served by the kubelet through the API server (pods/log)
    def logged() -> str | None:
        text = core.read_namespaced_pod_log("env", node_namespace)
        return text if "READY" in text else None

    env = dict(
        line.split("=", 1) for line in wait_for("the pod's log", logged).splitlines() if "=" in line
    )
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_VISIBLE_DEVICES"] == uuid
    # ... and it came from the driver's CDI spec for this claim
    specs = list(node.cdi_dir.glob(f"*{allocation_claim_uid(resource, node_namespace)}*.json"))
    assert len(specs) == 1
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in specs[0].read_text()

    # its address is on the bridge, reached from the host through it
    address = ipaddress.ip_address(pod_obj.status.pod_ip)
    assert address in ipaddress.ip_network(real_node.POD_SUBNET)
    route = subprocess.run(
        ["ip", "route", "get", str(address)], check=True, capture_output=True, text=True
    ).stdout
    assert f"dev {real_node.BRIDGE}" in route

    # deleting the pod unprepares the claim: the driver removes its CDI spec
    core.delete_namespaced_pod("env", node_namespace, grace_period_seconds=1)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("env", node_namespace)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    wait_for("the pod deleted by the kubelet", gone)
    wait_for("the claim's CDI spec removed", lambda: not specs[0].exists())


def allocation_claim_uid(resource: Any, namespace: str) -> str:
    return str(resource.read_namespaced_resource_claim("gpu", namespace).metadata.uid)


@needs_root
def test_a_pods_failure_and_exit_code_are_the_kubelets(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    core, resource = _apis(node_api)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    core.create_namespaced_pod(
        node_namespace, busybox_pod("fails", "gpu", "echo about to fail; exit 3")
    )

    def ended() -> Any:
        obj = core.read_namespaced_pod("fails", node_namespace)
        return obj if obj.status.phase in ("Failed", "Succeeded") else None

    pod_obj = wait_for("the pod to end", ended, timeout=120)
    assert pod_obj.status.phase == "Failed"
    (status,) = pod_obj.status.container_statuses
    assert status.state.terminated.exit_code == 3
    assert core.read_namespaced_pod_log("fails", node_namespace) == "about to fail\n"


def logged_env(core: Any, pod: str, namespace: str) -> dict[str, str]:
    """The environment a pod of ``env | sort; echo READY; ...`` printed."""

    def running() -> bool:
        phase = core.read_namespaced_pod(pod, namespace).status.phase
        if phase in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {pod} ended: {phase}")
        return bool(phase == "Running")

    def logged() -> str | None:
        text: str | None = core.read_namespaced_pod_log(pod, namespace)
        return text if text is not None and "READY" in text else None

    wait_for(f"pod {pod} Running on the real node", running, timeout=120)
    lines = wait_for(f"the log of pod {pod}", logged).splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


@needs_root
def test_an_mps_claims_limits_reach_the_container_through_the_drivers_cdi_spec(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    """``dra.request``'s MPS keywords, in the claim as built for the cluster, decoded by the
    driver on the node (strictly, as NVIDIA's) and handed to the container as NVIDIA's MPS
    variables, through the CDI spec of the claim."""
    core, resource = _apis(node_api)
    keywords = {"gpu": 1, "share": "mps", "threads": 25, "pinned_memory": "10Gi"}
    made = build_claim("mps", keywords, namespace=node_namespace, classes=[nodeplugins.DRIVER])
    resource.create_namespaced_resource_claim(node_namespace, made)
    core.create_namespaced_pod(
        node_namespace, busybox_pod("mps", "mps", "env | sort; echo READY; sleep 600")
    )
    env = logged_env(core, "mps", node_namespace)
    allocation = resource.read_namespaced_resource_claim("mps", node_namespace).status.allocation
    (result,) = allocation.devices.results
    uuid = device_uuids(node)[f"{result.pool}/{result.device}"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"  # NVIDIA's driver's
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{uuid}=10240M"  # whole MiB
    assert env["DRA_SIM_SHARING_STRATEGY"] == "MPS"
    assert "DRA_SIM_TIMESLICE_INTERVAL" not in env
    uid = resource.read_namespaced_resource_claim("mps", node_namespace).metadata.uid
    (cdi,) = node.cdi_dir.glob(f"*{uid}*.json")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in cdi.read_text()


@needs_root
def test_a_time_sliced_claims_interval_reaches_the_container_as_the_simulated_variable(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    """The real driver sets a time slice with nvidia-smi, which no container sees; the
    simulated one says what it was told in variables of its own (documented as simulated)."""
    core, resource = _apis(node_api)
    keywords = {"gpu": 1, "share": "time-slicing", "interval": "short"}
    made = build_claim("ts", keywords, namespace=node_namespace, classes=[nodeplugins.DRIVER])
    resource.create_namespaced_resource_claim(node_namespace, made)
    core.create_namespaced_pod(
        node_namespace, busybox_pod("ts", "ts", "env | sort; echo READY; sleep 600")
    )
    env = logged_env(core, "ts", node_namespace)
    assert env["DRA_SIM_SHARING_STRATEGY"] == "TimeSlicing"
    assert env["DRA_SIM_TIMESLICE_INTERVAL"] == "Short"
    assert not {k for k in env if k.startswith("CUDA_MPS_")}  # no MPS for a time-sliced GPU


@needs_root
def test_a_claim_with_an_unknown_gpuconfig_field_fails_the_start_with_the_drivers_reason(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    """NVIDIA's driver decodes its config strictly; so does the simulated one: a misspelt
    field fails the prepare, the pod never starts, and the driver's reason is in the pod's
    events (the kubelet's FailedPrepareDynamicResources)."""
    core, resource = _apis(node_api)
    bad = claim("typo")
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercent": 50}},
    }
    bad["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": nodeplugins.DRIVER, "parameters": parameters}}
    ]
    resource.create_namespaced_resource_claim(node_namespace, bad)
    core.create_namespaced_pod(node_namespace, busybox_pod("typo", "typo", "echo started"))

    def refused() -> str | None:
        events = core.list_namespaced_event(
            node_namespace, field_selector="involvedObject.name=typo"
        ).items
        said = [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"]
        return next((m for m in said if "unknown field" in m), None)

    reason = wait_for("the driver's refusal in the pod's events", refused, timeout=120)
    assert reason.startswith("FailedPrepareDynamicResources: "), reason
    assert 'unknown field "sharing.mpsConfig.defaultActiveThreadPercent"' in reason, reason
    assert "error decoding config parameters" in reason, reason
    pod = core.read_namespaced_pod("typo", node_namespace)
    assert pod.status.phase == "Pending"  # never started
    assert all(c.state.running is None for c in pod.status.container_statuses or ())
    uid = str(resource.read_namespaced_resource_claim("typo", node_namespace).metadata.uid)
    assert not any(uid in spec.name for spec in node.cdi_dir.glob("*.json"))  # nothing prepared


@needs_root
def test_upstreams_test_driver_prepares_its_claim_beside_ours_in_one_pod(
    node: real_node.Node, node_api: client.ApiClient, node_namespace: str
) -> None:
    """Upstream's DRA test driver, a second driver registered with the same kubelet: it
    published its own slice; a pod with a claim of each driver runs; the test driver turned
    its claim's opaque parameters into variables of its CDI spec, ours set the GPU's UUID in
    its own; deleting the pod unprepares both."""
    core, resource = _apis(node_api)
    upstream = nodeplugins.TEST_DRIVER
    with contextlib.suppress(ApiException):  # the class of its devices, the test's to make
        resource.delete_device_class(upstream)
    resource.create_device_class(nodeplugins.upstream_device_class())

    # the slice of its devices, published by the driver (owned by the node), not by us
    slices = resource.list_resource_slice(field_selector=f"spec.nodeName={node.name}").items
    (published,) = [s for s in slices if s.spec.driver == upstream]
    assert published.spec.pool.name == node.name
    names = [f"device-{i:02d}" for i in range(nodeplugins.TEST_DRIVER_DEVICES)]
    assert sorted(d.name for d in published.spec.devices) == names
    (owner,) = published.metadata.owner_references
    assert (owner.kind, owner.name) == ("Node", node.name)

    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "upstream"},
        "spec": {
            "devices": {
                "requests": [{"name": "dev", "exactly": {"deviceClassName": upstream}}],
                "config": [
                    {
                        "requests": ["dev"],
                        "opaque": {
                            "driver": upstream,
                            "parameters": {"greeting": "hello from upstream", "answer": "42"},
                        },
                    }
                ],
            }
        },
    }
    resource.create_namespaced_resource_claim(node_namespace, theirs)
    resource.create_namespaced_resource_claim(node_namespace, claim("gpu"))
    pod = busybox_pod("both", "gpu", "env | sort; echo READY; sleep 600")
    pod["spec"]["resourceClaims"].append({"name": "upstream", "resourceClaimName": "upstream"})
    pod["spec"]["containers"][0]["resources"]["claims"].append({"name": "upstream"})
    core.create_namespaced_pod(node_namespace, pod)
    env = logged_env(core, "both", node_namespace)

    read = resource.read_namespaced_resource_claim
    ours, their = read("gpu", node_namespace), read("upstream", node_namespace)
    (result,) = their.status.allocation.devices.results
    assert (result.driver, result.pool) == (upstream, node.name)
    assert result.device in names
    # what the test driver injected, through its CDI spec
    assert env["user_greeting"] == "hello from upstream"
    assert env["user_answer"] == "42"
    assert env[nodeplugins.upstream_claim_variable("upstream", "dev")] == "true"
    spec = node.cdi_dir / nodeplugins.upstream_cdi_spec_name(their.metadata.uid, "dev")
    edits = json.loads(spec.read_text())["devices"][0]["containerEdits"]
    assert "user_greeting=hello from upstream" in edits["env"]
    # ... and what ours did, for the other claim, in its own spec
    (gpu,) = ours.status.allocation.devices.results
    assert gpu.driver == nodeplugins.DRIVER
    assert env["NVIDIA_VISIBLE_DEVICES"] == device_uuids(node)[f"{gpu.pool}/{gpu.device}"]
    (our_spec,) = [p for p in node.cdi_dir.glob(f"*{ours.metadata.uid}*.json") if p != spec]
    assert "user_greeting" not in our_spec.read_text()
    assert "NVIDIA_VISIBLE_DEVICES" not in spec.read_text()

    # deleting the pod unprepares both claims: each driver removes its spec
    core.delete_namespaced_pod("both", node_namespace, grace_period_seconds=1)
    wait_for("the test driver's CDI spec removed", lambda: not spec.exists())
    wait_for("our driver's CDI spec removed", lambda: not our_spec.exists())
    resource.delete_device_class(upstream)


@needs_root
def test_a_pod_running_at_the_nodes_stop_leaves_nothing(
    node: real_node.Node, node_api: client.ApiClient
) -> None:
    """Leaves a pod with a claim running, in a namespace of its own that is not deleted: the
    node stops with it at the end of the session, and the session's fixture then asserts that
    nothing of the node is left on this machine (:func:`tests.k8s.node.leftovers`) and that
    both drivers' slices of it are gone (the test driver's process too: leftovers() looks for
    any process of the node's binaries)."""
    core, resource = _apis(node_api)
    drivers = {s.spec.driver for s in resource.list_resource_slice().items}
    assert drivers == {nodeplugins.DRIVER, nodeplugins.TEST_DRIVER}  # both plugins run
    namespace = f"left-running-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(
        "the namespace's default service account",
        lambda: any(
            a.metadata.name == "default"
            for a in core.list_namespaced_service_account(namespace).items
        ),
    )
    resource.create_namespaced_resource_claim(namespace, claim("gpu"))
    core.create_namespaced_pod(namespace, busybox_pod("sleeps", "gpu", "sleep 600"))

    def running() -> bool:
        phase: str = core.read_namespaced_pod("sleeps", namespace).status.phase
        return phase == "Running"

    wait_for("the pod Running", running, timeout=120)
    assert real_node.leftovers(node.before, node.state_dir) != []  # the node is there

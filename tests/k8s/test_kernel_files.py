"""The kernel's files: a GPU kernel in a pod of its own sees the notebook's folder through
the server pod's volume that holds it (dra_jupyter/kube/kernels/volumes.py), mounted where the
storage allows two pods (a ReadWriteMany claim anywhere, a ReadWriteOnce claim on the
server's node), and a start that cannot see it is refused in one line before anything is
made. The decision is pure (a table below); on the real control plane, a PersistentVolume
and its claim bound by kube-controller-manager, a stand-in "server pod" bound to a node, and
kernels started through a real jupyter_server. Its kernels run on the stand-in kubelet (see
test_kernels.py), which mounts no volume: the real node's mounted folders are not tested yet."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.kernels.pods import KernelPodSpec, kernel_pod
from dra_jupyter.kube.kernels.volumes import (
    Files,
    Unshared,
    kernel_files,
    node_has_devices,
    node_refusal,
)
from dra_jupyter.kube.simulate import SimulatedCluster, simulate
from dra_jupyter.model.objects import Wire
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import IMAGE, RefusedError, Server, execute, kernel_pods

HOME = "/home/jovyan"
TOKEN = {  # what the ServiceAccount admission adds to every pod: never the kernel's
    "name": "kube-api-access-x",
    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    "readOnly": True,
}


def server_pod(volumes: list[Wire], mounts: list[Wire], node: str = "cpu-1", **spec: Any) -> Wire:
    container = {"name": "notebook", "image": "img", "volumeMounts": [*mounts, TOKEN]}
    return {
        "metadata": {"name": "jupyter-alice", "namespace": "team-a"},
        "spec": {
            "nodeName": node,
            "containers": [container],
            "volumes": [*volumes, {"name": "kube-api-access-x", "projected": {"sources": []}}],
            **spec,
        },
    }


def home_pod(claim: str = "home-alice", **spec: Any) -> Wire:
    volume = {"name": "home", "persistentVolumeClaim": {"claimName": claim}}
    return server_pod([volume], [{"name": "home", "mountPath": HOME}], **spec)


def pvc(*modes: str, asked: tuple[str, ...] = ()) -> Wire:
    """A claim as read: its bound volume's modes in status (none: not bound), ``asked`` in
    its spec."""
    claim: Wire = {"metadata": {"name": "home-alice"}, "spec": {"accessModes": list(asked)}}
    if modes:
        claim["status"] = {"phase": "Bound", "accessModes": list(modes)}
    return claim


CLAIM = {"name": "home", "persistentVolumeClaim": {"claimName": "home-alice"}}
MOUNT = {"name": "home", "mountPath": HOME}

# name: (server pod, cwd, claim as read, expected Files fields or the Unshared line)
CASES: dict[str, tuple[Wire, str, Wire | None, dict[str, Any] | str]] = {
    "ReadWriteMany: the claim, anywhere": (
        home_pod(),
        f"{HOME}/work",
        pvc("ReadWriteMany"),
        {
            "volumes": (CLAIM,),
            "mounts": (MOUNT,),
            "node": None,
            "where": "volume home (claim home-alice, ReadWriteMany)",
        },
    ),
    "ReadWriteOnce: the claim, on the server's node": (
        home_pod(),
        HOME,
        pvc("ReadWriteOnce"),
        {"node": "cpu-1", "where": "volume home (claim home-alice, ReadWriteOnce)"},
    ),
    "both modes: anywhere": (
        home_pod(),
        HOME,
        pvc("ReadWriteOnce", "ReadWriteMany"),
        {"node": None},
    ),
    "the bound volume's modes before those asked for": (
        home_pod(),
        HOME,
        pvc("ReadWriteOnce", asked=("ReadWriteMany",)),
        {"node": "cpu-1"},
    ),
    "not bound yet: the modes asked for": (
        home_pod(),
        HOME,
        pvc(asked=("ReadWriteMany",)),
        {"node": None},
    ),
    "a claim that cannot be read: as ReadWriteOnce": (
        home_pod(),
        HOME,
        None,
        {"node": "cpu-1", "where": "volume home (claim home-alice, access modes not readable)"},
    ),
    "ReadOnlyMany: anywhere, read-only": (
        home_pod(),
        HOME,
        pvc("ReadOnlyMany"),
        {"node": None, "mounts": ({**MOUNT, "readOnly": True},)},
    ),
    "ReadWriteOncePod: never": (
        home_pod(),
        f"{HOME}/work",
        pvc("ReadWriteOncePod"),
        "its folder /home/jovyan/work is on volume home (claim home-alice, ReadWriteOncePod), "
        "which only one pod may use; use a ReadWriteMany or ReadWriteOnce volume for home",
    ),
    "the deepest mount holds the folder; subPath and readOnly kept": (
        server_pod(
            [CLAIM, {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
            [MOUNT, {"name": "data", "mountPath": f"{HOME}/data/", "subPath": "alice"}],
        ),
        f"{HOME}/data/run-1",
        pvc("ReadWriteMany"),
        {
            "volumes": ({"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},),
            "mounts": ({"name": "data", "mountPath": f"{HOME}/data/", "subPath": "alice"},),
        },
    ),
    "a folder beside a mount, not in it": (
        server_pod(
            [CLAIM, {"name": "data", "emptyDir": {}}],
            [MOUNT, {"name": "data", "mountPath": f"{HOME}/data"}],
        ),
        f"{HOME}/database",
        pvc("ReadWriteMany"),
        {"volumes": (CLAIM,)},
    ),
    "emptyDir: never": (
        server_pod([{"name": "scratch", "emptyDir": {}}], [{"name": "scratch", "mountPath": HOME}]),
        f"{HOME}/work/",
        None,
        "its folder /home/jovyan/work is on volume scratch (emptyDir), which only the server's "
        "pod sees; use a ReadWriteMany PersistentVolumeClaim for scratch",
    ),
    "an inline CSI volume: never": (
        server_pod([{"name": "s", "csi": {"driver": "x"}}], [{"name": "s", "mountPath": "/srv"}]),
        "/srv",
        None,
        "its folder /srv is on volume s (csi), which no other pod can share; use a "
        "ReadWriteMany PersistentVolumeClaim for s",
    ),
    "nfs: anywhere": (
        server_pod(
            [{"name": "nfs", "nfs": {"server": "fs", "path": "/home"}}],
            [{"name": "nfs", "mountPath": "/home"}],
        ),
        HOME,
        None,
        {"node": None, "where": "volume nfs (nfs)"},
    ),
    "hostPath: the server's node": (
        server_pod(
            [{"name": "h", "hostPath": {"path": "/data"}}], [{"name": "h", "mountPath": "/data"}]
        ),
        "/data",
        None,
        {"node": "cpu-1", "where": "volume h (hostPath)"},
    ),
    "the container's own filesystem: never": (
        home_pod(),
        "/opt/notebooks",
        None,
        "its folder /opt/notebooks is in the server container's own filesystem, which no "
        "other pod sees; mount a volume at /opt/notebooks or above it in the server's pod",
    ),
    "subPathExpr: never": (
        server_pod([CLAIM], [{"name": "home", "mountPath": HOME, "subPathExpr": "$(USER)"}]),
        HOME,
        pvc("ReadWriteMany"),
        "its folder /home/jovyan is on volume home, mounted with subPathExpr, which depends on "
        "the server container's environment; mount it with subPath",
    ),
}


@pytest.mark.pure
@pytest.mark.parametrize("case", CASES)
def test_what_the_kernel_pod_mounts_to_see_the_notebooks_folder(case: str) -> None:
    pod, cwd, claim, expected = CASES[case]
    got = kernel_files(pod, cwd, claim)
    if isinstance(expected, str):
        assert got == Unshared(expected)
        assert "\n" not in expected
        return
    assert isinstance(got, Files), got
    for field_name, value in expected.items():
        assert getattr(got, field_name) == value, field_name
    assert all(v["name"] != "kube-api-access-x" for v in got.volumes)  # only the folder's


@pytest.mark.pure
def test_the_kernel_runs_as_the_servers_user_on_its_node_with_its_volume() -> None:
    security = {"runAsUser": 1000, "runAsGroup": 100, "fsGroup": 100}
    pod = home_pod(securityContext=security)
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 1000, "privileged": False}
    files = kernel_files(pod, f"{HOME}/work", pvc("ReadWriteOnce"))
    assert isinstance(files, Files)
    spec = KernelPodSpec(
        "kernel-1", "team-a", "img", ["ipython"], "alice", "k1", {"gpu": 1}, files=files,
        working_dir=f"{HOME}/work",
    )  # fmt: skip
    made = kernel_pod(spec)["spec"]
    [container] = made["containers"]
    assert made["volumes"] == [CLAIM]
    assert container["volumeMounts"] == [MOUNT]
    assert container["workingDir"] == f"{HOME}/work"
    assert made["securityContext"] == security
    assert container["securityContext"] == {"runAsUser": 1000}  # its user, nothing more
    # the server's node, by name, for kube-scheduler to allocate the claim there
    assert made["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["cpu-1"]}
                        ]
                    }
                ]
            }
        }
    }
    assert "nodeName" not in made
    anywhere = kernel_files(home_pod(), HOME, pvc("ReadWriteMany"))
    assert isinstance(anywhere, Files)
    assert (
        "affinity"
        not in kernel_pod(KernelPodSpec("k", "ns", "i", [], "a", "k", files=anywhere))["spec"]
    )


@pytest.mark.pure
def test_a_read_write_once_folder_on_a_node_without_the_devices_is_refused() -> None:
    cluster = simulate(simulated.load("h200-8x"), 2)
    classes = [c["metadata"]["name"] for c in cluster.device_classes]
    claim = build_claim("k", {"gpu": 1, "model": "H200"}, classes=classes)
    gpu_node = cluster.node_names[0]
    assert node_has_devices(gpu_node, claim, cluster.slices, cluster.device_classes)
    assert not node_has_devices("cpu-1", claim, cluster.slices, cluster.device_classes)
    nine = build_claim("k", {"gpu": 9}, classes=classes)
    assert not node_has_devices(gpu_node, nine, cluster.slices, cluster.device_classes)
    files = kernel_files(home_pod(), f"{HOME}/work", pvc("ReadWriteOnce"))
    assert isinstance(files, Files)
    assert node_refusal(f"{HOME}/work", files, "gpu=1 model=H200") == Unshared(
        "its folder /home/jovyan/work is on volume home (claim home-alice, ReadWriteOnce) of "
        "node cpu-1, which has no devices for gpu=1 model=H200; use a ReadWriteMany volume "
        "for home or a GPU node for the server"
    )


# --- on the real control plane --------------------------------------------------------------


@contextlib.contextmanager
def home_volume(api: client.ApiClient, namespace: str, folder: Path, mode: str) -> Iterator[str]:
    """A hostPath PersistentVolume of ``folder`` and its claim, statically bound (the
    control plane has no provisioner: kube-controller-manager's PV controller binds them);
    the claim's name. The volume is deleted at the end (it is cluster-wide)."""
    core = client.CoreV1Api(api)
    name = f"home-{mode.lower()}-{namespace}"
    pv = {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": [mode],
            "hostPath": {"path": str(folder)},
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": namespace, "name": name},
        },
    }
    claim = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": [mode],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_persistent_volume(to_model(client.V1PersistentVolume, pv))
    try:
        core.create_namespaced_persistent_volume_claim(
            namespace, to_model(client.V1PersistentVolumeClaim, claim)
        )

        def bound() -> bool:
            read = core.read_namespaced_persistent_volume_claim(name, namespace)
            return read.status is not None and read.status.phase == "Bound"

        wait_for(f"claim {name} to be bound", bound)
        yield name
    finally:
        with contextlib.suppress(ApiException):
            core.delete_persistent_volume(name)


def fake_server_pod(
    api: client.ApiClient, namespace: str, name: str, node: str, folder: Path, volume: Wire
) -> None:
    """A pod as the server's own would be (its folder on ``volume``), bound to ``node``
    (no scheduler: ``nodeName``); what the provisioner reads with ``server_pod``. On a
    simulated node the stand-in kubelet runs its command, which ends at once."""
    pod = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": os.getuid()},
            "containers": [
                {
                    "name": "notebook",
                    "image": IMAGE,
                    "command": ["python3", "-c", "pass"],
                    "volumeMounts": [{"name": "home", "mountPath": str(folder)}],
                }
            ],
            "volumes": [{"name": "home", **volume}],
        },
    }
    client.CoreV1Api(api).create_namespaced_pod(namespace, to_model(client.V1Pod, pod))


def kernel_spec(server: Server, name: str, **config: Any) -> str:
    """A kernel spec of one H200 whose provisioner reads ``config`` (server_pod ...),
    written beside the cluster's (jupyter_server looks for kernel specs at each request)."""
    share = server.root.parent / "share" / "jupyter"
    spec = json.loads((share / "kernels" / "dra-h200-x1" / "kernel.json").read_text())
    spec["metadata"]["kernel_provisioner"]["config"].update(config)
    (share / "kernels" / name).mkdir()
    (share / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    return name


def no_kernel_pod(api: client.ApiClient, namespace: str, kernel: str) -> None:
    wait_for("no kernel pod left", lambda: kernel_pods(api, namespace, kernel) == [])


def test_a_gpu_kernel_mounts_the_notebooks_volume_where_its_access_modes_allow(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    """ReadWriteOnce: the kernel pod gets the claim and goes to the server's node (a GPU
    node here), where kube-scheduler allocates its H200; ReadWriteMany: the claim, on any
    node, from a server on a node without devices. The kernel works in the notebook's
    folder and reads what the server wrote there."""
    gpu_node = published.node_names[1]
    (server.root / "work" / "data.txt").write_text("from the server\n")
    code = "import os; print(os.getcwd(), open('data.txt').read(), end='')"
    with (
        home_volume(api, namespace, server.root, "ReadWriteOnce") as rwo,
        home_volume(api, namespace, server.root, "ReadWriteMany") as rwx,
    ):
        fake_server_pod(
            api, namespace, "jupyter-rwo", gpu_node, server.root,
            {"persistentVolumeClaim": {"claimName": rwo}},
        )  # fmt: skip
        fake_server_pod(
            api, namespace, "jupyter-rwx", "cpu-node-1", server.root,
            {"persistentVolumeClaim": {"claimName": rwx}},
        )  # fmt: skip
        for server_pod_name, claim, node in (
            ("jupyter-rwo", rwo, gpu_node),
            ("jupyter-rwx", rwx, None),
        ):
            name = kernel_spec(server, f"files-{server_pod_name}", server_pod=server_pod_name)
            kernel = server.call("POST", "/api/kernels", {"name": name, "path": "work"})["id"]
            [pod] = kernel_pods(api, namespace, kernel)
            spec = pod["spec"]
            [container] = spec["containers"]
            assert [v for v in spec["volumes"] if "persistentVolumeClaim" in v] == [
                {"name": "home", "persistentVolumeClaim": {"claimName": claim}}
            ]
            assert {"name": "home", "mountPath": str(server.root)} in container["volumeMounts"]
            assert container["workingDir"] == str(server.root / "work")
            assert spec["securityContext"] == {"runAsUser": os.getuid()}
            if node is None:
                assert "affinity" not in spec
            else:
                [term] = spec["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"]
                assert term == {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]
                }
                assert spec["nodeName"] == node  # placed there, its claim allocated there
            assert pod["status"]["resourceClaimStatuses"], pod["status"]
            printed = asyncio.run(execute(server, kernel, code))
            assert printed == f"{server.root / 'work'} from the server\n"
            server.call("DELETE", f"/api/kernels/{kernel}")
            no_kernel_pod(api, namespace, kernel)
        log = (server.root.parent / "server.log").read_text()
        assert f"is on volume home (claim {rwo}, ReadWriteOnce)" in log


def test_a_kernel_that_cannot_see_the_notebooks_folder_is_refused_before_anything_is_made(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    """A ReadWriteOnce folder on a node without devices, a ReadWriteOncePod folder, an
    emptyDir, a server pod that cannot be read: each start is refused with one line (400),
    and no pod, template or Secret was ever made; ``files = "ignore"`` starts it anyway."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    root = server.root
    with (
        home_volume(api, namespace, root, "ReadWriteOnce") as rwo,
        home_volume(api, namespace, root, "ReadWriteOncePod") as rwop,
    ):
        for pod_name, node, volume in (
            ("jupyter-rwo", "cpu-node-1", {"persistentVolumeClaim": {"claimName": rwo}}),
            ("jupyter-rwop", "cpu-node-1", {"persistentVolumeClaim": {"claimName": rwop}}),
            ("jupyter-scratch", "cpu-node-1", {"emptyDir": {}}),
        ):
            fake_server_pod(api, namespace, pod_name, node, root, volume)
        expected = {
            "jupyter-rwo": f"its folder {root}/work is on volume home (claim {rwo}, "
            "ReadWriteOnce) of node cpu-node-1, which has no devices for gpu=1 model=NVIDIA "
            "H200; use a ReadWriteMany volume for home or a GPU node for the server",
            "jupyter-rwop": f"its folder {root}/work is on volume home (claim {rwop}, "
            "ReadWriteOncePod), which only one pod may use; use a ReadWriteMany or "
            "ReadWriteOnce volume for home",
            "jupyter-scratch": f"its folder {root}/work is on volume home (emptyDir), which "
            "only the server's pod sees; use a ReadWriteMany PersistentVolumeClaim for home",
            "jupyter-nowhere": "the server's pod jupyter-nowhere cannot be read, so neither "
            "can the volume of its folder; grant get on pods (deploy/hub-rbac.yaml) or name "
            "it in server_pod",
        }
        for pod_name, line in expected.items():
            name = kernel_spec(server, f"files-{pod_name}", server_pod=pod_name)
            with pytest.raises(RefusedError) as raised:
                server.call("POST", "/api/kernels", {"name": name, "path": "work"})
            assert raised.value.code == 400  # InvalidInputError's
            message = raised.value.message
            assert re.fullmatch(rf"kernel \S+: {re.escape(line)}", message), message
        log = (root.parent / "server.log").read_text()
        assert "starting pod" not in log  # refused before anything was made
        kernel_objects = "dra-jupyter/component=kernel"
        assert core.list_namespaced_pod(namespace, label_selector=kernel_objects).items == []
        assert resource.list_namespaced_resource_claim_template(namespace).items == []
        assert core.list_namespaced_secret(namespace, label_selector=kernel_objects).items == []
        # an admin's files = "ignore": started without the folder's volume
        name = kernel_spec(server, "files-ignored", server_pod="jupyter-scratch", files="ignore")
        kernel = server.call("POST", "/api/kernels", {"name": name, "path": "work"})["id"]
        [pod] = kernel_pods(api, namespace, kernel)
        assert "volumes" not in pod["spec"] or all(
            v["name"] != "home" for v in pod["spec"]["volumes"]
        )
        server.call("DELETE", f"/api/kernels/{kernel}")
        no_kernel_pod(api, namespace, kernel)

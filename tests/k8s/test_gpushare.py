"""A shared GPU's keywords reach the real API server exactly as NVIDIA's DRA driver decodes
them (#40, item 1): ``dra.request(share="mps", threads=50, pinned_memory="10Gi")`` on the
Kubernetes backend makes a ResourceClaim, and a GPU kernel's request a ResourceClaimTemplate,
whose ``spec.devices.config`` as the server stores it (read as raw JSON, no client model in
between) is NVIDIA's ``GpuConfig``/``MigDeviceConfig`` of ``resource.nvidia.com/v1beta1``,
the shapes of the driver's own conformance claim ``gpu-test5`` and nothing more (the driver
decodes strictly: an extra field would fail the node's prepare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.kernels.pods import KernelPodSpec, kernel_template
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.test_backend import session
from tests.k8s.test_claims import CLASSES

NVIDIA = "resource.nvidia.com/v1beta1"
# gpu-test5 of NVIDIA's quickstart (dra-drivers.md §1.7), field for field
MPS_CONFIG = {
    "apiVersion": NVIDIA,
    "kind": "GpuConfig",
    "sharing": {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        },
    },
}
TIME_SLICING_CONFIG = {
    "apiVersion": NVIDIA,
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}


def stored(api: client.ApiClient, read: Any, name: str, namespace: str) -> dict[str, Any]:
    """The object as the API server answers it, parsed from its JSON."""
    answer = read(name, namespace, _preload_content=False)
    parsed: dict[str, Any] = json.loads(answer.data)
    return parsed


def nvidia_config(requests: list[str], parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"requests": requests, "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    ]


def test_a_shared_gpus_claim_in_the_api_server_is_the_drivers_config(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    resource = client.ResourceV1Api(api)
    alice = session(kubeconfig, namespace)
    mps = alice.request(gpu=1, share="mps", threads=50, pinned_memory="10Gi", name="nb-mps")
    sliced = alice.request(gpu=1, share="time-slicing", interval="long", name="nb-ts")
    claim = stored(api, resource.read_namespaced_resource_claim, "nb-mps", namespace)
    assert claim["spec"]["devices"]["config"] == nvidia_config(["gpu"], MPS_CONFIG)
    claim = stored(api, resource.read_namespaced_resource_claim, "nb-ts", namespace)
    assert claim["spec"]["devices"]["config"] == nvidia_config(["gpu"], TIME_SLICING_CONFIG)
    assert mps.release() is True
    assert sliced.release() is True


def test_a_shared_gpus_claim_can_be_annotated_after_it_is_made(
    kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """The server marks a claim's activity with an annotation (the idle release reads it),
    and a hub's shared claim is marked joined the same way. The API server keeps the opaque
    config as the client sent it and a patch re-encodes it in Go's form: sent as the client's
    json.dumps writes it, every patch of the claim was refused (422 "spec: field is
    immutable"); sent in Go's form (dra_jupyter.kube.connect), it is taken."""
    alice = session(kubeconfig, namespace)
    mps = alice.request(gpu=1, share="mps", threads=50, pinned_memory="10Gi", name="nb-mps")
    assert alice.backend.touch("nb-mps", 1_700_000_000.0) is True
    assert mps.release() is True


def test_a_gpu_kernels_claim_template_carries_its_sharing(
    api: client.ApiClient, namespace: str
) -> None:
    resource = client.ResourceV1Api(api)
    spec = KernelPodSpec(
        name="kernel-mig",
        namespace=namespace,
        image="img:1",
        argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        user="alice",
        kernel_id="0123-abcd",
        request={"mig": "1g.18gb", "share": "mps", "threads": 25},
        classes=CLASSES,
    )
    # as the kernel provisioner sends it (kube/kernels/pods.py, KernelPods.create)
    body = to_model(client.V1ResourceClaimTemplate, kernel_template(spec))
    resource.create_namespaced_resource_claim_template(namespace, body)
    template = stored(api, resource.read_namespaced_resource_claim_template, spec.name, namespace)
    assert template["spec"]["spec"]["devices"]["config"] == nvidia_config(
        ["mig"],
        {
            "apiVersion": NVIDIA,
            "kind": "MigDeviceConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}},
        },
    )

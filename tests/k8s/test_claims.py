"""The ResourceClaims dra.request() builds are accepted by the real API server (its validation
and CEL compilation), and what it refuses, our own selector compiler refuses too."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import ClusterError, SelectorError
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.selectors import compile_selector

CLASSES = [c["metadata"]["name"] for c in simulated.load("h200-8x").device_classes]
SPECS: list[dict[str, Any]] = [
    {"gpu": 1},
    {"gpu": "all"},
    {"gpu": 2, "memory": "80Gi", "same": "pcieRoot"},
    {"gpu": 4, "same": "numaNode", "distinct": "pciBusID"},
    {"gpu": 1, "model": "H200"},
    {"gpu": 1, "selector": 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"'},
    {"mig": "3g.71gb", "count": 2, "same": "parentUUID"},
    {"share": "20Gi", "device_class": "gpu.nvidia.com"},
    {"alternatives": [{"gpu": 2, "model": "H200"}, {"gpu": 1, "memory": "40Gi"}]},
]


def contains(sent: Any, got: Any) -> bool:
    """Every field we sent is there, with our value (the server may add its defaults)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(
            k in got and contains(v, got[k]) for k, v in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(got, list)
            and len(sent) == len(got)
            and all(contains(a, b) for a, b in zip(sent, got, strict=True))
        )
    return bool(sent == got)


def create(api: client.ApiClient, claim: dict[str, Any], namespace: str) -> dict[str, Any]:
    resource = client.ResourceV1Api(api)
    model = to_model(client.ResourceV1ResourceClaim, claim)
    return to_wire(api, resource.create_namespaced_resource_claim(namespace, body=model))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: " ".join(f"{k}={v}" for k, v in s.items()))
def test_claims_we_build_are_accepted(
    api: client.ApiClient, namespace: str, spec: dict[str, Any]
) -> None:
    labels = {"dra-jupyter/user": "alice", "dra-jupyter/kernel": "0b5e2c4f-kernel"}
    claim = build_claim("nb-1", spec, namespace=namespace, classes=CLASSES, labels=labels)
    got = create(api, claim, namespace)
    assert contains(claim["spec"], got["spec"])
    assert got["metadata"]["labels"] == labels
    for request in got["spec"]["devices"]["requests"]:
        for body in [request["exactly"]] if "exactly" in request else request["firstAvailable"]:
            assert body["allocationMode"] in ("ExactCount", "All")  # defaulted by the server


@pytest.mark.parametrize(
    ("selector", "server_says"),
    [
        ('device.attributes["gpu.nvidia.com"].productName.contains(', "compilation failed"),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        ("device.nosuchfield == 1", "compilation failed"),
    ],
)
def test_a_bad_selector_is_rejected_by_the_api_server_and_by_us(
    api: client.ApiClient, namespace: str, selector: str, server_says: str
) -> None:
    claim = build_claim(
        "nb-bad", {"gpu": 1, "selector": selector}, namespace=namespace, classes=CLASSES
    )
    with pytest.raises(ApiException) as raised:
        create(api, claim, namespace)
    error = cluster_error(raised.value, "dra.request", api)
    assert isinstance(error, ClusterError)
    assert error.status == 422
    message = str(error)
    assert message.startswith(f"dra.request: {api.configuration.host} answered 422: ")
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in message
    assert server_says in message
    with pytest.raises(SelectorError):
        compile_selector(selector, where="claim nb-bad")


def test_a_claim_beyond_the_api_limits_is_rejected(api: client.ApiClient, namespace: str) -> None:
    claim = build_claim("nb-many", {"gpu": 1}, namespace=namespace, classes=CLASSES)
    request = claim["spec"]["devices"]["requests"][0]
    claim["spec"]["devices"]["requests"] = [{**request, "name": f"r{i}"} for i in range(33)]
    with pytest.raises(ApiException) as raised:
        create(api, claim, namespace)
    assert raised.value.status == 422
    assert "spec.devices.requests: Too many: 33: must have at most 32 items" in str(
        raised.value.body
    )

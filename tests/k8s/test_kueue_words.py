"""Kueue's word on what waits (:mod:`dra_jupyter.kube.kueue`) and the test environment's
webhook configurations (:mod:`tests.k8s.kueue`), as tables: no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from dra_jupyter.kube import kueue as words
from dra_jupyter.kube.kernels.pods import KernelPodSpec, kernel_pod
from tests.k8s import kueue

pytestmark = pytest.mark.pure

FULL = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    "in flavor default-flavor, 1 more needed"
)


def workload(
    name: str,
    created: str,
    *,
    queue: str = "gpus",
    priority: int = 0,
    reserved: bool = False,
    finished: bool = False,
    owner: str = "",
    message: str = FULL,
) -> dict[str, Any]:
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True" if reserved else "False",
            "reason": "QuotaReserved" if reserved else "Pending",
            "message": "" if reserved else message,
        }
    ]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": owner + "-uid"}]
    return {
        "metadata": meta,
        "spec": {"queueName": queue, "priority": priority},
        "status": {"conditions": conditions},
    }


def test_the_word_gives_kueues_reason_and_the_place_in_the_local_queue() -> None:
    running = workload("a", "2026-12-02T10:00:00Z", reserved=True)
    first = workload("b", "2026-12-02T10:01:00Z")
    second = workload("c", "2026-12-02T10:02:00Z")
    other_queue = workload("d", "2026-12-02T09:00:00Z", queue="cpus")
    done = workload("e", "2026-12-02T09:00:00Z", finished=True)
    every = [second, running, first, other_queue, done]
    assert words.word(second, every) == f"waiting in Kueue's queue gpus, 2 of 2: {FULL}"
    assert words.word(first, every) == f"waiting in Kueue's queue gpus, 1 of 2: {FULL}"
    assert words.word(running, every) == ""  # admitted: nothing to say


def test_a_higher_priority_goes_first_then_the_older() -> None:
    old = workload("old", "2026-12-02T10:00:00Z")
    urgent = workload("urgent", "2026-12-02T11:00:00Z", priority=100)
    assert words.word(urgent, [old, urgent]).startswith("waiting in Kueue's queue gpus, 1 of 2")
    assert words.word(old, [old, urgent]).startswith("waiting in Kueue's queue gpus, 2 of 2")


def test_a_workload_kueue_has_not_looked_at_yet_says_so() -> None:
    fresh = {"metadata": {"name": "f"}, "spec": {"queueName": "gpus"}}
    assert words.word(fresh, [fresh]) == "waiting in Kueue's queue gpus, 1 of 1: not yet considered"


def test_the_workload_of_an_object_is_found_by_its_owner() -> None:
    mine = workload("pod-k-1", "2026-12-02T10:00:00Z", owner="kernel-1")
    theirs = workload("pod-k-2", "2026-12-02T10:00:00Z", owner="kernel-2")
    assert words.owned_by([theirs, mine], "kernel-1-uid") is mine
    assert words.owned_by([theirs], "kernel-1-uid") is None


def test_a_pod_is_gated_by_kueue_only_while_its_admission_gate_is_there() -> None:
    assert words.gated({"spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}})
    assert not words.gated({"spec": {"schedulingGates": [{"name": "other.example.com/x"}]}})
    assert not words.gated({"spec": {}})


MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
- clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-ray-io-v1-rayjob}
  name: mrayjob.kb.io
- clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}
  name: mclusterqueue.kb.io
"""


def test_the_webhooks_kept_are_served_at_the_url_and_see_only_queued_pods_and_jobs() -> None:
    (configuration,) = kueue.webhook_configurations(MANIFESTS, "https://127.0.0.1:9", "Q0E=")
    assert configuration["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    pod, queue = configuration["webhooks"]  # ray's is not an integration here
    assert pod["clientConfig"] == {"url": "https://127.0.0.1:9/mutate--v1-pod", "caBundle": "Q0E="}
    assert pod["objectSelector"] == {
        "matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]
    }
    assert "objectSelector" not in queue  # Kueue's own kinds: every object


def test_kueue_counts_gpus_of_the_test_device_class_and_leaves_its_visibility_server_off() -> None:
    config = kueue.manager_config(9443, 8081, kueue.cache_dir())
    assert config["featureGates"] == {
        "DynamicResourceAllocation": True,
        "VisibilityOnDemand": False,
    }
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}
    ]
    assert config["integrations"]["frameworks"] == ["batch/job", "pod"]


def test_a_kernel_pod_with_devices_carries_the_queue_and_one_without_does_not() -> None:
    def spec(request: dict[str, Any]) -> KernelPodSpec:
        return KernelPodSpec(
            name="kernel-1",
            namespace="team-a",
            image="img:1",
            argv=["python"],
            user="alice",
            kernel_id="k-1",
            request=request,
            queue="gpus",
        )

    assert kernel_pod(spec({"gpu": 1}))["metadata"]["labels"][kueue.QUEUE_LABEL] == "gpus"
    assert kueue.QUEUE_LABEL not in kernel_pod(spec({}))["metadata"]["labels"]


def test_kueues_look_before_the_pods_template_exists_is_said_as_not_counted_yet() -> None:
    early = workload(
        "pod-k-1",
        "2026-12-02T10:00:00Z",
        message="spec.podSets[0].template.spec.resourceClaims[0]: Internal error: failed to "
        "get claim spec for ResourceClaimTemplate kernel-1 in podset main: "
        'ResourceClaimTemplate.resource.k8s.io "kernel-1" not found',
    )
    assert words.word(early, [early]) == (
        "waiting in Kueue's queue gpus, 1 of 1: Kueue has not counted its devices yet"
    )


@pytest.mark.parametrize(
    ("devices", "said"),
    [
        ({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g", "count": 2}}]}, ""),
        (
            {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g", "selectors": [{}]}}]},
            "a selector (memory=, model= or where=)",
        ),
        (
            {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "g"}}],
                "constraints": [{"matchAttribute": "x"}],
            },
            "same= (a matchAttribute constraint)",
        ),
        ({"requests": [{"name": "gpu", "firstAvailable": [{}]}]}, "alternatives (firstAvailable)"),
        (
            {"requests": [{"name": "gpu", "exactly": {"allocationMode": "All"}}]},
            "every device of a kind (allocationMode All)",
        ),
    ],
)
def test_what_kueue_cannot_count_is_named(devices: dict[str, Any], said: str) -> None:
    assert words.uncountable({"devices": devices}) == said


def test_a_request_kueue_cannot_count_is_refused_in_one_line() -> None:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"selectors": [{}]}}]}}
    assert words.refusal("kernel k-1", "gpus", spec) == (
        "kernel k-1: Kueue's queue gpus counts devices only by DeviceClass and number, and this "
        "request has a selector (memory=, model= or where=); ask for devices by count alone "
        "(gpu=N), or ask the admin for a DeviceClass that selects those devices"
    )
    assert words.refusal("kernel k-1", "gpus", {"devices": {"requests": []}}) == ""

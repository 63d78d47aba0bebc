"""The spawn's device events from pod and claim snapshots (each change once), their
interleaving with KubeSpawner's, the claim added to KubeSpawner's own pod object, and a
"GPU kernels only" pod that gets none."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from kubespawner.objects import make_pod

from dra_jupyter.hub import kubespawner
from dra_jupyter.hub.pod import add_claim
from dra_jupyter.hub.progress import DeviceProgress, Event, interleave, never_back

ALLOCATION = {
    "devices": {
        "results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-2", "device": "gpu-3"}
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-2"]}]}
        ]
    },
}


def claim(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "jupyter-alice-dra-x1"}, "status": status}


def test_each_state_is_told_once_in_order() -> None:
    progress = DeviceProgress("gpu=1", "jupyter-alice-dra")
    assert "jupyter-alice-dra" in progress.requested()["message"]
    pod: dict[str, Any] = {"spec": {}, "status": {}}
    first = progress.update(pod, claim({}), now=0.0)
    assert [e["message"] for e in first] == [
        "Claim jupyter-alice-dra-x1 made from the template: pending, waiting for kube-scheduler"
    ]
    assert progress.update(pod, claim({}), now=1.0) == []  # nothing new
    bound = {"spec": {"nodeName": "gpu-node-2"}, "status": {}}
    later = progress.update(bound, claim({"allocation": ALLOCATION, "reservedFor": [{}]}), 2.0)
    assert [e["message"] for e in later] == [
        "Claim jupyter-alice-dra-x1 allocated on node gpu-node-2: gpu-node-2/gpu-3",
        "Pod bound to node gpu-node-2",
        "Claim jupyter-alice-dra-x1 reserved for the pod",
    ]
    assert [e["progress"] for e in later] == [40, 50, 55]
    assert "<code>gpu-node-2</code>" in later[0]["html_message"]
    assert not progress.wants_explanation(100.0, after=8.0)  # bound: nothing to explain


def test_an_unschedulable_pod_is_explained_and_fails_with_why() -> None:
    progress = DeviceProgress("gpu=9", "t")
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 cannot allocate all claims.",
    }
    pod = {"spec": {}, "status": {"conditions": [condition]}}
    events = progress.update(pod, claim({}), now=5.0)
    assert events[-1]["message"] == (
        "kube-scheduler cannot place the server: 0/2 nodes are available: 2 cannot allocate "
        "all claims."
    )
    assert 'class="text-danger"' in events[-1]["html_message"]
    assert progress.update(pod, claim({}), now=6.0) == []  # the same reason: once
    assert progress.unschedulable_since == 5.0
    assert progress.wants_explanation(6.0, after=8.0)
    why = progress.explained("can never be met on this cluster\nnode gpu-node-1: <9 of 8>")
    assert why["message"] == (
        "Why: gpu=9: can never be met on this cluster; node gpu-node-1: <9 of 8>"
    )
    assert "&lt;9 of 8&gt;" in why["html_message"]  # escaped
    assert not progress.wants_explanation(7.0, after=8.0)  # explained once
    text, markup = progress.failure()
    assert text.startswith("no devices for gpu=9: kube-scheduler cannot place the server")
    assert "dra-explain" in markup


def test_a_long_pending_claim_is_explained_without_a_scheduler_verdict() -> None:
    progress = DeviceProgress("gpu=1", "t")
    progress.update({"spec": {}, "status": {}}, claim({}), now=0.0)
    assert not progress.wants_explanation(7.9, after=8.0)
    assert progress.wants_explanation(8.0, after=8.0)


def test_kueues_word_is_told_each_time_it_changes_and_not_when_there_is_none() -> None:
    progress = DeviceProgress("gpu=1", "t")
    word = "waiting in Kueue's queue gpus, 2 of 2: insufficient unused quota for <gpu>"
    (told,) = progress.queued(word)
    assert told["message"] == f"The server is {word}"
    assert "progress" not in told  # the bar stays where it is while the pod waits
    assert "&lt;gpu&gt;" in told["html_message"]
    assert progress.queued(word) == []  # the same word: nothing new
    assert progress.queued("") == []  # admitted, or Kueue not read
    (moved,) = progress.queued(word.replace("2 of 2", "1 of 1"))
    assert "1 of 1" in moved["message"]


async def _items(items: list[Event], pause: float) -> AsyncIterator[Event]:
    for item in items:
        await asyncio.sleep(pause)
        yield item


def test_two_streams_are_interleaved_and_the_bar_never_goes_back() -> None:
    async def collect() -> list[Event]:
        ours = _items([{"progress": 20, "message": "a"}, {"progress": 40, "message": "b"}], 0.01)
        theirs = _items([{"progress": 30, "message": "x"}, {"message": "slow"}], 0.015)
        return [e async for e in never_back(interleave(ours, theirs))]

    got = asyncio.run(collect())
    assert sorted(e["message"] for e in got) == ["a", "b", "slow", "x"]
    bars = [e["progress"] for e in got if "progress" in e]
    assert bars == sorted(bars)


def test_the_claim_is_added_and_the_containers_limits_kept() -> None:
    pod = make_pod(
        name="jupyter-alice",
        cmd=["jupyterhub-singleuser"],
        port=8888,
        image="image",
        image_pull_policy=None,
        cpu_limit=2,
        mem_limit="1G",
        extra_resource_limits={"example.com/fpga": 1},
    )
    add_claim(pod, "jupyter-alice-dra", labels={"q": "a"}, active_deadline=3600.5)
    add_claim(pod, "jupyter-alice-dra")  # again: no second reference
    assert pod.spec.resource_claims == [
        {"name": "dra", "resourceClaimTemplateName": "jupyter-alice-dra"}
    ]
    resources = pod.spec.containers[0].resources
    assert resources.claims == [{"name": "dra"}]
    assert resources.limits == {"cpu": 2, "memory": "1G", "example.com/fpga": 1}
    assert pod.spec.active_deadline_seconds == 3600
    assert pod.metadata.labels["q"] == "a"
    assert add_claim(pod, None) is pod


def test_stock_kubespawners_hook_gives_a_gpu_kernels_only_server_its_kernel_spec() -> None:
    """modify_pod_hook with dra_kernels_only: no claim, no deadline, and the kernel spec of
    the profile in the server's environment (nothing is asked of the cluster)."""
    pod = make_pod(
        name="jupyter-alice",
        cmd=["jupyterhub-singleuser"],
        port=8888,
        image="image",
        image_pull_policy=None,
    )
    spawner = SimpleNamespace(
        dra_request={"gpu": 1, "model": "H200"},
        dra_kernels_only=True,
        dra_lease="8h",
        dra_idle_timeout="1h",
        dra_kueue_queue=None,
        namespace="team-a",
        pod_name="jupyter-alice",
        user_options={"profile": "h200"},
    )
    edited = asyncio.run(kubespawner.modify_pod_hook(spawner, pod))
    assert edited.spec.resource_claims is None
    assert edited.spec.active_deadline_seconds is None
    env = {e["name"]: e["value"] for e in edited.spec.containers[0].env}
    assert env["DRA_JUPYTER_BACKEND"] == "kubernetes"
    assert env["DRA_JUPYTER_DEFAULT_KERNEL"] == "dra-h200"
    spec = json.loads(env["DRA_JUPYTER_KERNEL_SPECS"])["dra-h200"]
    assert spec["display_name"] == "Python 3 \u00b7 gpu=1 model=H200"
    assert spec["metadata"]["kernel_provisioner"]["config"] == {
        "request": {"gpu": 1, "model": "H200"}
    }
    assert spec["metadata"]["dra_jupyter"]["idle_timeout"] == "1h"
    # an admin's slug of any spelling makes a kernel's name
    [name] = kubespawner.profile_kernel_specs({"gpu": 1}, "Big GPU/#1", "x")
    assert name == "dra-big-gpu-1"

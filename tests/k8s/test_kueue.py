"""The cluster's quota is Kueue's: real Kueue (built from the Go module proxy, :mod:`.kueue`)
on a control plane of this module's own, with a ClusterQueue whose quota is two GPUs and a
LocalQueue ``gpus`` in the test's namespace. GPU kernels of a server whose queue is ``gpus``
and ``dra.run``'s Jobs of that queue wait in Kueue's line beyond the quota, and the user reads
Kueue's reason and place, not just "Pending"; what frees quota lets the next one in.

A control plane of its own: Kueue's CRDs and webhooks would change what the other tests of
the session's cluster see (``dra.run`` checks whether Kueue is installed)."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.hub.progress import DeviceProgress
from dra_jupyter.kube import kueue as kueue_words
from dra_jupyter.kube.connect import api_client, to_wire
from dra_jupyter.kube.runs.jobrun import JobRun
from dra_jupyter.kube.spawn import ServerDevices
from tests.hub.test_kubespawner import service_account_kubeconfig
from tests.k8s import kueue
from tests.k8s.addon import OwnCluster, own_cluster
from tests.k8s.fixtures import fresh_namespace, wait_for
from tests.k8s.kernelserver import RefusedError, kernel_pods, running_server
from tests.k8s.test_backend import session
from tests.k8s.test_pods import IMAGE

QUEUE = "gpus"
QUOTA = 2  # GPUs


def _created(objects: client.CustomObjectsApi, plural: str, body: dict[str, Any]) -> bool:
    """Create a cluster-scoped Kueue object; False while Kueue's webhook does not answer yet."""
    try:
        objects.create_cluster_custom_object(kueue.GROUP, "v1beta2", plural, body)
    except ApiException as error:
        if error.status == 409:
            return True
        if error.status >= 500:  # the webhook's first calls
            return False
        raise
    return True


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnCluster]:
    with own_cluster(tmp_path_factory, kueue.ADDON, kueue.start) as own:
        objects = client.CustomObjectsApi(own.api)
        wait_for(
            "Kueue to take a ResourceFlavor",
            lambda: _created(objects, "resourceflavors", kueue.resource_flavor()),
        )
        wait_for(
            "Kueue to take the ClusterQueue",
            lambda: _created(objects, "clusterqueues", kueue.cluster_queue(QUEUE, QUOTA)),
        )
        yield own


@pytest.fixture
def namespace(queued: OwnCluster) -> Iterator[str]:
    """A fresh namespace with the LocalQueue ``gpus`` of the two-GPU ClusterQueue."""
    with fresh_namespace(queued.api) as name:
        client.CustomObjectsApi(queued.api).create_namespaced_custom_object(
            kueue.GROUP, "v1beta2", name, "localqueues", kueue.local_queue(QUEUE, name, QUEUE)
        )
        yield name


def _missed_templates(api: client.ApiClient, namespace: str) -> list[str]:
    """Kueue's words on the namespace's Workloads that it read before their
    ResourceClaimTemplate existed. Kueue 0.17 marks such a Workload ``Requeued=False`` and
    never clears it, so it is never admitted, even once quota is free (the kernel or run
    made its template after its pod or Job): there must be none."""
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        kueue.GROUP, "v1beta2", namespace, "workloads"
    )
    assert isinstance(listed, dict)
    return [
        f"{w['metadata']['name']}: {c['type']}={c['status']}: {c['message']}"
        for w in listed["items"]
        for c in (w.get("status") or {}).get("conditions") or ()
        if "failed to get claim spec" in c.get("message", "")
    ]


def _log_has(path: Path, pattern: str) -> str | None:
    found = re.search(pattern, path.read_text())
    return found.group(0) if found else None


def test_gpu_kernels_beyond_the_queues_quota_wait_in_kueue_and_say_its_reason_and_place(
    queued: OwnCluster, namespace: str, tmp_path: Path
) -> None:
    """Two one-GPU kernels fill the quota; a third waits in Kueue (its pod gated: the
    cluster has 14 GPUs free, so without Kueue it would run), and the server says why and
    where; an eight-GPU kernel can never fit the quota and its start fails after its 10 s
    with Kueue's words; stopping a kernel lets the third one in."""
    core = client.CoreV1Api(queued.api)
    with running_server(
        queued.cluster,
        queued.api,
        namespace,
        tmp_path,
        queued.runner,
        idle_timeout=0,
        env={"DRA_JUPYTER_KUEUE_QUEUE": QUEUE},
        configs={  # Kueue counts devices by class and number only: no model selector
            "any-gpu": {"request": {"gpu": 1}},
            "eight-gpus": {"request": {"gpu": 8}, "start_timeout": 10},
        },
    ) as server:
        kernels = [
            server.call("POST", "/api/kernels", {"name": "any-gpu", "path": "work"})["id"]
            for _ in range(2)
        ]
        for kernel in kernels:
            (pod,) = kernel_pods(queued.api, namespace, kernel)
            assert pod["metadata"]["labels"][kueue.QUEUE_LABEL] == QUEUE
        with pytest.raises(RefusedError) as refused:  # a model: Kueue can't count
            server.call("POST", "/api/kernels", {"name": "dra-h200-x1", "path": "work"})
        said = refused.value.text
        assert refused.value.code == 400, said
        assert (
            "Kueue's queue gpus counts devices only by DeviceClass and number, and this "
            "request has a selector (memory=, model= or where=)"
        ) in said
        assert len(core.list_namespaced_pod(namespace).items) == 2  # nothing made for it
        third: dict[str, Any] = {}

        def start_third() -> None:
            try:
                # it waits in Kueue's line while the test goes on, its start timeout 300 s
                third["kernel"] = server.call(
                    "POST", "/api/kernels", {"name": "any-gpu", "path": "work"}, timeout=360
                )["id"]
            except RefusedError as error:  # reported by the assertion below
                third["error"] = error.text

        starting = threading.Thread(target=start_third)
        starting.start()
        log = tmp_path / "server.log"
        wait_for(
            "the server to say the third kernel waits in Kueue",
            lambda: _log_has(
                log,
                r"pod kernel-\S+: waiting in Kueue's queue gpus, 1 of 1: .*"
                r"insufficient unused quota for nvidia.com/gpu.*",
            ),
        )
        assert "Internal error" not in log.read_text()  # Kueue's look before the template
        assert _missed_templates(queued.api, namespace) == []
        # a hub's spawn progress reads the same word, on the hub's own RBAC
        pods = [to_wire(queued.api, p) for p in core.list_namespaced_pod(namespace).items]
        (gated,) = [p for p in pods if kueue_words.gated(p)]
        hub = service_account_kubeconfig(
            queued.api, queued.cluster, namespace, "hub", tmp_path / "hub.kubeconfig"
        )
        with api_client(str(hub)) as hub_api:
            word = ServerDevices(hub_api, namespace).kueue_word(gated["metadata"]["uid"])
        (told,) = DeviceProgress("gpu=1", "t").queued(word)
        assert re.fullmatch(
            r"The server is waiting in Kueue's queue gpus, 1 of 1: couldn't assign flavors to "
            r"pod set main: insufficient unused quota for nvidia.com/gpu.*",
            told["message"],
        ), told
        with pytest.raises(RefusedError) as raised:
            server.call("POST", "/api/kernels", {"name": "eight-gpus", "path": "work"})
        assert raised.value.code == 409
        message = raised.value.text
        assert re.search(
            r"kernel pod kernel-\S+ was not admitted by Kueue within 10 s: "
            # 2 of 2 behind the third; 1 of 2 when both were made within one second (the
            # Workloads' creation times are whole seconds)
            r"waiting in Kueue's queue gpus, [12] of 2: couldn't assign flavors",
            message,
        ), message
        assert starting.is_alive()  # still waiting: the quota is in use
        server.call("DELETE", f"/api/kernels/{kernels[0]}")
        starting.join(timeout=360)
        assert not starting.is_alive()
        assert "error" not in third, third
        (pod,) = kernel_pods(queued.api, namespace, third["kernel"])
        assert pod["status"]["phase"] == "Running"
        for kernel in (kernels[1], third["kernel"]):
            server.call("DELETE", f"/api/kernels/{kernel}")
    wait_for("no kernel pod left", lambda: core.list_namespaced_pod(namespace).items == [])


def test_a_run_beyond_the_queues_quota_waits_suspended_with_kueues_reason_then_runs(
    queued: OwnCluster, namespace: str
) -> None:
    """A two-GPU run fills the quota; a second run waits suspended in Kueue's line and its
    status says Kueue's reason and place; cancelling the first lets the second run."""
    alice = session(queued.cluster.kubeconfig, namespace, image=IMAGE, kueue_queue=QUEUE)
    with queued.runner.serving(namespace):
        with pytest.raises(
            InvalidInputError,
            match=rf"^dra\.run: no Kueue LocalQueue 'nope' in namespace {namespace}; ",
        ):
            alice.run(["true"], gpu=1, queue="nope")
        assert client.BatchV1Api(queued.api).list_namespaced_job(namespace).items == []
        first = alice.run(
            [sys.executable, "-c", "import time; time.sleep(600)"], gpu=2, name="first"
        )
        assert isinstance(first, JobRun)
        wait_for("the first run to run", lambda: first.status.phase == "Running")
        second = alice.run([sys.executable, "-c", "print('second ran')"], gpu=1, name="second")
        assert isinstance(second, JobRun)

        def queued_word() -> str | None:
            status = second.status
            return status.message if "couldn't assign flavors" in status.message else None

        message = wait_for("Kueue's word on the second run", queued_word)
        assert second.status.phase == "Pending"
        assert message.startswith("waiting in Kueue's queue gpus, 1 of 1: "), message
        assert "insufficient unused quota for nvidia.com/gpu" in message, message
        assert _missed_templates(queued.api, namespace) == []
        first.cancel()
        ended: list[object] = []

        def second_ended() -> bool:
            ended[:] = [second.status]
            return second.status.phase == "Succeeded"

        try:
            wait_for("the second run to end", second_ended, timeout=180)
        except AssertionError as error:  # what it was at the end, said
            raise AssertionError(f"{error}: {ended}") from None
        assert "second ran" in second.logs()
        second.cancel()
    with contextlib.suppress(ApiException):
        client.BatchV1Api(queued.api).delete_collection_namespaced_job(namespace)

"""A real ``jupyter server`` on the Kubernetes backend (the ``dra-singleuser`` account of
deploy/hub-rbac.yaml) reads the cluster from watched views in steady state
(:mod:`dra_jupyter.kube.views`, issue #38): once they synced, the REST reads the JupyterLab
extension polls (labextension/src/model.ts), its periodic checks and sweeps make no LIST,
of any kind; it holds 3 watches of its namespace and, for the Devices panel, 4 of the
cluster; a claim made or released, and a run cancelled, through it show in its reads at
once. Every count is the API server's own, of that account's requests
(:func:`tests.k8s.apimetrics.counted_account`).

Why on the stand-in kubelet, not the real node: its run is a Job, on the session's simulated
nodes (see tests/k8s/test_jobs.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_jupyter.kube import views
from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.kernels import pods
from dra_jupyter.kube.runs.jobs import COMPONENT, COMPONENT_LABEL, RUN_LABEL
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.types import USER_ANNOTATION, USER_LABEL, label_value
from tests.k8s import testenv
from tests.k8s.apimetrics import counted_account
from tests.k8s.fixtures import wait_for
from tests.k8s.kernelserver import RefusedError, Server, running_server
from tests.k8s.podrunner import PodRunner

ACCOUNT = "dra-singleuser"  # the server's (kernelserver.running_server)
SYNC_DEADLINE_S = 90.0  # for the views to sync, on a loaded machine
ROUNDS = 20  # of every polled read, after the views synced
READING_S = 3.0  # at least this long, so that the checks (every 0.2 s) run passes meanwhile
NAMESPACE_WATCHES = 3  # claims, pods, Jobs
# the Devices panel's: slices, classes, taint rules, every namespace's claims (one view of
# each in the process, until a hub-wide view serves them: #38's item 2)
CLUSTER_WATCHES = 4


def make_run(api: client.ApiClient, namespace: str, user: str, name: str) -> None:
    """A Job labelled as ``dra.run`` labels a run of ``user`` (made by the admin: the server
    only reads it); no pod (parallelism 0)."""
    labels = {USER_LABEL: label_value(user), COMPONENT_LABEL: COMPONENT, RUN_LABEL: name}
    container = {"name": "main", "image": "dra-jupyter-test/never-pulled:0", "command": ["true"]}
    job = {
        "metadata": {"name": name, "labels": labels, "annotations": {USER_ANNOTATION: user}},
        "spec": {
            "parallelism": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }
    client.BatchV1Api(api).create_namespaced_job(namespace, body=to_model(client.V1Job, job))


def polled(server: Server, claim: str) -> dict[str, Any]:
    """One round of what an open lab polls (model.ts): claims, a claim, runs, metrics,
    usage (refused on a cluster: no usage book), the devices (the Devices panel shown)."""
    said: dict[str, Any] = {}
    for path in (
        "/dra/api/claims",
        f"/dra/api/claims/{claim}",
        "/dra/api/runs",
        "/dra/api/metrics?history=30",
        "/dra/api/usage?since=7d",
        "/dra/api/devices",
    ):
        try:
            said[path.split("?")[0]] = server.call("GET", path)
        except RefusedError as error:
            said[path.split("?")[0]] = error.code
    return said


def claim_names(server: Server) -> list[str]:
    return sorted(c["name"] for c in server.call("GET", "/dra/api/claims")["claims"])


def test_a_servers_reads_and_checks_make_no_list_once_its_views_synced(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
    published: SimulatedCluster,
) -> None:
    with (
        counted_account(cluster, api, namespace, ACCOUNT) as counted,
        running_server(
            cluster, api, namespace, tmp_path, pod_runner, idle_timeout=3600, check_interval=0.2
        ) as server,
    ):
        kept = server.call("POST", "/dra/api/claims", {"gpu": 1})
        user = kept["user"]
        make_run(api, namespace, user, "train-1")
        # the first reads start the views (each waits for its first list); a server that
        # watches nothing (before #38) goes on after the deadline, and its LISTs are counted
        deadline = time.monotonic() + SYNC_DEADLINE_S
        while time.monotonic() < deadline:
            polled(server, kept["name"])
            if counted.count("watch") >= NAMESPACE_WATCHES + CLUSTER_WATCHES:
                break
        wait_for(
            "the run in GET runs",
            lambda: [r["name"] for r in server.call("GET", "/dra/api/runs")["runs"]] == ["train-1"],
        )
        lists, watches = counted.count("list"), counted.count("watch")

        rounds, deadline = 0, time.monotonic() + READING_S
        while rounds < ROUNDS or time.monotonic() < deadline:
            said = polled(server, kept["name"])
            assert [c["name"] for c in said["/dra/api/claims"]["claims"]] == [kept["name"]]
            assert said["/dra/api/claims/" + kept["name"]]["name"] == kept["name"]
            assert [r["name"] for r in said["/dra/api/runs"]["runs"]] == ["train-1"]
            assert said["/dra/api/devices"]["devices"]  # the session's simulated nodes'
            rounds += 1

        # read-your-writes: a claim made, then released, through the server shows at once
        made = server.call("POST", "/dra/api/claims", {"gpu": 1})
        assert claim_names(server) == sorted([kept["name"], made["name"]])
        assert server.call("GET", f"/dra/api/claims/{made['name']}")["name"] == made["name"]
        server.call("DELETE", f"/dra/api/claims/{made['name']}")
        assert claim_names(server) == [kept["name"]]
        released = server.call("GET", f"/dra/api/claims/{made['name']}")
        assert released["released"] is not None

        # and a run cancelled through it is gone from GET runs at once
        cancelled = server.call("POST", "/dra/api/runs/train-1/cancel")
        assert (cancelled["name"], cancelled["phase"]) == ("train-1", "Cancelled")
        assert server.call("GET", "/dra/api/runs")["runs"] == []

        # what the API server dispatched of the account's requests meanwhile
        new_lists = counted.count("list") - lists
        assert new_lists == 0, f"{new_lists} LISTs in {rounds} rounds of reads and the checks"
        assert counted.count("watch") == watches
        assert counted.count("watch", "namespace") <= NAMESPACE_WATCHES
        assert counted.count("watch", "cluster") <= CLUSTER_WATCHES


def test_the_views_select_by_the_labels_runs_and_kernels_carry() -> None:
    assert views.COMPONENT_LABEL == COMPONENT_LABEL == pods.COMPONENT_LABEL
    assert views.SELECTORS[views.JOBS] == f"{COMPONENT_LABEL}={COMPONENT}"

"""A kernel's ``dra.request`` on the Kubernetes backend does not list the cluster (issue #38,
item 4): a kernel of a real ``jupyter server`` (the ``dra-singleuser`` account of
deploy/hub-rbac.yaml) asks its server whether the request could be met, which answers from
its watched views (:mod:`dra_jupyter.server.kernelasks`), and makes the claim without
reading a ResourceSlice; a request that could never be met is still refused before anything
is made, in the same words, from the slices the kernel reads then. Every count is the API
server's own, of that account's LISTs of ResourceSlices
(:func:`tests.k8s.apimetrics.counted_account`).

Why on the stand-in kubelet, not the real node: the kernel talks to its server and to the API
server from inside its pod, and a pod of the real node reaches neither (the API server listens
on 127.0.0.1 and the ``kubernetes`` Service has no kube-proxy; the kernel image has no
Kubernetes client)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from dra_jupyter.kernel.asking import POSSIBLE_PATH, SECRET_HEADER
from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s import testenv
from tests.k8s.apimetrics import counted_account
from tests.k8s.kernelserver import execute, running_server
from tests.k8s.podrunner import PodRunner

ACCOUNT = "dra-singleuser"  # the server's, and so its kernels' (kernelserver.running_server)

REQUEST = """
import dra_jupyter as dra
claim = dra.request(gpu=1, name="from-a-kernel")
print("made", claim.name, claim.state)
"""

REFUSED = """
import dra_jupyter as dra
try:
    dra.request(gpu=9, name="nine")
except dra.AllocationError as error:
    print("refused", type(error).__name__, error.explanation is not None)
    print(error)
"""


def test_a_kernels_request_lists_no_slice_and_a_refused_one_still_says_why(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
    published: SimulatedCluster,
) -> None:
    with (
        counted_account(
            cluster, api, namespace, ACCOUNT, verbs=("list",), resources=["resourceslices"]
        ) as counted,
        running_server(cluster, api, namespace, tmp_path, pod_runner, idle_timeout=0) as server,
    ):
        # the server's own claim: its views of the cluster list the slices once, and watch
        server.call("POST", "/dra/api/claims", {"gpu": 1})
        synced = counted.count("list")
        kernel = str(server.call("POST", "/api/kernels", {"name": "python3", "path": "work"})["id"])

        printed = asyncio.run(execute(server, kernel, REQUEST))
        assert "made from-a-kernel pending" in printed, printed
        assert ClaimClient(api, namespace).get("from-a-kernel") is not None
        assert counted.count("list") == synced, "the kernel's dra.request listed ResourceSlices"

        refused = asyncio.run(execute(server, kernel, REFUSED))
        assert "refused NeverPossibleError True" in refused, refused
        # what dra.request says of it outside a kernel (tests/k8s/test_backend.py)
        assert "\nthe request can never be met on the cluster at https://127.0.0.1:" in refused
        assert "request gpu: only 8 GPUs here (class gpu.nvidia.com), 9 needed" in refused
        assert ClaimClient(api, namespace).get("nine") is None
        # the refusal is explained from the slices the kernel read for it
        assert counted.count("list") > synced


def test_the_server_answers_only_its_kernels(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
    published: SimulatedCluster,
) -> None:
    """Without the secret the server put in its kernels' environment: 403, even with the
    server's own token (which a kernel never has)."""
    with running_server(cluster, api, namespace, tmp_path, pod_runner, idle_timeout=0) as server:
        for headers in (
            {"Authorization": f"token {server.token}"},
            {SECRET_HEADER: "guessed"},
        ):
            request = urllib.request.Request(
                f"{server.url}/{POSSIBLE_PATH}",
                data=json.dumps({"request": {"gpu": 1}}).encode(),
                method="POST",
                headers={"Content-Type": "application/json", **headers},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            with refused.value:  # its answer's connection
                assert refused.value.code == 403

"""The hub's one view of the cluster's devices (:mod:`dra_jupyter.hub.sharedview`) against
the real control plane of tests/k8s:

* the service process alone, on the hub's service account of exactly deploy/hub-rbac.yaml,
  with a stand-in for the hub's ``GET /hub/api/user`` (who a token is of): its counts per
  shape are those of the cluster as the admin reads it, a claim allocated for alice shows in
  her answer (and in the counts) by its watch, with no new LIST, and a caller the hub does
  not name a user is refused;
* a real JupyterHub running it as a hub-managed service, whose DRAKubeSpawner gives the
  servers its URL: alice's server, on ``dra-singleuser`` bound by exactly
  deploy/hub-rbac.yaml (no cluster-wide right), answers ``GET /dra/api/devices`` from the
  shared view (her pod's H200 and the cluster's counts), and makes no cluster-wide request
  of the API server at all.

Its servers run on the stand-in kubelet (``pod_runner``), not the real node: a hub's spawn
needs a single-user server image, and the test environment's kernel image holds only
ipykernel's closure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.claims import ClaimClient
from dra_jupyter.kube.connect import api_client, to_wire
from dra_jupyter.kube.records import to_record
from dra_jupyter.kube.sharedview import shape_counts
from dra_jupyter.kube.simulate import SimulatedCluster
from dra_jupyter.tables import device_rows
from tests.helpers import free_port
from tests.hub.test_kubespawner import (
    RBAC,
    SUBCLASS,
    Hub,
    apply_rbac,
    delete_rbac,
    running_hub,
    service_account_kubeconfig,
)
from tests.k8s import testenv
from tests.k8s.apimetrics import counted_account
from tests.k8s.fixtures import wait_for
from tests.k8s.kernelserver import execute, running_server
from tests.k8s.podrunner import PodRunner
from tests.k8s.test_backend import session

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "/services/dra-devices/"
TOKENS = {"alice-token": ("user", "alice"), "bob-token": ("user", "bob"), "svc": ("service", "x")}


class _FakeHubAPI(BaseHTTPRequestHandler):
    """The hub's ``GET /hub/api/user``: who a token is of (what the service asks)."""

    def do_GET(self) -> None:
        token = (self.headers.get("Authorization") or "").partition(" ")[2]
        known = TOKENS.get(token)
        status, body = (200, {"kind": known[0], "name": known[1]}) if known else (403, {})
        data = json.dumps(body).encode()
        self.send_response(status if self.path == "/hub/api/user" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"{}")


def admin_counts(api: client.ApiClient) -> list[dict[str, Any]]:
    """The counts per shape of the cluster as the admin lists it now."""
    resource = client.ResourceV1Api(api)
    slices = [to_wire(api, s) for s in resource.list_resource_slice().items]
    claims = [to_wire(api, c) for c in resource.list_resource_claim_for_all_namespaces().items]
    held = [to_record(c) for c in claims if (c.get("status") or {}).get("allocation")]
    return [dict(s) for s in shape_counts(device_rows(slices, held))]


@contextlib.contextmanager
def service_process(
    kubeconfig: Path, tmp: Path, port: int | None = None
) -> Iterator[tuple[str, int]]:
    """``python -m dra_jupyter.hub.sharedview`` on ``kubeconfig``, with the stand-in hub
    API (tokens: :data:`TOKENS`); its URL (with the prefix the proxy would pass) and pid."""
    hub_api = HTTPServer(("127.0.0.1", 0), _FakeHubAPI)
    threading.Thread(target=hub_api.serve_forever, daemon=True).start()
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp / "sharedview.log").open("wb")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_jupyter.hub.sharedview",
            f"--url={url}",
            f"--prefix={PREFIX}",
            f"--hub-api-url=http://127.0.0.1:{hub_api.server_address[1]}/hub/api",
            f"--kubeconfig={kubeconfig}",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def up() -> bool:
            assert process.poll() is None, (tmp / "sharedview.log").read_text()[-3000:]
            with contextlib.suppress(OSError):
                return get(f"{url}{PREFIX}health", None)[0] == 200
            return False

        def synced() -> bool:
            """Its watches synced: it answers (503 before; a server whose view does not
            answer has its kernels check for themselves, which lists: CI saw 1 LIST of
            taint rules in the kernel test once, the view not synced yet under load)."""
            with contextlib.suppress(OSError):
                return get(f"{url}{PREFIX}api/devices", "alice-token")[0] == 200
            return False

        wait_for("the shared view to listen", up)
        wait_for("the shared view's watches to sync", synced)
        yield url + PREFIX, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()
        hub_api.shutdown()
        hub_api.server_close()


def test_the_service_counts_the_cluster_by_watching_and_answers_each_user_their_own(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    kubeconfig: Path,
    published: SimulatedCluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    cluster_wide = apply_rbac(api, namespace, (RBAC,))  # the hub's account, exactly that file
    try:
        hub_config = service_account_kubeconfig(api, cluster, namespace, "hub", tmp_path / "kc")
        with (
            counted_account(
                cluster,
                api,
                namespace,
                "hub",
                verbs=("list",),
                resources=["resourceclaimtemplates"],
            ) as counted,
            service_process(hub_config, tmp_path) as (url, _),
        ):
            devices = url + "api/devices"
            assert get(devices, None)[0] == 401
            assert get(devices, "unknown")[0] == 403
            assert get(devices, "svc")[0] == 403  # a service's token is no user's

            def answered() -> dict[str, Any] | None:
                status, body = get(devices, "alice-token")
                return body if status == 200 and body["shapes"] == admin_counts(api) else None

            before = wait_for("the view's counts to be the cluster's", answered)
            assert before["user"] == "alice" and before["held"] == []
            [h200] = [s for s in before["shapes"] if "H200" in s["model"]]
            assert h200["total"] >= 16  # h200-8x on 2 nodes
            synced = counted.count("list", "cluster")

            held = session(kubeconfig, namespace, user="alice").request(gpu=1, reserve=True)
            try:
                [key] = [r.device for r in held.devices.rows]

                def mine() -> dict[str, Any] | None:
                    status, body = get(devices, "alice-token")
                    return body if status == 200 and body["held"] else None

                after = wait_for("alice's claim in her answer", mine)
                [row] = after["held"]
                assert row["device"] == key and row["state"] == "held"
                assert row["holder"].endswith("(alice)")
                [h200_now] = [s for s in after["shapes"] if s["model"] == h200["model"]]
                assert h200_now["held"] == h200["held"] + 1
                assert h200_now["free"] == h200["free"] - 1
                status, bob = get(devices, "bob-token")
                assert status == 200 and bob["held"] == [] and bob["shapes"] == after["shapes"]
                # the change came by the watch: no LIST since the views synced
                assert counted.count("list", "cluster") == synced
            finally:
                held.release()
    finally:
        delete_rbac(api, cluster_wide)


ASKED = """
import dra_jupyter as dra
claim = dra.request(gpu=1, name="from-a-kernel")
print("made", claim.name, claim.state)
try:
    dra.request(gpu=9, name="nine")
except dra.AllocationError as error:
    print("refused", type(error).__name__)
    print(error)
"""


def test_a_kernels_request_under_the_shared_view_is_checked_by_the_view(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    published: SimulatedCluster,
    namespace: str,
    tmp_path: Path,
    pod_runner: PodRunner,
) -> None:
    """#38: a server on exactly deploy/hub-rbac.yaml (it and its kernels may read no
    ResourceSlice) passes its kernel's question to the shared view: a request that could be
    met is made with the cluster's classes, one that never could is refused before anything
    is made, in the view's one line; the kernel lists nothing cluster-wide."""
    port = free_port()
    config = f"c.DRAExtensionApp.shared_view_url = 'http://127.0.0.1:{port}{PREFIX}'\n"
    with (
        running_server(
            cluster,
            api,
            namespace,
            tmp_path,
            pod_runner,
            idle_timeout=0,
            rbac=(RBAC,),
            config=config,
            env={"JUPYTERHUB_API_TOKEN": "alice-token"},
        ) as server,
        counted_account(
            cluster,
            api,
            namespace,
            "dra-singleuser",
            verbs=("list",),
            resources=["devicetaintrules"],
        ) as counted,
    ):
        hub_config = service_account_kubeconfig(api, cluster, namespace, "hub", tmp_path / "kc")
        with service_process(hub_config, tmp_path, port):
            kernel = str(server.call("POST", "/api/kernels", {"name": "python3"})["id"])
            before = counted.count("list", "cluster")
            printed = asyncio.run(execute(server, kernel, ASKED))
            listed = counted.count("list", "cluster") - before
        assert "made from-a-kernel pending" in printed, printed
        claim = ClaimClient(api, namespace).get("from-a-kernel")
        assert claim is not None
        [request] = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
        assert "refused NeverPossibleError" in printed, printed
        assert "dra.request: " in printed and "9" in printed.split("refused", 1)[1]
        assert ClaimClient(api, namespace).get("nine") is None
        assert listed == 0  # the kernel's requests read nothing of the cluster's devices


SHARED_VIEW = (
    SUBCLASS
    + """
from dra_jupyter.hub.sharedview import shared_view_service
c.JupyterHub.services = [*c.JupyterHub.services,
                         shared_view_service("http://127.0.0.1:{port}")]
# the servers reach it through the proxy, as a pod reaches proxy-public
c.DRAKubeSpawner.dra_shared_view_url = c.JupyterHub.bind_url.rstrip("/") + "/services/dra-devices/"
"""
)


@pytest.fixture
def shared_hub(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    published: SimulatedCluster,
    tmp_path_factory: pytest.TempPathFactory,
    pod_runner: PodRunner,
) -> Iterator[Hub]:
    """A hub running the shared view, its servers on exactly deploy/hub-rbac.yaml."""
    config = SHARED_VIEW.replace("{port}", str(free_port()))
    with running_hub(cluster, api, tmp_path_factory, pod_runner, config, (RBAC,)) as running:
        yield running


def test_a_server_with_no_cluster_wide_rbac_answers_devices_from_the_shared_view(
    shared_hub: Hub, cluster: testenv.Cluster
) -> None:
    hub = shared_hub
    singleuser = service_account_kubeconfig(
        hub.api, cluster, hub.namespace, "dra-singleuser", hub.dir / "probe.kubeconfig"
    )
    with api_client(str(singleuser)) as probe, pytest.raises(ApiException) as refused:
        client.ResourceV1Api(probe).list_resource_slice(limit=1)
    assert refused.value.status == 403  # the server's account may not read slices
    with counted_account(
        cluster, hub.api, hub.namespace, "dra-singleuser", verbs=("list", "watch", "get")
    ) as counted:
        status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "h200"})
        assert status in (201, 202), body
        events = hub.progress("alice", deadline_s=150)
        assert events[-1].get("ready"), (hub.dir / "hub.log").read_text()[-4000:]

        status, token = hub.request(
            "POST", "/hub/api/users/alice/tokens", {"scopes": ["access:servers!user=alice"]}
        )
        assert status == 201, token

        def answered() -> dict[str, Any] | None:
            status, body = hub.request("GET", "/user/alice/dra/api/devices", token=token["token"])
            assert status == 200, body
            return body if body["devices"] else None

        body = wait_for("alice's device from the shared view", answered)
        cluster_counts = body["cluster"]
        assert cluster_counts["problem"] == "", cluster_counts
        assert cluster_counts["source"].endswith("/services/dra-devices/")
        [h200] = [s for s in cluster_counts["shapes"] if "H200" in s["model"]]
        assert h200["total"] >= 16 and h200["held"] >= 1
        [mine] = body["devices"]  # her pod's claim's one H200, and nothing else
        assert mine["state"] == "held" and mine["holder"].endswith("(alice)")
        assert mine["node"].startswith("gpu-node-")
        # the server asked nothing of the cluster as a whole (refused requests count too)
        assert counted.count("list", "cluster") == 0
        assert counted.count("watch", "cluster") == 0
        assert counted.count("get", "cluster") == 0
        hub.stop("alice")

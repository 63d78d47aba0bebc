"""A real JupyterHub (configurable-http-proxy, DummyAuthenticator) whose spawner is
DRAKubeSpawner, against the real control plane of tests/k8s with simulated GPU nodes'
ResourceSlices published: the hub runs on a token of its service account bound by exactly
deploy/hub-rbac.yaml, the servers on one of ``dra-singleuser``'s, with
deploy/singleuser-cluster-rbac.yaml too (no shared view here: each server watches the
cluster itself; tests/hub/test_shared_view.py runs the hub's shared view instead).

The one stand-in is the kubelet (:mod:`tests.k8s.podrunner`, the ``pod_runner`` fixture):
kube-scheduler allocates the claim and binds the pod for real; the stand-in then runs the
pod's ``jupyterhub-singleuser`` as a local process on 127.0.0.1 and reports the pod Running,
so that the spawn completes. Why not the real node: a hub's spawn needs a single-user server
image (``jupyterhub-singleuser`` with the extension and its dependencies), and the test
environment's kernel image holds only ipykernel's closure.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import api_client, to_model, to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.helpers import free_port
from tests.k8s import testenv
from tests.k8s.fixtures import wait_for
from tests.k8s.podrunner import PodRunner

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "deploy" / "hub-rbac.yaml"
# what a server needs where no shared view runs: it watches the cluster itself
SERVER_CLUSTER_RBAC = ROOT / "deploy" / "singleuser-cluster-rbac.yaml"
FALLBACK_RBAC = (RBAC, SERVER_CLUSTER_RBAC)
PROXY_BIN = ROOT / "hub" / "proxy" / "node_modules" / ".bin"
VENV_BIN = Path(sys.executable).parent
START_S = 120.0  # the hub's own start, bounded
PASSWORD = "not-a-secret"

# The profiles as dra_jupyter.hub.choices makes them (kubespawner_override's dra_* keys),
# per group: alice (group gpu-users) sees all, bob only the one without a GPU.
PROFILES = """
GPU_PROFILES = [
    {"display_name": "One H200", "slug": "h200",
     "kubespawner_override": {"dra_request": {"gpu": 1, "model": "H200"},
                              "dra_lease": "8h", "dra_idle_timeout": "1h"}},
    {"display_name": "Nine GPUs (never free)", "slug": "nine",
     "kubespawner_override": {"dra_request": {"gpu": 9}, "dra_lease": None,
                              "dra_idle_timeout": None}},
    {"display_name": "A typo", "slug": "typo",
     "kubespawner_override": {"dra_request": {"gpus": 1}}},
    {"display_name": "One H200 in each kernel", "slug": "h200-kernels",
     "kubespawner_override": {"dra_request": {"gpu": 1, "model": "H200"},
                              "dra_kernels_only": True, "dra_lease": "8h"}},
    {"display_name": "Shared H200 (MPS, 25%)", "slug": "h200-mps",
     "kubespawner_override": {"dra_request": {"gpu": 1, "model": "H200", "share": "mps",
                                              "threads": 25},
                              "dra_shared": True}},
]
CPU_PROFILE = {"display_name": "No GPU", "slug": "cpu",
               "kubespawner_override": {"dra_request": {}}}

def profiles(spawner):
    if spawner.user.name == "dave":  # the cluster's own choices, live
        from dra_jupyter.hub.kubespawner import cluster_profiles
        return cluster_profiles(spawner)
    groups = {g.name for g in spawner.user.groups}
    if spawner.user.name == "carol":  # a server beside alice's (one stand-in kubelet): its port
        return [
            {**p, "kubespawner_override": {**p["kubespawner_override"], "port": CAROL_PORT}}
            for p in GPU_PROFILES
        ]
    return [*GPU_PROFILES, CPU_PROFILE] if "gpu-users" in groups else [CPU_PROFILE]
"""


def service_account_kubeconfig(
    api: client.ApiClient, cluster: testenv.Cluster, namespace: str, name: str, path: Path
) -> Path:
    """A kubeconfig with a bound token of service account ``name`` (a pod's identity)."""
    core = client.CoreV1Api(api)
    request = to_model(client.AuthenticationV1TokenRequest, {"spec": {"expirationSeconds": 3600}})
    token = core.create_namespaced_service_account_token(name, namespace, body=request)
    assert token.status is not None
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": name, "user": {"token": token.status.token}}]
    config["contexts"][0]["context"]["user"] = name
    config["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def apply_rbac(
    api: client.ApiClient, namespace: str, files: Sequence[Path] = FALLBACK_RBAC
) -> list[tuple[str, str]]:
    """``files`` in ``namespace`` (by default deploy/hub-rbac.yaml and, for servers that
    watch the cluster themselves, deploy/singleuser-cluster-rbac.yaml); the cluster-wide
    objects made (kind, name)."""
    text = "\n---\n".join(f.read_text() for f in files)
    text = text.replace("namespace: jupyterhub", f"namespace: {namespace}")
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    cluster_wide = []
    for doc in yaml.safe_load_all(text):
        if doc is None:  # a file of comments only
            continue
        kind = doc["kind"]
        if kind == "ServiceAccount":
            core.create_namespaced_service_account(
                namespace, to_model(client.V1ServiceAccount, doc)
            )
        elif kind == "Role":
            rbac.create_namespaced_role(namespace, to_model(client.V1Role, doc))
        elif kind == "RoleBinding":
            rbac.create_namespaced_role_binding(namespace, to_model(client.V1RoleBinding, doc))
        elif kind == "ClusterRole":  # named for the namespace: two hubs may run at once
            doc["metadata"]["name"] += f"-{namespace}"
            rbac.create_cluster_role(to_model(client.V1ClusterRole, doc))
            cluster_wide.append((kind, doc["metadata"]["name"]))
        elif kind == "ClusterRoleBinding":
            doc["metadata"]["name"] += f"-{namespace}"
            doc["roleRef"]["name"] += f"-{namespace}"
            rbac.create_cluster_role_binding(to_model(client.V1ClusterRoleBinding, doc))
            cluster_wide.append((kind, doc["metadata"]["name"]))
        else:
            raise AssertionError(f"{files}: unexpected kind {kind}")
    return cluster_wide


def delete_rbac(api: client.ApiClient, cluster_wide: list[tuple[str, str]]) -> None:
    """Delete the cluster-wide objects that :func:`apply_rbac` made (those already gone
    too); the namespaced ones go with their namespace."""
    rbac = client.RbacAuthorizationV1Api(api)
    for kind, name in cluster_wide:
        with contextlib.suppress(ApiException):
            if kind == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(name)
            else:
                rbac.delete_cluster_role(name)


@dataclass
class Hub:
    url: str
    token: str  # a service's, with admin:users, admin:servers and access:servers
    namespace: str
    api: client.ApiClient  # the admin's
    dir: Path
    kubelet: PodRunner

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30,
        token: str | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"token {token or self.token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, raw.decode(errors="replace")

    def progress(self, user: str, deadline_s: float) -> list[dict[str, Any]]:
        """The progress events of ``user``'s spawn (the SSE stream), up to the final one
        (ready or failed), reading at most ``deadline_s`` seconds."""
        req = urllib.request.Request(
            f"{self.url}/hub/api/users/{user}/server/progress",
            headers={"Authorization": f"token {self.token}", "Accept": "text/event-stream"},
        )
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + deadline_s
        with urllib.request.urlopen(req, timeout=deadline_s) as stream:
            while time.monotonic() < deadline:
                line = stream.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    event = json.loads(line[5:])
                    events.append(event)
                    if event.get("ready") or event.get("failed"):
                        break
        return events

    def server(self, user: str) -> dict[str, Any] | None:
        status, model = self.request("GET", f"/hub/api/users/{user}")
        assert status == 200, model
        servers: dict[str, Any] = model.get("servers") or {}
        return servers.get("")

    def templates(self) -> list[str]:
        listed = client.ResourceV1Api(self.api).list_namespaced_resource_claim_template(
            self.namespace
        )
        return [to_wire(self.api, t)["metadata"]["name"] for t in listed.items]

    def claims(self) -> list[dict[str, Any]]:
        listed = client.ResourceV1Api(self.api).list_namespaced_resource_claim(self.namespace)
        return [to_wire(self.api, c) for c in listed.items]

    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return to_wire(
                self.api, client.CoreV1Api(self.api).read_namespaced_pod(name, self.namespace)
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def stop(self, user: str) -> None:
        status, body = self.request("DELETE", f"/hub/api/users/{user}/server")
        assert status in (202, 204), body
        wait_for(f"{user}'s server to stop", lambda: self.server(user) is None)


def login(url: str, user: str) -> urllib.request.OpenerDirector:
    """A browser's session of ``user`` (DummyAuthenticator's login form)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{url}/hub/login", timeout=30).read()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    form = urllib.parse.urlencode({"username": user, "password": PASSWORD, "_xsrf": xsrf})
    opener.open(f"{url}/hub/login?next=", data=form.encode(), timeout=30).read()
    return opener


# DRAKubeSpawner, or stock KubeSpawner with the three hooks
SUBCLASS = """
c.JupyterHub.spawner_class = "dra_jupyter.hub.kubespawner.DRAKubeSpawner"
c.DRAKubeSpawner.dra_fail_unschedulable_after = 2.0
c.DRAKubeSpawner.dra_kueue_queue = "gpu-queue"
"""
STOCK = """
from dra_jupyter.hub import kubespawner as dra
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.pre_spawn_hook = dra.pre_spawn_hook
c.KubeSpawner.modify_pod_hook = dra.modify_pod_hook
c.KubeSpawner.after_pod_created_hook = dra.after_pod_created_hook
"""


def _config(
    tmp: Path,
    namespace: str,
    ports: dict[str, int],
    token: str,
    singleuser_kubeconfig: Path,
    spawner: str,
) -> str:
    return (
        PROFILES
        + f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = "http://127.0.0.1:{ports["proxy"]}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {ports["hub"]}
c.JupyterHub.hub_connect_ip = "127.0.0.1"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy-api"]}"
c.ConfigurableHTTPProxy.pid_file = "{tmp / "proxy.pid"}"
c.JupyterHub.db_url = "sqlite:///{tmp / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{tmp / "cookie_secret"}"
c.JupyterHub.pid_file = "{tmp / "hub.pid"}"
c.JupyterHub.cleanup_servers = True
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "{PASSWORD}"
c.Authenticator.allow_all = True
c.JupyterHub.load_groups = {{"gpu-users": {{"users": ["alice", "carol"]}}}}
CAROL_PORT = {ports["singleuser-carol"]}
c.JupyterHub.services = [{{"name": "test", "api_token": "{token}"}}]
c.JupyterHub.load_roles = [{{"name": "test", "services": ["test"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "read:users", "tokens"]}}]
c.KubeSpawner.namespace = "{namespace}"
c.KubeSpawner.image = "dra-jupyter-test/never-pulled:0"
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.args = {["--allow-root"] if os.getuid() == 0 else []!r}  # the stand-in kubelet's user
c.KubeSpawner.port = {ports["singleuser"]}
c.KubeSpawner.cpu_limit = 2.0
c.KubeSpawner.mem_limit = "2G"
c.KubeSpawner.service_account = "dra-singleuser"
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 90
c.KubeSpawner.delete_grace_period = 1
c.KubeSpawner.profile_list = profiles
c.DRAProfiles.rules = [
    {{"match": "*-x2", "users": ["alice"]}},  # two GPUs: alice's only
    {{"match": "counted-*-x1", "share": {{"share": "mps", "threads": 25}}}},  # and shared
]
c.KubeSpawner.environment = {{"DRA_JUPYTER_KUBECONFIG": "{singleuser_kubeconfig}",
    # the kernel pods' image: a server pod's own, which the provisioner reads in a cluster
    "DRA_JUPYTER_IMAGE": "dra-jupyter-test/never-pulled:0"}}
"""
        + spawner
    )


def _rbac_in_effect(kubeconfig: Path, namespace: str) -> bool:
    with api_client(str(kubeconfig)) as api:
        try:
            client.CoreV1Api(api).list_namespaced_pod(namespace)
            client.ResourceV1Api(api).read_namespaced_resource_claim_template("none", namespace)
        except ApiException as error:
            if error.status == 403:
                return False
            if error.status != 404:
                raise
    return True


@pytest.fixture(scope="module")
def hub(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    published: SimulatedCluster,
    tmp_path_factory: pytest.TempPathFactory,
    pod_runner: PodRunner,
) -> Iterator[Hub]:
    """A hub with DRAKubeSpawner."""
    with running_hub(cluster, api, tmp_path_factory, pod_runner, SUBCLASS) as running:
        yield running


@pytest.fixture
def stock_hub(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    published: SimulatedCluster,
    tmp_path_factory: pytest.TempPathFactory,
    pod_runner: PodRunner,
) -> Iterator[Hub]:
    """A hub with stock KubeSpawner and dra_jupyter.hub.kubespawner's three hooks."""
    with running_hub(cluster, api, tmp_path_factory, pod_runner, STOCK) as running:
        yield running


@contextlib.contextmanager
def running_hub(  # one hub: its namespace, RBAC, proxy, process, kubelet
    cluster: testenv.Cluster,
    api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
    pod_runner: PodRunner,
    spawner: str,
    rbac: Sequence[Path] = FALLBACK_RBAC,
) -> Iterator[Hub]:
    assert (PROXY_BIN / "configurable-http-proxy").exists(), "run `make hub-proxy` first"
    tmp = tmp_path_factory.mktemp("hub")
    namespace = f"hub-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    cluster_wide = apply_rbac(api, namespace, rbac)
    hub_config = service_account_kubeconfig(api, cluster, namespace, "hub", tmp / "hub.kubeconfig")
    singleuser_config = service_account_kubeconfig(
        api, cluster, namespace, "dra-singleuser", tmp / "singleuser.kubeconfig"
    )
    wait_for("the hub's Role to take effect", lambda: _rbac_in_effect(hub_config, namespace))
    ports = {
        k: free_port() for k in ("proxy", "proxy-api", "hub", "singleuser", "singleuser-carol")
    }
    token = secrets.token_hex(16)
    (tmp / "jupyterhub_config.py").write_text(
        _config(tmp, namespace, ports, token, singleuser_config, spawner)
    )
    env = {
        **os.environ,
        "KUBECONFIG": str(hub_config),  # KubeSpawner's and ours: the hub's service account
        "PATH": f"{PROXY_BIN}:{VENV_BIN}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("JUPYTERHUB_API_TOKEN", None)
    log = (tmp / "hub.log").open("wb")
    parent = os.getpid()
    process = subprocess.Popen(
        [str(VENV_BIN / "jupyterhub"), "-f", str(tmp / "jupyterhub_config.py")],
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # killed with the test run, as the control plane is (a run killed leaves no hub)
        preexec_fn=lambda: testenv._killed_with(parent),  # noqa: PLW1509
    )
    url = f"http://127.0.0.1:{ports['proxy']}"
    kubelet_env = {"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"]}  # for the servers
    try:
        with pod_runner.serving(namespace, kubelet_env) as kubelet:
            running = Hub(url, token, namespace, api, tmp, kubelet)

            def up() -> bool:
                assert process.poll() is None, (tmp / "hub.log").read_text()[-3000:]
                with contextlib.suppress(OSError):
                    return running.request("GET", "/hub/api/", timeout=5)[0] == 200
                return False

            wait_for("the hub to answer", up, timeout=START_S)
            yield running
            for user in ("alice", "bob", "carol"):
                with contextlib.suppress(Exception):
                    running.stop(user)
            assert not kubelet.problems, kubelet.problems
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(int((tmp / "proxy.pid").read_text()), signal.SIGTERM)
        delete_rbac(api, cluster_wide)
        core.delete_namespace(namespace)
        shutil.rmtree(tmp / "singleuser", ignore_errors=True)


def _texts(events: list[dict[str, Any]]) -> str:
    return "\n".join(str(e.get("message", "")) for e in events)


def test_the_spawn_page_lists_the_profiles_of_the_users_groups(hub: Hub) -> None:
    alice = login(hub.url, "alice").open(f"{hub.url}/hub/spawn", timeout=30).read().decode()
    for name in ("One H200", "Nine GPUs (never free)", "No GPU"):
        assert name in alice
    bob = login(hub.url, "bob").open(f"{hub.url}/hub/spawn", timeout=30).read().decode()
    assert "No GPU" in bob
    assert "One H200" not in bob


def test_a_gpu_server_gets_its_claim_allocated_bound_and_cleaned_up(hub: Hub) -> None:
    status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "h200"})
    assert status in (201, 202), body
    events = hub.progress("alice", deadline_s=150)
    text = _texts(events)
    assert events[-1].get("ready"), text + (hub.dir / "hub.log").read_text()[-4000:]
    assert "Devices requested: gpu=1 model=H200 (ResourceClaimTemplate jupyter-alice-dra)" in text
    assert "made from the template: pending" in text
    assert "allocated on node gpu-node-" in text
    assert "Pod bound to node gpu-node-" in text
    assert all(e.get("html_message") for e in events[1:-1] if "Claim" in e.get("message", ""))

    pod = hub.pod("jupyter-alice")
    assert pod is not None
    spec = pod["spec"]
    assert spec["resourceClaims"] == [
        {"name": "dra", "resourceClaimTemplateName": "jupyter-alice-dra"}
    ]
    container = spec["containers"][0]
    assert container["resources"]["claims"] == [{"name": "dra"}]
    # kept: KubeSpawner's cpu_limit 2 and mem_limit 2G (2 GiB in bytes)
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "2147483648"}
    assert spec["nodeName"].startswith("gpu-node-")
    assert spec["activeDeadlineSeconds"] == 8 * 3600  # dra_lease
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRA_JUPYTER_BACKEND"] == "kubernetes"
    assert env["DRA_JUPYTER_NAMESPACE"] == hub.namespace
    assert env["DRA_JUPYTER_KUEUE_QUEUE"] == "gpu-queue"  # the server's dra.run Jobs too
    assert env["JUPYTERHUB_USER"] == "alice"
    assert "--DRAExtensionApp.idle_timeout=3600" in container["args"]

    template = to_wire(
        hub.api,
        client.ResourceV1Api(hub.api).read_namespaced_resource_claim_template(
            "jupyter-alice-dra", hub.namespace
        ),
    )
    owners = template["metadata"].get("ownerReferences") or []
    assert [o["uid"] for o in owners] == [pod["metadata"]["uid"]]  # goes with the pod
    [claim] = [c for c in hub.claims() if c["metadata"]["name"].startswith("jupyter-alice-dra")]
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"].startswith("gpu-")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["jupyter-alice"]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]

    # inside the server: the extension on the Kubernetes backend, claims owned by alice
    status, token = hub.request(
        "POST", "/hub/api/users/alice/tokens", {"scopes": ["access:servers!user=alice"]}
    )
    assert status == 201, token
    status, made = hub.request(
        "POST", "/user/alice/dra/api/claims", {"gpu": 1}, token=token["token"]
    )
    assert status == 201, made
    made_claim = next(c for c in hub.claims() if c["metadata"]["name"] == made["name"])
    assert made_claim["metadata"]["labels"]["dra-jupyter/user"] == "alice"

    hub.stop("alice")
    wait_for("the pod to go", lambda: hub.pod("jupyter-alice") is None)
    assert hub.templates() == []
    wait_for("no claim left", lambda: not hub.claims())
    # the profile is ours to read: JupyterHub does not log it as an unhandled option
    assert "unhandled user_options" not in (hub.dir / "hub.log").read_text()


def test_a_shared_profile_is_one_claim_for_every_server_that_chooses_it(hub: Hub) -> None:
    """dra_shared (#40 item 4): "Shared H200 (MPS, 25%)" chosen by alice, then by carol, is
    one claim, made by alice's spawn with the profile's MPS config and used by both servers'
    pods by name, on its one device; it stays while one of them runs and goes with the last."""
    name = "dra-shared-h200-mps"
    said = {}
    for user in ("alice", "carol"):
        status, body = hub.request("POST", f"/hub/api/users/{user}/server", {"profile": "h200-mps"})
        assert status in (201, 202), body
        events = hub.progress(user, deadline_s=150)
        said[user] = _texts(events)
        assert events[-1].get("ready"), said[user] + (hub.dir / "hub.log").read_text()[-4000:]
        pod = hub.pod(f"jupyter-{user}")
        assert pod is not None
        assert pod["spec"]["resourceClaims"] == [{"name": "dra", "resourceClaimName": name}]
        assert pod["metadata"]["labels"]["dra-jupyter/shared-claim"] == name
    assert f"shared: claim {name}, the first to use it" in said["alice"]
    assert f"shared: claim {name}, with 1 other server(s) now" in said["carol"]
    [claim] = [c for c in hub.claims() if c["metadata"]["name"] == name]
    assert {r["name"] for r in claim["status"]["reservedFor"]} == {"jupyter-alice", "jupyter-carol"}
    [result] = claim["status"]["allocation"]["devices"]["results"]  # one GPU for both
    [config] = claim["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 25},
    }
    assert hub.templates() == []  # no claim of their own

    hub.stop("alice")
    wait_for("alice's pod to go", lambda: hub.pod("jupyter-alice") is None)
    assert [c["metadata"]["name"] for c in hub.claims()] == [name]  # carol's server uses it
    hub.stop("carol")
    wait_for("carol's pod to go", lambda: hub.pod("jupyter-carol") is None)
    wait_for("the shared claim to go with its last server", lambda: not hub.claims())
    assert result["device"].startswith("gpu-")


def start_kernel(hub: Hub, user: str, name: str, token: str) -> dict[str, Any]:
    """A kernel of spec ``name`` started in ``user``'s server, through the hub's proxy."""
    status, kernel = hub.request(
        "POST", f"/user/{user}/api/kernels", {"name": name}, timeout=240, token=token
    )
    assert status == 201, str(kernel) + (hub.dir / "hub.log").read_text()[-3000:]
    return dict(kernel)


def test_a_gpu_kernels_only_profile_spawns_a_cpu_server_whose_kernels_get_gpus(
    hub: Hub,
) -> None:
    """dra_kernels_only: the server pod gets no claim (nothing to hold while idle); its
    default kernel, started through the hub's proxy, runs in a pod of its own whose claim
    kube-scheduler allocates; stopping the kernel frees the GPU at once."""
    from tests.k8s.kernelserver import kernel_pods  # noqa: PLC0415

    status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "h200-kernels"})
    assert status in (201, 202), body
    events = hub.progress("alice", deadline_s=150)
    text = _texts(events)
    assert events[-1].get("ready"), text + (hub.dir / "hub.log").read_text()[-4000:]
    assert (
        "GPU kernels only: gpu=1 model=H200 in kernel pods (kernel spec dra-h200-kernels)" in text
    )
    assert "Devices requested" not in text
    pod = hub.pod("jupyter-alice")
    assert pod is not None
    assert not pod["spec"].get("resourceClaims")  # a CPU server
    assert "activeDeadlineSeconds" not in pod["spec"]  # dra_lease is not the server's
    assert not (pod["spec"]["containers"][0].get("resources") or {}).get("claims")
    assert hub.templates() == []
    assert hub.claims() == []  # so the spawn form's counts see nothing held by it

    status, token = hub.request(
        "POST", "/hub/api/users/alice/tokens", {"scopes": ["access:servers!user=alice"]}
    )
    assert status == 201, token
    alice = token["token"]
    status, specs = hub.request("GET", "/user/alice/api/kernelspecs", token=alice)
    assert status == 200, specs
    assert specs["default"] == "dra-h200-kernels"  # new notebooks start with it
    spec = specs["kernelspecs"]["dra-h200-kernels"]["spec"]
    assert spec["display_name"] == "Python 3 \u00b7 One H200 in each kernel"
    assert spec["metadata"]["kernel_provisioner"]["config"] == {
        "request": {"gpu": 1, "model": "H200"}
    }

    kernel = start_kernel(hub, "alice", "dra-h200-kernels", alice)
    [kernel_pod] = kernel_pods(hub.api, hub.namespace, kernel["id"])
    assert kernel_pod["status"]["phase"] == "Running"
    assert kernel_pod["spec"]["nodeName"].startswith("gpu-node-")
    [claim] = hub.claims()  # the kernel's, made from its template by the controller
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"].startswith("gpu-")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [kernel_pod["metadata"]["name"]]
    assert claim["metadata"]["labels"]["dra-jupyter/user"] == "alice"
    assert claim["metadata"]["labels"]["dra-jupyter/kernel"] == kernel["id"]
    # the server's extension sees it as the kernel's claim (idle release, the Devices panel)
    status, listed = hub.request("GET", "/user/alice/dra/api/claims", token=alice)
    assert status == 200, listed
    assert [(c["name"], c["kernel_id"]) for c in listed["claims"]] == [
        (claim["metadata"]["name"], kernel["id"])
    ]

    status, _ = hub.request("DELETE", f"/user/alice/api/kernels/{kernel['id']}", token=alice)
    assert status == 204
    wait_for("the kernel pod to go", lambda: not kernel_pods(hub.api, hub.namespace, kernel["id"]))
    wait_for("the kernel's claim to go", lambda: not hub.claims())
    assert hub.pod("jupyter-alice") is not None  # the server runs on, without devices

    # a kernel that runs when the server stops goes with it, and its GPU with it
    kernel = start_kernel(hub, "alice", "dra-h200-kernels", alice)
    assert kernel_pods(hub.api, hub.namespace, kernel["id"])
    hub.stop("alice")
    wait_for("the pod to go", lambda: hub.pod("jupyter-alice") is None)
    wait_for("the kernel pod to go", lambda: not kernel_pods(hub.api, hub.namespace, kernel["id"]))
    wait_for("the kernel's claim to go", lambda: not hub.claims())
    assert hub.templates() == []


def test_stopping_a_server_deletes_the_kernel_pods_it_left(
    api: client.ApiClient, namespace: str
) -> None:
    """Without a hub: the kernel pods of a server that was killed before it could delete
    them are deleted by the hub's stop (ServerDevices.delete_kernel_pods), and only
    those."""
    from dra_jupyter.kube.kernels.pods import COMPONENT, COMPONENT_LABEL  # noqa: PLC0415
    from dra_jupyter.kube.spawn import KERNEL_POD, ServerDevices  # noqa: PLC0415

    assert f"{COMPONENT_LABEL}={COMPONENT}" == KERNEL_POD  # the provisioner's labels
    core = client.CoreV1Api(api)
    made = {"kernel-a": "jupyter-alice", "kernel-b": "jupyter-bob", "other": "jupyter-alice"}
    for name, server in made.items():
        labels = {"dra-jupyter/server": server}
        if name.startswith("kernel-"):
            labels[COMPONENT_LABEL] = COMPONENT
        pod = {
            "metadata": {"name": name, "labels": labels},
            "spec": {  # placed nowhere: deleted at once, with no kubelet to confirm it
                "nodeSelector": {"dra-jupyter-test/nowhere": "true"},
                "containers": [{"name": "c", "image": "none", "command": ["true"]}],
            },
        }
        core.create_namespaced_pod(namespace, to_model(client.V1Pod, pod))
    dra = ServerDevices(api, namespace)
    assert dra.delete_kernel_pods("jupyter-alice") == ["kernel-a"]
    left = {to_wire(api, p)["metadata"]["name"] for p in core.list_namespaced_pod(namespace).items}
    assert left == {"kernel-b", "other"}
    assert dra.delete_kernel_pods("jupyter-alice") == []


def test_a_spawn_that_nothing_can_serve_says_why_within_10_s(hub: Hub) -> None:
    status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "nine"})
    assert status in (201, 202), body
    events = hub.progress("alice", deadline_s=10)  # the reason within 10 s, not a timeout
    text = _texts(events)
    assert "kube-scheduler cannot place the server" in text, text
    assert "Why: gpu=9: can never be met on this cluster" in text, text
    final = events[-1]
    assert final.get("failed"), text
    assert "no devices for gpu=9" in final["message"]
    assert "dra-explain" in final.get("html_message", "")
    wait_for("the failed server to be gone", lambda: hub.server("alice") is None)
    wait_for("no template left", lambda: hub.templates() == [])
    wait_for("no claim left", lambda: not hub.claims())
    assert hub.pod("jupyter-alice") is None
    # a clean spawn failure: the one line, no status and class name, no traceback logged
    assert not final["message"].startswith("Spawn failed: 4"), final["message"]
    assert "Unhandled error starting" not in (hub.dir / "hub.log").read_text()


def test_what_is_outside_the_allowed_set_is_refused(hub: Hub) -> None:
    # bob's group is not given the GPU profiles: he cannot choose one
    status, body = hub.request("POST", "/hub/api/users/bob/server", {"profile": "h200"})
    if status in (201, 202):
        events = hub.progress("bob", deadline_s=30)
        assert events[-1].get("failed"), events
        assert "No such profile: h200" in events[-1]["message"]
    else:
        assert "No such profile: h200" in json.dumps(body)
    wait_for("bob's refused server to be gone", lambda: hub.server("bob") is None)
    # a request of the spawner's own (not a profile's) is refused too
    status, body = hub.request(
        "POST", "/hub/api/users/bob/server", {"profile": "cpu", "dra_request": {"gpu": 8}}
    )
    refused = json.dumps(body)
    if status in (201, 202):
        refused = hub.progress("bob", deadline_s=30)[-1]["message"]
    assert "user_options may not carry dra_request" in refused
    wait_for("bob's refused server to be gone", lambda: hub.server("bob") is None)
    # a profile whose request uses a keyword that dra.request does not know
    status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "typo"})
    refused = json.dumps(body)
    if status in (201, 202):
        refused = hub.progress("alice", deadline_s=30)[-1]["message"]
    assert "dra_request keyword 'gpus' is not allowed here" in refused
    assert status in (201, 202, 400), (status, body)  # a bad request, never a 500
    wait_for("alice's refused server to be gone", lambda: hub.server("alice") is None)
    assert hub.templates() == []
    assert not hub.claims()
    # refusals of ours are clean spawn failures: JupyterHub logs no traceback for them
    assert "Unhandled error starting" not in (hub.dir / "hub.log").read_text()


def test_stock_kubespawner_with_the_hooks_gives_the_devices_too(stock_hub: Hub) -> None:
    hub = stock_hub
    status, body = hub.request("POST", "/hub/api/users/alice/server", {"profile": "h200"})
    assert status in (201, 202), body
    events = hub.progress("alice", deadline_s=150)
    assert events[-1].get("ready"), _texts(events) + (hub.dir / "hub.log").read_text()[-4000:]
    pod = hub.pod("jupyter-alice")
    assert pod is not None
    assert pod["spec"]["resourceClaims"] == [
        {"name": "dra", "resourceClaimTemplateName": "jupyter-alice-dra"}
    ]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["claims"] == [{"name": "dra"}]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "2147483648"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRA_JUPYTER_BACKEND"] == "kubernetes"
    template = to_wire(
        hub.api,
        client.ResourceV1Api(hub.api).read_namespaced_resource_claim_template(
            "jupyter-alice-dra", hub.namespace
        ),
    )
    owners = template["metadata"].get("ownerReferences") or []
    assert [o["uid"] for o in owners] == [pod["metadata"]["uid"]]
    [claim] = hub.claims()
    assert claim["status"]["allocation"]["devices"]["results"]
    hub.stop("alice")
    # nothing deletes the template but the garbage collector, for its owner is gone
    wait_for("the template to go with the pod", lambda: hub.templates() == [])
    wait_for("no claim left", lambda: not hub.claims())


def own_model_slice(model: str, node: str, tag: str) -> dict[str, Any]:
    """A ResourceSlice of two H200s renamed ``model`` on a node of their own: devices no
    other test holds."""
    from dra_jupyter.inventory import simulated  # noqa: PLC0415

    [base] = simulated.load("h200-8x").slices[:1]
    devices = []
    for i, device in enumerate(base["spec"]["devices"][:2]):
        attributes = dict(device["attributes"])
        attributes["productName"] = {"string": model}
        attributes["uuid"] = {"string": f"GPU-{tag}-{i}"}
        devices.append({**device, "attributes": attributes})
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {"driver": "gpu.nvidia.com", "pool": pool, "nodeName": node, "devices": devices},
    }


def test_the_explanation_says_who_holds_what_a_spawn_needs(
    api: client.ApiClient, kubeconfig: Path, namespace: str, published: SimulatedCluster
) -> None:
    """Without a hub: two GPUs of a model of their own on a node of their own, held by bob
    and carol (reserved by our allocator), explained for a new server's template."""
    from dra_jupyter.kube.spawn import ServerDevices, claim_template  # noqa: PLC0415
    from tests.k8s.test_backend import session  # noqa: PLC0415

    tag = uuid.uuid4().hex[:8]
    model, node = f"HubTest {tag}", f"hubtest-{tag}"
    slice_ = own_model_slice(model, node, tag)
    resource = client.ResourceV1Api(api)
    resource.create_resource_slice(to_model(client.V1ResourceSlice, slice_))
    held = []
    try:
        for user in ("bob", "carol"):
            claim = session(kubeconfig, namespace, user).request(gpu=1, model=tag, reserve=True)
            held.append(claim)
        dra = ServerDevices(api, namespace)
        template = claim_template(
            "t", {"gpu": 1, "model": tag}, namespace=namespace, user="alice", pod="jupyter-alice"
        )
        busy = dra.explain({"spec": template["spec"]["spec"]}, {"gpu": 1, "model": tag})
        lines = busy.splitlines()
        assert lines[0] == "not now: the devices it needs are held by others"
        assert f"node {node}: request gpu:" in busy
        assert "held now on the cluster:" in lines[-1]
        assert "bob 1" in lines[-1] and "carol 1" in lines[-1]
        never = claim_template(
            "t", {"gpu": 3, "model": tag}, namespace=namespace, user="a", pod="p"
        )
        text = dra.explain({"spec": never["spec"]["spec"]}, {"gpu": 3, "model": tag})
        assert text.startswith("can never be met on this cluster, even with every device free")
    finally:
        for claim in held:
            claim.release()
        resource.delete_resource_slice(f"{node}-gpus")


def test_profiles_from_the_cluster_count_what_could_start_now(
    hub: Hub, kubeconfig: Path, published: SimulatedCluster
) -> None:
    """dave's profiles are cluster_profiles: his spawn page offers the cluster's models with
    how many could start now, counted from its slices and claims, live; the admin's rule
    keeps the two-GPU choices for alice."""
    from tests.k8s.test_backend import session  # noqa: PLC0415

    tag = uuid.uuid4().hex[:8]
    model, node = f"Counted {tag}", f"counted-{tag}"
    slice_ = own_model_slice(model, node, tag)
    resource = client.ResourceV1Api(hub.api)
    resource.create_resource_slice(to_model(client.V1ResourceSlice, slice_))

    def offered() -> str:
        """dave's spawn page from the profile of one GPU of the new model on."""
        page: str = login(hub.url, "dave").open(f"{hub.url}/hub/spawn", timeout=60).read().decode()
        assert "No GPU" in page, page[-2000:]
        assert f"2\u00d7 {model}" not in page  # the rule: two GPUs are alice's
        return page[page.index(f"1\u00d7 {model}") :][:800]

    def shows(count: str) -> bool:  # the hub's view follows the cluster by watching it
        return count in offered()

    held = None
    try:
        wait_for("2 can start now", lambda: shows("2 can start now"))
        # the admin's share rule: a shared choice beside the whole GPU (no one on it yet)
        assert f"Shared 1\u00d7 {model}" in offered() and "(MPS, 25%)" in offered()
        assert "no one shares it now" in offered()
        held = session(kubeconfig, hub.namespace, "bob").request(gpu=1, model=tag, reserve=True)
        wait_for("1 can start now", lambda: shows("1 can start now"))
        held.release()
        held = None
        wait_for("2 can start now again", lambda: shows("2 can start now"))
    finally:
        if held is not None:
            held.release()
        resource.delete_resource_slice(f"{node}-gpus")

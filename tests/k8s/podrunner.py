"""The stand-in kubelet of the test environment's simulated nodes: it runs their pods.

The control plane of :mod:`tests.k8s.testenv` has no kubelet: kube-scheduler allocates a
pod's claims and binds the pod to a simulated node (``dra-jupyter publish-slices``), where it
would stay Pending. :class:`PodRunner` does the kubelet's part for the pods of the namespaces
it serves (all, or those given), as ``scripts/k8s-testenv start --run-pods`` (or
``run-pods``) and the tests' ``pod_runner`` fixture run it:

* **runs** each bound pod's first container as a local process: its ``command`` and ``args``
  (``$(VAR)`` expanded) with its ``env`` and ``envFrom`` (values, Secret and ConfigMap keys,
  the downward API's fields), over this machine's ``PATH``, ``PYTHONPATH``, ``HOME``,
  ``LANG`` and ``TMPDIR``, in its ``workingDir`` when that folder exists here;
* **plus the device environment the DRA driver would inject** for the devices allocated to
  the claims the container uses (``resources.claims``), from the claims' allocation results
  and the ResourceSlices' attributes, as :func:`dra_jupyter.kernel.environment.environment_for`
  names them: ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` list the GPU and MIG
  UUIDs. This is the one part that is simulated: the NVIDIA driver itself injects the
  devices' nodes through CDI (and ``NVIDIA_VISIBLE_DEVICES=void``), so that a container sees
  only its devices; a local process sees the host's, and the UUIDs in
  ``CUDA_VISIBLE_DEVICES`` restrict what CUDA shows it the same way;
* **reports** the pod's status as a kubelet does (the status subresource): Running with pod
  IP 127.0.0.1 (the process shares this machine's network), then Succeeded or Failed with the
  container's exit code, or a restart per ``restartPolicy`` (``restartCount``,
  ``lastState``, the CrashLoopBackOff wait doubling from ``backoff_s``);
* **serves logs** on the kubelet's API (``/containerLogs/...``, HTTPS on 127.0.0.1, the
  certificates of the control plane's CA), whose port it writes in the simulated Nodes'
  ``status.daemonEndpoints``, so that ``kubectl logs`` and the API server's ``pods/log``
  (what ``dra.run`` streams) work for real: ``follow``, ``previous``, ``tailLines`` and
  ``limitBytes``;
* **deletes** pods being deleted: SIGTERM to the process group, SIGKILL after the pod's grace
  period (30 s at most), the pod's terminal status written (Failed or Succeeded by the exit
  code, as a kubelet writes it: the Job controller's podFailurePolicy waits for it), then
  the deletion finished (grace period 0, the pod's uid as precondition), as a kubelet
  confirms it.

Not simulated: images (the command must exist here), init and further containers, volumes
and service-account tokens, probes, exec, attach and port-forward, resource limits.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import http.server
import json
import os
import re
import signal
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kernel.environment import environment_for
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SIMULATED_LABEL
from dra_jupyter.model.objects import Wire
from tests.k8s.testenv import _killed_with

POLL_S = 0.25
NODES_EVERY_S = 2.0  # how often the simulated Nodes are read (and given our address)
KEPT_ENV = ("PATH", "PYTHONPATH", "HOME", "LANG", "TMPDIR")
MAX_BACKOFF_S = 300.0  # the kubelet's cap on CrashLoopBackOff
BACKOFF_RESET_S = 600.0  # a container that ran this long starts its back-off anew
MAX_GRACE_S = 30.0
POD_IP = "127.0.0.1"
PROBLEMS_KEPT = 100
NO_COMMAND = (
    "the stand-in kubelet runs a container's command and args; this container has none (an "
    "image's own entrypoint is not simulated)"
)


def now_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a defined variable's value, ``$$`` for ``$``, and
    anything else left as it is."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, text)


def field_value(pod: Wire, path: str) -> str:
    """The downward API's ``fieldRef.fieldPath`` of ``pod`` (as the kubelet resolves it)."""
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": POD_IP,
        "status.hostIP": POD_IP,
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ValueError(f"fieldRef {path!r} is not simulated")


def device_results(pod: Wire, container: Wire, claims: Mapping[str, Wire]) -> list[Wire]:
    """The allocation results of the claims ``container`` uses (``resources.claims``, a
    ``request`` narrowing one to that request's devices); ``claims``: by pod claim name."""
    results: list[Wire] = []
    for used in (container.get("resources") or {}).get("claims") or ():
        claim = claims.get(used["name"])
        if claim is None:
            continue
        allocation = (claim.get("status") or {}).get("allocation") or {}
        request = used.get("request")
        for result in (allocation.get("devices") or {}).get("results") or ():
            name = str(result.get("request", ""))
            if request is None or name == request or name.startswith(f"{request}/"):
                results.append(result)
    return results


def claim_names(pod: Wire) -> dict[str, str]:
    """The pod's claims: its name for each (``spec.resourceClaims[].name``) -> the
    ResourceClaim's, made by the resourceclaim controller for a template (absent until then)."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    names = {}
    for entry in pod["spec"].get("resourceClaims") or ():
        name = entry.get("resourceClaimName") or generated.get(entry["name"])
        if name:
            names[entry["name"]] = str(name)
    return names


@dataclass
class Container:
    """A pod's first container on the stand-in node, over its restarts."""

    namespace: str
    pod: str
    uid: str
    name: str
    image: str
    policy: str  # the pod's restartPolicy
    dir: Path  # its logs and scratch folder
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    pod_started: str = field(default_factory=now_stamp)
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    crashes: int = 0  # consecutive, for the back-off
    started_at: str = ""
    started_mono: float = 0.0
    state: Wire = field(default_factory=dict)
    last_state: Wire = field(default_factory=dict)
    next_start: float | None = None  # when it restarts after its back-off
    stopping_until: float | None = None  # being deleted: SIGKILL then
    ended: bool = False  # terminated for good (Succeeded or Failed)
    exit_code: int | None = None

    def log(self, restart: int) -> Path:
        return self.dir / f"{self.name}-{restart}.log"

    @property
    def running(self) -> bool:
        return self.process is not None

    def phase(self) -> str:
        if not self.ended:
            return "Running"
        return "Succeeded" if self.exit_code == 0 else "Failed"


class PodRunner:
    """Runs the pods bound to the simulated nodes (see the module): in every namespace when
    ``namespaces`` is None, else in those it holds (:meth:`serving` adds one for a while)."""

    def __init__(
        self,
        api: client.ApiClient,
        state_dir: Path,
        *,
        pki: Path,
        namespaces: Collection[str] | None = None,
        base_env: Mapping[str, str] | None = None,
        backoff_s: float = 10.0,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)
        self.state_dir = state_dir
        self.pki = pki
        self.namespaces: set[str] | None = None if namespaces is None else set(namespaces)
        if base_env is None:
            base_env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        self.base_env = dict(base_env)
        self.backoff_s = backoff_s
        self.pods: dict[str, Container] = {}  # pod uid -> its container
        self._env_of: dict[str, dict[str, str]] = {}  # namespace -> its pods' own base env
        self.problems: list[str] = []
        self.port = 0
        self._nodes: set[str] = set()
        self._nodes_read = 0.0
        self._stop = threading.Event()
        self._lock = threading.RLock()  # the pods, between the loop and the log server
        self._thread = threading.Thread(target=self._loop, name="pod-runner", daemon=True)
        self._server: http.server.ThreadingHTTPServer | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> PodRunner:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._server = _log_server(self)
        self.port = int(self._server.server_address[1])
        threading.Thread(
            target=self._server.serve_forever, name="pod-runner-logs", daemon=True
        ).start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; every process still running gets SIGTERM, SIGKILL after 10 s."""
        with self._lock:
            self._stop.set()
        self._thread.join(timeout=60)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            containers = list(self.pods.values())
            self.pods.clear()
        for container in containers:
            if container.process is not None:
                _end(container.process)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def serving(self, namespace: str, env: Mapping[str, str] | None = None) -> Iterator[PodRunner]:
        """Run the pods of ``namespace`` too, for the ``with`` block, their processes with
        ``env`` over the base environment; those still running at its end are stopped."""
        assert self.namespaces is not None, "this runner serves every namespace"
        with self._lock:
            self.namespaces.add(namespace)
            self._env_of[namespace] = dict(env or {})
        try:
            yield self
        finally:
            with self._lock:
                self.namespaces.discard(namespace)
                self._env_of.pop(namespace, None)
                left = [c for c in self.pods.values() if c.namespace == namespace]
                for container in left:
                    del self.pods[container.uid]
            for container in left:  # what the namespace's deletion would have stopped
                if container.process is not None:
                    _end(container.process)

    def problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)
            del self.problems[:-PROBLEMS_KEPT]

    # --- the loop -----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.sync()
            except Exception as error:  # reported (tests assert there are none), never lost
                self.problem(f"{type(error).__name__}: {error}")

    def sync(self) -> None:
        """One pass over the pods served: start, follow, restart, delete."""
        with self._lock:
            namespaces = None if self.namespaces is None else sorted(self.namespaces)
        if namespaces is None:
            listed = self.core.list_pod_for_all_namespaces().items
        else:
            listed = [p for ns in namespaces for p in self.core.list_namespaced_pod(ns).items]
        pods = [to_wire(self.api, p) for p in listed]
        # the nodes only matter to pods: a runner that serves none reads nothing (the API
        # server may be down then: tests/k8s/test_apiserver_restart.py kills it)
        if pods and (
            any(p["spec"].get("nodeName") not in self._nodes for p in pods)
            or time.monotonic() - self._nodes_read > NODES_EVERY_S
        ):
            self._read_nodes()
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            if pod["spec"].get("nodeName") in self._nodes:
                self._sync_pod(pod)
        with self._lock:
            gone = [uid for uid in self.pods if uid not in seen]
            if namespaces is not None:  # only the namespaces listed can tell
                gone = [u for u in gone if self.pods[u].namespace in namespaces]
            forgotten = [self.pods.pop(uid) for uid in gone]
        for container in forgotten:  # deleted for good by someone else: stop it now
            if container.process is not None:
                _kill(container.process)

    def _read_nodes(self) -> None:
        """The simulated Nodes, each given our address and log port (what the API server
        reads to reach a node's kubelet)."""
        nodes = self.core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items
        names = set()
        for node in nodes:
            wire = to_wire(self.api, node)
            name = wire["metadata"]["name"]
            names.add(name)
            status = wire.get("status") or {}
            port = (status.get("daemonEndpoints") or {}).get("kubeletEndpoint", {}).get("Port")
            if port != self.port or status.get("addresses") != [
                {"type": "InternalIP", "address": POD_IP}
            ]:
                patch = {
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": POD_IP}],
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
                    }
                }
                try:
                    self.core.patch_node_status(name, patch)
                except ApiException as error:
                    if error.status != 404:
                        raise
                    names.discard(name)  # deleted since the list (a test unpublished it)
        self._nodes = names
        self._nodes_read = time.monotonic()

    def _sync_pod(self, pod: Wire) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            container = self.pods.get(uid)
        if meta.get("deletionTimestamp"):
            self._delete(pod, container)
            return
        if container is None:
            if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
                return  # ended, or run before this runner started
            container = self._prepare(pod)
            if container is None:
                return  # its claims are not ready yet
            with self._lock:
                if self._stop.is_set():
                    return
                self.pods[uid] = container
                self._start(container)
            self._report(container)
            return
        with self._lock:
            changed = self._step(container)
        if changed:
            self._report(container)

    # --- a container's life -------------------------------------------------------------

    def _prepare(self, pod: Wire) -> Container | None:
        meta, spec = pod["metadata"], pod["spec"]
        name, namespace = meta["name"], meta["namespace"]
        container = spec["containers"][0]
        claims: dict[str, Wire] = {}
        names = claim_names(pod)
        for entry in spec.get("resourceClaims") or ():
            claim_name = names.get(entry["name"])
            if claim_name is None:
                return None
            claim = to_wire(
                self.api, self.resource.read_namespaced_resource_claim(claim_name, namespace)
            )
            reserved = (claim.get("status") or {}).get("reservedFor") or ()
            if not any(r.get("uid") == meta["uid"] for r in reserved):
                return None  # the scheduler has not reserved it for the pod yet
            claims[entry["name"]] = claim
        env = dict(self.base_env)
        with self._lock:
            env.update(self._env_of.get(namespace, {}))
        env["HOSTNAME"] = name
        try:
            env.update(self._container_env(pod, container))
        except ApiException as error:
            if error.status == 404:  # a Secret or ConfigMap not made yet: the kubelet waits
                return None
            raise
        results = device_results(pod, container, claims)
        if results:
            slices = [to_wire(self.api, s) for s in self.resource.list_resource_slice().items]
            devices = environment_for(results, slices)
            env.update(devices.env)
            if devices.missing:
                self.problem(f"pod {namespace}/{name}: no identity for {devices.missing}")
        argv = [
            expand(str(a), env)
            for a in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        folder = self.state_dir / "pods" / namespace / f"{name}-{meta['uid'][:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        working = Path(container.get("workingDir") or folder)
        return Container(
            namespace=namespace,
            pod=name,
            uid=meta["uid"],
            name=container["name"],
            image=str(container.get("image", "")),
            policy=str(spec.get("restartPolicy") or "Always"),
            dir=folder,
            argv=argv,
            env=env,
            cwd=working if working.is_dir() else folder,
        )

    def _container_env(self, pod: Wire, container: Wire) -> dict[str, str]:
        """``envFrom`` then ``env``, as the kubelet resolves them."""
        namespace = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.get("envFrom") or ():
            prefix = source.get("prefix", "")
            if "secretRef" in source:
                data = self._secret(namespace, source["secretRef"])
            else:
                data = self._config_map(namespace, source.get("configMapRef") or {})
            env.update({f"{prefix}{k}": v for k, v in data.items()})
        for entry in container.get("env") or ():
            name = entry["name"]
            source = entry.get("valueFrom")
            if source is None:
                env[name] = expand(str(entry.get("value", "")), env)
            elif "fieldRef" in source:
                env[name] = field_value(pod, source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                value = self._secret(namespace, ref).get(ref["key"])
                if value is not None:
                    env[name] = value
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                value = self._config_map(namespace, ref).get(ref["key"])
                if value is not None:
                    env[name] = value
            else:
                raise ValueError(f"env {name}: {sorted(source)} is not simulated")
        return env

    def _secret(self, namespace: str, ref: Wire) -> dict[str, str]:
        try:
            secret = to_wire(self.api, self.core.read_namespaced_secret(ref["name"], namespace))
        except ApiException as error:
            if error.status == 404 and ref.get("optional"):
                return {}
            raise
        data = secret.get("data") or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def _config_map(self, namespace: str, ref: Wire) -> dict[str, str]:
        try:
            found = self.core.read_namespaced_config_map(ref["name"], namespace)
        except ApiException as error:
            if error.status == 404 and ref.get("optional"):
                return {}
            raise
        return dict(to_wire(self.api, found).get("data") or {})

    def _start(self, container: Container) -> None:
        """Start the container's process (under the lock); a command that cannot start
        ends it at once, as the runtime's StartError does."""
        container.next_start = None
        container.started_at = now_stamp()
        container.started_mono = time.monotonic()
        parent = os.getpid()
        with container.log(container.restarts).open("ab") as log:
            try:
                if not container.argv:
                    raise FileNotFoundError(NO_COMMAND)
                container.process = subprocess.Popen(  # the pod's own argv, never a shell
                    container.argv,
                    env=container.env,
                    cwd=container.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, signalled as one
                    # dies with the runner (a test run, or the testenv's pod-runner component)
                    preexec_fn=lambda: _killed_with(parent),  # noqa: PLW1509
                )
            except OSError as error:
                log.write(f"{error}\n".encode())
                self._exited(container, 128, "StartError", str(error))
                return
        container.state = {"running": {"startedAt": container.started_at}}

    def _step(self, container: Container) -> bool:
        """Follow a started container (under the lock); whether its status changed."""
        if container.ended or container.stopping_until is not None:
            return False
        if container.process is not None:
            code = container.process.poll()
            if code is None:
                return False
            container.process = None
            if code < 0:  # killed by a signal: what a container runtime reports
                self._exited(container, 128 - code, "Error", "")
            else:
                self._exited(container, code, "Completed" if code == 0 else "Error", "")
            return True
        if container.next_start is not None and time.monotonic() >= container.next_start:
            container.restarts += 1
            self._start(container)
            return True
        return False

    def _exited(self, container: Container, code: int, reason: str, message: str) -> None:
        terminated: Wire = {
            "exitCode": code,
            "reason": reason,
            "startedAt": container.started_at,
            "finishedAt": now_stamp(),
        }
        if message:
            terminated["message"] = message
        container.process = None
        container.exit_code = code
        policy = container.policy
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            ran = time.monotonic() - container.started_mono
            container.crashes = 1 if ran > BACKOFF_RESET_S else container.crashes + 1
            delay = min(self.backoff_s * 2 ** (container.crashes - 1), MAX_BACKOFF_S)
            container.last_state = {"terminated": terminated}
            container.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container="
                    f"{container.name} pod={container.pod}",
                }
            }
            container.next_start = time.monotonic() + delay
        else:
            container.state = {"terminated": terminated}
            container.ended = True

    def _report(self, container: Container) -> None:
        """The pod's status, as a kubelet writes it (the status subresource)."""
        with self._lock:
            running = container.running
            phase = container.phase()
            status_of_container = {
                "name": container.name,
                "image": container.image,
                "imageID": "",
                "containerID": f"stand-in://{container.uid}/{container.restarts}",
                "ready": running,
                "started": running,
                "restartCount": container.restarts,
                "state": dict(container.state),
                "lastState": dict(container.last_state),
            }
        now = now_stamp()

        def condition(kind: str, true: bool, reason: str = "") -> Wire:
            out: Wire = {"type": kind, "status": "True" if true else "False"}
            out["lastTransitionTime"] = now
            if reason and not true:
                out["reason"] = reason
            return out

        done = "PodCompleted" if phase != "Running" else "ContainersNotReady"
        status = {
            "phase": phase,
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "startTime": container.pod_started,
            "conditions": [
                condition("Initialized", True),
                condition("ContainersReady", running, done),
                condition("Ready", running, done),
            ],
            "containerStatuses": [status_of_container],
        }
        try:
            self.core.patch_namespaced_pod_status(
                container.pod, container.namespace, {"status": status}
            )
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: the next pass forgets it
                raise

    def _delete(self, pod: Wire, container: Container | None) -> None:
        """Stop a pod being deleted (SIGTERM, SIGKILL after its grace period), then finish
        its deletion."""
        meta = pod["metadata"]
        if container is not None and container.process is not None:
            process = container.process
            if process.poll() is None:
                if container.stopping_until is None:
                    grace = meta.get("deletionGracePeriodSeconds")
                    grace = MAX_GRACE_S if grace is None else min(float(grace), MAX_GRACE_S)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGTERM)
                    container.stopping_until = time.monotonic() + grace
                    return
                if time.monotonic() < container.stopping_until:
                    return
                _kill(process)
            code = process.wait()
            # As a kubelet does, the pod's terminal phase before its deletion ends: the Job
            # controller judges a deleted pod by it (its podFailurePolicy waits for it).
            with self._lock:
                container.stopping_until = None
                container.process = None
                container.ended = True
                container.exit_code = 128 - code if code < 0 else code
                container.state = {
                    "terminated": {
                        "exitCode": container.exit_code,
                        "reason": "Error" if container.exit_code else "Completed",
                        "startedAt": container.started_at,
                        "finishedAt": now_stamp(),
                    }
                }
            self._report(container)
        with self._lock:
            self.pods.pop(meta["uid"], None)
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)
        except ApiException as error:
            if error.status not in (404, 409):  # gone, or a new pod of that name
                raise

    # --- logs ---------------------------------------------------------------------------

    def find(self, namespace: str, pod: str, name: str) -> Container | None:
        with self._lock:
            for container in self.pods.values():
                if (container.namespace, container.pod, container.name) == (namespace, pod, name):
                    return container
        return None

    def stream_log(
        self, container: Container, query: Mapping[str, str], write: Any
    ) -> tuple[int, str]:
        """Write the container's log (``query``: the kubelet's parameters) with ``write``;
        (400, why) when there is none to write."""
        with self._lock:
            restart = container.restarts
            started = container.started_at != ""
        if query.get("previous") == "true":
            if restart == 0:
                return 400, (
                    f'previous terminated container "{container.name}" in pod '
                    f'"{container.pod}" not found'
                )
            restart -= 1
        elif not started:
            return 400, (
                f'container "{container.name}" in pod "{container.pod}" is waiting to start'
            )
        path = container.log(restart)
        data = path.read_bytes() if path.exists() else b""
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else b""
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        sent = 0

        def send(chunk: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                chunk = chunk[: max(limit - sent, 0)]
            if chunk:
                write(chunk)
                sent += len(chunk)
            return limit is None or sent < limit

        if not send(data) or query.get("follow") != "true" or query.get("previous") == "true":
            return 200, ""
        offset = path.stat().st_size if path.exists() else 0
        while not self._stop.is_set():
            with self._lock:
                current = (
                    container.restarts == restart
                    and container.process is not None
                    and self.pods.get(container.uid) is container
                )
            with path.open("rb") as log:
                log.seek(offset)
                chunk = log.read()
            offset += len(chunk)
            if chunk and not send(chunk):
                break
            if not chunk and not current:
                break  # the container ended and all it wrote is sent
            if not chunk:
                time.sleep(POLL_S)
        return 200, ""


def _log_server(runner: PodRunner) -> http.server.ThreadingHTTPServer:
    """The kubelet's log endpoint on 127.0.0.1 (a free port): HTTPS with the control plane's
    serving certificate, clients with a certificate of its CA (the API server's)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection does (following)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            parts = url.path.strip("/").split("/")
            if url.path == "/healthz":
                self._answer(200, "ok")
                return
            if len(parts) != 4 or parts[0] != "containerLogs":
                self._answer(404, f"{url.path}: the stand-in kubelet serves only containerLogs")
                return
            container = runner.find(parts[1], parts[2], parts[3])
            if container is None:
                self._answer(404, f"container {parts[3]} of pod {parts[1]}/{parts[2]} not found")
                return
            started = False

            def write(chunk: bytes) -> None:
                nonlocal started
                if not started:
                    started = True
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                self.wfile.write(chunk)
                self.wfile.flush()

            code, why = runner.stream_log(container, query, write)
            if code != 200:
                self._answer(code, why)
            elif not started:
                write(b"")

        def _answer(self, code: int, text: str) -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the runner's problems are what matters

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(runner.pki / "serving.crt"), str(runner.pki / "serving.key"))
    context.load_verify_locations(str(runner.pki / "ca.crt"))
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def _end(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill(process)


def write_state(state_dir: Path, runner: PodRunner) -> Path:
    """``pod-runner.json`` in the state folder: its pid and log port (``start`` waits for it)."""
    path = state_dir / "pod-runner.json"
    path.write_text(json.dumps({"pid": os.getpid(), "port": runner.port}))
    return path

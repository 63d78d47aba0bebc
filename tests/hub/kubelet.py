"""A stand-in for the kubelet of the simulated GPU nodes, for tests/hub only.

The control plane of tests/k8s has no kubelet: kube-scheduler allocates a pod's claims and
binds the pod to a simulated node, and there it would stay Pending. This is the seam: for
each pod of the namespace bound to a node, it runs the notebook container's command
(``jupyterhub-singleuser``, with the container's ``env``, over this process's PATH and
PYTHONPATH) as a local process, and reports the pod Running with podIP 127.0.0.1 (the
status subresource, as a kubelet does); a pod being deleted has its process stopped and is
then deleted for good (grace period 0, as the kubelet confirms a deletion). Images,
volumes, the devices themselves (the DRA driver's part) are not simulated.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import to_wire
from tests.k8s.testenv import _killed_with

POLL_S = 0.3
KEPT_ENV = ("PATH", "PYTHONPATH", "HOME", "LANG", "TMPDIR")


class StandInKubelet:
    """Runs the pods of ``namespace`` that kube-scheduler bound (see the module)."""

    def __init__(self, api: client.ApiClient, namespace: str, logs: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.api = api
        self.namespace = namespace
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> its process
        self.problems: list[str] = []
        self._stop = threading.Event()
        # held while a process is started or the running ones are taken: none is started
        # after __exit__ took them (the loop may still be in a call when it ends)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="stand-in-kubelet", daemon=True)

    def __enter__(self) -> StandInKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._stop.set()
        self._thread.join(timeout=60)
        with self._lock:
            processes = list(self.running.values())
            self.running.clear()
        for process in processes:
            _end(process)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                pods = self.core.list_namespaced_pod(self.namespace).items
                for pod in pods:
                    self._sync(to_wire(self.api, pod))
            except Exception as error:  # reported by the test, never lost
                self.problems.append(f"{type(error).__name__}: {error}")

    def _sync(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid, name = meta["uid"], meta["name"]
        if meta.get("deletionTimestamp"):
            with self._lock:
                process = self.running.pop(uid, None)
            if process is not None:
                _end(process)
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            return
        if not spec.get("nodeName") or uid in self.running:
            return
        if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            return
        container = spec["containers"][0]
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        env.update({e["name"]: e.get("value", "") for e in container.get("env") or ()})
        parent = os.getpid()
        with self._lock:
            if self._stop.is_set():  # ended meanwhile: start nothing __exit__ would miss
                return
            with (self.logs / f"{name}.log").open("ab") as log:
                self.running[uid] = subprocess.Popen(  # the pod's own argv, never a shell
                    command,
                    env=env,
                    cwd=self.logs,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # dies with the test run
                    preexec_fn=lambda: _killed_with(parent),  # noqa: PLW1509
                )
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"status": "True", "lastTransitionTime": now}
        status = {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": [
                {"type": "Initialized", **ready},
                {"type": "ContainersReady", **ready},
                {"type": "Ready", **ready},
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})


def _end(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=10)

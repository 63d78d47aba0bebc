"""GPU kernels on Kubernetes (issue 25): a kernel's start to its first executed cell with its
devices, and its idle deadline to its claim deleted, on the test control plane.

Run with ``make bench-kernels`` (or ``.venv/bin/python -m benchmarks.bench_gpu_kernels``
once ``scripts/k8s-testenv build`` has built the control plane). It starts what the tests of
tests/k8s/kernelserver.py start, in a temporary folder: the real control plane
(:mod:`tests.k8s.testenv`), the simulated ``h200-8x`` on two nodes (``dra-jupyter
publish-slices``), the stand-in kubelet (:class:`tests.k8s.podrunner.PodRunner`, in this
process as the tests' fixture runs it, so that the moment it starts a kernel's process is
known to the microsecond) and a real ``jupyter_server`` with the dra_jupyter extension on the
Kubernetes backend (idle release after ``--idle-timeout`` s, checked every
``--check-interval`` s), reached through its REST API as a browser would. Then, one kernel
after the other, ``--kernels`` times (after one warm-up kernel, shown apart):

* ``POST /api/kernels`` with the ``dra-h200-x1`` kernel spec (the ``dra-kubernetes``
  provisioner: a pod of its own with a claim of one H200), the kernel's websocket opened,
  ``kernel_info`` asked, then a cell that prints ``CUDA_VISIBLE_DEVICES`` executed (its UUID
  checked);
* the claim's ``idle_deadline`` read from ``GET /dra/api/claims``, and the claim watched
  until it is gone from the API server.

Where the time goes comes from watches on the namespace's pods, claims and Secrets (each
event stamped with this process's monotonic clock when it arrives; ``creationTimestamp`` has
whole seconds only), the stand-in's own moments (the pod first seen bound, its process
started, and ended) and the server's log lines (milliseconds): the provisioner's
``starting pod`` and ``runs at``, the extension's ``leaves its pod: its claim ... was
released``.

Beside it, what the stand-in's process costs by itself, on this machine, without
Kubernetes: the pod's command (``python3 -m dra_jupyter.kube.kernels.boot python -m
ipykernel_launcher -f {connection_file}``) started as a plain process just before each
kernel (the same load), to its ``kernel_info`` reply and to its first cell's result over
ZeroMQ, and a bare ``python -c pass``. That is what a container's start costs anywhere. Ours
on the critical path is the server's part before the pod's process starts (the provisioner's
spec, the pod, template and Secret made) plus what the kernel took in its pod beyond the
same command alone: the provisioner's poll of the pod and jupyter_server's answer and
websocket, where the kernel's own start does not hide them.

Targets of issue 25: kernel start to first executed cell with devices within 5 s; idle
deadline to claim deleted within check_interval + 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dra_jupyter.cli import main as cli_main
from dra_jupyter.kube.claims import KERNEL_LABEL
from dra_jupyter.kube.connect import api_client
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import label_value
from tests.k8s import testenv
from tests.k8s.kernelserver import Server, running_server
from tests.k8s.podrunner import Container, PodRunner

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
INVENTORY, NODES = "h200-8x", 2
KERNEL_SPEC = "dra-h200-x1"
CODE = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
BOOT = ["python3", "-m", "dra_jupyter.kube.kernels.boot", "python", "-m", "ipykernel_launcher"]
DEADLINE_S = 120.0  # for anything to happen; a benchmark that waits longer has failed
START_TARGET_S = 5.0
SLOW_PASS_S = 0.5  # a pass of the stand-in's loop longer than this is reported
DESCRIPTION = "GPU kernels on the test control plane: start to first cell, idle to claim gone"

# --- moments ----------------------------------------------------------------------------


class Moments:
    """The first time each moment of each kernel was seen: (kernel label, moment) -> this
    process's monotonic clock. Written by the watch threads, the stand-in and the client."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def mark(self, kernel: str, moment: str, when: float | None = None) -> None:
        with self._lock:
            self._seen.setdefault((kernel, moment), time.monotonic() if when is None else when)
            self._changed.notify_all()

    def of(self, kernel: str) -> dict[str, float]:
        with self._lock:
            return {m: t for (k, m), t in self._seen.items() if k == kernel}

    def wait(self, kernel: str, moment: str, timeout: float = DEADLINE_S) -> float:
        with self._lock:
            if not self._changed.wait_for(lambda: (kernel, moment) in self._seen, timeout):
                raise TimeoutError(f"kernel {kernel}: no {moment} within {timeout:g} s")
            return self._seen[(kernel, moment)]


def _pod_moments(kind: str, pod: Wire) -> list[str]:
    out = ["pod made"] if kind == "ADDED" else []
    if pod["spec"].get("nodeName"):
        out.append("pod bound")
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running":
        out.append("pod running")
    if phase in ("Succeeded", "Failed"):
        out.append("pod ended")
    if pod["metadata"].get("deletionTimestamp"):
        out.append("pod deleting")
    if kind == "DELETED":
        out.append("pod gone")
    return out


def _claim_moments(kind: str, claim: Wire) -> list[str]:
    out = ["claim made"] if kind == "ADDED" else []
    if (claim.get("status") or {}).get("allocation"):
        out.append("claim allocated")
    if claim["metadata"].get("deletionTimestamp"):
        out.append("claim deleting")
    if kind == "DELETED":
        out.append("claim gone")
    return out


def _secret_moments(kind: str, secret: Wire) -> list[str]:
    return ["secret made"] if kind == "ADDED" else []


class Watches:
    """Watches on the namespace's pods, claims and Secrets, marking each kernel's moments
    (by its label) as their events arrive."""

    def __init__(self, api: client.ApiClient, namespace: str, moments: Moments) -> None:
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        self.sources: list[tuple[Callable[..., Any], Callable[[str, Wire], list[str]]]] = [
            (core.list_namespaced_pod, _pod_moments),
            (resource.list_namespaced_resource_claim, _claim_moments),
            (core.list_namespaced_secret, _secret_moments),
        ]
        self.namespace = namespace
        self.moments = moments
        self.stop = threading.Event()
        self.problems: list[str] = []
        self.threads = [
            threading.Thread(target=self._follow, args=s, daemon=True, name=f"watch-{i}")
            for i, s in enumerate(self.sources)
        ]

    def __enter__(self) -> Watches:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)

    def _follow(
        self, lister: Callable[..., Any], moments: Callable[[str, Wire], list[str]]
    ) -> None:
        version: str | None = None
        while not self.stop.is_set():
            # the objects as JSON: the client's models lack resource.k8s.io/v1's names
            stream = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
            options: dict[str, Any] = {"timeout_seconds": 2, "label_selector": KERNEL_LABEL}
            if version:
                options["resource_version"] = version
            try:
                events = stream.stream(lister, self.namespace, **options)  # type: ignore[no-untyped-call]
                for event in events:
                    seen = time.monotonic()
                    item: Wire = event["raw_object"]
                    if event["type"] == "ERROR":  # expired, say: list again
                        sys.stderr.write(f"watch: {event['raw_object']}\n")
                        version = None
                        break
                    version = item["metadata"]["resourceVersion"]
                    kernel = str((item["metadata"].get("labels") or {}).get(KERNEL_LABEL))
                    for moment in moments(event["type"], item):
                        self.moments.mark(kernel, moment, seen)
                    if self.stop.is_set():
                        stream.stop()  # type: ignore[no-untyped-call]
            except ApiException as error:
                if error.status != 410:  # expired: list again
                    self.problems.append(f"{lister.__name__}: {error.status} {error.reason}")
                version = None
            except Exception as error:  # reported at the end, the watch goes on
                self.problems.append(f"{lister.__name__}: {type(error).__name__}: {error}")
                sys.stderr.write(f"watch: {self.problems[-1]}\n")
                version = None
                time.sleep(0.5)


class TimedRunner(PodRunner):
    """The stand-in kubelet, noting when it first sees each kernel pod bound and when it
    starts its process."""

    def __init__(self, *args: Any, moments: Moments, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.moments = moments
        self._kernel_of: dict[str, str] = {}  # pod uid -> its kernel's label
        self.slow_passes: list[tuple[float, float]] = []  # (when, seconds)

    def sync(self) -> None:
        """One pass, noted when it is slow (a stand-in that lags is not the server)."""
        begin = time.monotonic()
        super().sync()
        took = time.monotonic() - begin
        if took > SLOW_PASS_S:
            self.slow_passes.append((begin, took))

    def _sync_pod(self, pod: Wire) -> None:
        kernel = (pod["metadata"].get("labels") or {}).get(KERNEL_LABEL)
        if kernel:
            self._kernel_of[pod["metadata"]["uid"]] = kernel
        super()._sync_pod(pod)

    def _prepare(self, pod: Wire) -> Container | None:
        kernel = self._kernel_of.get(pod["metadata"]["uid"])
        if kernel:
            self.moments.mark(kernel, "stand-in saw it bound")
        return super()._prepare(pod)

    def _start(self, container: Container) -> None:
        super()._start(container)
        kernel = self._kernel_of.get(container.uid)
        process = container.process
        if kernel and process is not None:
            self.moments.mark(kernel, "process started", container.started_mono)

            def exited() -> None:  # the stand-in's poll() sees the code once this has it
                process.wait()
                self.moments.mark(kernel, "process exited")

            threading.Thread(target=exited, daemon=True, name=f"exit-{kernel[:8]}").start()


# --- the server's log -------------------------------------------------------------------

LOG_LINE = re.compile(r"^\[\w (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) [^\]]*\] (.*)$")


def log_moments(log: Path, kernel: str, offset: float) -> dict[str, float]:
    """The server's own moments for ``kernel`` (its log's local times, to this process's
    monotonic clock by ``offset``: wall minus monotonic)."""
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        stamp, message = match.groups()
        if message.startswith(f"kernel {kernel}: starting pod "):
            moment = "provisioner starts the pod"
        elif message.startswith(f"kernel {kernel}: pod ") and " runs at " in message:
            moment = "provisioner saw it running"
        elif f"kernel {kernel} leaves its pod: its claim " in message:
            moment = "kernel stopped (log)"
        else:
            continue
        wall = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
        found.setdefault(moment, wall - offset)
    return found


# --- one kernel -------------------------------------------------------------------------


async def first_cell(server: Server, kernel: str, label: str, moments: Moments) -> str:
    """Open the kernel's websocket, ask kernel_info, execute CODE; what it printed. Its
    moments are marked under ``label`` (the kernel's label value, as the watches see it)."""
    from tornado.httpclient import HTTPRequest  # noqa: PLC0415  # the client's only
    from tornado.websocket import websocket_connect  # noqa: PLC0415

    url = server.url.replace("http://", "ws://") + f"/api/kernels/{kernel}/channels"
    request = HTTPRequest(
        url, headers={"Authorization": f"token {server.token}"}, request_timeout=DEADLINE_S
    )
    ws = await websocket_connect(request)
    moments.mark(label, "websocket open")
    session = uuid.uuid4().hex

    async def ask(kind: str, content: Wire) -> list[Wire]:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": kind, "username": "bench", "session": session}
        header |= {"version": "5.3", "date": ""}
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
        await ws.write_message(json.dumps({**message, "channel": "shell", "buffers": []}))
        got: list[Wire] = []
        replied = idle = False
        while not (replied and idle):
            raw = await asyncio.wait_for(ws.read_message(), DEADLINE_S)
            if raw is None:
                raise RuntimeError(f"kernel {kernel}: its websocket closed")
            answer = json.loads(raw)
            if answer.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            got.append(answer)
            kind_of = answer["header"]["msg_type"]
            replied = replied or kind_of.endswith("_reply")
            idle = idle or (kind_of == "status" and answer["content"]["execution_state"] == "idle")
        return got

    try:
        await ask("kernel_info_request", {})
        moments.mark(label, "kernel_info answered")
        content = {"code": CODE, "silent": False, "store_history": False, "user_expressions": {}}
        answers = await ask("execute_request", content)
        moments.mark(label, "first cell executed")
    finally:
        ws.close()
    return "".join(a["content"]["text"] for a in answers if a["header"]["msg_type"] == "stream")


def claim_deadline(server: Server, kernel: str) -> tuple[str, float]:
    """The kernel's claim and its idle deadline (seconds since the epoch), as the REST API
    reports it once the cell has ended."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        claims = server.call("GET", "/dra/api/claims")["claims"]
        mine = [c for c in claims if c.get("kernel_id") == kernel and not c.get("released")]
        if mine and not mine[0]["busy"] and mine[0]["idle_deadline"] is not None:
            return str(mine[0]["name"]), float(mine[0]["idle_deadline"])
        time.sleep(0.02)
    raise TimeoutError(f"kernel {kernel}: no idle deadline in GET /dra/api/claims")


@dataclass
class Run:
    """One kernel's moments, seconds on this process's monotonic clock."""

    kernel: str
    at: dict[str, float] = field(default_factory=dict)


def one_kernel(server: Server, moments: Moments, offset: float, log: Path) -> Run:
    started = time.monotonic()
    kernel = server.call("POST", "/api/kernels", {"name": KERNEL_SPEC, "path": "work"})["id"]
    answered = time.monotonic()
    label = label_value(kernel)
    moments.mark(label, "POST sent", started)
    moments.mark(label, "POST answered", answered)
    printed = asyncio.run(first_cell(server, kernel, label, moments))
    if not printed.strip().startswith("GPU-"):
        raise RuntimeError(f"kernel {kernel}: CUDA_VISIBLE_DEVICES is {printed.strip()!r}")
    _, deadline = claim_deadline(server, kernel)
    moments.mark(label, "idle deadline", deadline - offset)
    moments.wait(label, "claim gone")
    moments.wait(label, "pod gone")
    run = Run(kernel, moments.of(label))
    run.at.update(log_moments(log, kernel, offset))
    return run


# --- phases -----------------------------------------------------------------------------

# (phase, from, to, whose): consecutive moments of a kernel's start and of its idle release
START = [
    ("server: the provisioner's spec", "POST sent", "provisioner starts the pod", "ours"),
    ("server: pod, template, Secret created", "provisioner starts the pod", "secret made", "ours"),
    ("control plane: claim made, allocated, pod bound", "secret made", "scheduled", "k8s"),
    ("stand-in: sees the pod, starts its process", "scheduled", "process started", "stand-in"),
    ("stand-in: reports Running", "process started", "pod running", "stand-in"),
    ("server: provisioner sees it running", "pod running", "provisioner saw it running", "ours"),
    ("server: answers POST /api/kernels", "provisioner saw it running", "POST answered", "ours"),
    ("server: websocket (waits for kernel_info)", "POST answered", "websocket open", "kernel"),
    ("kernel: kernel_info over the websocket", "websocket open", "kernel_info answered", "kernel"),
    ("kernel: the cell", "kernel_info answered", "first cell executed", "kernel"),
]  # fmt: skip
# The claim goes once its pod has ended (the resourceclaim controller, as the pod no longer
# holds it), before the pod's deletion; a pod deleted before its process ended (a kernel that
# does not stop on shutdown_request) goes the other way: "pod ended" is then the pod's
# deletion (see derived).
IDLE = [
    ("server: deletes the claim", "idle deadline", "claim deleting", "ours"),
    ("server: moves the kernel off its pod", "claim deleting", "kernel stopped (log)", "ours"),
    ("kernel: exits on shutdown_request", "kernel stopped (log)", "process exited", "kernel"),
    ("stand-in: reports the pod ended", "process exited", "pod ended", "stand-in"),
    ("control plane: the claim goes", "pod ended", "claim gone", "k8s"),
]
AFTER = [  # off the path to the claim's deletion
    ("server: provisioner deletes the pod", "pod ended", "pod deleting", "ours"),
    ("stand-in: finishes the pod's deletion", "pod deleting", "pod gone", "stand-in"),
]


def derived(run: Run, alone: float) -> dict[str, float]:
    """Seconds: the phases and the totals. ``alone``: the pod's command started as a plain
    process just before this kernel, to its first cell; what the same command took in the
    pod beyond it (our polls and jupyter_server's connection, where the kernel's own start
    does not hide them), with what is ours before the process, is ours on the critical
    path."""
    at = dict(run.at)
    at["scheduled"] = max(at["claim allocated"], at["pod bound"])
    at["pod ended"] = min(at.get("pod ended", at["pod deleting"]), at["pod deleting"])
    at["process exited"] = min(at.get("process exited", at["pod ended"]), at["pod ended"])
    out: dict[str, float] = {}
    for name, a, b, _ in [*START, *IDLE, *AFTER]:
        if a in at and b in at:
            out[name] = at[b] - at[a]
    out[TOTAL] = at["first cell executed"] - at["POST sent"]
    out[BEFORE] = at["process started"] - at["POST sent"]
    out[IN_POD] = at["first cell executed"] - at["process started"]
    out[ALONE] = alone
    out[OURS] = at["secret made"] - at["POST sent"] + out[IN_POD] - alone
    out[IDLE_TOTAL] = at["claim gone"] - at["idle deadline"]
    return out


TOTAL = "start: total"
BEFORE = "start: POST to the process started (ours, control plane, stand-in)"
IN_POD = "start: process started to first cell, in the pod"
ALONE = "start: the same command alone, just before (no Kubernetes)"
OURS = "start: ours on the critical path"
IDLE_TOTAL = "idle: deadline to claim gone"


# --- the process by itself ---------------------------------------------------------------


def process_cost(env: Mapping[str, str], folder: Path) -> dict[str, float]:
    """The stand-in's process without Kubernetes: ``python -c pass``, and the kernel pod's
    command to kernel_info and to its first cell (ZeroMQ, as jupyter_server talks to it)."""
    from jupyter_client.blocking.client import BlockingKernelClient  # noqa: PLC0415
    from jupyter_client.connect import write_connection_file  # noqa: PLC0415

    out: dict[str, float] = {}
    begin = time.monotonic()
    subprocess.run(["python3", "-c", "pass"], env=dict(env), check=True)
    out["python -c pass"] = time.monotonic() - begin
    key = secrets.token_hex(16)
    path = folder / f"alone-{secrets.token_hex(4)}.json"
    _, info = write_connection_file(str(path), ip="127.0.0.1", key=key.encode())
    connection = {k: v for k, v in info.items() if k != "ip"}
    connection["key"] = key
    child_env = {**env, "DRA_JUPYTER_CONNECTION": json.dumps(connection)}
    child_env["DRA_JUPYTER_POD_IP"] = "127.0.0.1"
    kc = BlockingKernelClient()
    kc.load_connection_info(info)
    kc.start_channels()
    begin = time.monotonic()
    process = subprocess.Popen(
        [*BOOT, "-f", "{connection_file}"],
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        asked = kc.kernel_info()
        while kc.get_shell_msg(timeout=DEADLINE_S)["parent_header"].get("msg_id") != asked:
            pass
        out["to kernel_info"] = time.monotonic() - begin
        asked = kc.execute(CODE)
        while kc.get_shell_msg(timeout=DEADLINE_S)["parent_header"].get("msg_id") != asked:
            pass
        out["to first cell"] = time.monotonic() - begin
        kc.shutdown()
        stopping = time.monotonic()
        process.wait(timeout=DEADLINE_S)
        out["shutdown_request to exit"] = time.monotonic() - stopping
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        kc.stop_channels()
    return out


# --- the environment --------------------------------------------------------------------


@contextlib.contextmanager
def environment(
    folder: Path, idle_timeout: float, check_interval: float
) -> Iterator[tuple[Server, Moments, Path, dict[str, str]]]:
    """The control plane, the published slices, a namespace, the stand-in and the server."""
    cluster = testenv.start(folder / "k8s", die_with_parent=True)
    try:
        argv = ["publish-slices", "--inventory", INVENTORY, "--nodes", str(NODES)]
        if cli_main([*argv, "--kubeconfig", str(cluster.kubeconfig)]) != 0:
            raise RuntimeError("publish-slices failed")
        with api_client(str(cluster.kubeconfig)) as api:
            namespace = make_namespace(api)
            env = {
                "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
                "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            }
            if "HOME" in os.environ:
                env["HOME"] = os.environ["HOME"]
            moments = Moments()
            runner = TimedRunner(
                api,
                folder / "pods",
                pki=cluster.state_dir / "pki",
                namespaces=(),
                base_env=env,
                moments=moments,
            )
            server_folder = folder / "server"
            server_folder.mkdir()
            with (
                runner,
                Watches(api, namespace, moments) as watches,
                running_server(
                    cluster,
                    api,
                    namespace,
                    server_folder,
                    runner,
                    idle_timeout=idle_timeout,
                    check_interval=check_interval,
                ) as server,
            ):
                extension_ready(server)
                yield server, moments, server_folder / "server.log", env
            for when, took in runner.slow_passes:
                print(f"stand-in: a pass of {took * 1000:.0f} ms at {when:.3f} (monotonic)")
            problems = [*runner.problems, *watches.problems]
            if problems:
                raise RuntimeError("; ".join(problems[:5]))
    finally:
        cluster.stop()


def extension_ready(server: Server) -> None:
    """Wait for the dra_jupyter extension's REST API: the server answers /api/status before
    its extensions have started, and the first kernel would be timed against their start."""
    end = time.monotonic() + DEADLINE_S
    while True:
        try:
            server.call("GET", "/dra/api/claims")
        except urllib.error.HTTPError as error:
            if error.code != 404 or time.monotonic() > end:
                raise
            time.sleep(0.2)
        else:
            return


def make_namespace(api: client.ApiClient) -> str:
    core = client.CoreV1Api(api)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as error:
            if error.status != 404:
                raise
            time.sleep(0.2)
        else:
            return name
    raise TimeoutError(f"no default service account in {name}")


# --- the report -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (1..99), interpolated as the median is."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def row(name: str, seconds: Sequence[float], whose: str = "", first: float | None = None) -> str:
    ms = [s * 1000 for s in seconds]
    cells = [f"{percentile(ms, 50):.0f}", f"{percentile(ms, 90):.0f}", f"{max(ms):.0f}"]
    warm = "" if first is None else f"{first * 1000:.0f}"
    return f"| {name} | {whose} | {' | '.join(cells)} | {warm} |"


def report(
    runs: list[dict[str, float]], first: dict[str, float], costs: dict[str, list[float]]
) -> str:
    head = "| phase | whose | p50 ms | p90 ms | max ms | first kernel ms |\n" + "|---" * 6 + "|"
    lines = ["Kernel start to first executed cell:", "", head]
    for name, _, _, whose in START:
        lines.append(row(name, [r[name] for r in runs], whose, first.get(name)))
    for name in (TOTAL, BEFORE, IN_POD, ALONE, OURS):
        lines.append(row(f"**{name}**", [r[name] for r in runs], "", first.get(name)))
    lines += ["", "Idle deadline to claim deleted:", "", head]
    for name, _, _, whose in IDLE:
        lines.append(row(name, [r[name] for r in runs], whose, first.get(name)))
    lines.append(row(f"**{IDLE_TOTAL}**", [r[IDLE_TOTAL] for r in runs], "", first.get(IDLE_TOTAL)))
    for name, _, _, whose in AFTER:
        lines.append(row(f"(after) {name}", [r[name] for r in runs], whose, first.get(name)))
    lines += [
        "",
        "The pod's command as a plain process, one before each kernel (no Kubernetes):",
        "",
        "| what | p50 ms | p90 ms | max ms |",
        "|---|---|---|---|",
    ]
    for name, values in costs.items():
        ms = [v * 1000 for v in values]
        lines.append(
            f"| {name} | {percentile(ms, 50):.0f} | {percentile(ms, 90):.0f} | {max(ms):.0f} |"
        )
    return "\n".join(lines)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--kernels", type=int, default=10, help="kernels measured (%(default)s)")
    parser.add_argument("--idle-timeout", type=float, default=3.0, help="s (%(default)s)")
    parser.add_argument("--check-interval", type=float, default=1.0, help="s (%(default)s)")
    parser.add_argument("--json", type=Path, help="write every run's phases there")
    parser.add_argument("--verbose", action="store_true", help="each kernel's moments (ms)")
    parser.add_argument("--logs", type=Path, help="keep the server's and the pods' logs there")
    args = parser.parse_args(argv)
    if not testenv.is_built():
        sys.stderr.write(
            f"bench-kernels: the control plane is not built in {testenv.cache_dir()}; run "
            "`scripts/k8s-testenv build` (make bench-kernels does)\n"
        )
        return 1
    print(f"load average at the start: {load()} ({os.cpu_count()} cores)", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp,
        environment(Path(tmp), args.idle_timeout, args.check_interval) as (
            server,
            moments,
            log,
            env,
        ),
    ):
        offset = time.time() - time.monotonic()
        process_cost(env, Path(tmp))  # warm: the first start reads every file from disk
        costs: dict[str, list[float]] = {}
        runs = []
        for i in range(args.kernels + 1):
            alone = process_cost(env, Path(tmp))
            for what, seconds in alone.items():
                costs.setdefault(what, []).append(seconds)
            run = one_kernel(server, moments, offset, log)
            if args.verbose:
                zero = run.at["POST sent"]
                seen = sorted(run.at.items(), key=lambda kv: kv[1])
                moments_ms = ", ".join(f"{k} {(t - zero) * 1000:.0f}" for k, t in seen)
                print(f"[POST at {zero:.3f} monotonic] {moments_ms}", flush=True)
            phases = derived(run, alone["to first cell"])
            runs.append(phases)
            print(
                f"kernel {i}: start {phases[TOTAL] * 1000:.0f} ms, idle "
                f"{phases[IDLE_TOTAL] * 1000:.0f} ms",
                flush=True,
            )
        if args.logs:
            shutil.copytree(log.parent, args.logs / "server", dirs_exist_ok=True)
            shutil.copytree(Path(tmp) / "pods", args.logs / "pods", dirs_exist_ok=True)
    print(f"load average at the end: {load()}\n")
    print(
        f"{args.kernels} kernels of {KERNEL_SPEC} after one warm-up (first kernel), "
        f"idle_timeout {args.idle_timeout:g} s, check_interval {args.check_interval:g} s\n"
    )
    print(report(runs[1:], runs[0], costs))
    start = percentile([r[TOTAL] for r in runs[1:]], 90)
    idle = max(r[IDLE_TOTAL] for r in runs[1:])
    print(
        f"\ntarget start <= {START_TARGET_S:g} s: p90 {start:.2f} s "
        f"({'met' if start <= START_TARGET_S else 'NOT met'}); target idle <= check_interval "
        f"+ 1 s = {args.check_interval + 1:g} s: max {idle:.2f} s "
        f"({'met' if idle <= args.check_interval + 1 else 'NOT met'})"
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "baseline": costs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

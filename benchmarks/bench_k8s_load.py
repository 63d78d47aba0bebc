"""What Jupyter servers on the Kubernetes backend cost a cluster's API server (issue 38), counted
by the API server itself, on the test control plane with ``--nodes`` simulated nodes of 8
H200s (one ResourceSlice each).

Run with ``make bench-k8s-load`` (or ``.venv/bin/python -m benchmarks.bench_k8s_load`` once
``scripts/k8s-testenv build`` has built the control plane). It starts the real control plane
(:mod:`tests.k8s.testenv`) and ``--servers`` real ``jupyter server`` processes, each in a
namespace of its own on the ``dra-singleuser`` account of deploy/hub-rbac.yaml
(:func:`tests.k8s.kernelserver.running_server`), each holding one claim made through its REST
API. Then, for ``--seconds`` per phase, it reads each server as an open JupyterLab with the
Devices panel shown does (labextension/src/model.ts): every ``refreshInterval`` (5 s) the
claims, the devices, the metrics and the runs, the usage once a minute; where the server
says ``pushed`` (``GET /dra/api/claims``), every 60 s instead, as the lab then polls.

The phases, side by side on the same machine and control plane:

* **baseline**: ``c.DRAExtensionApp.watch = False``: every read goes to the API server, as
  every server did before issue 38 (its LISTs are what the issue measured);
* **watched**: the default: views listed once, then watched, and changes pushed;
* **shared view**: watched, each server asking the hub's shared view of the devices
  (:mod:`dra_jupyter.hub.sharedview`, one process, with a stand-in for the hub's word on the
  token) and bound by deploy/hub-rbac.yaml alone: it watches only its namespace.

Counted from the API server's ``/metrics`` over each phase's window (nothing else runs on
this control plane): ``apiserver_request_total`` of LIST and WATCH, the bytes of the LISTs'
answers (``apiserver_response_sizes_sum``), the WATCHes open at its end
(``apiserver_longrunning_requests``); each server's resident memory (``VmRSS``) at its end,
beside the same at ``--small-nodes`` nodes. The report gives them per server and minute, and
extrapolated to a hub of 1,000 users.

Then, on one watched server at ``--nodes`` nodes, ``--changes`` claims made and released
in its namespace by another client (as a kernel or a teammate would): the time from the
API server's answer to the server's ``changed`` event on jupyter_server's event stream (the
websocket JupyterLab listens to), whose p99 the issue wants within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from dra_jupyter.cli import main as cli_main
from dra_jupyter.kube.connect import api_client
from dra_jupyter.server.claim_events import CHANGED
from tests import kernelws
from tests.hub.test_kubespawner import FALLBACK_RBAC, RBAC
from tests.hub.test_shared_view import service_process
from tests.k8s import testenv
from tests.k8s.apimetrics import Everything, counted_account, sample
from tests.k8s.kernelserver import RefusedError, Server, running_server
from tests.k8s.test_backend import session

DESCRIPTION = (__doc__ or "").split("\n\n", 1)[0]
INVENTORY = "h200-8x"
LAB_POLL_S = 5.0  # refreshInterval's default
PUSHED_POLL_S = 60.0  # the lab's poll where the server pushes (model.ts PUSHED_POLL_S)
USAGE_EVERY_S = 60.0  # model.ts USAGE_EVERY
USERS = 1000  # the hub the report extrapolates to
DEADLINE_S = 120.0
ACCOUNT = "dra-singleuser"  # the servers' (deploy/hub-rbac.yaml), one per namespace
SHARED_TOKEN = "alice-token"  # a user's, as the shared view's stand-in hub knows it


@dataclass
class Phase:
    name: str
    nodes: int
    servers: int
    seconds: float
    lists: float  # of the servers' accounts (their own FlowSchemas count them)
    list_bytes: float  # of every LIST answered (no pod runs: the servers' almost all)
    watches_opened: float  # of the servers' accounts since they started (warm-up too)
    watches_cluster: float  # of those, cluster-wide ones
    rss_mib: list[float]

    def per_server_minute(self, value: float) -> float:
        return value / self.servers / (self.seconds / 60)


def counters(cluster: testenv.Cluster, accounts: list[Everything]) -> dict[str, float]:
    return {
        "lists": sum(a.count("list") for a in accounts),
        "list_bytes": sample(cluster, "apiserver_response_sizes_sum", verb="LIST"),
        "watches_opened": sum(a.count("watch") for a in accounts),
        "watches_cluster": sum(a.count("watch", "cluster") for a in accounts),
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_namespace(api: client.ApiClient) -> str:
    name = f"load-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def extension_ready(server: Server) -> None:
    """The server answers /api/status before its extensions started: wait for ours."""
    end = time.monotonic() + DEADLINE_S
    while True:
        try:
            server.call("GET", "/dra/api/claims")
            return
        except (urllib.error.HTTPError, OSError):
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def lab(server: Server, claim: str, seconds: float, stop: threading.Event) -> None:
    """Read ``server`` as an open lab with the Devices panel shown, for ``seconds``."""
    end = time.monotonic() + seconds
    usage_at = -USAGE_EVERY_S
    while time.monotonic() < end and not stop.is_set():
        started = time.monotonic()
        pushed = bool(server.call("GET", "/dra/api/claims").get("pushed"))
        server.call("GET", f"/dra/api/claims/{claim}")
        server.call("GET", "/dra/api/devices")
        with contextlib.suppress(RefusedError):  # 400 on a cluster: no usage book
            server.call("GET", "/dra/api/metrics?history=40")
        server.call("GET", "/dra/api/runs")
        if started - usage_at >= USAGE_EVERY_S:
            usage_at = started
            with contextlib.suppress(RefusedError):
                server.call("GET", "/dra/api/usage?since=7d")
        pause = (PUSHED_POLL_S if pushed else LAB_POLL_S) - (time.monotonic() - started)
        stop.wait(max(0.0, min(pause, end - time.monotonic())))


@contextlib.contextmanager
def servers(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    folder: Path,
    count: int,
    *,
    watch: bool,
    shared: str = "",
) -> Iterator[tuple[list[tuple[Server, str]], list[Everything]]]:
    """``count`` servers, each in a namespace of its own with one claim held, and the
    counters of their accounts' requests; with ``shared`` (the hub's shared view's URL),
    each reads it with a user's token and is bound by deploy/hub-rbac.yaml alone (nothing
    cluster-wide). No pod runs: no stand-in kubelet lists pods."""
    with contextlib.ExitStack() as stack:
        up = []
        accounts = []
        for _ in range(count):
            namespace = make_namespace(api)
            where = folder / namespace
            where.mkdir(parents=True)
            accounts.append(stack.enter_context(counted_account(cluster, api, namespace, ACCOUNT)))
            server = stack.enter_context(
                running_server(
                    cluster,
                    api,
                    namespace,
                    where,
                    None,
                    idle_timeout=0,
                    check_interval=30,
                    config=f"c.DRAExtensionApp.watch = {watch}\n"
                    + (f"c.DRAExtensionApp.shared_view_url = {shared!r}\n" if shared else ""),
                    env={"JUPYTERHUB_API_TOKEN": SHARED_TOKEN} if shared else None,
                    rbac=(RBAC,) if shared else FALLBACK_RBAC,
                )
            )
            extension_ready(server)
            made = server.call("POST", "/dra/api/claims", {"gpu": 1})
            up.append((server, str(made["name"])))
        yield up, accounts


def measure(
    name: str,
    cluster: testenv.Cluster,
    servers: tuple[list[tuple[Server, str]], list[Everything]],
    nodes: int,
    seconds: float,
) -> Phase:
    """Warm each server (its first reads start its views), then count one window."""
    up, accounts = servers
    for server, claim in up:
        lab(server, claim, 0.1, threading.Event())  # one round: the views start and sync
    before = counters(cluster, accounts)
    stop = threading.Event()
    threads = [
        threading.Thread(target=lab, args=(server, claim, seconds, stop)) for server, claim in up
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    after = counters(cluster, accounts)
    return Phase(
        name=name,
        nodes=nodes,
        servers=len(up),
        seconds=took,
        lists=after["lists"] - before["lists"],
        list_bytes=after["list_bytes"] - before["list_bytes"],
        watches_opened=after["watches_opened"],
        watches_cluster=after["watches_cluster"],
        rss_mib=[rss_mib(server.pid) for server, _ in up],
    )


async def push_latencies(
    server: Server, kubeconfig: Path, namespace: str, changes: int
) -> list[float]:
    """Seconds from the API server's answer to a claim's create or delete (by another
    client, in the server's namespace) to the server's ``changed`` event naming claims."""
    url = server.url.replace("http://", "ws://") + "/api/events/subscribe"
    ws = await kernelws.connect(url, server.token, DEADLINE_S)
    other = session(kubeconfig, namespace)  # not through the server: as a kernel would
    took: list[float] = []

    async def pushed(since: float) -> None:
        while True:
            raw = await asyncio.wait_for(ws.read_message(), DEADLINE_S)
            if raw is None:
                raise RuntimeError("the event stream closed")
            event = json.loads(raw)
            if event.get("schema_id") == CHANGED and "claims" in event["topics"]:
                took.append(time.monotonic() - since)
                return

    try:
        for i in range(changes // 2):
            name = f"push-{i}"
            await asyncio.to_thread(other.request, gpu=1, name=name)
            await pushed(time.monotonic())
            await asyncio.to_thread(other.release, name)
            await pushed(time.monotonic())
    finally:
        ws.close()
    return took


def latency_report(took: list[float], nodes: int) -> str:
    """The push latencies' percentiles, in one line."""
    cuts = statistics.quantiles(took, n=100, method="inclusive")
    return (
        f"Push to an open lab at {nodes} nodes, {len(took)} claims made or released elsewhere: "
        f"p50 {cuts[49]:.2f} s, p99 {cuts[98]:.2f} s, max {max(took):.2f} s (target: p99 within "
        "2 s; the server gathers changes for 0.25 s before it pushes)."
    )


def publish(cluster: testenv.Cluster, nodes: int) -> None:
    argv = ["publish-slices", "--inventory", INVENTORY, "--nodes", str(nodes)]
    if cli_main([*argv, "--kubeconfig", str(cluster.kubeconfig)]) != 0:
        raise RuntimeError("publish-slices failed")


def report(
    phases: list[Phase], small: Phase | None, shared: Phase | None = None, view_mib: float = 0.0
) -> str:
    head = (
        "| phase | nodes | servers | LIST / server / min | MB listed / server / min "
        "| WATCHes opened / server (of them cluster-wide) | RSS MiB / server |"
    )
    lines = [head, "|---" * 7 + "|"]
    for p in [*([small] if small else []), *phases, *([shared] if shared else [])]:
        rss = sum(p.rss_mib) / len(p.rss_mib)
        lines.append(
            f"| {p.name} | {p.nodes} | {p.servers} | {p.per_server_minute(p.lists):.1f} "
            f"| {p.per_server_minute(p.list_bytes) / 1e6:.2f} "
            f"| {p.watches_opened / p.servers:.1f} ({p.watches_cluster / p.servers:.1f}) "
            f"| {rss:.0f} |"
        )
    base, watched = phases[0], phases[-1]
    lines += ["", f"Extrapolated to {USERS} users with JupyterLab open (the panel shown):", ""]
    lines += ["| | baseline (watch off) | watched | ratio |", "|---|---|---|---|"]
    rows: list[tuple[str, Callable[[Phase], float]]] = [
        ("LIST / s at the API server", lambda p: p.per_server_minute(p.lists) * USERS / 60),
        ("MB / s of JSON listed", lambda p: p.per_server_minute(p.list_bytes) * USERS / 60e6),
        ("GB of server memory", lambda p: sum(p.rss_mib) / len(p.rss_mib) * USERS / 1024),
    ]
    for what, of in rows:
        b, w = of(base), of(watched)
        ratio = f"{w / b:.3f}" if b else "-"
        lines.append(f"| {what} | {b:.2f} | {w:.2f} | {ratio} |")
    if small is not None:
        grew = sum(watched.rss_mib) / len(watched.rss_mib) - sum(small.rss_mib) / len(small.rss_mib)
        lines += [
            "",
            f"A watched server's memory at {watched.nodes} nodes against {small.nodes}: "
            f"{grew:+.0f} MiB (target: within 20 MiB).",
        ]
    if shared is not None and small is not None:
        grew = sum(shared.rss_mib) / len(shared.rss_mib) - sum(small.rss_mib) / len(small.rss_mib)
        lines += [
            f"A server reading the hub's shared view at {shared.nodes} nodes against a watched "
            f"one at {small.nodes}: {grew:+.0f} MiB; the shared view itself, one per hub: "
            f"{view_mib:.0f} MiB.",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes (%(default)s)")
    parser.add_argument("--small-nodes", type=int, default=10, help="for memory (%(default)s)")
    parser.add_argument("--servers", type=int, default=5, help="servers (%(default)s)")
    parser.add_argument("--seconds", type=float, default=120.0, help="per phase (%(default)s)")
    parser.add_argument(
        "--changes", type=int, default=100, help="claims made or released (%(default)s)"
    )
    args = parser.parse_args(argv)
    if not testenv.is_built():
        sys.stderr.write(
            f"bench-k8s-load: the control plane is not built in {testenv.cache_dir()}; run "
            "`scripts/k8s-testenv build` (make bench-k8s-load does)\n"
        )
        return 1
    one, five, _ = os.getloadavg()
    print(f"load average at the start: {one:.2f}, {five:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="bench-k8s-load-") as tmp:
        folder = Path(tmp)
        cluster = testenv.start(folder / "k8s", die_with_parent=True)
        try:
            with api_client(str(cluster.kubeconfig)) as api:
                small = None
                if args.small_nodes:
                    publish(cluster, args.small_nodes)
                    with servers(cluster, api, folder, args.servers, watch=True) as up:
                        small = measure("watched", cluster, up, args.small_nodes, args.seconds)
                    print(f"{args.small_nodes} nodes measured", flush=True)
                publish(cluster, args.nodes)
                phases = []
                took: list[float] = []
                for name, watch in (("baseline", False), ("watched", True)):
                    with servers(cluster, api, folder, args.servers, watch=watch) as up:
                        phases.append(measure(name, cluster, up, args.nodes, args.seconds))
                        if watch and args.changes >= 2:
                            server, claim = up[0][0]
                            namespace = server.call("GET", f"/dra/api/claims/{claim}")
                            took = asyncio.run(
                                push_latencies(
                                    server, cluster.kubeconfig, namespace["namespace"], args.changes
                                )
                            )
                    print(f"{name} measured", flush=True)
                # the hub's shared view (one process for every server), the servers asking it
                with (
                    service_process(cluster.kubeconfig, folder) as (url, view_pid),
                    servers(cluster, api, folder, args.servers, watch=True, shared=url) as up,
                ):
                    shared = measure("shared view", cluster, up, args.nodes, args.seconds)
                    shared_view_mib = rss_mib(view_pid)
                print("shared view measured", flush=True)
        finally:
            cluster.stop()
    one, five, _ = os.getloadavg()
    print(f"load average at the end: {one:.2f}, {five:.2f}\n")
    print(report(phases, small, shared, shared_view_mib))
    if took:
        print("\n" + latency_report(took, args.nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

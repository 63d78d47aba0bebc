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

Last, the hub's spawn form at ``--nodes`` nodes (``--form-renders`` renders each way): the
hub's ``cluster_profiles`` (:func:`dra_jupyter.hub.kubespawner._cluster_profiles`, what
KubeSpawner calls per render) on the ``hub`` account of deploy/hub-rbac.yaml, timed in
the benchmark's process, with the API requests of that account (any verb, any kind)
counted by the API server over the renders:

* **shared view**: the spawner configured with the hub's shared view (a ``python -m
  dra_jupyter.hub.sharedview`` process on the same account): one local ``GET
  api/choices`` per render;
* **hub's watched copy**: no view: the hub's own process watches slices, classes, taint
  rules and claims (its first render, which lists and starts the watches, apart);
* **listed per render**: the same read with a new reader each render and no watch, as the
  hub read before issue 38;

and a spawn that waits (9 GPUs) explained, by the view (``POST api/explain``) and by the
hub's own reading of the cluster (as without a view), timed and counted the same way.

``--phases`` runs some of it: ``servers`` (the 10-node, baseline and watched phases and the
push latency), ``shared`` (the shared-view phase), ``form``.
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
from kubernetes.client.exceptions import ApiException
from traitlets.config import Config, Configurable

from dra_jupyter.cli import main as cli_main
from dra_jupyter.hub import kubespawner
from dra_jupyter.hub.choices import choices
from dra_jupyter.hub.form import service_world
from dra_jupyter.hub.sharedview import shared_view_service
from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.spawn import ServerDevices, claim_template
from dra_jupyter.server.claim_events import CHANGED
from tests import kernelws
from tests.hub.test_kubespawner import (
    FALLBACK_RBAC,
    RBAC,
    apply_rbac,
    service_account_kubeconfig,
)
from tests.hub.test_shared_view import service_process
from tests.k8s import testenv
from tests.k8s.apimetrics import Everything, counted_account, sample
from tests.k8s.fixtures import wait_for
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
PHASES = ("servers", "shared", "form")
FORM_TARGET_MS = 50.0  # issue 38: the spawn form at 1,000 nodes within 50 ms, 0 API calls
FORM_VERBS = ("list", "get", "watch")
NINE = {"gpu": 9}  # a spawn's request that waits (never met here), for the explanation


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


@dataclass
class FormReads:
    """One way of reading the spawn form's choices: each render's wall time, and the API
    requests of the hub's account over all of them."""

    name: str
    ms: list[float]
    calls: int

    def p50(self) -> float:
        return statistics.median(self.ms)


class FormSpawner(Configurable):
    """What ``cluster_profiles`` reads of a DRAKubeSpawner: its config (the hub's
    ``c.JupyterHub.services``), namespace, kubeconfig, view's name and user."""

    def __init__(self, config: Config, namespace: str, kubeconfig: Path, view: str) -> None:
        super().__init__(config=config)
        self.namespace = namespace
        self.dra_kubeconfig = str(kubeconfig)
        self.dra_shared_view_service = view
        self.user = FormUser()


class FormUser:
    name = "alice"
    groups: tuple[object, ...] = ()


def hub_account(cluster: testenv.Cluster, api: client.ApiClient, folder: Path) -> tuple[str, Path]:
    """A namespace with the ``hub`` account of deploy/hub-rbac.yaml, and its kubeconfig once
    its cluster-wide reads are in effect."""
    namespace = make_namespace(api)
    apply_rbac(api, namespace, (RBAC,))
    kubeconfig = service_account_kubeconfig(
        api, cluster, namespace, "hub", folder / f"{namespace}-hub.kubeconfig"
    )

    def reads() -> bool:
        with api_client(str(kubeconfig)) as hubs:
            try:
                client.ResourceV1Api(hubs).list_resource_slice(limit=1)
            except ApiException as error:
                if error.status == 403:
                    return False
                raise
        return True

    wait_for("the hub's ClusterRole to take effect", reads)
    return namespace, kubeconfig


def form_reads(
    name: str, counted: Everything, renders: int, render: Callable[[], object]
) -> FormReads:
    """``renders`` calls of ``render``, timed, and the account's requests over them."""
    before = sum(counted.count(verb) for verb in FORM_VERBS)
    ms = []
    for _ in range(renders):
        started = time.perf_counter()
        render()
        ms.append((time.perf_counter() - started) * 1000)
    return FormReads(name, ms, sum(counted.count(verb) for verb in FORM_VERBS) - before)


def measure_form(
    cluster: testenv.Cluster, api: client.ApiClient, folder: Path, renders: int, listed: int
) -> list[FormReads]:
    """The spawn form read three ways on the ``hub`` account (see the module's docstring),
    in this order: the view, then the hub's watched copy, then a listing per render (the
    view's watches stay open throughout, opened before the counts)."""
    namespace, kubeconfig = hub_account(cluster, api, folder)
    held = session(cluster.kubeconfig, namespace, "bob")
    for _ in range(4):  # a few claims held: the counts have something to count
        held.request(gpu=1, reserve=True)
    reads = []
    with (
        service_process(kubeconfig, folder) as (url, _),
        counted_account(cluster, api, namespace, "hub", verbs=FORM_VERBS) as counted,
        api_client(str(kubeconfig)) as hubs,
    ):
        config = Config()
        # the stand-in hub of service_process knows a user's token, which api/choices takes
        # as it takes the service's own
        service = shared_view_service(url, environ={}, api_token=SHARED_TOKEN)
        config.JupyterHub.services = [service]
        viewed = FormSpawner(config, namespace, kubeconfig, "dra-devices")
        view = kubespawner._form_view(viewed)
        assert view is not None
        wait_for("the shared view to sync", lambda: not view.choices(namespace)[2])
        reads.append(form_reads("shared view", counted, renders, _profiles(viewed)))
        own = FormSpawner(Config(), namespace, kubeconfig, "")
        first = form_reads("hub's watched copy: its first render", counted, 1, _profiles(own))
        reads.append(form_reads("hub's watched copy", counted, renders, _profiles(own)))
        reads.append(first)

        def listing() -> object:  # a new reader each render, no cache: before issue 38
            inventory, holders = ServerDevices(hubs, namespace).devices()
            return choices(service_world(inventory, holders))

        reads.append(form_reads("listed per render", counted, listed, listing))
        # a spawn that waits (9 GPUs: never on this cluster), explained each way
        template = claim_template(
            "jupyter-alice-dra", NINE, namespace=namespace, user="alice", pod="jupyter-alice"
        )
        claim = {"metadata": template["metadata"], "spec": template["spec"]["spec"]}
        reads.append(
            form_reads(
                "explain: shared view",
                counted,
                listed,
                lambda: view.explain(namespace, claim, NINE),
            )
        )
        reads.append(
            form_reads(
                "explain: the hub lists",
                counted,
                listed,
                lambda: ServerDevices(hubs, namespace).explain(claim, NINE),
            )
        )
    return reads


def _profiles(spawner: FormSpawner) -> Callable[[], object]:
    return lambda: kubespawner._cluster_profiles(spawner)


def form_report(reads: list[FormReads], nodes: int) -> str:
    """The spawn form's table: per render, the API calls and the wall time, and the ratio
    of each p50 to the hub's watched copy's."""
    base = next(r for r in reads if r.name == "hub's watched copy")
    lines = [
        f"The spawn form at {nodes} nodes (the hub's `cluster_profiles`, per render):",
        "",
        "| read | renders | API calls / render | ms p50 | ms max | p50 / watched copy's |",
        "|---|---|---|---|---|---|",
    ]
    explained = [r for r in reads if r.name.startswith("explain")]
    for r in (r for r in reads if r not in explained):
        lines.append(
            f"| {r.name} | {len(r.ms)} | {r.calls / len(r.ms):.1f} | {r.p50():.1f} "
            f"| {max(r.ms):.1f} | {r.p50() / base.p50():.2f} |"
        )
    view = next(r for r in reads if r.name == "shared view")
    lines += [
        "",
        f"Target (issue 38): 0 API calls per render and within {FORM_TARGET_MS:.0f} ms; the "
        f"shared view: {view.calls} calls in {len(view.ms)} renders, max {max(view.ms):.1f} ms.",
    ]
    if explained:
        lines += [
            "",
            "A spawn that waits (gpu=9), explained:",
            "",
            "| explained by | times | API calls / explanation | ms p50 | ms max |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.name.split(': ', 1)[1]} | {len(r.ms)} | {r.calls / len(r.ms):.1f} "
            f"| {r.p50():.1f} | {max(r.ms):.1f} |"
            for r in explained
        ]
    return "\n".join(lines)


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
    if len(phases) < 2:  # no baseline and watched phase (--phases): the shared view alone
        if shared is not None:
            lines += ["", f"The shared view itself, one per hub: {view_mib:.0f} MiB."]
        return "\n".join(lines)
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


def arguments(argv: Sequence[str] | None) -> tuple[argparse.Namespace, set[str]]:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes (%(default)s)")
    parser.add_argument("--small-nodes", type=int, default=10, help="for memory (%(default)s)")
    parser.add_argument("--servers", type=int, default=5, help="servers (%(default)s)")
    parser.add_argument("--seconds", type=float, default=120.0, help="per phase (%(default)s)")
    parser.add_argument(
        "--changes", type=int, default=100, help="claims made or released (%(default)s)"
    )
    parser.add_argument(
        "--phases", default=",".join(PHASES), help="of %(default)s, comma-separated"
    )
    parser.add_argument(
        "--form-renders", type=int, default=50, help="spawn form renders each way (%(default)s)"
    )
    parser.add_argument(
        "--form-listed",
        type=int,
        default=10,
        help="renders read by listing, as before issue 38 (%(default)s)",
    )
    args = parser.parse_args(argv)
    phases_run = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not phases_run or not phases_run <= set(PHASES):
        parser.error(f"--phases: some of {', '.join(PHASES)}")
    return args, phases_run


def main(argv: Sequence[str] | None = None) -> int:
    args, phases_run = arguments(argv)
    if not testenv.is_built():
        sys.stderr.write(
            f"bench-k8s-load: the control plane is not built in {testenv.cache_dir()}; run "
            "`scripts/k8s-testenv build` (make bench-k8s-load does)\n"
        )
        return 1
    one, five, _ = os.getloadavg()
    print(f"load average at the start: {one:.2f}, {five:.2f} ({os.cpu_count()} cores)")
    phases: list[Phase] = []
    small = shared = None
    shared_view_mib = 0.0
    took: list[float] = []
    form: list[FormReads] = []
    with tempfile.TemporaryDirectory(prefix="bench-k8s-load-") as tmp:
        folder = Path(tmp)
        cluster = testenv.start(folder / "k8s", die_with_parent=True)
        try:
            with api_client(str(cluster.kubeconfig)) as api:
                if "servers" in phases_run and args.small_nodes:
                    publish(cluster, args.small_nodes)
                    with servers(cluster, api, folder, args.servers, watch=True) as up:
                        small = measure("watched", cluster, up, args.small_nodes, args.seconds)
                    print(f"{args.small_nodes} nodes measured", flush=True)
                publish(cluster, args.nodes)
                if "servers" in phases_run:
                    for name, watch in (("baseline", False), ("watched", True)):
                        with servers(cluster, api, folder, args.servers, watch=watch) as up:
                            phases.append(measure(name, cluster, up, args.nodes, args.seconds))
                            if watch and args.changes >= 2:
                                took = pushes(up, cluster, args.changes)
                        print(f"{name} measured", flush=True)
                if "shared" in phases_run:
                    # the hub's shared view (one process for every server), the servers
                    # asking it
                    with (
                        service_process(cluster.kubeconfig, folder) as (url, view_pid),
                        servers(cluster, api, folder, args.servers, watch=True, shared=url) as up,
                    ):
                        shared = measure("shared view", cluster, up, args.nodes, args.seconds)
                        shared_view_mib = rss_mib(view_pid)
                    print("shared view measured", flush=True)
                if "form" in phases_run:
                    form = measure_form(cluster, api, folder, args.form_renders, args.form_listed)
                    print("spawn form measured", flush=True)
        finally:
            cluster.stop()
    one, five, _ = os.getloadavg()
    print(f"load average at the end: {one:.2f}, {five:.2f}\n")
    if phases or shared:
        print(report(phases, small, shared, shared_view_mib))
    if took:
        print("\n" + latency_report(took, args.nodes))
    if form:
        print("\n" + form_report(form, args.nodes))
    return 0


def pushes(
    up: tuple[list[tuple[Server, str]], list[Everything]], cluster: testenv.Cluster, changes: int
) -> list[float]:
    """The push latencies of the first of the servers ``up`` (:func:`push_latencies`)."""
    server, claim = up[0][0]
    namespace = server.call("GET", f"/dra/api/claims/{claim}")["namespace"]
    return asyncio.run(push_latencies(server, cluster.kubeconfig, namespace, changes))


if __name__ == "__main__":
    raise SystemExit(main())

"""A real node beside the test control plane: containerd, runc, the CNI bridge, the kubelet and
the project's simulated GPU driver (``tools/dra-sim-plugin``), and on request upstream's DRA
test driver as a second one (:mod:`.nodeplugins`), built by :mod:`.nodebuild`.

    node = start(cluster, state_dir)   # returns once the node is Ready and its slices published
    ...                                # pods with imagePullPolicy: Never of images.BUSYBOX
    stop(node)                         # undoes everything; leftovers(node.before) is then empty

What only a real node can do happens: a pod's claim is prepared by the driver over the kubelet
plugin protocol, the driver's CDI spec gives the container its environment, the container
runs :data:`.images.BUSYBOX` in its own network namespace with an address on the bridge, and
its log is served by the kubelet through the API server. The GPUs behind the driver are the
one simulated part: the driver publishes a simulated inventory (``dra_jupyter.inventory
.simulated``) and injects no device nodes.

What it takes on these machines (cgroup v1 hierarchies, root without CAP_SYS_RESOURCE, no
systemd): ``failCgroupV1: false`` and ``cgroupDriver: cgroupfs`` for the kubelet,
``restrict_oom_score_adj`` for containerd, the node IP of the machine's interface in the
kubelet's serving certificate (it refuses a loopback node IP), the ``not-ready`` taint removed
(the test control plane runs no node lifecycle controller), the API server's kubelet client
bound to ``system:kubelet-api-admin`` (``pods/log``). The bridge does no masquerading
(``ipMasq: false``) and has no route off the machine: pod traffic stays between the host and
the pods. State lives under ``state_dir``; what cannot (the kubelet's iptables chains,
``ip_forward``, cgroups, ``/run/containerd/s``, ``/var/log/pods``) is noted before the start
(:class:`Before`) and put back by :func:`stop`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tests.helpers import free_port
from tests.k8s import images, nodebuild, nodeplugins, testenv
from tests.k8s.k8sbuild import TestenvError

NODE_NAME = "dra-node-1"
BRIDGE = "drajup0"
POD_SUBNET = "10.244.0.0/24"  # private; no route or masquerade off this machine
START_TIMEOUT_S = 120.0
LOCK_WAIT_S = 600.0  # one node on a machine at a time: another test run's waits this long
STOP_TIMEOUT_S = 60.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAMES = ("kubepods", "k8s.io")
# Host paths a kubelet or containerd uses whatever their configured directories
LOG_DIRS = ("/var/log/pods", "/var/log/containers")  # the kubelet's, whatever its root dir
HOST_PATHS = (
    "/run/containerd",
    "/run/netns",
    "/var/lib/cni",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/kubelet",
    "/etc/cdi",
    "/var/run/cdi",
)
# The kernel settings the kubelet sets at its start (its setupKernelTunables), and the bridge
# plugin's ip_forward: put back as they were
SYSCTLS = (
    "net/ipv4/ip_forward",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")
CHAIN_PREFIXES = ("KUBE-", "CNI-")


# --- what the machine looked like before -----------------------------------------------------


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _run(*command: str, check: bool = True) -> str:
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise TestenvError(f"k8s-testenv node: {' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


def _chains() -> list[str]:
    """``program/table/chain`` of every chain of the prefixes that iptables shows."""
    found = []
    for program in IPTABLES:
        for table in TABLES:
            out = _run(f"{program}-save", "-t", table, check=False)
            found += [
                f"{program}/{table}/{line[1:].split()[0]}"
                for line in out.splitlines()
                if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES)
            ]
    return sorted(found)


def _cgroups() -> list[str]:
    return sorted(
        str(CGROUP_ROOT / h / n)
        for h in (p.name for p in CGROUP_ROOT.iterdir() if p.is_dir())
        for n in CGROUP_NAMES
        if (CGROUP_ROOT / h / n).is_dir()
    )


@dataclass
class Before:
    """What the node changes outside its state directory, as it was before it started."""

    sysctls: dict[str, str]
    chains: list[str]
    cgroups: list[str]
    host_paths: list[str]  # those of HOST_PATHS that existed
    bridge: bool
    log_entries: list[str]  # what LOG_DIRS held

    @classmethod
    def now(cls) -> Before:
        return cls(
            sysctls={name: _read(f"/proc/sys/{name}") for name in SYSCTLS},
            chains=_chains(),
            cgroups=_cgroups(),
            host_paths=[p for p in HOST_PATHS if os.path.lexists(p)],
            bridge=Path(f"/sys/class/net/{BRIDGE}").exists(),
            log_entries=_log_entries(),
        )


def _log_entries() -> list[str]:
    return sorted(str(p) for d in LOG_DIRS if Path(d).is_dir() for p in Path(d).iterdir())


def _mounts_under(*roots: str) -> list[str]:
    points = []
    for line in _read("/proc/self/mountinfo").splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == r or point.startswith(r.rstrip("/") + "/") for r in roots):
            points.append(point)
    return points


def _processes_of(bin_dir: Path) -> list[int]:
    """Processes running a program of ``bin_dir`` (containerd, its shims, the kubelet)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "exe").readlink().parent == bin_dir:
                    pids.append(int(entry.name))
    return pids


def _cgroup_processes(cgroups: list[str]) -> list[int]:
    pids: set[int] = set()
    for root in cgroups:
        for procs in Path(root).rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in procs.read_text().split()}
    return sorted(pids)


def leftovers(before: Before, state_dir: Path | None = None) -> list[str]:
    """What a node left on this machine that was not there ``before``: empty after
    :func:`stop`."""
    now = Before.now()
    left = [f"iptables chain {c}" for c in now.chains if c not in before.chains]
    left += [
        f"{name.replace('/', '.')} is {value}, was {before.sysctls[name]}"
        for name, value in now.sysctls.items()
        if value != before.sysctls[name]
    ]
    new_cgroups = [c for c in now.cgroups if c not in before.cgroups]
    left += [f"cgroup {c}" for c in new_cgroups]
    left += [f"process {p} in a node's cgroup" for p in _cgroup_processes(new_cgroups)]
    left += [f"path {p}" for p in now.host_paths if p not in before.host_paths]
    left += [f"path {p}" for p in now.log_entries if p not in before.log_entries]
    if now.bridge and not before.bridge:
        left.append(f"network interface {BRIDGE}")
    left += [f"process {p} of {nodebuild.bin_dir()}" for p in _processes_of(nodebuild.bin_dir())]
    roots = ["/run/containerd", "/run/netns"] + ([str(state_dir)] if state_dir else [])
    left += [f"mount {m}" for m in _mounts_under(*roots)]
    return left


# --- configuration (pure) ---------------------------------------------------------------------


def node_ip() -> str:
    """The address of the machine's first global IPv4 interface (the kubelet refuses loopback)."""
    for line in _run("ip", "-4", "-o", "addr", "show", "scope", "global").splitlines():
        return line.split()[3].split("/")[0]
    raise TestenvError("k8s-testenv node: this machine has no global IPv4 address for a node IP")


def containerd_config(state: Path, cni_conf_dir: Path, cdi_dir: Path) -> str:
    """containerd's config (version 3): its directories under ``state``, CDI from ``cdi_dir``,
    runc with cgroupfs, the pinned sandbox image :data:`images.PAUSE`."""
    return f"""version = 3
root = "{state}/root"
state = "{state}/state"

[grpc]
  address = "{state}/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["{cdi_dir}"]
  # root here lacks CAP_SYS_RESOURCE: without it every sandbox fails to start
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{nodebuild.RUNC}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{nodebuild.CNI_BIN_DIR}"]
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{images.PAUSE}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """The pod network: a bridge with the pods' gateway on the host, no masquerade."""
    return {
        "cniVersion": "1.0.0",
        "name": "dra-jupyter-testenv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": POD_SUBNET}]],
                },
            }
        ],
    }


def kubelet_config(
    pki: Path, ip: str, port: int, healthz_port: int, runtime: str
) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration for this machine (see the module)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{runtime}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # these machines mount cgroup v1 hierarchies (a warning only)
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "resolvConf": "",  # pods get no DNS server: they reach nothing off this machine
        # the imported images must stay: never collected, and no disk-pressure eviction
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "podPidsLimit": -1,
    }


# --- running ----------------------------------------------------------------------------------


@dataclass
class Node:
    """A running node; ``procs`` holds its processes (a :class:`testenv.Cluster` of its own,
    so that they start and stop as the control plane's components do)."""

    name: str
    ip: str
    state_dir: Path
    before: Before
    procs: testenv.Cluster
    cluster: testenv.Cluster
    timings: dict[str, float] = field(default_factory=dict)
    lock: TextIO | None = None  # held while the node runs (:func:`_lock`)

    @property
    def containerd_socket(self) -> Path:
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.state_dir / "cdi"

    def save(self) -> None:
        state = {"name": self.name, "ip": self.ip, "before": asdict(self.before)}
        (self.state_dir / "node.json").write_text(json.dumps(state, indent=2))


def _api(cluster: testenv.Cluster) -> Any:
    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415

    return api_client(str(cluster.kubeconfig))


def start(
    cluster: testenv.Cluster,
    state_dir: Path,
    *,
    name: str = NODE_NAME,
    inventory: str = nodeplugins.INVENTORY,
    test_driver: bool = False,
    timeout: float = START_TIMEOUT_S,
) -> Node:
    """Start a real node registered to ``cluster`` (see the module); its state in
    ``state_dir``; with ``test_driver``, upstream's DRA test driver runs there too
    (:mod:`.nodeplugins`). Returns once the node is Ready, untainted, and its drivers' slices
    are published. On failure, everything started is undone before the error is raised."""
    if os.geteuid() != 0:
        raise TestenvError("k8s-testenv node: a real node needs root (mounts, cgroups, iptables)")
    if not nodebuild.is_built():
        raise TestenvError(
            f"k8s-testenv node: not built in {nodebuild.cache_dir()}; run "
            "`scripts/k8s-testenv build` (or `make k8s-build`) first"
        )
    started = time.monotonic()
    lock = _lock(LOCK_WAIT_S)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    procs = testenv.Cluster(
        state_dir, cluster.server, cluster.kubeconfig, die_with_parent=cluster.die_with_parent
    )
    node = Node(name, node_ip(), state_dir, Before.now(), procs, cluster, lock=lock)
    node.save()
    try:
        _start(node, inventory, test_driver, time.monotonic() + timeout)
    except BaseException:
        stop(node)
        raise
    node.timings["start_s"] = time.monotonic() - started
    return node


def _lock(timeout: float) -> TextIO:
    """The machine's node lock (a file of the build cache), taken: the bridge, the node's
    cgroups and what :func:`stop_machine` kills are one node's at a time. A second test run
    waits for the first's node to stop."""
    path = nodebuild.cache_dir().parent / "node-running.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("w")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise TestenvError(
                    f"k8s-testenv node: another real node ran on this machine for {timeout:.0f} s "
                    f"(lock {path})"
                ) from None
            time.sleep(1.0)
        else:
            return lock


def _pki(node: Node) -> Path:
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    from tests.k8s import pki  # noqa: PLC0415

    ca_dir = node.cluster.state_dir / "pki"
    out = node.state_dir / "pki"
    out.mkdir(mode=0o700, exist_ok=True)
    ca = (
        x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes()),
        serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None),
    )
    cert, key = pki.certificate(
        f"system:node:{node.name}", issuer=ca, hosts=(node.ip, "127.0.0.1", node.name)
    )
    (out / "kubelet-serving.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "kubelet-serving.key").write_bytes(pki.pem_key(key))
    (out / "ca.crt").write_bytes((ca_dir / "ca.crt").read_bytes())
    user = f"system:node:{node.name}"
    pki.issue_client(ca_dir, user, ["system:nodes"])
    pki.write_kubeconfig(node.state_dir / "kubelet.kubeconfig", node.cluster.server, ca_dir, user)
    return out


def _start(node: Node, inventory: str, test_driver: bool, deadline: float) -> None:
    from kubernetes import client  # noqa: PLC0415

    pki = _pki(node)
    t0 = time.monotonic()
    _start_containerd(node, deadline)
    node.timings["containerd_s"] = time.monotonic() - t0
    with _api(node.cluster) as api:
        # Any: wire dicts in, the models' optional fields out; untyped here
        core: Any = client.CoreV1Api(api)
        t0 = time.monotonic()
        _start_kubelet(node, pki, api, core, deadline)
        node.timings["kubelet_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        resource = client.ResourceV1Api(api)
        nodeplugins.start(node, inventory, resource, deadline, test_driver=test_driver)
        node.timings["plugin_s"] = time.monotonic() - t0


def _start_containerd(node: Node, deadline: float) -> None:
    """containerd with the CNI bridge and CDI; the images imported."""
    state, binaries = node.state_dir, nodebuild.bin_dir()
    cni_dir = state / "cni" / "net.d"
    for directory in (cni_dir, node.cdi_dir, state / "containerd"):
        directory.mkdir(parents=True, exist_ok=True)
    (cni_dir / "10-dra-jupyter.conflist").write_text(
        json.dumps(cni_conflist(state / "cni" / "ipam"))
    )
    config = state / "containerd" / "config.toml"
    config.write_text(containerd_config(state / "containerd", cni_dir, node.cdi_dir))
    # its shim is found on PATH: the built one first
    path = f"PATH={binaries}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    testenv._spawn(
        node.procs,
        "containerd",
        ["--config", str(config), "--log-level", "warn"],
        program=["env", path, str(binaries / "containerd")],
        # the machine's node lock held as long as containerd runs: also once the process
        # that started the node is gone (`scripts/k8s-testenv start`), until its stop
        pass_fds=[node.lock.fileno()] if node.lock is not None else [],
    )
    ctr = [str(binaries / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io"]

    def containerd_ready() -> tuple[bool, str]:
        done = subprocess.run([*ctr, "version"], check=False, capture_output=True, text=True)
        return done.returncode == 0, done.stderr

    testenv._wait(node.procs, "containerd", containerd_ready, deadline)
    archives = [
        images.pause_archive(state / "images" / "pause.tar", binaries / "pause"),
        images.busybox_archive(state / "images" / "busybox.tar", Path(nodebuild.BUSYBOX)),
    ]
    for archive in archives:
        _run(*ctr, "images", "import", str(archive))


def import_image(node: Node, archive: Path) -> None:
    """An image archive more (:mod:`.kernelimage`'s), imported into the node's containerd:
    the images every node has are imported at its start, this one where a test needs it."""
    binaries = nodebuild.bin_dir()
    ctr = [str(binaries / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io"]
    started = time.monotonic()
    _run(*ctr, "images", "import", str(archive))
    node.timings[f"import_{archive.stem}_s"] = time.monotonic() - started


KUBELET_API_ADMIN = {
    "metadata": {"name": "dra-jupyter-testenv-kubelet-api-admin"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    },
    "subjects": [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "kube-apiserver-kubelet-client",  # tests/k8s/pki.py's
        }
    ],
}


def _start_kubelet(node: Node, pki: Path, api: Any, core: Any, deadline: float) -> None:
    """The kubelet, registered and Ready; its not-ready taint removed; ``pods/log`` allowed."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    state = node.state_dir
    kubelet_root = state / "kubelet"
    kubelet_root.mkdir(exist_ok=True)
    kubelet_file = state / "kubelet.yaml"
    kubelet_file.write_text(
        json.dumps(
            kubelet_config(pki, node.ip, free_port(), free_port(), str(node.containerd_socket))
        )
    )
    testenv._spawn(
        node.procs,
        "kubelet",
        [
            f"--config={kubelet_file}",
            f"--kubeconfig={state / 'kubelet.kubeconfig'}",
            f"--root-dir={kubelet_root}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            "--v=1",
        ],
        program=[str(nodebuild.bin_dir() / "kubelet")],
    )
    with contextlib.suppress(ApiException):  # there already: an earlier node made it
        rbac: Any = client.RbacAuthorizationV1Api(api)
        rbac.create_cluster_role_binding(KUBELET_API_ADMIN)

    def ready() -> tuple[bool, str]:
        try:
            obj = core.read_node(node.name)
        except ApiException as error:
            return False, str(error.status)
        conditions = obj.status.conditions or ()
        ok = any(c.type == "Ready" and c.status == "True" for c in conditions)
        return ok, f"conditions {[(c.type, c.status) for c in conditions]}"

    testenv._wait(node.procs, f"node {node.name} Ready", ready, deadline)
    # the test control plane runs no node lifecycle controller to take it off
    taints = [
        api.sanitize_for_serialization(t)
        for t in core.read_node(node.name).spec.taints or ()
        if t.key != "node.kubernetes.io/not-ready"
    ]
    core.patch_node(node.name, {"spec": {"taints": taints or None}})


def _drain(node: Node, timeout: float) -> None:
    """Delete the pods bound to the node, gracefully, so the kubelet stops their containers and
    tears down their sandboxes (the CNI's veths, the netns mounts); wait until they are gone."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    with _api(node.cluster) as api:
        core: Any = client.CoreV1Api(api)
        selector = f"spec.nodeName={node.name}"
        for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not core.list_pod_for_all_namespaces(field_selector=selector).items:
                return
            time.sleep(0.5)


def _forget(node: Node) -> None:
    """Delete the Node object and the driver's slices of it: with its kubelet gone, a node
    started again under the same name would otherwise look Ready and published at once."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    with _api(node.cluster) as api:
        resource: Any = client.ResourceV1Api(api)
        with contextlib.suppress(ApiException):
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={node.name}")
        with contextlib.suppress(ApiException):
            client.CoreV1Api(api).delete_node(node.name)


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _until(what: str, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TestenvError(f"k8s-testenv node stop: {what}")
        time.sleep(0.1)


def _remove_chains(before: Before) -> None:
    """Every KUBE-*/CNI-* chain that was not there before: the rules that jump to it first."""
    new = [c for c in _chains() if c not in before.chains]
    for program, table in {(c.split("/")[0], c.split("/")[1]) for c in new}:
        names = {c.split("/")[2] for c in new if c.startswith(f"{program}/{table}/")}
        for line in _run(f"{program}-save", "-t", table, check=False).splitlines():
            parts = line.split()
            if (
                line.startswith("-A ")
                and parts[1] not in names
                and any(f"-j {n}" in line or f"-g {n}" in line for n in names)
            ):
                _run(program, "-t", table, "-D", *parts[1:], check=False)
        for chain in names:
            _run(program, "-t", table, "-F", chain, check=False)
        for chain in names:
            _run(program, "-t", table, "-X", chain, check=False)


def stop(node: Node, timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop the node and undo what it did to this machine (see the module)."""
    started = time.monotonic()
    kubelet_running = any(c.name == "kubelet" and testenv._ours(c) for c in node.procs.components)
    if kubelet_running:
        with contextlib.suppress(Exception):  # best effort: what is left is killed below
            _drain(node, timeout / 2)
    try:
        node.procs.stop()  # the plugins, the kubelet, containerd: newest first
        stop_machine(node.state_dir, node.before)
        with contextlib.suppress(Exception):  # best effort: the control plane may be gone
            _forget(node)
    finally:
        if node.lock is not None:
            node.lock.close()  # releases the lock
            node.lock = None
    node.timings["stop_s"] = time.monotonic() - started


def stop_machine(state_dir: Path, before: Before) -> None:
    """Undo what a node did outside ``state_dir`` (its processes stopped): the containers'
    processes, mounts, cgroups, iptables chains, ip_forward, the bridge, host paths."""
    new_cgroups = [c for c in _cgroups() if c not in before.cgroups]
    _kill_all(_processes_of(nodebuild.bin_dir()))  # shims that outlived containerd
    _kill_all(_cgroup_processes(new_cgroups))
    _until(
        "processes of the node's cgroups did not exit",
        lambda: not _cgroup_processes(new_cgroups) and not _processes_of(nodebuild.bin_dir()),
        10.0,
    )
    for point in sorted(
        _mounts_under("/run/containerd", "/run/netns", str(state_dir)), key=len, reverse=True
    ):
        _run("umount", "-l", point, check=False)
    for cgroup in new_cgroups:
        for directory in sorted(
            (p for p in Path(cgroup).rglob("*") if p.is_dir()),
            key=lambda p: len(p.parts),
            reverse=True,
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            Path(cgroup).rmdir()
    _remove_chains(before)
    if Path(f"/sys/class/net/{BRIDGE}").exists() and not before.bridge:
        _run("ip", "link", "delete", BRIDGE, check=False)
    for name, value in before.sysctls.items():
        if value and _read(f"/proc/sys/{name}") != value:
            Path(f"/proc/sys/{name}").write_text(value + "\n")
    new_paths = [p for p in HOST_PATHS if p not in before.host_paths and os.path.lexists(p)]
    new_paths += [p for p in _log_entries() if p not in before.log_entries]
    for path in new_paths:
        _run("rm", "-rf", "--one-file-system", path, check=False)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / "node.json").unlink()


def stop_saved(state_dir: Path, cluster: testenv.Cluster | None = None) -> bool:
    """Stop the node whose state (node.json, cluster.json) is in ``state_dir``: for
    ``scripts/k8s-testenv stop``; its pods deleted first, as :func:`stop` does, where its
    control plane ``cluster`` still runs. False when none was started from there."""
    try:
        saved = json.loads((state_dir / "node.json").read_text())
    except FileNotFoundError:
        return False
    before = Before(**saved["before"])
    procs = testenv.Cluster.load(state_dir)
    if procs is not None:
        kubelet = any(c.name == "kubelet" and testenv._ours(c) for c in procs.components)
        if cluster is not None and kubelet:
            node = Node(saved["name"], saved["ip"], state_dir, before, procs, cluster)
            with contextlib.suppress(Exception):  # best effort: what is left is killed below
                _drain(node, STOP_TIMEOUT_S / 2)
        procs.stop()
    stop_machine(state_dir, before)
    return True


@contextlib.contextmanager
def started(cluster: testenv.Cluster, state_dir: Path) -> Iterator[Node]:
    """A node for a block of tests: built (a no-op once built), started, stopped at the end."""
    nodebuild.build()
    node = start(cluster, state_dir)
    try:
        yield node
    finally:
        stop(node)

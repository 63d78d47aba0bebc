"""``scripts/k8s-testenv``: build, start and stop the test environment (:mod:`.testenv`'s
control plane, and a node that runs its pods).

    scripts/k8s-testenv build                 # once per machine; later calls reuse the cache
    scripts/k8s-testenv start [--state-dir D] [--node real|stand-in|none] [--no-workloads]
    scripts/k8s-testenv run-pods [--state-dir D] [--namespace NS]   # the stand-in kubelet
    scripts/k8s-testenv stop  [--state-dir D]

``start`` prints the admin kubeconfig's path (stdout) and says on stderr what it started.
Its node (:func:`node_choice`):

* ``real`` (the default where the machine allows it: as root): a real node beside the
  control plane (:mod:`.node`: containerd, the kubelet, a CNI bridge and the simulated GPU
  driver, which publishes the node's ResourceSlices of the ``h200-8x`` inventory), built
  first where it is not (:mod:`.nodebuild`, cached), with the kernel image
  (:data:`.kernelimage.KERNEL`) imported beside the node's own images;
* ``stand-in`` (the default for anyone else, saying why in one line; ``--run-pods`` is the
  same): the stand-in kubelet (:mod:`.podrunner`, pods as local processes) and one simulated
  node of the same inventory published (``gpu-node-1``, as ``dra-jupyter publish-slices
  --inventory h200-8x --nodes 1`` does), so that the same commands run pods there;
* ``none``: the control plane alone (pods stay Pending).

``stop`` stops the node (its pods deleted first, then everything it did to the machine
undone: :func:`.node.stop_saved`) and the control plane.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.k8s.k8sbuild import ETCD_VERSION, KUBERNETES_VERSION, bin_dir
from tests.k8s.testenv import (
    WORKLOAD_API,
    Cluster,
    TestenvError,
    build,
    cache_dir,
    run_pods,
    start,
    stop,
)

__all__ = ["NODES", "default_state_dir", "main", "node_choice"]

REAL, STAND_IN, NONE = "real", "stand-in", "none"
NODES = (REAL, STAND_IN, NONE)
STAND_IN_INVENTORY = "h200-8x"  # the real node's driver's (tests/k8s/nodeplugins.py)


def default_state_dir() -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "dra-jupyter" / "k8s-testenv"


def node_choice(asked: str | None, run_pods: bool, euid: int) -> tuple[str, str]:
    """The node ``start`` runs (one of :data:`NODES`) and, where it is the stand-in because
    this machine allows no real node, the one line that says why ("" otherwise).
    :class:`TestenvError` when ``--run-pods`` (the stand-in) contradicts ``--node``."""
    if run_pods:
        if asked not in (None, STAND_IN):
            raise TestenvError(
                f"k8s-testenv start: --run-pods is --node stand-in; not with --node {asked}"
            )
        return STAND_IN, ""
    if asked is not None:
        return asked, ""
    if euid == 0:
        return REAL, ""
    return STAND_IN, (
        "k8s-testenv: no real node: it needs root (mounts, cgroups, iptables) and this runs as "
        f"uid {euid}; the stand-in kubelet runs the pods as local processes instead"
    )


def _start_command(args: argparse.Namespace) -> None:
    began = time.monotonic()
    choice, why = node_choice(args.node, args.run_pods, os.geteuid())
    if why:
        sys.stderr.write(why + "\n")
    build()
    archive = _real_node_inputs() if choice == REAL else None
    cluster = start(args.state_dir, run_pods=choice == STAND_IN, workloads=not args.no_workloads)
    try:
        if archive is not None:
            _start_real_node(cluster, archive)
        elif choice == STAND_IN:
            _publish_stand_in(cluster)
    except BaseException:
        cluster.stop()
        raise
    print(cluster.kubeconfig)
    sys.stderr.write(
        f"k8s-testenv: started in {time.monotonic() - began:.0f} s; API server "
        f"{cluster.server}; export KUBECONFIG={cluster.kubeconfig}\n"
    )


def _real_node_inputs() -> Path:
    """The node's build (made where missing) and the kernel image's archive (written where
    its inputs changed), before anything starts."""
    from tests.k8s import kernelimage, nodebuild  # noqa: PLC0415

    nodebuild.build()
    return kernelimage.archive()


def _start_real_node(cluster: Cluster, archive: Path) -> None:
    from tests.k8s import images, kernelimage, node, nodeplugins  # noqa: PLC0415

    real = node.start(cluster, cluster.state_dir / "node")
    try:
        node.import_image(real, archive)
    except BaseException:
        node.stop(real)
        raise
    imported = real.timings[f"import_{archive.stem}_s"]
    sys.stderr.write(
        f"k8s-testenv: node {real.name} ({real.ip}) Ready in {real.timings['start_s']:.0f} s, "
        f"its driver {nodeplugins.DRIVER} publishing the {nodeplugins.INVENTORY} inventory's "
        f"devices; images {kernelimage.KERNEL} (imported in {imported:.0f} s), "
        f"{images.BUSYBOX} and {images.PAUSE} (imagePullPolicy: Never)\n"
    )


def _publish_stand_in(cluster: Cluster) -> None:
    """One simulated node of :data:`STAND_IN_INVENTORY`, for the stand-in kubelet to run."""
    from dra_jupyter.inventory import simulated  # noqa: PLC0415
    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415
    from dra_jupyter.kube.publish import Publisher  # noqa: PLC0415
    from dra_jupyter.kube.simulate import simulate  # noqa: PLC0415

    started = time.monotonic()
    world = simulate(simulated.load(STAND_IN_INVENTORY), 1)
    with api_client(str(cluster.kubeconfig)) as api:
        Publisher(api).publish(world)
    sys.stderr.write(
        f"k8s-testenv: stand-in node {', '.join(world.node_names)} of the {STAND_IN_INVENTORY} "
        f"inventory published in {time.monotonic() - started:.0f} s; its pods run as local "
        "processes (no image is pulled or run)\n"
    )


def _stop_command(state_dir: Path) -> None:
    from tests.k8s import node  # noqa: PLC0415

    began = time.monotonic()
    state_dir = state_dir.resolve()
    had_node = node.stop_saved(state_dir / "node", Cluster.load(state_dir))
    if not stop(state_dir):
        sys.stderr.write(f"k8s-testenv: nothing runs from {state_dir}\n")
        return
    what = "the node and the control plane" if had_node else "the control plane"
    sys.stderr.write(f"k8s-testenv: stopped {what} in {time.monotonic() - began:.0f} s\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="k8s-testenv",
        description=f"A real Kubernetes {KUBERNETES_VERSION} control plane (etcd {ETCD_VERSION}) "
        "on loopback, with a node that runs its pods, for tests and demos.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help=f"build the binaries into {cache_dir()} (skipped if built)")
    p.add_argument("--force", action="store_true", help="rebuild even if built")
    for name, helptext in (
        ("start", "start the control plane and a node; prints the admin kubeconfig's path"),
        ("run-pods", "run the pods bound to the simulated nodes (the stand-in kubelet)"),
        ("stop", "stop the node and the control plane started from the state directory"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument(
            "--state-dir",
            type=Path,
            default=default_state_dir(),
            help="certificates, kubeconfigs, etcd data and logs (default: %(default)s)",
        )
        if name == "start":
            p.add_argument(
                "--node",
                choices=NODES,
                nargs="?",
                const=REAL,
                default=None,
                help="real: containerd, the kubelet, a CNI bridge and the simulated GPU driver "
                "(root; tests/k8s/node.py); stand-in: pods as local processes on a simulated "
                "node; none: the control plane alone (default: real as root, else stand-in)",
            )
            p.add_argument(
                "--run-pods",
                action="store_true",
                help="the same as --node stand-in",
            )
            p.add_argument(
                "--no-workloads",
                action="store_true",
                help=f"leave the Workload API ({WORKLOAD_API}) and gang scheduling off, "
                "as Kubernetes' defaults do",
            )
        if name == "run-pods":
            p.add_argument(
                "--namespace",
                action="append",
                default=[],
                help="run only this namespace's pods (repeatable; default: every namespace)",
            )
            p.add_argument(
                "--restart-backoff",
                type=float,
                default=10.0,
                help="seconds before the first restart of a failed container (doubling)",
            )
    sub.add_parser("where", help="print the cache directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from tests.k8s import nodebuild  # noqa: PLC0415

    try:
        if args.command == "build":
            from tests.k8s import jobset, kueue  # noqa: PLC0415

            build(force=args.force)
            kueue.build(force=args.force)
            jobset.build(force=args.force)
            if os.geteuid() == 0:
                nodebuild.build(force=args.force)
            else:
                sys.stderr.write(
                    "k8s-testenv: the real node is not built (it needs root for apt-get, "
                    "mounts, cgroups and iptables); the k8s tier's real-node tests skip\n"
                )
            print(bin_dir())
        elif args.command == "start":
            _start_command(args)
        elif args.command == "run-pods":
            run_pods(args.state_dir, args.namespace, args.restart_backoff)
        elif args.command == "stop":
            _stop_command(args.state_dir)
        else:
            print(cache_dir())
    except TestenvError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    return 0

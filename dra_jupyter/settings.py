"""Settings of the Python API and the CLI: one dataclass, read from the environment.

====================================  ===========================================================
variable                              meaning (default)
====================================  ===========================================================
``DRA_JUPYTER_LEDGER``                the ledger file; a shared path makes one ledger for every
                                      user of the machine (``$XDG_STATE_HOME/dra-jupyter/
                                      ledger.sqlite``, per user)
``DRA_JUPYTER_INVENTORY``             ``auto`` (NVML when it finds GPUs, else the simulated
                                      ``h200-8x``), ``nvml``, a bundled simulated inventory
                                      name, or a YAML file of ResourceSlices
``DRA_JUPYTER_STRATEGY``              ``topology`` or ``first-fit`` (``topology``)
``DRA_JUPYTER_POLL_INTERVAL``         seconds between attempts while a request waits (0.5)
``DRA_JUPYTER_IDLE_TIMEOUT``          seconds without a cell after which the Jupyter server
                                      releases this kernel's claims (set by the server
                                      extension; 0: no idle release known)
``DRA_JUPYTER_BACKEND``               ``local`` (this machine, the ledger), ``service`` (the
                                      machine's ``dra-jupyter service``, over its socket),
                                      ``kubernetes`` (ResourceClaims in a cluster) or ``auto``:
                                      kubernetes when running in a pod with a service account,
                                      else service where it is installed, else local (unset:
                                      service where it is installed, else local). The service
                                      is installed where its socket or its policy file exists:
                                      then it is used whether it answers or not (a session
                                      never falls back to a private ledger)
``DRA_JUPYTER_SOCKET``                the service's Unix socket (``/run/dra-jupyter/socket``)
``DRA_JUPYTER_SERVICE_CONFIG``        the service's policy file, whose presence says that the
                                      service is installed (``/etc/dra-jupyter/service.toml``)
``DRA_JUPYTER_NAMESPACE``             the namespace of the Kubernetes backend's claims and
                                      pods (the pod's own, else the kubeconfig context's,
                                      else ``default``)
``DRA_JUPYTER_IMAGE``                 the image of ``dra.run`` pods (the notebook pod's own)
``DRA_JUPYTER_KUEUE_QUEUE``           the Kueue LocalQueue of ``dra.run``'s Jobs when the call
                                      names none (a hub sets it from ``dra_kueue_queue``)
``DRA_JUPYTER_KUBECONFIG``            a kubeconfig file for the Kubernetes backend, used before
                                      the pod's service account (none: in-cluster, then
                                      ``$KUBECONFIG``, then ``~/.kube/config``)
``DRA_JUPYTER_SHARED_VIEW_URL``       the hub's shared view of the cluster's devices
                                      (:mod:`dra_jupyter.hub.sharedview`; a hub's spawner sets
                                      it): where set, the Kubernetes backend reads no
                                      cluster-wide kind (no slices, no other namespace's
                                      claims) and a Jupyter server asks the view for the counts
                                      ("": none, the server watches the cluster itself)
``DRA_JUPYTER_SERVER_ID``             the Jupyter server whose kernel this is: its claims are
                                      labelled ``dra-jupyter/server`` with it (set by the
                                      server extension)
``DRA_JUPYTER_RERUN_RELEASES``        ``1``: when a notebook cell runs again, the claims its
                                      previous run made are released before its new requests;
                                      ``0`` keeps them (``1``)
``DRA_JUPYTER_KUBE_RETRIES``          attempts at an unreachable API server before giving up (4)
``DRA_JUPYTER_KUBE_BACKOFF``          seconds before the first retry, doubled each time (0.5)
``DRA_JUPYTER_HEALTH_GRACE``          seconds a claim keeps a device taken out with NoExecute
                                      (the health watcher's, an admin's taint), to save work,
                                      before it is released; a GPU lost: none (300)
``DRA_JUPYTER_RECLAIM``               ``1``: on the embedded ledger, while a request waits, idle
                                      holders that could free what it needs are warned, then
                                      released (reclaim under pressure); ``0``: only their
                                      idle timeout (``1``)
``DRA_JUPYTER_RECLAIM_GRACE``         seconds from that warning to the release (300)
``DRA_JUPYTER_KEEPS_UNDER_PRESSURE``  Keeps a warned holder may use while someone waits (1)
``DRA_JUPYTER_RECLAIM_IDLE``          seconds without activity before a holder counts as idle
                                      for reclaim under pressure (600)
====================================  ===========================================================
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dra_jupyter.allocator import STRATEGIES, Strategy
from dra_jupyter.errors import InvalidInputError, shown

BackendName = Literal["local", "service", "kubernetes", "auto"]
BACKENDS: tuple[BackendName, ...] = ("local", "service", "kubernetes", "auto")
DEFAULT_SOCKET = Path("/run/dra-jupyter/socket")
BACKEND_ENV = "DRA_JUPYTER_BACKEND"
DEFAULT_SERVICE_CONFIG = Path("/etc/dra-jupyter/service.toml")
# What a pod's service account mounts (token, namespace): its presence means "in a pod".
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


# A Kubernetes label value (what a server id must be): at most 63 characters.
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")


def default_server_id(hostname: str | None = None) -> str:
    """The host name as a DNS label (lower case, ``[a-z0-9-]``, at most 63 characters):
    stable for a notebook pod, whose host name is the pod's name (``jupyter-alice`` under
    zero-to-jupyterhub), and unique among the pods of a namespace."""
    name = (hostname if hostname is not None else socket.gethostname()).lower()
    label = re.sub(r"[^a-z0-9-]+", "-", name)[:63].strip("-")
    return label or "jupyter"


def check_server_id(server_id: str, where: str) -> str:
    """``server_id``, when it can be a Kubernetes label value; else InvalidInputError."""
    if not server_id or not _LABEL_VALUE.fullmatch(server_id):
        raise InvalidInputError(
            f"{where}={server_id!r} is not a Kubernetes label value; use at most 63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return server_id


def default_ledger(environ: Mapping[str, str]) -> Path:
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dra-jupyter" / "ledger.sqlite"


@dataclass(frozen=True)
class Settings:
    ledger: Path
    inventory: str = "auto"
    strategy: Strategy = "topology"
    poll_interval: float = 0.5  # seconds
    namespace: str = ""  # "": the pod's, the kubeconfig context's, else "default"
    idle_timeout: float = 0  # seconds; what the server extension told this kernel
    backend: BackendName = "local"
    image: str = ""  # dra.run's image ("": the notebook pod's own)
    kueue_queue: str = ""  # the Kueue LocalQueue of dra.run's Jobs ("": none unless queue=)
    kubeconfig: str | None = None  # None: in-cluster, $KUBECONFIG, ~/.kube/config
    kube_retries: int = 4  # attempts at an unreachable API server
    kube_backoff: float = 0.5  # seconds before the first retry, doubled each time
    server_id: str = ""  # the Jupyter server whose kernel or REST API makes the claims
    # keep views of the cluster by watching it (dra_jupyter.kube.watching): a long-lived
    # process sets it (the Jupyter server); a kernel or a command reads when asked
    watch: bool = False
    # the hub's shared view of the cluster's devices ("": none): where set, nothing here
    # reads a cluster-wide kind (dra_jupyter.kube.sharedview)
    shared_view_url: str = ""
    rerun_releases: bool = True  # a cell run again releases its previous run's claims first
    socket: Path = DEFAULT_SOCKET  # the dra-jupyter service's Unix socket
    service_config: Path = DEFAULT_SERVICE_CONFIG  # its policy file (where it is installed)
    health_grace: float = 300.0  # seconds before a NoExecute taint releases its holders
    # reclaim under pressure on the embedded ledger: the service's names and defaults
    # (dra_jupyter.sharing.reclaim.ReclaimSettings)
    reclaim: bool = True
    reclaim_grace: float = 300.0
    keeps_under_pressure: int = 1
    reclaim_idle: float = 600.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        strategy = env.get("DRA_JUPYTER_STRATEGY", "topology")
        if strategy not in STRATEGIES:
            raise InvalidInputError(
                f"DRA_JUPYTER_STRATEGY={shown(strategy)} is not known; "
                f"use {' or '.join(STRATEGIES)}"
            )
        sock = Path(env.get("DRA_JUPYTER_SOCKET") or DEFAULT_SOCKET)
        config = Path(env.get("DRA_JUPYTER_SERVICE_CONFIG") or DEFAULT_SERVICE_CONFIG)
        backend = env.get(BACKEND_ENV) or (
            "service" if service_installed(sock, config) else "local"
        )
        if backend not in BACKENDS:
            raise InvalidInputError(
                f"DRA_JUPYTER_BACKEND={shown(backend)} is not known; use {', '.join(BACKENDS)}"
            )
        retries = _seconds(env, "DRA_JUPYTER_KUBE_RETRIES", 4)
        if retries < 1 or retries != int(retries):
            raise InvalidInputError(
                f"DRA_JUPYTER_KUBE_RETRIES must be a whole number of at least 1, not {retries:g}"
            )
        rerun = env.get("DRA_JUPYTER_RERUN_RELEASES", "1").strip().lower()
        if rerun not in ("1", "0", "true", "false", "yes", "no", ""):
            raise InvalidInputError(
                f"DRA_JUPYTER_RERUN_RELEASES={shown(rerun)} is not known; use 1 or 0"
            )
        reclaim = env.get("DRA_JUPYTER_RECLAIM", "1").strip().lower()
        if reclaim not in ("1", "0", "true", "false", "yes", "no", ""):
            raise InvalidInputError(
                f"DRA_JUPYTER_RECLAIM={shown(reclaim)} is not known; use 1 or 0"
            )
        keeps = _seconds(env, "DRA_JUPYTER_KEEPS_UNDER_PRESSURE", 1)
        if keeps < 0 or keeps != int(keeps):
            raise InvalidInputError(
                f"DRA_JUPYTER_KEEPS_UNDER_PRESSURE must be a whole number, 0 or more, not {keeps:g}"
            )
        server_id = env.get("DRA_JUPYTER_SERVER_ID", "")
        if server_id:
            check_server_id(server_id, "DRA_JUPYTER_SERVER_ID")
        return cls(
            backend=backend,
            server_id=server_id,
            kubeconfig=env.get("DRA_JUPYTER_KUBECONFIG") or None,
            namespace=env.get("DRA_JUPYTER_NAMESPACE", ""),
            image=env.get("DRA_JUPYTER_IMAGE", ""),
            kueue_queue=env.get("DRA_JUPYTER_KUEUE_QUEUE", ""),
            shared_view_url=env.get("DRA_JUPYTER_SHARED_VIEW_URL", "").strip(),
            kube_retries=int(retries),
            kube_backoff=_seconds(env, "DRA_JUPYTER_KUBE_BACKOFF", 0.5),
            ledger=Path(env.get("DRA_JUPYTER_LEDGER") or default_ledger(env)),
            socket=sock,
            service_config=config,
            inventory=env.get("DRA_JUPYTER_INVENTORY", "auto"),
            strategy=strategy,
            poll_interval=_seconds(env, "DRA_JUPYTER_POLL_INTERVAL", 0.5),
            idle_timeout=_seconds(env, "DRA_JUPYTER_IDLE_TIMEOUT", 0),
            rerun_releases=rerun in ("1", "true", "yes", ""),
            health_grace=_seconds(env, "DRA_JUPYTER_HEALTH_GRACE", 300),
            reclaim=reclaim in ("1", "true", "yes", ""),
            reclaim_grace=_seconds(env, "DRA_JUPYTER_RECLAIM_GRACE", 300),
            keeps_under_pressure=int(keeps),
            reclaim_idle=_seconds(env, "DRA_JUPYTER_RECLAIM_IDLE", 600),
        )


def service_installed(socket: Path, config: Path) -> bool:
    """Whether the machine's ``dra-jupyter service`` is installed: its socket or its policy
    file exists (the daemon may be restarting: it is the service all the same)."""
    return socket.exists() or config.exists()


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of 0 or more from the environment (NaN and infinities are no number)."""
    try:
        value = float(env.get(name, default))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(
            f"{name} must be a number of seconds, 0 or more, not {shown(env[name])}"
        )
    return value

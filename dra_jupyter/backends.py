"""Which backend a session gets: :func:`open_backend`, the one place that knows the kinds.

``local`` is :class:`~dra_jupyter.local.backend.LocalBackend` (this machine's devices, the
SQLite ledger); ``kubernetes`` is :class:`~dra_jupyter.kube.backend.KubernetesBackend`
(ResourceClaims in a namespace); ``service`` is
:class:`~dra_jupyter.service.client.ServiceBackend` (the machine's ``dra-jupyter service``,
over its Unix socket); ``auto`` is kubernetes in a pod with a service account, else
service where it is installed (its socket or its policy file exists: whether it answers or
not, so that a session started while the daemon restarts is refused rather than given a
private ledger), else local. Each is imported only when it is chosen: the
Kubernetes client loads only for the Kubernetes backend. What a backend offers is
:class:`dra_jupyter.types.Backend`; its runs are :func:`open_runs`; the local backend, where
a caller needs its embedded ledger, is :func:`ledger_backend`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.settings import SERVICE_ACCOUNT_DIR, Settings, service_installed
from dra_jupyter.sharing.reclaim import ReclaimSettings

if TYPE_CHECKING:
    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.local.backend import LocalBackend
    from dra_jupyter.types import Backend, Owner, Watching
    from dra_jupyter.types.runs import Runs


def open_backend(settings: Settings, owner: Owner, inventory: Inventory | None = None) -> Backend:
    """The backend ``settings`` name, for ``owner``; ``inventory`` replaces the local
    backend's configured one (a simulated inventory in tests and benchmarks)."""
    kind = resolve_backend(settings)
    if kind == "kubernetes":
        from dra_jupyter.kube.backend import KubernetesBackend  # noqa: PLC0415  # on use

        return KubernetesBackend(settings, owner)
    if kind == "service":  # the daemon's devices: ``inventory`` does not replace them
        from dra_jupyter.service.client import ServiceBackend  # noqa: PLC0415

        return ServiceBackend(
            settings.socket, owner, strategy=settings.strategy, namespace=settings.namespace
        )
    from dra_jupyter.local.backend import LocalBackend  # noqa: PLC0415
    from dra_jupyter.local.ledger import Ledger  # noqa: PLC0415

    return LocalBackend(
        inventory if inventory is not None else resolve_inventory(settings.inventory),
        Ledger(settings.ledger),
        owner,
        strategy=settings.strategy,
        poll_interval=settings.poll_interval,
        namespace=settings.namespace,
        reclaim=reclaim_settings(settings),
    )


def reclaim_settings(settings: Settings) -> ReclaimSettings | None:
    """The embedded ledger's reclaim under pressure as ``settings`` have it (None: off)."""
    if not settings.reclaim:
        return None
    return ReclaimSettings(
        grace=settings.reclaim_grace,
        keeps=settings.keeps_under_pressure,
        idle_after=settings.reclaim_idle,
    )


def in_pod(service_account: Path = SERVICE_ACCOUNT_DIR) -> bool:
    """Whether this process runs in a pod with a service account (its token and namespace)."""
    return (service_account / "token").is_file() and (service_account / "namespace").is_file()


def service_answers(path: Path, timeout: float = 0.5) -> bool:
    """Whether something listens on the Unix socket at ``path`` (a dra-jupyter service)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        return False
    finally:
        sock.close()
    return True


def resolve_backend(settings: Settings, service_account: Path = SERVICE_ACCOUNT_DIR) -> str:
    """``local``, ``service`` or ``kubernetes``: ``auto`` is kubernetes in a pod, else
    service where it is installed, else local."""
    if settings.backend == "auto":
        if in_pod(service_account):
            return "kubernetes"
        installed = service_installed(settings.socket, settings.service_config)
        return "service" if installed else "local"
    return settings.backend


def open_runs(settings: Settings, backend: Backend) -> Runs[Any]:
    """``backend``'s runs (``dra.run``): on a cluster its pods, Jobs and JobSets
    (:mod:`dra_jupyter.kube.runs.facet`; ``settings``: the image and Kueue queue of a run
    that names none); on one machine (local, service) the background runs of its user,
    their book in the user's ledger (the local backend's own), their launchers started with
    the settings of this session (:func:`runner_env`)."""
    if backend.cluster is not None:  # only the Kubernetes backend has a cluster facet
        from dra_jupyter.kube.backend import KubernetesBackend  # noqa: PLC0415  # loaded
        from dra_jupyter.kube.runs.facet import KubeRuns  # noqa: PLC0415

        assert isinstance(backend, KubernetesBackend)
        return KubeRuns(backend, image=settings.image, queue=settings.kueue_queue)
    from dra_jupyter.local.ledger import Ledger  # noqa: PLC0415  # on use
    from dra_jupyter.local.runs import LocalRuns, RunBook  # noqa: PLC0415

    kind = resolve_backend(settings)
    local = ledger_backend(backend)
    path = local.ledger.path if local is not None else Path(settings.ledger)

    def book() -> RunBook:  # the user's ledger opened on first use (made where missing)
        return RunBook(local.ledger if local is not None else Ledger(path))

    env = runner_env(settings, kind, path)
    return LocalRuns(book, backend.owner.user, backend.release, env, backend.capabilities)


def ledger_backend(backend: Backend) -> LocalBackend | None:
    """``backend`` where it is the local one, whose ledger is embedded in this process (what
    ``dra-jupyter health --watch`` watches, what a run's launcher hears ring); None
    elsewhere (the service's daemon keeps its own, a cluster has none)."""
    from dra_jupyter.local.backend import LocalBackend  # noqa: PLC0415  # on use

    return backend if isinstance(backend, LocalBackend) else None


def open_health_watcher(backend: Backend, grace: float) -> Watching | None:
    """The machine's health watcher for ``backend``'s devices, started, where the backend
    does not watch them itself: the embedded ledger on NVML devices, when no other watcher
    runs for the ledger (:func:`dra_jupyter.local.watcher.watch_ledger`). None elsewhere:
    the service runs its own; simulated devices and a cluster have nothing to watch."""
    local = ledger_backend(backend)
    if local is None:
        return None
    from dra_jupyter.local.watcher import watch_ledger  # noqa: PLC0415  # NVML on use

    return watch_ledger(local, grace)


def runner_env(settings: Settings, kind: str, ledger: Path) -> dict[str, str]:
    """The environment of a run's launcher: this process's, with the session's settings
    spelled out (``dra.configure()`` changed them in this process only) and without the
    kernel's id (the run's claim is not the kernel's) or device variables (the launcher
    sets its claim's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "DRA_JUPYTER_KERNEL_ID"
        and not k.endswith("_VISIBLE_DEVICES")
        and k != "TPU_VISIBLE_CHIPS"
    }
    env.update(
        DRA_JUPYTER_BACKEND=kind,
        DRA_JUPYTER_LEDGER=str(ledger),
        DRA_JUPYTER_INVENTORY=settings.inventory,
        DRA_JUPYTER_STRATEGY=settings.strategy,
        DRA_JUPYTER_POLL_INTERVAL=str(settings.poll_interval),
        DRA_JUPYTER_SOCKET=str(settings.socket),
        DRA_JUPYTER_SERVICE_CONFIG=str(settings.service_config),
        DRA_JUPYTER_NAMESPACE=settings.namespace,
    )
    return env

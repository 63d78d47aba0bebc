"""Which backend a session gets: :func:`open_backend`, the one place that knows the kinds.

``local`` is :class:`~dra_jupyter.local.backend.LocalBackend` (this machine's devices, the
SQLite ledger); ``kubernetes`` is :class:`~dra_jupyter.kube.backend.KubernetesBackend`
(ResourceClaims in a namespace); ``service`` is
:class:`~dra_jupyter.service.client.ServiceBackend` (the machine's ``dra-jupyter service``,
over its Unix socket); ``auto`` is kubernetes in a pod with a service account, else
service when its socket answers, else local. Each is imported only when it is chosen: the
Kubernetes client loads only for the Kubernetes backend. What a backend offers is
:class:`dra_jupyter.types.Backend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.settings import Settings, resolve_backend

if TYPE_CHECKING:
    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.types import Backend, Owner


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
    )

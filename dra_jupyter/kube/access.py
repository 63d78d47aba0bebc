"""What the cluster operations (:mod:`.cluster`, :mod:`.runs`, :mod:`.reserve`) read of the
Kubernetes backend: its API client, namespace, owner and settings, the cluster's slices and
who holds devices. A protocol, so that they sit below :mod:`.backend`, which they serve."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.kube.watching import View
    from dra_jupyter.settings import Settings
    from dra_jupyter.types import ClaimRecord, Owner

T = TypeVar("T")


class ClusterAccess(Protocol):
    """One user's reach into one namespace of a cluster (a
    :class:`~dra_jupyter.kube.backend.KubernetesBackend` is one)."""

    owner: Owner
    namespace: str
    settings: Settings
    slices_readable: bool  # False: RBAC hides the slices

    @property
    def api(self) -> ApiClient:
        """The API client of the cluster."""

    def inventory(self, *, refresh: bool = False) -> Inventory:
        """The cluster's ResourceSlices, DeviceClasses and DeviceTaintRules (what allocates
        reads ``patched_slices``)."""

    def holders(self, *, cluster_wide: bool = False) -> list[ClaimRecord]:
        """Every claim that holds devices (in every namespace with ``cluster_wide``)."""

    def watched(self, kind: str) -> View | None:
        """The namespace's watched view of ``kind`` (``resourceclaims``, ``pods``, ``jobs``
        of dra-jupyter's labels: :mod:`.views`) while it is synced and well; None: read
        from the API server (a ``ClusterError`` while it is in error after it watched)."""

    def running(self, kind: str) -> View | None:
        """That view if one runs, well or not: what a write tells (read-your-writes)."""

    def retrying(self, call: Callable[[], T]) -> T:
        """``call``, retried while the API server cannot be reached."""

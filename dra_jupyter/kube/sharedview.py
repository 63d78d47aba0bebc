"""One view of the cluster's devices for a whole hub, and the client a user's server reads it
with (docs/jupyterhub.md, "One view of the devices per hub").

The hub's service (:mod:`dra_jupyter.hub.sharedview`) keeps the cluster's ResourceSlices,
DeviceClasses, DeviceTaintRules and every namespace's claims in the watched views of one
process (:mod:`.views`, :mod:`.watching`: listed once, then watched) and answers, per
caller, a :class:`SharedDevices`: per device shape the devices free, held, shared, blocked
and tainted (:class:`ShapeCount`), and the rows of the devices the caller's own claims hold.
A user's server configured with its URL (``c.DRAExtensionApp.shared_view_url``,
``$DRA_JUPYTER_SHARED_VIEW_URL``) asks it (:mod:`dra_jupyter.server.sharedcounts`: one GET
at :data:`DEVICES_PATH`, with the server's own hub token) instead of watching the cluster
itself, so it needs no RBAC on slices or on other namespaces' claims.

:class:`ClusterCounts` is the service's side: it answers from memory, made again only when
a view changed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TypedDict

from dra_jupyter.errors import UnavailableError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.kube.backend import KubernetesBackend
from dra_jupyter.kube.views import CLAIMS
from dra_jupyter.settings import Settings
from dra_jupyter.tables import DeviceRow, device_rows
from dra_jupyter.types import ClaimRecord, Owner
from dra_jupyter.types.shapes import ShapeCount

__all__ = [
    "DEVICES_PATH",
    "STATES",
    "ClusterCounts",
    "HeldRow",
    "ShapeCount",
    "SharedDevices",
    "shape_counts",
]

DEVICES_PATH = "api/devices"  # under the service's URL
POSSIBLE_PATH = "api/possible"  # a kernel's question (dra_jupyter.api.asked), there too
STATES = ("free", "held", "shared", "blocked", "tainted")  # a row's states (tables.device_rows)


class HeldRow(TypedDict):
    """A device the caller's claims hold: ``GET /dra/api/devices``'s row."""

    device: str
    kind: str
    model: str
    memory: str
    mig_profile: str
    node: str
    numa_node: str
    pcie_root: str
    state: str
    holder: str
    taints: str


class SharedDevices(TypedDict):
    """The shared view's answer to one user: what the cluster has, by shape, and what that
    user's claims hold."""

    inventory: str  # the cluster, in words
    user: str  # whom the hub said the token is of
    shapes: list[ShapeCount]
    held: list[HeldRow]


def shape_counts(rows: Sequence[DeviceRow]) -> list[ShapeCount]:
    """The rows counted per shape, by state, in the order shapes first appear."""
    counts: dict[tuple[str, str, str, str], ShapeCount] = {}
    for row in rows:
        key = (row.kind, row.model, row.memory, row.mig_profile)
        found = counts.get(key)
        if found is None:
            found = counts[key] = ShapeCount(
                kind=row.kind,
                model=row.model,
                memory=row.memory,
                mig_profile=row.mig_profile,
                total=0,
                free=0,
                held=0,
                shared=0,
                blocked=0,
                tainted=0,
            )
        found["total"] += 1
        if row.state in STATES:
            found[row.state] += 1  # type: ignore[literal-required]
    return list(counts.values())


class ClusterCounts:
    """The cluster's devices as one process keeps them by watching (a
    :class:`~dra_jupyter.kube.backend.KubernetesBackend` reader with ``watch``: its views are
    the process's, shared with every other reader of the same API client), answered per
    user from memory; the rows are made again only when a view changed."""

    def __init__(self, reader: KubernetesBackend) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        # made from the views at these versions: (versions, description, shapes, rows, held)
        self._made: (
            tuple[
                tuple[object, ...], str, list[ShapeCount], dict[str, DeviceRow], list[ClaimRecord]
            ]
            | None
        ) = None

    @classmethod
    def of_kubeconfig(cls, kubeconfig: str | None) -> ClusterCounts:
        """A reader of its own API client (``kubeconfig``; None: in-cluster, then
        ``$KUBECONFIG``) that watches; no owner, one try per read."""
        settings = Settings(
            ledger=Path("/nonexistent"), kubeconfig=kubeconfig, kube_retries=1, watch=True
        )
        return cls(KubernetesBackend(settings, Owner(user="", host="", pid=0)))

    def synced(self) -> tuple[tuple[object, ...], Inventory]:
        """The views' versions now (equal while nothing changed) and the inventory (the
        claims that hold devices: ``reader.holders()``); :class:`UnavailableError` while
        the views are not synced or in error."""
        views = self.reader.views
        inventory = views.inventory()
        claims = views.cluster(CLAIMS)
        if inventory is None or claims is None:
            raise UnavailableError(
                "the shared view's watches of the cluster are not synced (or in error: see "
                "the service's log)"
            )
        return (id(inventory), claims.resource_version), inventory

    def _current(
        self,
    ) -> tuple[str, list[ShapeCount], dict[str, DeviceRow], list[ClaimRecord]]:
        versions, inventory = self.synced()
        with self._lock:
            made = self._made
            if made is not None and made[0] == versions:
                return made[1], made[2], made[3], made[4]
        held = [c for c in self.reader.holders() if c.allocation]
        rows = device_rows(inventory.patched_slices, held)
        by_key = {r.device: r for r in rows}
        shapes = shape_counts(rows)
        with self._lock:
            self._made = (versions, inventory.description, shapes, by_key, held)
        return inventory.description, shapes, by_key, held

    def answer(self, user: str) -> SharedDevices:
        """What ``user`` is shown: the counts per shape, and the rows of the devices that
        ``user``'s claims (by the user in full, :data:`~dra_jupyter.types.USER_ANNOTATION`)
        hold; :class:`UnavailableError` while the views are not synced or in error."""
        description, shapes, rows, held = self._current()
        mine: list[HeldRow] = []
        for record in held:
            if record.owner.user != user:
                continue
            for key in record.device_keys:
                row = rows.get(key)
                if row is not None:
                    mine.append(HeldRow(**asdict(row)))  # type: ignore[typeddict-item]
        return SharedDevices(inventory=description, user=user, shapes=shapes, held=mine)

    def close(self) -> None:
        self.reader.close()

"""What a backend offers the Python API and the magics: :class:`Backend`.

Two backends implement it: :class:`~dra_jupyter.local.backend.LocalBackend` (this machine,
the SQLite ledger, the embedded allocator) and
:class:`~dra_jupyter.kube.backend.KubernetesBackend` (ResourceClaims in a namespace, allocated
by kube-scheduler when a pod uses them). Claims travel as
:class:`~dra_jupyter.local.ledger.ClaimRecord`: the ResourceClaim and its ``status.allocation``
(empty while a Kubernetes claim waits for a pod).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from dra_jupyter.allocator import Allocator
    from dra_jupyter.local.backend import Waiting
    from dra_jupyter.local.ledger import ClaimRecord

Wire = dict[str, Any]


class Backend(Protocol):
    def check_possible(self, claim: Wire) -> None:
        """Raise AllocationError when the claim could never be met on these devices."""

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: Callable[[Waiting], None] | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        """Make the claim (the local backend allocates it at once, or waits in line)."""

    def release(self, name: str) -> bool:
        """Give the claim back; False when it was gone already."""

    def claims(self, *, all_users: bool = False) -> list[ClaimRecord]:
        """This user's live claims (everyone's with ``all_users``)."""

    def allocator(self, held: list[ClaimRecord]) -> Allocator:
        """The embedded allocator over these devices, with ``held`` taken (for explain)."""

    def state(self, name: str) -> str:
        """``allocated``, ``pending``, ``reserved``, ``released``, or ``deleted`` (gone, not
        by this process's release)."""

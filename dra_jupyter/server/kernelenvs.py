"""Which claims' devices a kernel of this server has in its environment, for its claim
cards (``in_kernel_env``): a restart with the devices is offered only where it would give
them. A kernel has them when it made the claim itself (``dra.request`` sets them in the
kernel's own process; the claims the server holds for a kernel carry the server's pid) or
was restarted with the claim (``restart-with-claims``, :meth:`KernelEnvs.restarted_with`).
"""

from __future__ import annotations

from dra_jupyter.types import ClaimRecord


class KernelEnvs:
    """What kernels were restarted with, and the test of a claim, for one server."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._restarted_with: dict[str, frozenset[str]] = {}  # kernel -> claims

    def restarted_with(self, kernel_id: str, records: list[ClaimRecord]) -> None:
        """The kernel was restarted with these claims' devices in its environment."""
        self._restarted_with[kernel_id] = frozenset(r.name for r in records)

    def has(self, record: ClaimRecord) -> bool:
        """Whether the claim's kernel has its devices in its environment."""
        kernel_id = record.owner.kernel_id
        if kernel_id is None:
            return False
        made_by_kernel = record.owner.pid != self.server_pid
        return made_by_kernel or record.name in self._restarted_with.get(kernel_id, ())

"""``%%dra gpu=1``: run a cell with devices held for exactly as long as the cell runs.

The claim is made before the cell runs (under a name chosen here, so that it can be
released even when an interrupt lands while it is being made), its devices join the
process's environment for the cell (:mod:`dra_jupyter.kernel.environment`) and leave it after,
and the claim is released after the cell whatever happens: success, an exception,
``KeyboardInterrupt`` — and an interrupt during the release itself does not stop the
release.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dra_jupyter.errors import ClaimNotFoundError, MagicError
from dra_jupyter.types import claim_prefix

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionResult

    from dra_jupyter.api import Claim, Session


def cell_claim_name(session: Session) -> str:
    """``<user>-cell-<6 hex>``: says where the claim comes from, and is known in advance."""
    return f"{claim_prefix(session.owner.user)}-cell-{secrets.token_hex(3)}"


def release_surely(session: Session, name: str) -> None:
    """Release ``name`` (if it exists) and take its devices out of the environment; a
    second interrupt must not leave it held."""
    while True:
        try:
            session.release(name)
            return
        except ClaimNotFoundError:  # released meanwhile (the card's button, say)
            return
        except KeyboardInterrupt:
            continue


@contextmanager
def held_for_cell(session: Session, spec: Mapping[str, Any]) -> Iterator[Claim]:
    """Hold a claim for the duration of the ``with`` block, its environment applied."""
    caps = session.backend.capabilities
    if not caps.devices_here:  # a pending claim no pod uses would give this cell nothing
        raise MagicError(
            f"%%dra: on {caps.where} the devices go to pods, not to this kernel; "
            "%%dra run KEY=VALUE runs the cell's code in a pod with them"
        )
    options = dict(spec)
    name = str(options.pop("name", "") or cell_claim_name(session))
    # a claim of that name held before this cell is the user's, never this cell's to release
    # (the request fails on it); one made here is released even if an interrupt lands
    # while it is being made, before request() returns
    existed = any(r.name == name for r in session.backend.claims(all_users=True))
    try:
        claim = session.request(name=name, apply_env=False, **options)
        existed = False
        for note in claim.apply_env():
            print(f"dra: {note}", file=sys.stderr)
        yield claim
    finally:
        if not existed:
            release_surely(session, name)


def needs_await(shell: Any, cell: str) -> bool:
    """Whether IPython would run ``cell`` as a coroutine (top-level ``await``)."""
    try:
        transformed = shell.transform_cell(cell)
    except Exception:  # the cell's own run reports its syntax
        return False
    return bool(shell.should_run_async(cell, transformed_cell=transformed))


def run_with_claim(shell: Any, session: Session, spec: Mapping[str, Any], cell: str) -> None:
    """Run ``cell`` as IPython runs any cell (its output, its traceback), holding the claim.

    When the cell fails the claim is already released; a one-line error then marks this
    cell as failed too, so "Run all" and nbclient stop as they would without ``%%dra``.
    """
    if needs_await(shell, cell):
        keywords = ", ".join(f"{k}={v!r}" for k, v in spec.items())
        raise MagicError(
            "%%dra: this cell uses top-level await, which IPython cannot run under a cell "
            f"magic; hold the devices inside the cell: with dra.request({keywords}) as claim: ..."
        )
    result: ExecutionResult | None = None
    with held_for_cell(session, spec) as claim:
        result = shell.run_cell(cell, store_history=False)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        what = (
            "was interrupted"
            if isinstance(error, KeyboardInterrupt)
            else f"raised {type(error).__name__}"
        )
        raise MagicError(f"%%dra: the cell {what}; claim {claim.name} was released")

"""The default session behind :mod:`dra_jupyter`'s functions and the magics, and
``dra.configure`` to start a new one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dra_jupyter.allocator import STRATEGIES
from dra_jupyter.api.session import Session
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.settings import BACKENDS, Settings


class _Default:
    """The session behind the module-level functions; made on first use."""

    session: Session | None = None


def default_session() -> Session:
    """The session of :mod:`dra_jupyter`'s functions and the magics (made on first use)."""
    if _Default.session is None:
        _Default.session = Session()
    return _Default.session


def configure(
    *,
    inventory: str | Inventory | None = None,
    ledger: str | Path | None = None,
    strategy: str | None = None,
    backend: str | None = None,
    namespace: str | None = None,
    rerun_releases: bool | None = None,
) -> Session:
    """Start a new default session: another inventory (a name, a file, ``nvml``, or an
    :class:`Inventory`), ledger file, strategy, backend (``local``, ``kubernetes``,
    ``auto``) or namespace; ``rerun_releases=False`` keeps the claims of a notebook cell's
    previous run when it runs again (by default they are released first). Claims already
    made stay where they are."""
    settings = Settings.from_env()
    if backend is not None:
        if backend not in BACKENDS:
            raise InvalidInputError(f"backend {backend!r} is not known; use {BACKENDS}")
        settings = replace(settings, backend=backend)
    if namespace is not None:
        settings = replace(settings, namespace=namespace)
    if rerun_releases is not None:
        settings = replace(settings, rerun_releases=bool(rerun_releases))
    if isinstance(inventory, str):
        settings = replace(settings, inventory=inventory)
    if ledger is not None:
        settings = replace(settings, ledger=Path(ledger))
    if strategy is not None:
        if strategy not in STRATEGIES:
            raise InvalidInputError(f"strategy {strategy!r} is not known; use {STRATEGIES}")
        settings = replace(settings, strategy=strategy)
    _Default.session = Session(
        settings, inventory=inventory if isinstance(inventory, Inventory) else None
    )
    return _Default.session

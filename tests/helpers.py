"""Small helpers shared by test modules."""

from __future__ import annotations

from dra_jupyter.api import Session
from dra_jupyter.local.backend import LocalBackend


def local(session: Session) -> LocalBackend:
    """The session's local backend (its clock, sleep and ledger are the tests' to set)."""
    backend = session.backend
    assert isinstance(backend, LocalBackend), type(backend)
    return backend

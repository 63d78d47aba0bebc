"""The device environment of this process: always the union of what it holds.

``CUDA_VISIBLE_DEVICES`` and friends (:mod:`dra_jupyter.envvars`) name the devices of every
claim this process holds with ``apply_env`` (in request order), recomputed on each request
and release: a second request adds its devices instead of replacing the first's, a
release takes only its own away, and when nothing is held any more each variable is what
it was before the first claim set it (or unset). A claim released elsewhere (the card's
button, the server's idle release, a lease) leaves the environment at the next
:meth:`ProcessEnvironment.sync`, which the API runs before each request and ``%dra env``
runs before it reports, and a kernel runs before each cell.

One per process (:meth:`ProcessEnvironment.of_process`): the environment is the
process's, whichever session made the claims.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, ClassVar

from dra_jupyter.envvars import environment_for

if TYPE_CHECKING:
    from dra_jupyter.api import Claim, Session


class ProcessEnvironment:
    """The claims whose devices this process's environment names (see the module doc)."""

    _process: ClassVar[ProcessEnvironment | None] = None

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.claims: list[Claim] = []  # in request order
        self.saved: dict[str, str | None] = {}  # a variable's value before we set it

    @classmethod
    def of_process(cls) -> ProcessEnvironment:
        if cls._process is None:
            cls._process = cls()
        return cls._process

    def hold(self, claim: Claim) -> None:
        """Add the claim's devices to the environment."""
        if all(c is not claim for c in self.claims):
            self.claims.append(claim)
        self.apply()

    def drop(self, claim: Claim) -> None:
        """Take the claim's devices out of the environment."""
        kept = [c for c in self.claims if c is not claim]
        if len(kept) != len(self.claims):
            self.claims = kept
            self.apply()

    def drop_names(self, session: Session, names: set[str]) -> None:
        """Take out the session's claims of these names (released by name)."""
        kept = [c for c in self.claims if c._session is not session or c.name not in names]
        if len(kept) != len(self.claims):
            self.claims = kept
            self.apply()

    def sync(self) -> None:
        """Drop the claims that were released elsewhere (asks each held claim its state)."""
        kept = [c for c in self.claims if c.state != "released"]
        if len(kept) != len(self.claims):
            self.claims = kept
            self.apply()

    def wanted(self) -> dict[str, str]:
        """The variables that the held claims' devices make, joined in request order."""
        joined: dict[str, list[str]] = {}
        for claim in self.claims:
            results = claim.allocation.get("devices", {}).get("results", [])
            env = environment_for(results, claim._session.inventory.slices).env
            for key, value in env.items():
                items = joined.setdefault(key, [])
                items.extend(v for v in value.split(",") if v not in items)
        return {key: ",".join(values) for key, values in joined.items()}

    def apply(self) -> None:
        """Set :meth:`wanted` in the environment; put back what a variable no claim makes
        any more was before the first claim set it."""
        wanted = self.wanted()
        for key, value in wanted.items():
            if key not in self.saved:
                self.saved[key] = self.environ.get(key)
            self.environ[key] = value
        for key in [k for k in self.saved if k not in wanted]:
            before = self.saved.pop(key)
            if before is None:
                self.environ.pop(key, None)
            else:
                self.environ[key] = before

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
import threading
from collections.abc import Iterable, MutableMapping, Sequence
from typing import ClassVar, Protocol


class Named(Protocol):
    @property
    def name(self) -> str: ...


class LiveClaims(Protocol):
    """Where claims live (a :class:`~dra_jupyter.types.Backend` is one)."""

    def claims(self, *, all_users: bool = False) -> Sequence[Named]:
        """The live claims (everyone's with ``all_users``)."""


class Claim(Protocol):
    """A claim whose devices the environment names (:class:`dra_jupyter.api.Claim` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def env(self) -> dict[str, str]:
        """The variables that make its devices visible."""

    @property
    def backend(self) -> LiveClaims:
        """Where it lives: one read there says which claims are still live."""

    def released_elsewhere(self) -> None:
        """It was released by someone else: it says so from now on."""


class ProcessEnvironment:
    """The claims whose devices this process's environment names (see the module doc)."""

    _process: ClassVar[ProcessEnvironment | None] = None

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.claims: list[Claim] = []  # in request order
        self.saved: dict[str, str | None] = {}  # a variable's value before we set it
        self.adopted = False  # a restarted kernel's claims were taken in (adopt)
        self.runtime_noted = False  # said that CUDA (or ROCm, TPU) was loaded already
        # request() may run on other threads than a kernel's cells (and their sync)
        self._lock = threading.RLock()

    @classmethod
    def of_process(cls) -> ProcessEnvironment:
        if cls._process is None:
            cls._process = cls()
        return cls._process

    def hold(self, claim: Claim) -> None:
        """Add the claim's devices to the environment."""
        with self._lock:
            if all(c is not claim for c in self.claims):
                self.claims.append(claim)
            self.apply()

    def adopt(self, claims: Iterable[Claim]) -> None:
        """Take in the claims a restarted kernel started with (restart-with-claims puts
        their variables in its environment): held, and their variables were not there
        before them, so they go when the claims do."""
        with self._lock:
            self.adopted = True
            new = [c for c in claims if all(c is not held for held in self.claims)]
            if not new:
                return
            self.claims.extend(new)
            for key, value in self.wanted().items():
                if key not in self.saved and self.environ.get(key) == value:
                    self.saved[key] = None
            self.apply()

    def drop(self, claim: Claim) -> None:
        """Take the claim's devices out of the environment, and those of every held claim
        released meanwhile (by name, through another :class:`Claim` object, elsewhere)."""
        with self._lock:
            self.claims = [c for c in self.claims if c is not claim]
            self.sync()

    def sync(self) -> None:
        """Drop the claims that were released elsewhere: one read of each backend's live
        claims (the ledger's, in one transaction), not one per claim."""
        with self._lock:
            live: dict[int, set[str]] = {}
            for claim in self.claims:
                backend = claim.backend
                if id(backend) not in live:
                    live[id(backend)] = {r.name for r in backend.claims(all_users=True)}
            kept = [c for c in self.claims if c.name in live[id(c.backend)]]
            for gone in self.claims:
                if gone not in kept:
                    gone.released_elsewhere()
            self.claims = kept
            self.apply()

    def wanted(self) -> dict[str, str]:
        """The variables that the held claims' devices make, joined in request order."""
        joined: dict[str, list[str]] = {}
        for claim in self.claims:
            for key, value in claim.env.items():
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

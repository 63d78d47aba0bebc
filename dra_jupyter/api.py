"""The Python API: ``dra.request(gpu=2)``, ``dra.devices()``, ``dra.claims()``.

A :class:`Session` ties settings, an inventory, the ledger and the local backend
together; the module-level functions of :mod:`dra_jupyter` use one default session,
made on first use (importing the package does nothing).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from dra_jupyter.allocator import STRATEGIES, Explanation
from dra_jupyter.claimspec import build_claim
from dra_jupyter.durations import format_duration, parse_duration
from dra_jupyter.envvars import accelerator_runtime_loaded, environment_for
from dra_jupyter.errors import (
    AllocationError,
    DraJupyterError,
    DraJupyterWarning,
    InvalidInputError,
    ObjectError,
)
from dra_jupyter.hints import impossible_hint
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend, Waiting
from dra_jupyter.local.ledger import ClaimRecord, Ledger
from dra_jupyter.local.owners import Owner
from dra_jupyter.settings import Settings
from dra_jupyter.tables import (
    CLAIM_COLUMNS,
    DEVICE_COLUMNS,
    ClaimRow,
    DeviceRow,
    Table,
    claim_rows,
    device_rows,
)

KERNEL_ID_ENV = "DRA_JUPYTER_KERNEL_ID"


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package."""
    package = str(Path(__file__).parent)
    frame = inspect.currentframe()
    level = 0
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return max(level, 1)


class _QueueReporter:
    """Says on stderr where a waiting request stands, each time its place changes."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.what = ", ".join(f"{k}={v!r}" for k, v in spec.items()) or "devices"
        self.last: int | None = None

    def __call__(self, waiting: Waiting) -> None:
        if waiting.position == self.last:
            return
        self.last = waiting.position
        limit = f" of {format_duration(waiting.timeout)}" if waiting.timeout else ""
        place = "next in line" if waiting.position == 1 else f"number {waiting.position} in line"
        print(
            f"dra: waiting for {self.what}: {place} "
            f"({format_duration(waiting.waited)}{limit} so far)",
            file=sys.stderr,
        )


class Claim:
    """Devices held for you. Use ``.env``, ``.devices``; give them back with ``.release()``
    (or use the claim as a context manager)."""

    def __init__(self, session: Session, record: ClaimRecord) -> None:
        self._session = session
        self._record = record
        self._released = False
        self.notes: list[str] = []

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def state(self) -> str:
        """``allocated`` while held, ``released`` once given back (by you or by the system)."""
        if self._released:
            return "released"
        alive = any(r.name == self.name for r in self._session.backend.claims(all_users=True))
        if not alive:
            self._released = True
        return "allocated" if alive else "released"

    @property
    def allocation(self) -> dict[str, Any]:
        return self._record.allocation

    @property
    def devices(self) -> Table[DeviceRow]:
        mine = {
            f"{r['driver']}/{r['pool']}/{r['device']}"
            for r in self.allocation.get("devices", {}).get("results", [])
        }
        rows = [
            r
            for r in device_rows(self._session.inventory.slices, [self._record])
            if r.device in mine
        ]
        return Table(rows, DEVICE_COLUMNS, title=f"claim {self.name}")

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that make these devices visible to CUDA, ROCm or TPU."""
        results = self.allocation.get("devices", {}).get("results", [])
        return environment_for(results, self._session.inventory.slices).env

    def apply_env(self, environ: dict[str, str] | None = None) -> list[str]:
        """Set :attr:`env` in this process; returns what the user should know."""
        target = os.environ if environ is None else environ
        found = environment_for(
            self.allocation.get("devices", {}).get("results", []), self._session.inventory.slices
        )
        notes = []
        if found.missing:
            notes.append(
                f"claim {self.name}: no runtime identity for {', '.join(found.missing)} "
                f"({'simulated inventory' if self._session.inventory.simulated else 'not created'})"
            )
        runtime = accelerator_runtime_loaded()
        if runtime and found.env:
            notes.append(
                f"claim {self.name}: {runtime} is already loaded in this process, so the new "
                "device environment may not take effect; restart the kernel with the claim "
                "(or start a fresh process with claim.env)"
            )
        target.update(found.env)
        return notes

    def explain(self) -> Explanation:
        """Whether this claim's request could be met now, and if not why (per device stage)."""
        others = [r for r in self._session.backend.claims(all_users=True) if r.name != self.name]
        return self._session.backend.allocator(others).explain([self._record.spec])

    def release(self) -> bool:
        """Give the devices back; False if they were released already."""
        if self._released:
            return False
        self._released = True
        return self._session.backend.release(self.name)

    def to_dict(self) -> dict[str, Any]:
        """The ResourceClaim, with ``status.allocation``."""
        return self._record.to_object()

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        devices = ", ".join(
            r["device"] for r in self.allocation.get("devices", {}).get("results", [])
        )
        return f"<Claim {self.name}: {devices} ({'released' if self._released else 'held'})>"


class Session:
    """Settings, inventory, ledger and backend for one user (and optionally one kernel)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        inventory: Inventory | None = None,
        owner: Owner | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self._inventory = inventory
        self.owner = owner or Owner.current(kernel_id=os.environ.get(KERNEL_ID_ENV) or None)

    @cached_property
    def inventory(self) -> Inventory:
        return self._inventory or resolve_inventory(self.settings.inventory)

    @cached_property
    def backend(self) -> LocalBackend:
        return LocalBackend(
            self.inventory,
            Ledger(self.settings.ledger),
            self.owner,
            strategy=self.settings.strategy,
            poll_interval=self.settings.poll_interval,
        )

    def class_names(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.inventory.device_classes]

    def build(self, spec: Mapping[str, Any], name: str = "") -> dict[str, Any]:
        labels = {"dra-jupyter/user": self.owner.user[:63]}
        if self.owner.kernel_id:
            labels["dra-jupyter/kernel"] = self.owner.kernel_id[:63]
        return build_claim(
            name,
            spec,
            namespace=self.settings.namespace,
            classes=self.class_names(),
            labels=labels,
        )

    def request(
        self,
        *,
        timeout: str | float | None = 0,
        lease: str | float | None = None,
        name: str = "",
        apply_env: bool = True,
        on_wait: Callable[[Waiting], None] | None = None,
        **spec: Any,
    ) -> Claim:
        """Get devices now (``timeout=0``), or wait for them up to ``timeout`` ('5m')."""
        wait = parse_duration(timeout, what="timeout")
        lease_s = parse_duration(lease, what="lease")
        claim = self.build(spec, name)
        try:
            self.backend.check_possible(claim)
        except (AllocationError, ObjectError) as err:
            # ObjectError: the inventory lacks the DeviceClass (a TPU asked of a GPU machine)
            hint = impossible_hint(spec, self.inventory)
            if hint is None:
                raise
            explanation = err.explanation if isinstance(err, AllocationError) else None
            raise AllocationError(f"dra.request: {hint}", explanation) from None
        if on_wait is None and wait != 0:
            on_wait = _QueueReporter(spec)
        record = self.backend.allocate(
            claim, timeout=wait, lease=lease_s, on_wait=on_wait, checked=True
        )
        result = Claim(self, record)
        if apply_env:
            result.notes = result.apply_env()
            for note in result.notes:
                warnings.warn(note, DraJupyterWarning, stacklevel=_caller_level())
        return result

    def devices(self) -> Table[DeviceRow]:
        held = self.backend.claims(all_users=True)
        inv = self.inventory
        title = f"{inv.description}" + (" (SIMULATED)" if inv.simulated else "")
        return Table(device_rows(inv.slices, held), DEVICE_COLUMNS, title=title)

    def claims(self, *, all_users: bool = False) -> Table[ClaimRow]:
        return Table(claim_rows(self.backend.claims(all_users=all_users)), CLAIM_COLUMNS)

    def claim(self, name: str) -> Claim:
        for record in self.backend.claims(all_users=True):
            if record.name == name:
                return Claim(self, record)
        raise DraJupyterError(f"claim {name} does not exist (it may have been released)")

    def release(self, name: str) -> bool:
        return self.backend.release(name)

    def release_all(self) -> list[str]:
        """Release every claim of this user; returns their names."""
        names = [r.name for r in self.backend.claims()]
        for name in names:
            self.backend.release(name)
        return names


class _Default:
    """The session behind the module-level functions; made on first use."""

    session: Session | None = None


def default_session() -> Session:
    if _Default.session is None:
        _Default.session = Session()
    return _Default.session


def configure(
    *,
    inventory: str | Inventory | None = None,
    ledger: str | Path | None = None,
    strategy: str | None = None,
) -> Session:
    """Start a new default session: another inventory (a name, a file, ``nvml``, or an
    :class:`Inventory`), ledger file or strategy. Claims already made stay in their ledger."""
    settings = Settings.from_env()
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

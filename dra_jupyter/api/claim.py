"""A claim as its user holds it (:class:`Claim`), and how a session shows its claims
(:class:`ClaimView`: :class:`TextView` here; the notebook's cards in
:mod:`dra_jupyter.widgets.notebook`)."""

from __future__ import annotations

import math
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import yaml

from dra_jupyter.allocator import Explanation
from dra_jupyter.api.requestnotes import QueueReporter
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.kernel.environment import (
    ProcessEnvironment,
    accelerator_runtime_loaded,
    environment_for,
)
from dra_jupyter.tables import DEVICE_COLUMNS, DeviceRow, Table, device_rows
from dra_jupyter.types import Backend, ClaimRecord, Waiting

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.api.session import Session


class WaitReporter(Protocol):
    """Told where a waiting request stands (``on_wait``), then how the wait ended."""

    def __call__(self, waiting: Waiting) -> None: ...

    def allocated(self, claim: Claim) -> None: ...

    def failed(self, message: str) -> None: ...


class ClaimView(Protocol):
    """How a session shows its claims: :class:`TextView` here; the notebook's
    (:class:`dra_jupyter.widgets.notebook.NotebookView`) shows cards."""

    def reporter(self, what: str, simulated: bool) -> WaitReporter:
        """The reporter of a request that may wait (``what``: the request as typed)."""

    def mimebundle(self, claim: Claim) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """What a notebook displays for the claim."""

    def changed(self, claim: Claim) -> None:
        """The claim changed in this process (released): update what shows it."""

    def card(self, claim: Claim) -> Any:
        """The claim's card widget (one per claim: the one shown while it waited)."""

    def origin(self) -> tuple[str, str] | None:
        """The notebook cell that makes a request now, ``(cell id, id of this run)``,
        where the view knows it (a kernel's; else None)."""


class TextView:
    """Claims as text; a waiting request says where it stands on stderr."""

    def reporter(self, what: str, simulated: bool) -> WaitReporter:
        return QueueReporter(what)

    def mimebundle(self, claim: Claim) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        return {"text/plain": repr(claim)}

    def changed(self, claim: Claim) -> None:
        return None

    def card(self, claim: Claim) -> Any:
        raise InvalidInputError(
            f"claim {claim.name}: a card is a notebook widget; in a kernel, "
            "dra.claim(name).card() or display(claim) shows it"
        )

    def origin(self) -> tuple[str, str] | None:
        return None


class _Cells:
    """The claims each notebook cell made in its latest run (this process's, whichever
    session made them): ``cell id -> (run id, claims)``."""

    made: ClassVar[dict[str, tuple[str, list[Claim]]]] = {}


def release_previous_run(cell: str, run: str) -> None:
    """A cell runs again: release the claims its previous run made (and this process
    still holds), before its new requests; several requests of one run all stay."""
    previous_run, claims = _Cells.made.get(cell, (run, []))
    if previous_run == run:
        _Cells.made.setdefault(cell, (run, claims))
        return
    _Cells.made[cell] = (run, [])
    released = [c.name for c in claims if c.state != "released" and c.release()]
    if released:
        print(
            f"dra: released {', '.join(released)}, made when this cell ran before "
            "(dra.configure(rerun_releases=False) keeps them)"
        )  # information, on stdout: a notebook shows stderr as an error


class Claim:
    """Devices held for you. Use ``.env``, ``.devices``; give them back with ``.release()``
    (or use the claim as a context manager)."""

    def __init__(self, session: Session, record: ClaimRecord) -> None:
        self._session = session
        self._record = record
        self._released = False
        self.view: Any = None  # what the session's ClaimView keeps for this claim (its card)
        self.notes: list[str] = []

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def record(self) -> ClaimRecord:
        """The claim as its backend keeps it (its allocation, owner, times)."""
        return self._record

    @property
    def state(self) -> str:
        """``allocated`` while held, ``released`` once given back (by you or by the system).
        Kubernetes: ``pending`` until a pod uses it, ``allocated`` once kube-scheduler has
        chosen its devices, ``reserved`` while a pod holds it."""
        if self._released:
            return "released"
        state = self._session.backend.state(self.name)
        if state in ("released", "deleted"):
            self._released = True
            if state == "deleted":
                self.notes.append(
                    f"claim {self.name} was deleted in namespace {self._record.namespace} by "
                    "someone else; its devices are no longer yours: request them again"
                )
            return "released"
        return state

    @property
    def allocation(self) -> dict[str, Any]:
        """``status.allocation`` (Kubernetes: empty until kube-scheduler allocates it for a
        pod; read again from the cluster until then)."""
        backend = self._session.backend
        if (
            backend.capabilities.allocates_later
            and not self._released
            and not self._record.allocation
        ):
            self._record = backend.record(self.name) or self._record
        return self._record.allocation

    @property
    def devices(self) -> Table[DeviceRow]:
        """This claim's devices; once it is released, their state now (free, or whoever
        holds them since), never a stale holder."""
        self.allocation  # noqa: B018  # a pending claim's record is read again
        mine = set(self._record.device_keys)
        released = self.state == "released"
        rows = []
        if mine:  # a pending claim has none: the cluster is not read for it
            held = self._session.backend.holders() if released else [self._record]
            inventory = self._session.inventory
            rows = [r for r in device_rows(inventory.patched_slices, held) if r.device in mine]
        title = f"claim {self.name}" + (" (released: the devices' state now)" if released else "")
        return Table(rows, DEVICE_COLUMNS, title=title)

    @property
    def backend(self) -> Backend:
        """Where the claim lives: its session's backend."""
        return self._session.backend

    def released_elsewhere(self) -> None:
        """Released by someone else (the server's idle release, another process): it says
        ``released`` from now on without asking the backend."""
        self._released = True

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that make these devices visible to CUDA, ROCm or TPU."""
        results = self.allocation.get("devices", {}).get("results", [])
        inventory = self._session.inventory
        return environment_for(results, inventory.slices, simulated=inventory.simulated).env

    def apply_env(self, environ: dict[str, str] | None = None) -> list[str]:
        """Add :attr:`env` to this process's environment, which then names the devices of
        every claim it holds (:mod:`dra_jupyter.kernel.environment`), or set it in ``environ``;
        returns what the user should know."""
        inventory = self._session.inventory
        found = environment_for(
            self.allocation.get("devices", {}).get("results", []),
            inventory.slices,
            simulated=inventory.simulated,
        )
        notes = []
        if found.missing:
            notes.append(
                f"claim {self.name}: {', '.join(found.missing)} has no identity a runtime can "
                "use yet (a MIG partition the driver has not created), so the environment "
                "leaves it out"
            )
        process = ProcessEnvironment.of_process()
        runtime = None  # asked where it matters: this process's environment, not yet said
        if environ is None and not process.runtime_noted and found.env:
            runtime = accelerator_runtime_loaded()
        if runtime:
            process.runtime_noted = True  # said once per process: it holds for every claim
            notes.append(
                f"claim {self.name}: {runtime} is already loaded in this process, so changes "
                "of its device environment (CUDA_VISIBLE_DEVICES and friends) apply to the "
                "processes it starts from now on, not to itself; to use the devices here, "
                "restart the kernel with its claims (the claim card's Restart kernel with "
                "these devices), or start a fresh process with claim.env"
            )
        if environ is None:
            process.hold(self)
        else:
            environ.update(found.env)
        return notes

    def explain(self) -> Explanation:
        """Whether this claim's request could be met now, and if not why (per device stage)."""
        held = self._session.backend.holders()
        me = (self._record.namespace, self.name)
        others = [r for r in held if (r.namespace, r.name) != me]
        return self._session.backend.allocator(others).explain([self._record.spec])

    def release(self) -> bool:
        """Give the devices back; False if they were released already."""
        if self._released:
            return False
        released = self._session.backend.release(self.name)  # refused: still held
        self._released = True
        ProcessEnvironment.of_process().drop(self)
        self._session.view.changed(self)  # its card says so at once
        return released

    def history(self) -> pd.DataFrame:
        """Utilisation, memory and temperature of this claim's devices since it was made
        (one row per device and time; ``simulated`` says whether the values are made up)."""
        end = math.inf
        if self.state == "released":
            ended = self._session.backend.released_at(self.name)
            end = time.time() if ended is None else ended
        keys = self._record.device_keys
        return self._session.history(
            keys, since=self._record.created, held={k: [(self._record.created, end)] for k in keys}
        )

    def card(self) -> Any:
        """This claim's card widget, in a notebook (the one shown while it waited)."""
        return self._session.view.card(self)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """What the session's view shows: in a notebook the claim card (unless the cell
        that made the claim shows it already), elsewhere text."""
        return self._session.view.mimebundle(self)

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

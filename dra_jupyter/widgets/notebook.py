"""Claims in a notebook: the card while a request waits and after, as the session's view.

:func:`notebook_session` is the default session with :class:`NotebookView` when this
process is a kernel: ``dra.request()`` and the magics use it, so a request that waits
shows a card in its cell, and a claim displays as its card. Widgets are updated only from
the kernel's main thread (ipykernel 7 loses widget messages sent from other threads);
from any other thread, and outside a kernel, claims are text, as
:class:`dra_jupyter.api.TextView` shows them.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, ClassVar

from dra_jupyter.api import Claim, Session, TextView, WaitReporter, default_session
from dra_jupyter.errors import DraJupyterError, DraJupyterWarning
from dra_jupyter.kernel.environment import ProcessEnvironment
from dra_jupyter.kernel.info import current_cell, execution_count, in_kernel
from dra_jupyter.outofservice import Told, message, unhealthy
from dra_jupyter.settings import Settings
from dra_jupyter.types import ClaimRecord, DeviceTaint, reclaiming_of, tainting_of
from dra_jupyter.widgets.card import CardReporter, CardView, ClaimCard


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class NotebookView(TextView):
    """Cards for claims in a kernel (see the module docstring)."""

    def reporter(self, what: str, simulated: bool) -> WaitReporter:
        if in_kernel() and _main_thread():
            return CardReporter(what, simulated)
        return super().reporter(what, simulated)

    def card(self, claim: Claim) -> ClaimCard:
        """The claim's card: the one shown while it waited, else a new one."""
        view = claim.view
        if isinstance(view, CardView):
            view.card.refresh()
            return view.card
        card = ClaimCard(claim)
        claim.view = CardView(card)
        return card

    def mimebundle(self, claim: Claim) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """The claim card, unless the cell that made the claim shows it already (it waited
        there); outside a kernel, text."""
        view = claim.view
        shown_here = isinstance(view, CardView) and view.cell == execution_count()
        if not in_kernel() or (shown_here and view.cell is not None):
            return super().mimebundle(claim)
        bundle = self.card(claim)._repr_mimebundle_()
        if bundle is None:
            return super().mimebundle(claim)
        data, metadata = bundle
        return {**data, "text/plain": repr(claim)}, metadata

    def origin(self) -> tuple[str, str] | None:
        """The cell whose run makes a request, from its execute request (``cellId``)."""
        return current_cell()

    def changed(self, claim: Claim) -> None:
        view = claim.view
        if isinstance(view, CardView) and _main_thread():
            view.card.refresh()  # its card says so at once


def notebook_session() -> Session:
    """The default session, shown through :class:`NotebookView` (cards in a kernel). In a
    kernel, each cell first takes the devices of claims released elsewhere (the server's
    idle release, a lease, the card of another view) out of the process's environment, and
    a kernel restarted with its claims holds them from its first call on."""
    session = default_session()
    if not isinstance(session.view, NotebookView):
        session.view = NotebookView()
    if in_kernel():
        _adopt_kernel_claims(session)
        _sync_before_each_cell()
    return session


class _Problems:
    """The last problem the per-cell sync met, said once (not before every cell); the
    devices taken out of service said already."""

    last = ""
    told = Told()
    warned: ClassVar[set[tuple[str, float]]] = set()  # reclaim warnings said: (claim, when)


# what a kernel's user can do about a device taken out of service, from the notebook
IN_KERNEL = (
    "In JupyterLab: Move (an equivalent device, the kernel restarted on it); here: "
    "dra.release('{claim}') and request again"
)


def _sync_environment(info: Any = None) -> None:
    try:
        ProcessEnvironment.of_process().sync()
        environment = ProcessEnvironment.of_process()
        for line in taken_out_lines(environment, _Problems.told):
            print(line, flush=True)  # before the cell's own output, once
        if environment.claims:
            for line in reclaim_lines(environment, _Problems.warned):
                print(line, flush=True)
    except DraJupyterError as err:  # e.g. the ledger is busy or gone: the cell still runs
        if str(err) != _Problems.last:
            _Problems.last = str(err)
            warnings.warn(f"dra: {err}", DraJupyterWarning, stacklevel=1)
    else:
        _Problems.last = ""


def taken_out_lines(environment: ProcessEnvironment, told: Told) -> list[str]:
    """What to say, once, of the devices of this process's claims that were taken out of
    service since (:mod:`dra_jupyter.outofservice`): one read of each backend's taints."""
    by_backend: dict[int, tuple[Any, list[ClaimRecord]]] = {}
    for claim in environment.claims:
        if not isinstance(claim, Claim):
            continue
        held = by_backend.setdefault(id(claim.backend), (claim.backend, []))
        held[1].append(claim.record)
    events = []
    for backend, records in by_backend.values():
        tainting = tainting_of(backend)
        if tainting is not None:
            # this machine's grace, as its Jupyter server's (None: a cluster evicts pods)
            here = backend.capabilities.devices_here
            grace = Settings.from_env().health_grace if here else None
            events += unhealthy_events_said(records, tainting.taints(), grace)
    return [f"dra: {e['message']}" for e in told.new(events)]


def reclaim_lines(environment: ProcessEnvironment, told: set[tuple[str, float]]) -> list[str]:
    """What to say, once per warning, of this process's claims that are to be released for
    someone who waits (reclaim under pressure: the service, a shared embedded ledger), so
    that a notebook outside JupyterLab hears it too; ``told`` is updated in place."""
    mine: dict[int, tuple[Any, set[str]]] = {}
    for claim in environment.claims:
        if isinstance(claim, Claim):
            entry = mine.setdefault(id(claim.backend), (claim.backend, set()))
            entry[1].add(claim.record.name)
    lines, seen = [], set()
    for backend, names in mine.values():
        reclaiming = reclaiming_of(backend)
        if reclaiming is None:
            continue
        for notice in reclaiming.notices():
            if notice.claim not in names:
                continue
            key = (notice.claim, notice.warned)
            seen.add(key)
            if key not in told:
                lines.append(f"dra: {notice.message}")
    told.intersection_update(seen)  # a warning withdrawn and given again is said again
    told.update(seen)
    return lines


def unhealthy_events_said(
    records: list[ClaimRecord], taints: list[DeviceTaint], grace: float | None = None
) -> list[dict[str, Any]]:
    """The events of :func:`~dra_jupyter.outofservice.unhealthy`, in the kernel's words."""
    return [
        {
            "claim": record.name,
            "device": device,
            "key": taint.key,
            "message": message(record, device, taint, IN_KERNEL.format(claim=record.name), grace),
        }
        for record, device, taint in unhealthy(records, taints)
    ]


def _adopt_kernel_claims(session: Session) -> None:
    """Once per kernel: the claims of this kernel that exist before its first call (a
    restart with claims kept them, and put their devices in its environment)."""
    environment = ProcessEnvironment.of_process()
    kernel_id = session.owner.kernel_id
    if environment.adopted or not kernel_id or not session.backend.capabilities.devices_here:
        environment.adopted = True
        return
    mine = [r for r in session.backend.claims() if r.owner.kernel_id == kernel_id]
    environment.adopt(Claim(session, record) for record in mine)


def _sync_before_each_cell() -> None:
    from IPython import get_ipython  # noqa: PLC0415  # loaded: this is a kernel

    events = get_ipython().events
    if _sync_environment not in events.callbacks.get("pre_run_cell", []):
        events.register("pre_run_cell", _sync_environment)

"""The claim card that ``dra.request()`` shows in a notebook while it waits and after.

States: ``waiting`` (with the place in line), ``allocated``, ``released``, ``failed``
(the wait ended without devices); the view shows ``warning`` when the server extension's
idle deadline is near. Release works everywhere (through the server extension's REST API,
or a message to the kernel); Keep (``POST /dra/api/claims/{name}/keep``) needs the server
extension and is disabled, with a tooltip saying so, where none answers.

The kernel updates the card only from its main thread: while ``request()`` waits (each
change of place in line, from the waiting loop), and in answer to the view's messages
(``refresh``, ``release``). It runs no timer and no thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import traitlets

from dra_jupyter.kernel.info import execution_count
from dra_jupyter.widgets.assets import esm
from dra_jupyter.widgets.base import DraWidget

if TYPE_CHECKING:
    from dra_jupyter.api import Claim
    from dra_jupyter.types import Waiting


class ClaimCard(DraWidget):
    """One request or claim: its state, devices, idle countdown, Release and Keep."""

    _esm = esm("card.js")

    name = traitlets.Unicode("").tag(sync=True)
    state = traitlets.Unicode("waiting").tag(sync=True)
    what = traitlets.Unicode("").tag(sync=True)  # the request, as typed
    position = traitlets.Int(0).tag(sync=True)  # place in line while waiting; 0: unknown
    waiting_since = traitlets.Float(0.0).tag(sync=True)
    timeout = traitlets.Float(0.0).tag(sync=True)  # seconds; 0: none
    devices = traitlets.List(traitlets.Dict()).tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    lease_expires = traitlets.Float(0.0).tag(sync=True)  # 0: no lease

    def __init__(
        self,
        claim: Claim | None = None,
        *,
        what: str = "",
        timeout: float | None = None,
        simulated: bool = False,
        interval: float = 2.0,
    ) -> None:
        super().__init__(
            what=what,
            timeout=float(timeout or 0),
            waiting_since=time.time(),
            simulated=simulated,
            interval=self.checked_interval("ClaimCard", interval),
        )
        self.claim: Claim | None = None
        if claim is not None:
            self.bind(claim)
        self.on_msg(self._on_message)

    def bind(self, claim: Claim) -> None:
        """Show ``claim`` (allocated, or released if it is gone already)."""
        self.claim = claim
        record = claim._record
        with self.hold_sync():  # one update message, not one per trait
            self.name = claim.name
            self.simulated = claim._session.inventory.simulated
            self.devices = [
                {"device": r.device, "name": r.device.rsplit("/", 1)[-1], "model": r.model,
                 "memory": r.memory, "mig_profile": r.mig_profile}
                for r in claim.devices
            ]  # fmt: skip
            self.lease_expires = float(record.lease_expires or 0)
            self.position = 0
            self.message = "\n".join(claim.notes)
            self.state = claim.state

    def waiting(self, waiting: Waiting) -> None:
        """The request's place in line changed (called by the waiting loop)."""
        with self.hold_sync():
            self.state = "waiting"
            self.position = waiting.position
            if waiting.timeout:
                self.timeout = float(waiting.timeout)

    def failed(self, message: str) -> None:
        with self.hold_sync():
            self.state = "failed"
            self.message = message

    def refresh(self) -> None:
        """Recheck the claim (it may have been released elsewhere, or expired)."""
        with self.hold_sync():
            if self.claim is not None and self.state != "released":
                self.state = self.claim.state
            self.revision += 1

    def release(self) -> None:
        if self.claim is not None:
            self.claim.release()
        self.refresh()

    def _on_message(self, widget: Any, content: Any, buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "refresh":
            self.refresh()
        elif kind == "release":
            self.release()

    def __repr__(self) -> str:
        if not self.name:
            return f"<ClaimCard {self.what or 'request'}: {self.state}>"
        devices = ", ".join(d["name"] for d in self.devices)
        return f"<ClaimCard {self.name}: {self.state} ({devices})>"


class CardReporter:
    """The ``on_wait`` of ``request()`` in a kernel: shows a card on the first report of
    waiting, and moves it on as the place in line changes."""

    def __init__(self, what: str, simulated: bool) -> None:
        self.what = what
        self.simulated = simulated
        self.card: ClaimCard | None = None
        self.last: int | None = None

    def __call__(self, waiting: Waiting) -> None:
        if self.card is None:
            from IPython.display import display  # noqa: PLC0415  # in a kernel only

            self.card = ClaimCard(what=self.what, timeout=waiting.timeout, simulated=self.simulated)
            self.card.waiting(waiting)
            self.last = waiting.position
            display(self.card)  # type: ignore[no-untyped-call]
        elif waiting.position != self.last:
            self.last = waiting.position
            self.card.waiting(waiting)

    def allocated(self, claim: Claim) -> None:
        if self.card is not None:
            self.card.bind(claim)
            # this cell shows the card already: not twice (see NotebookView.mimebundle)
            claim.view = CardView(self.card, execution_count())

    def failed(self, message: str) -> None:
        if self.card is not None:
            self.card.failed(message)


@dataclass
class CardView:
    """What a notebook keeps for a claim: its card, and the cell that shows it already."""

    card: ClaimCard
    cell: int | None = None

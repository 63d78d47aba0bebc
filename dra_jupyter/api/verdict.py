"""A request's verdict: whether it can be met now (and on which devices), once others release
theirs (and who holds them), or never here (and why, in the user's terms): ``dra.explain``,
``%dra explain``, ``dra-jupyter explain``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dra_jupyter.errors import ObjectError

if TYPE_CHECKING:
    from dra_jupyter.allocator import Explanation

from dra_jupyter.verdicts import NOTEBOOK_WAIT, PROBE, describe, impossible_hint

if TYPE_CHECKING:
    from dra_jupyter.api.session import Session


@dataclass
class Verdict:
    """Whether a request can be met now, later (when devices are released), or never here."""

    request: str
    answer: str  # "now", "later" or "never"
    headline: str
    explanation: Explanation | None
    held_now: list[str] = field(default_factory=list)  # "claim (user): devices"
    verbose: bool = False

    def __str__(self) -> str:
        lines = [self.headline]
        if self.explanation is not None and self.answer != "now":
            lines.extend(self.explanation.summary(named=False).splitlines())
        if self.held_now:
            lines.append("held now: " + "; ".join(self.held_now))
        if self.verbose and self.explanation is not None:
            lines.extend(["", self.explanation.to_text()])
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "answer": self.answer,
            "headline": self.headline,
            "held_now": self.held_now,
            "explanation": self.explanation.to_dict() if self.explanation else None,
        }

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's printer, untyped
        printer = p
        for i, line in enumerate(str(self).split("\n")):
            if i:
                printer.break_()
            printer.text(line)


def _devices(results: Any) -> str:
    found = results[0].to_dict().get("devices", {}).get("results", [])
    return ", ".join(r["device"] for r in found)


def explain_request(
    session: Session,
    spec: Mapping[str, Any],
    *,
    verbose: bool = False,
    wait_hint: str = NOTEBOOK_WAIT,
) -> Verdict:
    """Say whether ``spec`` can be met: now (and on which devices), once others release
    theirs (and who holds them), or never on this inventory (and why, in the user's terms)."""
    what = describe(spec)
    claim = session.build(spec, PROBE)
    backend = session.backend
    inv = session.inventory
    where = inv.description + (" (simulated)" if inv.simulated else "")
    idle = backend.allocator([])
    # one machine's claims: their namespace means nothing there ("held by all8")
    bare = claim["metadata"].get("namespace") if backend.cluster is None else None
    try:
        possible = idle.allocate([claim])
    except ObjectError:  # the inventory lacks the DeviceClass (a TPU asked of a GPU machine)
        hint = impossible_hint(spec, inv)
        if hint is None:
            raise
        return Verdict(
            what, "never", f"{what}: can never be met here: {hint}", None, verbose=verbose
        )
    if possible is None:
        hint = impossible_hint(spec, inv)
        return Verdict(
            what,
            "never",
            f"{what}: can never be met here: {hint}"
            if hint
            else f"{what}: can never be met on {where}",
            idle.explain([claim], bare_namespace=bare),
            verbose=verbose,
        )
    held = backend.claims(all_users=True)
    allocator = backend.allocator(held)
    results = allocator.allocate([claim])
    explanation = allocator.explain([claim], bare_namespace=bare)
    if results is not None:
        node = explanation.node or "this machine"
        return Verdict(
            what,
            "now",
            f"{what}: can be met now on {node}: {_devices(results)}",
            explanation,
            verbose=verbose,
        )
    holders = [
        f"{r.name} ({r.owner.user}): "
        + ", ".join(x["device"] for x in r.allocation.get("devices", {}).get("results", []))
        for r in held
    ]
    return Verdict(
        what,
        "later",
        f"{what}: cannot be met now, only once other claims release devices; {wait_hint}",
        explanation,
        holders,
        verbose=verbose,
    )

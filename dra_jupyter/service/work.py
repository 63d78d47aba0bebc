"""How much allocation work a request may cost on the daemon's loop, and the allocator that
says when its search ran out of steps.

The daemon serves everyone from one thread, so no request may hold it for long. Two things
make a request costly: CEL selectors (compiling 2 KiB of CEL takes some 20 ms, and the
frame may hold 1 MiB; an estimated cost under the limit of 1,000,000 may still take the
engine a second per device, and it holds the GIL), and a wide search (many requests under
one constraint). A request is worked out on the loop only when all are small
(:func:`costly`): at most :data:`INLINE_CEL` bytes of CEL, whose estimated cost on the
engine over the inventory's devices is at most :data:`INLINE_COST` (a few milliseconds),
and a search within :data:`INLINE_STEPS` (:class:`Bounded` tells when it was not). Anything
else is *costly*: worked out off the loop (:mod:`~dra_jupyter.service.jobs`), under the
policy's CPU budget per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_jupyter.allocator import AllocationResult, Allocator
from dra_jupyter.errors import SelectorError
from dra_jupyter.model.objects import ResourceClaim
from dra_jupyter.selectors import compile_selector

INLINE_CEL = 2048  # bytes of CEL of a request compiled on the loop (some 20 ms at most)
INLINE_COST = 10_000  # estimated CEL cost (selectors x devices) worked out on the loop
INLINE_STEPS = 1_000  # steps of the search on the loop (about 40 ms at most)


class InlineBudgetError(Exception):
    """The search of an allocation on the loop ran out of :data:`INLINE_STEPS`: the request
    is costly, to be worked out off the loop."""


class Bounded(Allocator):
    """An :class:`~dra_jupyter.allocator.Allocator` whose :meth:`allocate` raises
    :class:`InlineBudgetError` where its search gave up (rather than answering None, "busy"),
    and whose :attr:`exhausted` says whether a search of it (an explanation's too) gave up."""

    exhausted = False

    def allocate(self, claims: Any, node: str | None = None) -> list[AllocationResult] | None:
        self.exhausted = False
        found = super().allocate(claims, node)
        if found is None and self.exhausted:
            raise InlineBudgetError
        return found

    def search_on(
        self, claims: list[ResourceClaim], node_name: str | None
    ) -> tuple[list[AllocationResult] | None, bool]:
        found, exhausted = super().search_on(claims, node_name)
        self.exhausted = self.exhausted or exhausted
        return found, exhausted


def costly(claim: Mapping[str, Any], devices: int) -> bool:
    """Whether ``claim`` is to be worked out off the loop: over :data:`INLINE_CEL` bytes of
    CEL (not compiled here, then), or over :data:`INLINE_COST` (:func:`engine_cost`)."""
    expressions = _expressions(claim)
    if sum(len(e) for e in expressions) > INLINE_CEL:
        return True
    return engine_cost(expressions, devices) > INLINE_COST


def engine_cost(expressions: list[str], devices: int) -> int:
    """The estimated cost of the CEL ``expressions`` that run on the engine (those of the
    fast path cost next to nothing), times ``devices``: what evaluating them on every device
    may cost at most, in cel-go's units (about a microsecond each at worst). A selector that
    does not compile costs nothing here: the allocator refuses it, at once."""
    total = 0
    for expression in expressions:
        try:
            compiled = compile_selector(expression, where="request")
        except SelectorError:
            continue
        if not compiled.has_fast_path:
            total += compiled.cost
    return total * max(devices, 1)


def _expressions(claim: Mapping[str, Any]) -> list[str]:
    """Every CEL expression of the claim's requests and their alternatives (what is not a
    request of the shape expected is skipped: the allocator says what is wrong with it)."""
    spec = claim.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    out: list[str] = []
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict):
            continue
        parts = [request.get("exactly")]
        alternatives = request.get("firstAvailable")
        if isinstance(alternatives, list):
            parts.extend(alternatives)
        for part in parts:
            selectors = part.get("selectors") if isinstance(part, dict) else None
            for selector in selectors if isinstance(selectors, list) else ():
                cel = selector.get("cel") if isinstance(selector, dict) else None
                expression = cel.get("expression") if isinstance(cel, dict) else None
                if isinstance(expression, str):
                    out.append(expression)
    return out

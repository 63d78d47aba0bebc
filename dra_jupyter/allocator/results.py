"""Turning a found solution into ``status.allocation`` objects (upstream's result assembly)."""

from __future__ import annotations

from collections.abc import Callable

from dra_jupyter.allocator.search import Pick, RequestData
from dra_jupyter.model.objects import (
    AllocationResult,
    DeviceResult,
    ResourceClaim,
    Wire,
)


def device_results(picks: list[Pick], new_share_id: Callable[[], str]) -> tuple[DeviceResult, ...]:
    out = []
    for pick in picks:
        request = pick.request_data.request
        device = pick.candidate.device
        shared = device.allow_multiple_allocations
        out.append(
            DeviceResult(
                request=pick.request_data.name,
                device=pick.candidate.id,
                admin_access=request.admin_access,
                tolerations=request.tolerations,
                share_id=new_share_id() if shared else None,
                consumed_capacity=pick.consumed if shared and pick.consumed else None,
                binding_conditions=device.binding_conditions,
                binding_failure_conditions=device.binding_failure_conditions,
            )
        )
    return tuple(out)


def configs(claim: ResourceClaim, chosen: list[RequestData]) -> tuple[Wire, ...]:
    """``devices.config``: each used class's config once (FromClass), then the claim's (FromClaim).

    ``chosen`` holds, per request of the claim, the request or the chosen subrequest.
    This is Kubernetes 1.37 exactly: a claim config is copied once if it names any
    allocated request (or chosen subrequest), and a config that applies to every request
    of the claim has its ``requests`` left out ("empty means all").
    """
    out: list[Wire] = []
    class_entries: dict[str, list[Wire]] = {}
    for rd in chosen:
        name = rd.device_class.name
        if name in class_entries:
            for entry in class_entries[name]:
                entry["requests"].append(rd.name)
            continue
        entries = [
            {"source": "FromClass", "requests": [rd.name], **config}
            for config in rd.device_class.config
        ]
        class_entries[name] = entries
        out.extend(entries)
    for config in claim.config:
        if not config.requests:
            out.append({"source": "FromClaim", **config.configuration})
            continue
        if any(
            request.name in config.requests
            or (rd.parent is not None and rd.name in config.requests)
            for request, rd in zip(claim.requests, chosen, strict=True)
        ):
            out.append(
                {"source": "FromClaim", "requests": list(config.requests), **config.configuration}
            )
    for entry in out:
        requests = entry.get("requests")
        if requests and all(
            request.name in requests or (rd.parent is not None and rd.name in requests)
            for request, rd in zip(claim.requests, chosen, strict=True)
        ):
            del entry["requests"]
    return tuple(out)


def node_selector(picks: list[Pick], node: str | None) -> Wire | None:
    """Upstream ``createNodeSelector``: the node itself for node-local devices, else the
    union of the slices' selector requirements, else ``None`` (usable everywhere)."""
    fields: list[Wire] = []
    expressions: list[Wire] = []
    for pick in picks:
        slice_ = pick.candidate.slice
        device = pick.candidate.device
        selection = (
            device.node_selection if slice_.per_device_node_selection else slice_.node_selection
        )
        if (selection is not None and selection.node_name is not None) or device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        if selection is not None and selection.node_selector is not None:
            terms = selection.node_selector.get("nodeSelectorTerms") or []
            if terms:
                _merge(terms[0].get("matchFields") or [], fields)
                _merge(terms[0].get("matchExpressions") or [], expressions)
    if not fields and not expressions:
        return None
    term: Wire = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def _merge(source: list[Wire], target: list[Wire]) -> None:
    for req in source:
        values = set(req.get("values") or ())
        if not any(
            t.get("key") == req.get("key")
            and t.get("operator") == req.get("operator")
            and set(t.get("values") or ()) == values
            for t in target
        ):
            target.append(req)


def allocation_result(
    claim: ResourceClaim,
    picks: list[Pick],
    chosen: list[RequestData],
    node: str | None,
    new_share_id: Callable[[], str],
) -> AllocationResult:
    return AllocationResult(
        results=device_results(picks, new_share_id),
        config=configs(claim, chosen),
        node_selector=node_selector(picks, node),
        node=node,
    )

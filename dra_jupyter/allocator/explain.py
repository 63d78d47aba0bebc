"""Why claims can or cannot be allocated: a per-node, per-request funnel of devices.

For every request (and every ``firstAvailable`` alternative) on every candidate node,
the devices of the node's usable pools are counted stage by stage: matching the
class, matching the request's selectors, not held by another claim, with enough
capacity, with enough counters, with every taint tolerated. The first stage where
fewer devices remain than the request needs is the reason it fails; when every
request could be served alone, the constraints and the competition between requests
are examined instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dra_jupyter.allocator.capacity import consumed_capacity, fits
from dra_jupyter.allocator.constraints import lookup_attribute, typed_values
from dra_jupyter.allocator.search import RequestData, taint_prevents
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.nodes import selection_matches
from dra_jupyter.model.objects import Device, DeviceID, ResourceClaim, ResourceSlice

if TYPE_CHECKING:
    from dra_jupyter.allocator.core import Allocator
    from dra_jupyter.allocator.pools import Pool

STAGES = ("devices", "class", "selectors", "free", "capacity", "counters", "taints")
STAGE_TEXT = {
    "devices": "devices on the node",
    "class": "match the device class",
    "selectors": "match the request's selectors",
    "free": "are not held by other claims",
    "capacity": "have the capacity asked for",
    "counters": "have enough shared counters left",
    "taints": "have only tolerated taints",
}


@dataclass
class RequestReport:
    claim: str
    request: str
    device_class: str
    needed: int | str  # a count, or "all"
    funnel: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def eligible(self) -> int:
        return self.funnel.get("taints", 0)

    @property
    def enough(self) -> bool:
        return self.needed == "all" or self.eligible >= int(self.needed)


@dataclass
class NodeReport:
    node: str | None
    satisfiable: bool
    requests: list[RequestReport] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


@dataclass
class Explanation:
    satisfiable: bool
    node: str | None  # the node an allocation was found on
    nodes: list[NodeReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line per request that failed on the best node: what the CLI prints on stderr."""
        if self.satisfiable:
            return f"allocatable on node {self.node}"
        lines = []
        for report in self.nodes:
            where = f"node {report.node}" if report.node else "no node"
            for reason in report.reasons:
                lines.append(f"{where}: {reason}")
            for req in report.requests:
                for reason in req.reasons:
                    lines.append(f"{where}: claim {req.claim}, request {req.request}: {reason}")
        return "\n".join(lines) or "no allocation exists"

    def to_text(self) -> str:
        lines = []
        verdict = f"allocatable on node {self.node}" if self.satisfiable else "NOT allocatable"
        lines.append(f"Claims are {verdict}.")
        for report in self.nodes:
            mark = "ok" if report.satisfiable else "no"
            lines.append(f"\nnode {report.node or '(any)'}: {mark}")
            lines.extend(f"  - {r}" for r in report.reasons)
            for req in report.requests:
                lines.append(
                    f"  claim {req.claim}, request {req.request} "
                    f"(class {req.device_class}, needs {req.needed}):"
                )
                for stage in STAGES:
                    if stage in req.funnel:
                        lines.append(f"    {req.funnel[stage]:>5}  {STAGE_TEXT[stage]}")
                lines.extend(f"    => {r}" for r in req.reasons)
        return "\n".join(lines)


def explain(allocator: Allocator, claims: list[ResourceClaim], node: str | None) -> Explanation:
    names: list[str | None] = [node] if node is not None else [*allocator.node_names()] or [None]
    reports = []
    found_on: str | None = None
    for name in names:
        report = _node_report(allocator, claims, name)
        reports.append(report)
        if report.satisfiable and found_on is None:
            found_on = name
            if allocator.strategy == "first-fit":
                break
    return Explanation(satisfiable=found_on is not None, node=found_on, nodes=reports)


def _node_report(allocator: Allocator, claims: list[ResourceClaim], name: str | None) -> NodeReport:
    report = NodeReport(node=name, satisfiable=False)
    node = allocator.node(name)
    pools = allocator.pools_for(node)
    for pool in pools:
        if pool.incomplete:
            report.reasons.append(
                f"pool {pool.id} is incomplete (its driver is still publishing it)"
            )
        elif pool.invalid:
            report.reasons.append(f"pool {pool.id} is invalid: {pool.invalid_reason}")
    try:
        data = allocator.request_data(claims, pools, node)
        found, exhausted = allocator.search_on(claims, name)
    except InvalidInputError as err:
        report.reasons.append(str(err))
        return report
    report.satisfiable = found is not None
    if exhausted:
        report.reasons.append(
            f"the search gave up after {allocator.max_steps} steps without an answer; "
            "simplify the claims (fewer requests under one constraint) or raise max_steps"
        )
    for (ci, _ri, _si), rd in sorted(data.items()):
        req = _request_report(allocator, claims[ci], rd, pools, node)
        report.requests.append(req)
    if found is None and not exhausted:
        _why_together(allocator, claims, data, report)
    return report


def _request_report(
    allocator: Allocator, claim: ResourceClaim, rd: RequestData, pools: list[Pool], node: Any
) -> RequestReport:
    request = rd.request
    needed: int | str = "all" if request.allocation_mode == "All" else request.count
    rep = RequestReport(
        claim=claim.key, request=rd.name, device_class=rd.device_class.name, needed=needed
    )
    funnel = Counter(dict.fromkeys(STAGES, 0))
    holders: Counter[str] = Counter()
    rejected_by_selector: Counter[int] = Counter()
    blocked_taints: Counter[str] = Counter()
    largest: dict[str, tuple[Any, str]] = {}
    errors: list[str] = []
    for pool in pools:
        if not pool.usable:
            continue
        for slice_ in pool.slices:
            for device in slice_.devices:
                dev_id = DeviceID(slice_.driver, slice_.pool, device.name)
                stage = _stage(
                    allocator, claim, rd, slice_, device, dev_id, node, rejected_by_selector, errors
                )
                if stage is None:
                    continue
                if stage == "selectors":
                    for name, cap in device.capacity.items():
                        if name in request.capacity_requests and (
                            name not in largest or cap.value > largest[name][0]
                        ):
                            largest[name] = (cap.value, str(dev_id))
                    stage = _availability(
                        allocator, rd, device, dev_id, pool, holders, blocked_taints
                    )
                for s in STAGES[: STAGES.index(stage) + 1]:
                    funnel[s] += 1
    rep.funnel = dict(funnel)
    rep.reasons.extend(errors[:1])
    if rep.enough and not errors:
        return rep
    # The first stage that leaves too few devices.
    want = 1 if needed == "all" else int(needed)
    for stage in STAGES[1:]:
        if funnel[stage] >= want:
            continue
        before = funnel[STAGES[STAGES.index(stage) - 1]]
        rep.reasons.append(
            _reason(
                stage,
                before,
                funnel[stage],
                want,
                rd,
                rejected_by_selector,
                holders,
                blocked_taints,
                largest,
            )
        )
        break
    return rep


def _stage(
    allocator: Allocator,
    claim: ResourceClaim,
    rd: RequestData,
    slice_: ResourceSlice,
    device: Device,
    dev_id: DeviceID,
    node: Any,
    rejected: Counter[int],
    errors: list[str],
) -> str | None:
    """Count a device in the 'devices', 'class' and 'selectors' stages; None if it stops there."""
    try:
        cls = rd.device_class
        for i, expr in enumerate(cls.selectors):
            if not allocator._selector_holds(
                expr, device, dev_id, f"class {cls.name}, selector #{i}"
            ):
                return "devices"
        passed = True
        for i, expr in enumerate(rd.request.selectors):
            where = f"claim {claim.key}, request {rd.request.name}, selector #{i}"
            if not allocator._selector_holds(expr, device, dev_id, where):
                rejected[i] += 1
                passed = False
        if slice_.per_device_node_selection and not (
            device.node_selection is not None and selection_matches(device.node_selection, node)
        ):
            passed = False
    except InvalidInputError as err:
        errors.append(str(err))
        return None
    return "selectors" if passed else "class"


def _availability(
    allocator: Allocator,
    rd: RequestData,
    device: Device,
    dev_id: DeviceID,
    pool: Pool,
    holders: Counter[str],
    blocked_taints: Counter[str],
) -> str:
    state = allocator.state
    request = rd.request
    if not request.admin_access and dev_id in state.dedicated:
        for holder in state.holders.get(dev_id, ()):
            holders[holder] += 1
        return "selectors"
    consumed = consumed_capacity(request.capacity_requests, device)
    if consumed is None or not fits(device, consumed, state.capacity.get(dev_id)):
        return "free"
    if device.consumes_counters and not _counters_left(allocator, device, pool):
        return "capacity"
    if taint_prevents(device, request):
        for t in device.taints:
            if t.effect in ("NoSchedule", "NoExecute"):
                blocked_taints[
                    f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                ] += 1
        return "counters"
    return "taints"


def _counters_left(allocator: Allocator, device: Device, pool: Pool) -> bool:
    used: dict[tuple[str, str], Any] = {}
    for slice_ in (*pool.slices, *pool.other_slices):
        for other in slice_.devices:
            if DeviceID(slice_.driver, slice_.pool, other.name) not in allocator.state.dedicated:
                continue
            for use in other.consumes_counters:
                for name, q in use.counters.items():
                    used[(use.counter_set, name)] = used.get((use.counter_set, name), 0) + q.value
    for use in device.consumes_counters:
        cs = pool.counter_sets.get(use.counter_set)
        if cs is None:
            return False
        for name, q in use.counters.items():
            if used.get((use.counter_set, name), 0) + q.value > cs.counters[name].value:
                return False
    return True


def _reason(
    stage: str,
    before: int,
    after: int,
    want: int,
    rd: RequestData,
    rejected: Counter[int],
    holders: Counter[str],
    taints: Counter[str],
    largest: dict[str, tuple[Any, str]],
) -> str:
    need = "all matching devices" if rd.request.allocation_mode == "All" else f"{want} needed"
    if stage == "class":
        return (
            f"no device matches class {rd.device_class.name} ({need})"
            if after == 0
            else (f"only {after} devices match class {rd.device_class.name}, {need}")
        )
    if stage == "selectors":
        worst = ", ".join(
            f"selector #{i} ({rd.request.selectors[i]!r}) rejects {n}"
            for i, n in rejected.most_common(2)
        )
        text = (
            f"{after} of {before} devices of class {rd.device_class.name} match the selectors, "
            f"{need}"
        )
        return f"{text}: {worst}" if worst else text
    if stage == "free":
        who = ", ".join(f"{c} ({n})" for c, n in holders.most_common(3))
        return f"{after} of {before} matching devices are free, {need}" + (
            f"; held by {who}" if who else ""
        )
    if stage == "capacity":
        asked = ", ".join(f"{k} >= {v}" for k, v in rd.request.capacity_requests.items())
        text = (
            f"{after} of {before} free devices have the capacity asked for "
            f"({asked or 'whole device'})"
        )
        big = "; ".join(f"the largest {k} is {v[0]} ({v[1]})" for k, v in largest.items())
        return f"{text}, {need}" + (f"; {big}" if big else "")
    if stage == "counters":
        return (
            f"{after} of {before} devices have enough shared counters left (a partition or the "
            f"whole device is taken), {need}"
        )
    listed = ", ".join(f"{t} on {n}" for t, n in taints.most_common(3))
    return (
        f"{after} of {before} devices have only tolerated taints, {need}; not tolerated: {listed}"
    )


def _why_together(
    allocator: Allocator,
    claims: list[ResourceClaim],
    data: dict[tuple[int, int, int], RequestData],
    report: NodeReport,
) -> None:
    if any(r.reasons for r in report.requests):
        return
    for ci, claim in enumerate(claims):
        for constraint in claim.constraints:
            attr = constraint.attribute
            groups: Counter[frozenset[Any]] = Counter()
            needed = 0
            pool_devices: set[DeviceID] = set()
            for (c, ri, si), rd in data.items():
                if c != ci or si != 0:
                    continue
                base = claim.requests[ri].name
                if constraint.requests and base not in constraint.requests:
                    continue
                needed += rd.num_devices
                for cand in rd.candidates:
                    if cand.id in pool_devices:
                        continue
                    pool_devices.add(cand.id)
                    value = lookup_attribute(cand.device, cand.id, attr)
                    if value is not None:
                        groups[typed_values(value)] += 1
            kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
            if constraint.match_attribute and groups:
                best, count = groups.most_common(1)[0]
                if count < needed:
                    shown = ", ".join(str(v) for _t, v in sorted(best, key=str))
                    report.reasons.append(
                        f"claim {claim.key}: {kind} {attr}: at most {count} eligible devices share "
                        f"one value ({shown}), {needed} needed"
                    )
                    return
            if constraint.distinct_attribute and len(groups) < needed:
                report.reasons.append(
                    f"claim {claim.key}: {kind} {attr}: only {len(groups)} distinct values among "
                    f"eligible devices, {needed} needed"
                )
                return
    report.reasons.append(
        "each request could be served alone, but not all together: they compete for the same "
        "devices or counters, or a constraint cannot hold across them"
    )

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

import functools
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from dra_jupyter.allocator.capacity import CapacityProblem, consumed_capacity, fits
from dra_jupyter.allocator.constraints import lookup_attribute, typed_values
from dra_jupyter.allocator.pools import usable_devices
from dra_jupyter.allocator.search import RequestData, taint_prevents
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.nodes import selection_matches
from dra_jupyter.model.objects import Device, DeviceID, ResourceClaim, ResourceSlice
from dra_jupyter.model.quantity import Quantity

if TYPE_CHECKING:
    from dra_jupyter.allocator.pools import Pool
    from dra_jupyter.allocator.state import AllocatedState
    from dra_jupyter.model.objects import AllocationResult, DeviceClass, ExactRequest, Node


class ExplainSource(Protocol):
    """What an explanation reads of the allocator it explains (an
    :class:`~dra_jupyter.allocator.core.Allocator` is one): the nodes in its order, their
    pools and the devices each request could use, its search, and what is held."""

    state: AllocatedState
    max_steps: int

    def node_order(self, claims: list[ResourceClaim], node: str | None) -> list[str | None]: ...

    def node(self, name: str | None) -> Node | None: ...

    def pools_for(self, node: Node | None) -> list[Pool]: ...

    def request_data(
        self,
        claims: list[ResourceClaim],
        pools: list[Pool],
        node: Node | None,
        *,
        ordered: bool = True,
    ) -> dict[tuple[int, int, int], RequestData]: ...

    def search_on(
        self, claims: list[ResourceClaim], node_name: str | None
    ) -> tuple[list[AllocationResult] | None, bool]: ...

    def selector_holds(
        self,
        expression: str,
        device: Device,
        dev_id: DeviceID,
        owner: DeviceClass | ResourceClaim,
        request: ExactRequest | None,
        index: int,
    ) -> bool: ...


STAGES = ("devices", "class", "selectors", "free", "capacity", "counters", "taints")
STAGE_TEXT = {
    "devices": "devices on the node",
    "class": "match the device class",
    "selectors": "match the request's selectors",
    "free": "are not held by other claims",
    "capacity": "have the capacity asked for",
    "counters": "are not blocked by partitions in use",
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
    enough: bool = True  # whether this request alone could be served on the node

    @property
    def eligible(self) -> int:
        return self.funnel.get("taints", 0)


_CLAIM = re.compile(r"^claim [^\s:]+: ")  # a node's reason that names its claim first


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

    def summary(self, *, named: bool = True) -> str:
        """One line per reason a node refused, nodes with the same reasons in one line: what
        the CLI prints on stderr.
        ``named=False`` leaves the claim's name out: a claim the user did not name (one
        made to ask whether a request could be met) is only its requests."""
        if self.satisfiable:
            return f"allocatable on node {self.node}"
        said: dict[tuple[str, ...], list[str | None]] = {}  # the same reasons: one entry
        for report in self.nodes:
            reasons = [reason if named else _CLAIM.sub("", reason, 1) for reason in report.reasons]
            for req in report.requests:
                claim = f"claim {req.claim}, " if named else ""
                reasons += [f"{claim}request {req.request}: {reason}" for reason in req.reasons]
            said.setdefault(tuple(reasons), []).append(report.node)
        lines = [
            f"{_nodes_text(nodes)}: {reason}"
            for reasons, nodes in said.items()
            for reason in reasons
        ]
        return "\n".join(lines) or "no allocation exists"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython shows ``claim.explain()`` as its text (``to_text``), not as a dataclass."""
        for i, line in enumerate(self.to_text().split("\n")):
            if i:
                p.break_()
            p.text(line)

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


def explain(
    allocator: ExplainSource,
    claims: list[ResourceClaim],
    node: str | None,
    *,
    bare_namespace: str | None = None,
) -> Explanation:
    """Report on the nodes in the order the allocator tries them, up to the first that fits
    (``bare_namespace``: holders in it are named without it)."""
    reports = []
    for name in allocator.node_order(claims, node):
        report = _node_report(allocator, claims, name, bare_namespace)
        reports.append(report)
        if report.satisfiable:
            return Explanation(satisfiable=True, node=name, nodes=reports)
    return Explanation(satisfiable=False, node=None, nodes=reports)


def _node_report(
    allocator: ExplainSource,
    claims: list[ResourceClaim],
    name: str | None,
    bare_namespace: str | None = None,
) -> NodeReport:
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
    data = allocator.request_data(claims, pools, node)
    found, exhausted = allocator.search_on(claims, name)
    report.satisfiable = found is not None
    if exhausted:
        report.reasons.append(
            f"the search gave up after {allocator.max_steps} steps without an answer; "
            "simplify the claims (fewer requests under one constraint) or raise max_steps"
        )
    for (ci, _ri, _si), rd in sorted(data.items()):
        req = _request_report(allocator, claims[ci], rd, pools, node, bare_namespace)
        report.requests.append(req)
    if found is None and not exhausted:
        _why_together(allocator, claims, data, report)
    return report


@dataclass
class _Tally:
    """What one request's funnel saw, for the reason that names the blocking stage."""

    funnel: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(STAGES, 0)))
    rejected: Counter[int] = field(default_factory=Counter)  # per request selector
    # per request selector: the values the devices it rules out have (what it compares)
    ruled_out: dict[int, Counter[str]] = field(default_factory=dict)
    largest_memory: dict[int, tuple[Quantity, str]] = field(default_factory=dict)
    holders: Counter[str] = field(default_factory=Counter)  # claims holding matching devices
    counter_sets: Counter[str] = field(default_factory=Counter)  # devices blocked per set
    scarce: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # set -> counter -> left
    counter_holders: dict[str, Counter[str]] = field(default_factory=dict)  # set -> holders
    counter_devices: dict[str, str] = field(default_factory=dict)  # set -> the device it is
    taken_whole: set[str] = field(default_factory=set)  # sets whose whole device is held
    taints: Counter[str] = field(default_factory=Counter)
    largest_left: dict[str, tuple[Quantity, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _request_report(
    allocator: ExplainSource,
    claim: ResourceClaim,
    rd: RequestData,
    pools: list[Pool],
    node: Any,
    bare_namespace: str | None = None,
) -> RequestReport:
    request = rd.request
    all_mode = request.allocation_mode == "All"
    rep = RequestReport(
        claim=claim.key,
        request=rd.name,
        device_class=rd.device_class.name,
        needed="all" if all_mode else request.count,
    )
    tally = _Tally()
    for pool, slice_, device, dev_id in usable_devices(pools):
        stage = _stage(allocator, claim, rd, slice_, device, dev_id, node, tally)
        if stage is None:
            continue
        if stage == "selectors":
            stage = _availability(allocator, rd, device, dev_id, pool, tally)
        for s in STAGES[: STAGES.index(stage) + 1]:
            tally.funnel[s] += 1
    if bare_namespace is not None:
        _bare(tally, f"{bare_namespace}/")
    funnel = tally.funnel
    rep.funnel = dict(funnel)
    rep.reasons.extend(tally.errors[:1])
    # "All" needs every device that matches the selectors, and at least one.
    want = max(funnel["selectors"], 1) if all_mode else request.count
    if funnel["taints"] >= want and not tally.errors:
        return rep
    rep.enough = False
    for stage in STAGES[1:]:
        if funnel[stage] >= want:
            continue
        before = funnel[STAGES[STAGES.index(stage) - 1]]
        rep.reasons.append(_reason(stage, before, funnel[stage], want, rd, tally))
        break
    return rep


def _bare(tally: _Tally, prefix: str) -> None:
    """Name the holders in ``prefix``'s namespace by their names alone."""

    def bare(counts: Counter[str]) -> Counter[str]:
        return Counter({k.removeprefix(prefix): n for k, n in counts.items()})

    tally.holders = bare(tally.holders)
    tally.counter_holders = {k: bare(v) for k, v in tally.counter_holders.items()}


def _stage(
    allocator: ExplainSource,
    claim: ResourceClaim,
    rd: RequestData,
    slice_: ResourceSlice,
    device: Device,
    dev_id: DeviceID,
    node: Any,
    tally: _Tally,
) -> str | None:
    """Count a device in the 'devices', 'class' and 'selectors' stages; None if it stops there."""
    try:
        cls = rd.device_class
        for i, expr in enumerate(cls.selectors):
            if not allocator.selector_holds(expr, device, dev_id, cls, None, i):
                return "devices"
        passed = True
        for i, expr in enumerate(rd.request.selectors):
            if not allocator.selector_holds(expr, device, dev_id, claim, rd.request, i):
                tally.rejected[i] += 1
                _note_ruled_out(tally, i, expr, device, dev_id)
                passed = False
        if slice_.per_device_node_selection and not (
            device.node_selection is not None and selection_matches(device.node_selection, node)
        ):
            passed = False
    except InvalidInputError as err:
        tally.errors.append(str(err))
        return None
    return "selectors" if passed else "class"


def _availability(
    allocator: ExplainSource,
    rd: RequestData,
    device: Device,
    dev_id: DeviceID,
    pool: Pool,
    tally: _Tally,
) -> str:
    """The last stage a device that matches the selectors passes."""
    state = allocator.state
    request = rd.request
    if not request.admin_access and dev_id in state.dedicated:
        for holder in state.holders.get(dev_id, ()):
            tally.holders[holder] += 1
        return "selectors"
    used = state.capacity.get(dev_id, {})
    try:
        consumed = consumed_capacity(request.capacity_requests, device)
    except CapacityProblem as problem:
        tally.errors.append(f"request {rd.name}: checking capacity for device {dev_id}: {problem}")
        return "selectors"
    if consumed is None or not fits(device, consumed, used):
        for name, cap in device.capacity.items():
            if name in request.capacity_requests:
                left = cap.value - used[name] if name in used else cap.value
                best = tally.largest_left.get(name)
                if best is None or left > best[0]:
                    tally.largest_left[name] = (left, str(dev_id))
        return "free"
    if device.consumes_counters and not _counters_left(allocator, device, pool, tally):
        return "capacity"
    if taint_prevents(device, request):
        for t in device.taints:
            if t.effect in ("NoSchedule", "NoExecute"):
                name = f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                if t.rule:  # put there by a DeviceTaintRule, not by the driver
                    name += f" (DeviceTaintRule {t.rule})"
                tally.taints[name] += 1
        return "counters"
    return "taints"


def _counters_left(allocator: ExplainSource, device: Device, pool: Pool, tally: _Tally) -> bool:
    """Whether the device's counters are left after what allocated devices consume; if not,
    note the exhausted counter and the claims whose devices consume it."""
    used: dict[tuple[str, str], Any] = {}
    users: dict[tuple[str, str], set[str]] = {}
    consumers: dict[str, set[str]] = {}  # counter set -> the allocated devices drawing on it
    for slice_ in (*pool.slices, *pool.other_slices):
        for other in slice_.devices:
            other_id = DeviceID(slice_.driver, slice_.pool, other.name)
            if not allocator.state.consumes_counters(other_id):
                continue
            for use in other.consumes_counters:
                for name, q in use.counters.items():
                    key = (use.counter_set, name)
                    used[key] = used.get(key, 0) + q.value
                    users.setdefault(key, set()).update(allocator.state.holders.get(other_id, ()))
                consumers.setdefault(use.counter_set, set()).add(other.name)
    blocked: set[str] = set()
    holders: dict[str, set[str]] = {}
    for use in device.consumes_counters:
        cs = pool.counter_sets.get(use.counter_set)
        if cs is None:
            return False
        for name, q in use.counters.items():
            key = (use.counter_set, name)
            total = cs.counters[name].value
            if used.get(key, 0) + q.value > total:
                blocked.add(use.counter_set)
                holders.setdefault(use.counter_set, set()).update(users.get(key, ()))
                left = (total - used.get(key, 0)) / total if total else Fraction(0)
                tally.scarce.setdefault(use.counter_set, {})[name] = left
    for name in blocked:
        tally.counter_sets[name] += 1
        if name not in tally.counter_devices:
            tally.counter_devices[name] = _set_device(pool, name)
        whole = tally.counter_devices[name]
        if whole in consumers.get(name, ()):
            tally.taken_whole.add(name)
        for holder in holders.get(name, ()):
            tally.counter_holders.setdefault(name, Counter())[holder] += 1
    return not blocked


def _set_device(pool: Pool, counter_set: str) -> str:
    """The device a counter set stands for, as people call it: ``gpu-0`` for
    ``gpu-0-counter-set`` (the whole device that consumes all of it), else the set's name."""
    for suffix in ("-counter-set", "-counters", "-counterset"):
        if counter_set.endswith(suffix):
            base = counter_set.removesuffix(suffix)
            names = {d.name for s in (*pool.slices, *pool.other_slices) for d in s.devices}
            if base in names:
                return base
    return f"counter set {counter_set}"


def _counter_words(counters: dict[str, Fraction]) -> str:
    """The counters of a set that ran out, in words, the most used up first:
    ``memory-slice-6``, ``memory-slice-7`` and ``jpeg-engines`` are its memory slices and
    jpeg engines."""
    words: dict[str, Fraction] = {}
    for name, left in counters.items():
        word = name.replace("-", " ").replace("_", " ")
        numbered = re.fullmatch(r"(.*\D) ?(\d+)", word)
        if numbered:
            word = numbered[1].rstrip() + "s"  # memory-slice-6 -> memory slices
        word = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", word).lower()  # copyEngines -> copy engines
        words[word] = min(left, words.get(word, left))
    # memory slices first: where a partition may sit (the other parts follow from them)
    names = sorted(words, key=lambda n: (words[n], "slice" not in n, n))
    return names[0] if len(names) == 1 else f"{names[0]} and other parts"


_MEMORY_SELECTOR = re.compile(
    r"""'memory' in device\.capacity\[(['"])[^'"]+\1\] && device\.capacity\[(['"])[^'"]+\2\]"""
    r"""\.memory\.compareTo\(quantity\((['"])(?P<amount>[^'"]+)\3\)\) >= 0"""
)
# a selector that compares a device's memory to a quantity (whatever else it says)
_MEMORY_COMPARED = re.compile(r"""\.memory\.compareTo\(quantity\(""")
_MODEL_SELECTOR = re.compile(
    r"""'(?P<attr>productName|tpuGen)' in device\.attributes\[(['"])(?P<domain>[^'"]+)\2\] && """
    r"""device\.attributes\[(['"])[^'"]+\4\]\.(?P=attr)\.lowerAscii\(\)\.contains\("""
    r"""'(?P<model>(?:[^'\\]|\\.)*)'\)"""
)
# ``device.attributes["gpu.nvidia.com"].architecture == "Hopper"`` (anywhere in a selector)
_COMPARISON = re.compile(
    r"""device\.attributes\[(['"])(?P<domain>[^'"]+)\1\]\s*\.\s*(?P<attr>[A-Za-z_]\w*)\s*==\s*"""
    r"""(?:"(?P<dq>[^"\\]*)"|'(?P<sq>[^'\\]*)')"""
)


@functools.lru_cache(maxsize=256)
def _compared(expr: str) -> tuple[str, str, str] | None:
    """What a selector compares: (domain, attribute, the value it must have), or None;
    ("", "memory", "") for a selector on a device's memory."""
    if _MEMORY_COMPARED.search(expr):
        return "", "memory", ""
    if m := _MODEL_SELECTOR.fullmatch(expr):
        return m["domain"], m["attr"], m["model"]
    if m := _COMPARISON.search(expr):
        return m["domain"], m["attr"], m["dq"] if m["dq"] is not None else m["sq"]
    return None


def _note_ruled_out(tally: _Tally, i: int, expr: str, device: Device, dev_id: DeviceID) -> None:
    """Remember what a device a selector rules out has instead: its memory, or the value
    of the attribute the selector compares."""
    compared = _compared(expr)
    if compared is None:
        return
    domain, attr, _wanted = compared
    if not domain:  # memory
        cap = device.capacity.get("memory")
        if cap is not None:
            best = tally.largest_memory.get(i)
            if best is None or cap.value > best[0]:
                tally.largest_memory[i] = (cap.value, dev_id.device)
        return
    value = lookup_attribute(device, dev_id, f"{domain}/{attr}")
    if value is not None:
        shown = ", ".join(str(v) for _t, v in sorted(typed_values(value), key=str))
        tally.ruled_out.setdefault(i, Counter())[shown] += 1


def _human_bytes(q: Quantity) -> str:
    """``143771Mi`` -> ``140.4Gi``, rounded down (never more than a device has)."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if q.value >= size:
            shown = q.value / size
            if shown.denominator == 1:
                return f"{shown.numerator}{unit}"
            tenths = int(shown * 10)
            return f"{tenths // 10}.{tenths % 10}{unit}"
    return str(q)


def _noun(device_class: str, n: int) -> str:
    """What the devices of a class are called: GPUs, MIG devices, TPU chips."""
    one, many = {
        "gpu.nvidia.com": ("GPU", "GPUs"),
        "gpu.amd.com": ("GPU", "GPUs"),
        "mig.nvidia.com": ("MIG device", "MIG devices"),
        "tpu.google.com": ("TPU chip", "TPU chips"),
    }.get(device_class, (f"device of class {device_class}", f"devices of class {device_class}"))
    return one if n == 1 else many


def _selector_label(expr: str, device_class: str) -> str:
    """A selector as the user typed it: ``memory="80Gi"``, ``model="h100"``, ``mig="3g.71gb"``,
    else ``selector <CEL>``."""
    if m := _MEMORY_SELECTOR.fullmatch(expr):
        return f'memory="{m["amount"]}"'
    if m := _MODEL_SELECTOR.fullmatch(expr):
        return f'model="{m["model"]}"'
    m = _COMPARISON.fullmatch(expr.strip())
    if device_class == "mig.nvidia.com" and m and m["attr"] == "profile":
        return f'mig="{m["dq"] if m["dq"] is not None else m["sq"]}"'
    return "selector " + _SHORT.sub("", expr)


# ``device.attributes["gpu.nvidia.com"].`` before an attribute's name: what a reader skips
_SHORT = re.compile(r"""device\.(?:attributes|capacity)\[(['"])[^'"]+\1\]\s*\.\s*""")


def _values(counts: Counter[str], all_out: bool) -> str:
    """``they are Blackwell``, ``the others are 1g.18gb (7), 2g.35gb (4) and 2 more``."""
    who = "they are" if all_out else "the others are"
    if len(counts) == 1:
        return f"{who} {next(iter(counts))}"
    shown = [f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:4]]
    more = f" and {len(counts) - 4} more" if len(counts) > 4 else ""
    return f"{who} " + ", ".join(shown) + more


def _selector_phrase(i: int, before: int, rd: RequestData, t: _Tally) -> str:
    """``model="h100" matches none of the 8 GPUs (they are NVIDIA H200)``."""
    expr = rd.request.selectors[i]
    cls = rd.device_class.name
    matched = before - t.rejected[i]
    how_many = "none" if matched == 0 else f"only {matched}"
    text = f"{_selector_label(expr, cls)} matches {how_many} of the {before} {_noun(cls, before)}"
    if i in t.largest_memory:
        amount, name = t.largest_memory[i]
        most = "the most memory is" if matched == 0 else "the others have at most"
        return f"{text} ({most} {_human_bytes(amount)}, {name})"
    if i in t.ruled_out:
        return f"{text} ({_values(t.ruled_out[i], matched == 0)})"
    return text


def _listed(counts: Counter[str], unit: str = "") -> str:
    """The three most common entries, and how many more there are."""
    shown = [
        f"{k} ({n}{unit.removesuffix('s') if n == 1 and unit.endswith('s') else unit})"
        for k, n in counts.most_common(3)
    ]
    if len(counts) > 3:
        shown.append(f"and {len(counts) - 3} more")
    return ", ".join(shown)


def _reason(stage: str, before: int, after: int, want: int, rd: RequestData, t: _Tally) -> str:
    all_mode = rd.request.allocation_mode == "All"
    if all_mode:
        need = f"all {want} matching devices needed" if want > 1 else "at least one needed"
    else:
        need = f"{want} needed"
    cls = rd.device_class.name
    if stage == "class":
        named = _noun(cls, 2) != f"devices of class {cls}"
        where = f" (class {cls})" if named else ""
        if after == 0:
            return f"no {_noun(cls, 2)} here{where} ({need})"
        return f"only {after} {_noun(cls, after)} here{where}, {need}"
    if stage == "selectors":
        worst = [_selector_phrase(i, before, rd, t) for i, _n in t.rejected.most_common(2)]
        if len(worst) == 1 and before - t.rejected.most_common(1)[0][1] == after:
            return f"{worst[0]}, {need}"  # the one selector that rules devices out
        nouns = _noun(cls, before)
        text = f"{after} of the {before} {nouns} match everything asked, {need}"
        return f"{text}: {'; '.join(worst)}" if worst else text
    if stage == "free":
        nouns = _noun(cls, before).split(" of class ")[0]
        text = f"{after} of the {before} matching {nouns} are free, {need}"
        return f"{text}; held by {_listed(t.holders)}" if t.holders else text
    if stage == "capacity":
        nouns = _noun(cls, before)
        asked = " and ".join(f"{k} >= {v}" for k, v in rd.request.capacity_requests.items())
        text = (
            f"{after} of the {before} {nouns} not held by others have {asked} left to share"
            if asked
            else f"{after} of the {before} {nouns} not held by others are unshared (a request "
            "without share= takes the whole device)"
        )
        text += f", {need}"
        others = "the others have" if after else "the most left is"
        left = "; ".join(
            f"{others} {_human_bytes(v[0]) if k == 'memory' else v[0]} of {k} "
            f"({v[1].rsplit('/', 1)[-1]})"
            for k, v in t.largest_left.items()
        )
        return f"{text}; {left}" if left else text
    if stage == "counters":
        if after:
            text = f"only {after} of the {before} free {_noun(cls, before)} are not blocked"
        elif before == 1:
            text = f"the free {_noun(cls, 1)} is blocked"
        else:
            text = f"all {before} free {_noun(cls, before)} are blocked"
        text += f" by partitions in use, {need}"
        parts = []
        for name, _n in t.counter_sets.most_common(3):
            whole = t.counter_devices[name]
            if name in t.taken_whole:
                part = f"{whole} is taken whole"
            else:
                part = f"the {_counter_words(t.scarce[name])} of {whole} are taken"
            holders = t.counter_holders.get(name)
            if holders and len(holders) == 1:
                part += f" by claim {next(iter(holders))}"
            elif holders:
                part += f" by claims {_listed(holders, ' blocked')}"
            parts.append(part)
        more = len(t.counter_sets) - len(parts)
        if more:
            parts.append(f"and the partitions of {more} more devices")
        return f"{text}: {'; '.join(parts)}" if parts else text
    nouns = _noun(cls, before).split(" of class ")[0]
    return (
        f"{after} of the {before} free {nouns} are not marked unusable, {need}; marked by a "
        f"taint the request does not tolerate: {_listed(t.taints, ' devices')}"
    )


def _why_together(
    allocator: ExplainSource,
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
            short = attr.rsplit("/", 1)[-1]
            if constraint.match_attribute and groups:
                best, count = groups.most_common(1)[0]
                if count < needed:
                    shown = ", ".join(str(v) for _t, v in sorted(best, key=str))
                    report.reasons.append(
                        f'claim {claim.key}: same="{short}" (matchAttribute {attr}): at most '
                        f"{count} of the devices that could be used have the same {short} "
                        f"({shown}), {needed} needed"
                    )
                    return
            if constraint.distinct_attribute and len(groups) < needed:
                report.reasons.append(
                    f'claim {claim.key}: distinct="{short}" (distinctAttribute {attr}): the '
                    f"devices that could be used have only {len(groups)} different {short} "
                    f"values, {needed} needed"
                )
                return
    competition = _competition(claims, data)
    constraints = [_constraint_label(c) for claim in claims for c in claim.constraints]
    if not competition and len({(ci, ri) for ci, ri, _si in data}) == 1 and constraints:
        # one request: what cannot hold is its constraints, together
        report.reasons.append(
            "the devices asked for are here, but no choice of them meets "
            f"{' and '.join(constraints)} at once"
        )
        return
    report.reasons.append(
        "each request could be served alone, but not all together: "
        + (
            competition
            or "they compete for the same devices or their parts, or a constraint (same=, "
            "distinct=) cannot hold across them"
        )
    )


def _constraint_label(constraint: Any) -> str:
    """``same="pcieRoot"``, ``distinct="numaNode"``: a constraint as the keyword typed."""
    key = "same" if constraint.match_attribute else "distinct"
    return f'{key}="{constraint.attribute.rsplit("/", 1)[-1]}"'


def _competition(claims: list[ResourceClaim], data: dict[tuple[int, int, int], RequestData]) -> str:
    """Which requests compete, and for what: the devices two requests could both take
    (whole), the shared devices whose capacity both would consume, the counter sets both
    would draw from; the first alternative of each request. Empty when none overlap (then
    a constraint is what cannot hold)."""
    entries: list[tuple[str, RequestData]] = []
    for (ci, _ri, si), rd in data.items():
        if si == 0:
            entries.append((f"claim {claims[ci].key} request {rd.name}", rd))

    def resources(rd: RequestData) -> tuple[set[str], set[str], set[str]]:
        pool = rd.all_devices if rd.all_devices is not None else rd.candidates
        whole: set[str] = set()
        shared: set[str] = set()
        counters: set[str] = set()
        for cand in pool:
            (shared if cand.device.allow_multiple_allocations else whole).add(str(cand.id))
            for used in cand.device.consumes_counters:
                key = f"{cand.pool.id}/{used.counter_set}"
                if key not in devices_of_sets:  # what people call it: the GPU it is
                    devices_of_sets[key] = _set_device(cand.pool, used.counter_set)
                counters.add(key)
        return whole, shared, counters

    devices_of_sets: dict[str, str] = {}

    found = [(label, resources(rd), rd.num_devices) for label, rd in entries]
    lines: list[str] = []
    for i, (a, (whole_a, shared_a, counters_a), need_a) in enumerate(found):
        for b, (whole_b, shared_b, counters_b), need_b in found[i + 1 :]:
            what = []
            if both := whole_a & whole_b:
                what.append(f"devices {_few(both)} ({need_a} + {need_b} needed of {len(both)})")
            if both := shared_a & shared_b:
                what.append(f"the capacity of {_few(both)}")
            if both := counters_a & counters_b:
                gpus = {devices_of_sets[k] for k in both}
                what.append(f"the parts (partitions) of {_few(gpus)}")
            if what:
                lines.append(f"{a} and {b} compete for {' and '.join(what)}")
    if len(lines) > 3:
        lines = [*lines[:3], f"and {len(lines) - 3} more pairs"]
    return "; ".join(lines)


def _few(names: set[str]) -> str:
    shown = sorted(names)
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")


NODES_NAMED = 3  # nodes named in one line of a summary; more are counted


def _nodes_text(nodes: list[str | None]) -> str:
    """``node a``, ``nodes a, b and c``, ``1000 nodes (a, b, c and 997 more)``: the nodes
    whose reasons are the same, said once (a refusal on 1,000 alike nodes is one line)."""
    names = [n or "(any)" for n in nodes]
    if len(names) == 1:
        return f"node {names[0]}" if nodes[0] else "no node"
    if len(names) <= NODES_NAMED:
        return f"nodes {', '.join(names[:-1])} and {names[-1]}"
    more = len(names) - NODES_NAMED
    return f"{len(names)} nodes ({', '.join(names[:NODES_NAMED])} and {more} more)"

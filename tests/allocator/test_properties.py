"""Property tests of the allocator against an independent checker and a brute-force oracle.

Hypothesis builds random but valid worlds: 1-3 nodes, each with a pool of 1-2 device
slices (1-8 devices each) and, when some devices are partitionable, a slice of
shared counters (MIG-like: a whole GPU and partitions draw ``memory`` and ``slices``
from one counter set); devices carry a string ``model``, an int ``numa`` and, mostly,
``resource.kubernetes.io/pcieRoot``, capacity ``memory``; some allow multiple
allocations under a request policy, some are tainted, some are held by allocated
claims (dedicated, shared with consumed capacity, or with admin access, which holds
nothing). Claims have 1-3 requests (``exactly`` or ``firstAvailable``) for 1-3 devices
with optional CEL selectors on memory and model, capacity requests, tolerations,
admin access, and optional ``matchAttribute``/``distinctAttribute`` constraints.

The world is described here by plain dataclasses; the wire dicts given to the
allocator are generated from them, and :func:`problems` checks what the allocator
returns against the description with plain Python, never with allocator code. The
CEL selectors are evaluated by the same Python predicates they were generated from.
:func:`feasible_on` enumerates every assignment of tiny worlds to decide whether a
valid allocation exists at all.

A device that allows multiple allocations *and* consumes counters, held by an
allocated claim through shares, counts against its counter set once
(kubernetes/kubernetes#139034); the worlds generate such holdings.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_jupyter.allocator import AllocationResult, Allocator

from .builders import (
    Wire,
    allocated_claim,
    claim,
    counter_set,
    device,
    device_allocation_result,
    device_class,
    device_counter_consumption,
    distinct_attribute,
    local_node_selector,
    match_attribute,
    request,
    request_with_prioritized_list,
    resource_pool,
    slice_with_counter_sets,
    slice_with_devices,
    sub_request,
)

DRIVER = "gpu.example.com"
OTHER_DRIVER = "nic.example.com"  # devices no class selects: they must never be given
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NODES = ("node-a", "node-b", "node-c")
MODELS = ("A100", "H100", "H200")
MEMORY_GI = (16, 40, 80, 141)
ROOTS = ("pci0000:00", "pci0000:40")
GI = 1024**3

Effect = Literal["NoSchedule", "NoExecute", "None"]


# --- the world, as plain data --------------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: Effect

    def wire(self) -> Wire:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: Literal["Exists", "Equal"]
    value: str = ""
    effect: str = ""

    def wire(self) -> Wire:
        out: Wire = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


TAINTS = (
    Taint("maintenance", "true", "NoSchedule"),
    Taint("maintenance", "true", "NoExecute"),
    Taint("maintenance", "true", "None"),  # never blocks
    Taint("health", "degraded", "NoSchedule"),
)
TOLERATIONS = (
    Toleration("maintenance", "Exists"),
    Toleration("maintenance", "Equal", "true", "NoSchedule"),
    Toleration("", "Exists"),  # tolerates every taint
    Toleration("maintenance", "Equal", "false"),  # wrong value
    Toleration("health", "Exists", effect="NoExecute"),  # wrong effect
)


@dataclass(frozen=True)
class Policy:
    """A capacity request policy, in Gi: ``values`` or a range ``min + n * step <= max``."""

    default: int | None = None
    values: tuple[int, ...] = ()
    min: int | None = None
    step: int | None = None
    max: int | None = None

    def wire(self) -> Wire:
        out: Wire = {}
        if self.default is not None:
            out["default"] = gi(self.default)
        if self.values:
            out["validValues"] = [gi(v) for v in self.values]
        if self.min is not None:
            rng: Wire = {"min": gi(self.min)}
            if self.step is not None:
                rng["step"] = gi(self.step)
            if self.max is not None:
                rng["max"] = gi(self.max)
            out["validRange"] = rng
        return out

    def allows(self, amount: int) -> bool:
        if amount == self.default:
            return True
        if self.values:
            return amount in self.values
        if self.min is not None:
            if self.max is not None and amount > self.max:
                return False
            return self.step is None or (amount - self.min) % self.step == 0
        return True


@dataclass(frozen=True)
class Dev:
    node: str
    slice: str
    pool: str
    name: str
    model: str
    numa: int
    pcie_root: str | None
    memory: int  # Gi
    driver: str = DRIVER
    shared: bool = False  # allowMultipleAllocations
    policy: Policy | None = None
    counter_set: str | None = None
    consumes: tuple[tuple[str, int], ...] = ()  # counters of counter_set: memory in Gi, slices
    taints: tuple[Taint, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> tuple[str, object] | None:
        """A constraint attribute as a typed value (None when the device lacks it)."""
        if name == f"{self.driver}/model":
            return ("string", self.model)
        if name == f"{self.driver}/numa":
            return ("int", self.numa)
        if name == PCIE_ROOT and self.pcie_root is not None:
            return ("string", self.pcie_root)
        return None

    def wire(self) -> Wire:
        attributes: dict[str, Any] = {"model": self.model, "numa": self.numa}
        if self.pcie_root is not None:
            attributes[PCIE_ROOT] = self.pcie_root
        memory: Wire = {"value": gi(self.memory)}
        if self.policy is not None:
            memory["requestPolicy"] = self.policy.wire()
        consumes = []
        if self.counter_set is not None:
            consumes.append(
                device_counter_consumption(self.counter_set, counter_values(dict(self.consumes)))
            )
        return device(
            self.name,
            attributes=attributes,
            capacity={"memory": memory},
            consumes_counters=consumes,
            taints=[t.wire() for t in self.taints],
            allow_multiple_allocations=True if self.shared else None,
        )


def gi(amount: int) -> str:
    return f"{amount}Gi"


def counter_values(values: dict[str, int]) -> dict[str, str]:
    return {name: gi(v) if name == "memory" else str(v) for name, v in values.items()}


# DeviceClasses: the CEL the allocator sees, and the Python predicate the checker uses.
CLASSES: dict[str, tuple[list[str], Callable[[Dev], bool]]] = {
    "gpu": ([], lambda d: d.driver == DRIVER),
    "gpu-large": (
        [f"device.capacity['{DRIVER}'].memory.compareTo(quantity('80Gi')) >= 0"],
        lambda d: d.driver == DRIVER and d.memory >= 80,
    ),
    "gpu-hopper": (
        [f"device.attributes['{DRIVER}'].model in ['H100', 'H200']"],
        lambda d: d.driver == DRIVER and d.model in ("H100", "H200"),
    ),
}


def class_objects() -> list[Wire]:
    return [
        device_class(name, DRIVER, selectors=selectors) for name, (selectors, _) in CLASSES.items()
    ]


@dataclass(frozen=True)
class Alt:
    """An ``exactly`` request, or one ``firstAvailable`` subrequest (``name`` set)."""

    device_class: str
    count: int
    name: str = ""
    min_memory: int | None = None  # CEL selector on capacity memory, in Gi
    model: str | None = None  # CEL selector on the model attribute
    capacity: int | None = None  # capacity.requests.memory, in Gi
    tolerations: tuple[Toleration, ...] = ()
    admin: bool = False

    def selectors(self) -> list[str]:
        out = []
        if self.min_memory is not None:
            out.append(
                f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{self.min_memory}Gi'))"
                " >= 0"
            )
        if self.model is not None:
            out.append(f"device.attributes['{DRIVER}'].model == '{self.model}'")
        return out

    def selects(self, dev: Dev) -> bool:
        """Class and request selectors, evaluated the way they were generated."""
        if not CLASSES[self.device_class][1](dev):
            return False
        if self.min_memory is not None and dev.memory < self.min_memory:
            return False
        return self.model is None or dev.model == self.model

    def tolerated(self, dev: Dev) -> bool:
        return all(
            t.effect == "None" or any(tol.tolerates(t) for tol in self.tolerations)
            for t in dev.taints
        )

    def capacity_wire(self) -> dict[str, str] | None:
        return None if self.capacity is None else {"memory": gi(self.capacity)}


@dataclass(frozen=True)
class Req:
    name: str
    alts: tuple[Alt, ...]
    first_available: bool = False

    def wire(self) -> Wire:
        if not self.first_available:
            alt = self.alts[0]
            return request(
                self.name,
                alt.device_class,
                alt.count,
                selectors=alt.selectors(),
                admin_access=True if alt.admin else None,
                tolerations=[t.wire() for t in alt.tolerations],
                capacity=alt.capacity_wire(),
            )
        return request_with_prioritized_list(
            self.name,
            *(
                sub_request(
                    alt.name,
                    alt.device_class,
                    alt.count,
                    selectors=alt.selectors(),
                    tolerations=[t.wire() for t in alt.tolerations],
                    capacity=alt.capacity_wire(),
                )
                for alt in self.alts
            ),
        )

    def result_name(self, alt: Alt) -> str:
        return f"{self.name}/{alt.name}" if self.first_available else self.name


@dataclass(frozen=True)
class Constraint:
    kind: Literal["match", "distinct"]
    attribute: str
    requests: tuple[str, ...] = ()  # () = every request of the claim

    def wire(self) -> Wire:
        build = match_attribute if self.kind == "match" else distinct_attribute
        return build(self.attribute, *self.requests)


@dataclass(frozen=True)
class ClaimSpec:
    name: str
    requests: tuple[Req, ...]
    constraints: tuple[Constraint, ...] = ()

    def wire(self) -> Wire:
        return claim(
            self.name,
            *(r.wire() for r in self.requests),
            constraints=[c.wire() for c in self.constraints],
        )


@dataclass(frozen=True)
class Held:
    """A result of an allocated claim: dedicated, a share (consumed Gi), or admin access."""

    dev: Dev
    consumed: int | None = None
    admin: bool = False


@dataclass(frozen=True)
class World:
    devices: tuple[Dev, ...]
    counter_sets: dict[tuple[str, str], dict[str, int]]  # (pool, set) -> counter -> total
    slices: tuple[Wire, ...]
    held: tuple[Held, ...]
    claims: tuple[ClaimSpec, ...] = ()
    nodes: tuple[str, ...] = ()
    by_key: dict[tuple[str, str, str], Dev] = field(default_factory=dict)

    def held_claims(self) -> list[Wire]:
        out = []
        for i, h in enumerate(self.held):
            d = h.dev
            result = device_allocation_result(
                "req-0",
                d.driver,
                d.pool,
                d.name,
                h.admin,
                share_id=share_id(900 + i) if d.shared else None,
                consumed_capacity=None if h.consumed is None else {"memory": gi(h.consumed)},
            )
            out.append(
                allocated_claim(f"held-{i}", result, node_selector=local_node_selector(d.node))
            )
        return out

    def claim_objects(self) -> list[Wire]:
        return [c.wire() for c in self.claims]


def share_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def consumption(requested: int | None, dev: Dev) -> int | None:
    """Gi of memory a request consumes of a device; None when the device cannot serve it.

    KEP-5075: without an amount, the policy's default, else the whole capacity; an amount
    rounds up to the next valid value (``validValues``) or to ``min + n * step``; the
    result must be allowed by the policy and fit in the capacity.
    """
    policy = dev.policy
    if requested is None:
        amount = policy.default if policy and policy.default is not None else dev.memory
    elif policy is None:
        amount = requested
    elif policy.values:
        bigger = [v for v in policy.values if v >= requested]
        if not bigger:
            return None
        amount = bigger[0]
    elif policy.min is not None:
        amount = max(requested, policy.min)
        if policy.step is not None:
            amount = policy.min + -(-(amount - policy.min) // policy.step) * policy.step
    else:
        amount = requested
    if (policy is not None and not policy.allows(amount)) or amount > dev.memory:
        return None
    return amount


# --- strategies ----------------------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn, memory: int) -> Policy | None:
    kind = draw(st.sampled_from(["none", "range", "values"]))
    if kind == "none":
        return None
    if kind == "values":
        choices = [v for v in (8, 16, 40, 80) if v <= memory]
        values = tuple(sorted(set(draw(st.lists(st.sampled_from(choices), min_size=1)))))
        default = draw(st.sampled_from(values))  # the API server requires one, among them
        return Policy(default=default, values=values)
    low = draw(st.sampled_from([4, 8, 16]))
    step = draw(st.sampled_from([4, 8]))
    aligned = list(range(low, memory + 1, step))
    high = draw(st.sampled_from((None, *[v for v in aligned if v >= 16])))
    top = high if high is not None else memory
    defaults = [v for v in aligned if v <= top][:4]
    if not defaults or low + step > memory:  # min, or one step from it, above the
        return None  # capacity: the API server refuses such a range
    default = draw(st.sampled_from(defaults))  # required, in the range, on a step
    return Policy(default=default, min=low, step=step, max=high)


@st.composite
def device_group(
    draw: st.DrawFn, node: str, slice_name: str, index: int, room: int, set_name: str
) -> tuple[list[Dev], dict[str, int] | None]:
    """A plain device, a shared device, or a partitioned GPU: 1-3 devices (at most ``room``)
    that draw on a new counter set ``set_name``, returned with it (MIG-like)."""
    base = Dev(
        node=node,
        slice=slice_name,
        pool=node,
        name=f"dev-{index}",
        model=draw(st.sampled_from(MODELS)),
        numa=draw(st.integers(0, 1)),
        pcie_root=draw(st.sampled_from((*ROOTS, None))),
        memory=draw(st.sampled_from(MEMORY_GI)),
        taints=tuple(draw(st.lists(st.sampled_from(TAINTS), max_size=1))),
    )
    kind = draw(st.sampled_from(["plain", "plain", "partitioned", "shared"]))
    if kind == "plain":
        return [base], None
    if kind == "shared":
        return [replace(base, shared=True, policy=draw(policies(base.memory)))], None
    total = draw(st.sampled_from((80, 141)))
    out = []
    for i in range(draw(st.integers(1, min(3, room)))):
        memory = draw(st.sampled_from([m for m in MEMORY_GI if m <= total]))
        slots = 7 if memory == total else draw(st.integers(1, 6))
        shared = draw(st.integers(0, 4)) == 0
        out.append(
            replace(
                base,
                name=f"dev-{index + i}",
                memory=memory,
                counter_set=set_name,
                consumes=(("memory", memory), ("slices", slots)),
                shared=shared,
                policy=draw(policies(memory)) if shared else None,
            )
        )
    return out, {"memory": total, "slices": 7}


@st.composite
def holdings(
    draw: st.DrawFn,
    devs: list[Dev],
    sets: dict[tuple[str, str], dict[str, int]],
    *,
    held_counter_shares: bool,
) -> list[Held]:
    """What allocated claims already hold, keeping the world valid (counters, capacity)."""
    held: list[Held] = []
    used_counters: Counter[tuple[str, str, str]] = Counter()

    def counters_fit(d: Dev) -> bool:
        return d.counter_set is None or all(
            used_counters[(d.pool, d.counter_set, c)] + v <= sets[(d.pool, d.counter_set)][c]
            for c, v in d.consumes
        )

    def take_counters(d: Dev) -> None:
        for c, v in d.consumes:
            used_counters[(d.pool, str(d.counter_set), c)] += v

    for d in devs:
        roll = draw(st.integers(0, 11))
        if roll == 0:  # admin access holds nothing
            held.append(Held(d, admin=True, consumed=consumption(None, d) if d.shared else None))
        elif not d.shared and roll == 1 and counters_fit(d):
            held.append(Held(d))
            take_counters(d)
        elif d.shared and (held_counter_shares or d.counter_set is None) and counters_fit(d):
            used = 0
            for _ in range(draw(st.integers(0, 2))):
                amount = consumption(draw(st.sampled_from([None, 8, 10, 16, 40])), d)
                if amount is not None and used + amount <= d.memory:
                    held.append(Held(d, consumed=amount))
                    used += amount
            if used:
                take_counters(d)
    return held


def node_slices(
    node: str, per_slice: list[list[Dev]], sets: dict[tuple[str, str], dict[str, int]]
) -> list[Wire]:
    """The node's pool: its device slices, then a slice with its counter sets, if any."""
    pool = resource_pool(node, len(per_slice) + (1 if sets else 0))
    slices = [
        slice_with_devices(f"{node}-{s}", node, pool, DRIVER, *(d.wire() for d in devs))
        for s, devs in enumerate(per_slice)
    ]
    if sets:
        counter_sets = [counter_set(name, counter_values(v)) for (_, name), v in sets.items()]
        slices.append(
            slice_with_counter_sets(f"{node}-counters", node, pool, DRIVER, *counter_sets)
        )
    return slices


@st.composite
def node_inventory(
    draw: st.DrawFn, node: str, max_devices: int, *, held_counter_shares: bool
) -> tuple[list[Dev], dict[tuple[str, str], dict[str, int]], list[Wire], list[Held]]:
    """One node: its devices, counter sets, slices and what allocated claims hold of it."""
    devs: list[Dev] = []
    sets: dict[tuple[str, str], dict[str, int]] = {}
    per_slice: list[list[Dev]] = []
    n_slices = draw(st.integers(1, 2)) if max_devices > 3 else 1
    for s in range(n_slices):
        room = max_devices - len(devs) - (n_slices - s - 1)
        target = draw(st.integers(1, max(1, min(8, room))))
        current: list[Dev] = []
        while len(current) < target:
            set_name = f"gpu-{len(sets)}"
            group, new_set = draw(
                device_group(
                    node, f"{node}-{s}", len(devs) + len(current), target - len(current), set_name
                )
            )
            current.extend(group)
            if new_set is not None:
                sets[(node, set_name)] = new_set
        per_slice.append(current)
        devs.extend(current)
    held = draw(holdings(devs, sets, held_counter_shares=held_counter_shares))
    slices = node_slices(node, per_slice, sets)
    if draw(st.integers(0, 3)) == 0:  # a device of another driver, in a pool of its own
        nic = Dev(node, f"{node}-nic", f"{node}-nic", "nic-0", "CX7", 0, ROOTS[0], 16, OTHER_DRIVER)
        devs.append(nic)
        slices.append(slice_with_devices(nic.slice, node, nic.pool, OTHER_DRIVER, nic.wire()))
    return devs, sets, slices, held


@st.composite
def alternatives(draw: st.DrawFn, name: str, max_count: int, *, admin: bool) -> Alt:
    return Alt(
        device_class=draw(st.sampled_from(["gpu", "gpu", "gpu", "gpu-large", "gpu-hopper"])),
        count=draw(st.sampled_from([c for c in (1, 1, 1, 1, 2, 2, 3) if c <= max_count])),
        name=name,
        min_memory=draw(st.sampled_from([None, None, None, None, 40, 80])),
        model=draw(st.sampled_from([None] * 6 + list(MODELS))),
        capacity=draw(st.sampled_from([None, None, None, None, 10, 16, 40])),
        tolerations=tuple(draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique=True))),
        admin=admin and draw(st.integers(0, 7)) == 0,
    )


@st.composite
def claim_specs(
    draw: st.DrawFn, max_claims: int, max_requests: int, max_count: int, *, admin: bool
) -> tuple[ClaimSpec, ...]:
    """Claims with at most ``max_requests`` requests in all."""
    n_claims = draw(st.integers(1, max_claims))
    left = max_requests
    out = []
    for ci in range(n_claims):
        if left < 1:
            break
        most = max(1, min(3, left - (n_claims - ci - 1)))
        n_requests = draw(st.sampled_from([n for n in (1, 1, 1, 2, 2, 3) if n <= most]))
        left -= n_requests
        requests = []
        for ri in range(n_requests):
            name = f"r{ri}"
            if draw(st.integers(0, 3)) == 0:
                alts = (
                    draw(alternatives("first", max_count, admin=False)),
                    draw(alternatives("second", max_count, admin=False)),
                )
                requests.append(Req(name, alts, first_available=True))
            else:
                requests.append(Req(name, (draw(alternatives("", max_count, admin=admin)),)))
        constraints = []
        for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
            names = [r.name for r in requests]
            scope = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
            constraints.append(
                Constraint(
                    kind=draw(st.sampled_from(["match", "distinct"])),
                    attribute=draw(
                        st.sampled_from([f"{DRIVER}/model", f"{DRIVER}/numa", PCIE_ROOT])
                    ),
                    requests=tuple(scope),
                )
            )
        out.append(ClaimSpec(f"claim-{ci}", tuple(requests), tuple(constraints)))
    return tuple(out)


@st.composite
def worlds(
    draw: st.DrawFn,
    *,
    max_devices: int = 16,
    max_claims: int = 2,
    max_requests: int = 4,
    max_count: int = 3,
    admin: bool = True,
    held_counter_shares: bool = True,
) -> World:
    n_nodes = draw(st.integers(1, 3))
    per_node = max(1, max_devices // n_nodes)
    devices: list[Dev] = []
    sets: dict[tuple[str, str], dict[str, int]] = {}
    slices: list[Wire] = []
    held: list[Held] = []
    for node in NODES[:n_nodes]:
        d, s, sl, h = draw(node_inventory(node, per_node, held_counter_shares=held_counter_shares))
        devices.extend(d)
        sets.update(s)
        slices.extend(sl)
        held.extend(h)
    claims = draw(claim_specs(max_claims, max_requests, max_count, admin=admin))
    return World(
        devices=tuple(devices),
        counter_sets=sets,
        slices=tuple(slices),
        held=tuple(held),
        claims=claims,
        nodes=NODES[:n_nodes],
        by_key={d.key: d for d in devices},
    )


# --- the checker ---------------------------------------------------------------------------

_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": GI, "Ti": 1024**4}


def quantity_bytes(text: object) -> int:
    match = _QUANTITY.match(str(text))
    assert match is not None, f"unexpected quantity {text!r}"
    return int(match.group(1)) * _UNITS[match.group(2)]


Key = tuple[str, str, str]


@dataclass
class Usage:
    """What held and new results use; admin-access results hold nothing."""

    dedicated: Counter[Key] = field(default_factory=Counter)  # results per exclusive device
    shared: Counter[Key] = field(default_factory=Counter)  # Gi consumed per shared device
    devices: set[Key] = field(default_factory=set)  # every device in use: counters
    shares: set[tuple[Key, str]] = field(default_factory=set)

    def add(self, dev: Dev, consumed: int | None) -> None:
        self.devices.add(dev.key)
        if dev.shared:
            self.shared[dev.key] += consumed or 0
        else:
            self.dedicated[dev.key] += 1


def _result_problems(what: str, alt: Alt, dev: Dev, res: Wire, usage: Usage) -> list[str]:
    """One result: selectors, taints, echoed fields, capacity; records what it uses."""
    out = []
    if not alt.selects(dev):
        out.append(f"{what}: does not match the class or request selectors")
    if not alt.tolerated(dev):
        out.append(f"{what}: taints {dev.taints} not tolerated by {alt.tolerations}")
    if bool(res.get("adminAccess")) != alt.admin:
        out.append(f"{what}: adminAccess {res.get('adminAccess')!r}")
    if res.get("tolerations", []) != [t.wire() for t in alt.tolerations]:
        out.append(f"{what}: tolerations {res.get('tolerations')!r}")
    expected = None
    if dev.shared:
        sid = res.get("shareID")
        if not sid or (dev.key, sid) in usage.shares:
            out.append(f"{what}: shareID {sid!r} missing or not unique")
        usage.shares.add((dev.key, str(sid)))
        expected = consumption(alt.capacity, dev)
        got = {k: quantity_bytes(v) for k, v in (res.get("consumedCapacity") or {}).items()}
        if expected is None:
            out.append(f"{what}: cannot serve capacity {alt.capacity}Gi")
        elif got != {"memory": expected * GI}:
            out.append(f"{what}: consumedCapacity {got}, expected {expected}Gi")
    else:
        if "shareID" in res or "consumedCapacity" in res:
            out.append(f"{what}: shareID/consumedCapacity on an exclusive device")
        if alt.capacity is not None and alt.capacity > dev.memory:
            out.append(f"{what}: capacity {alt.capacity}Gi > {dev.memory}Gi")
    if not alt.admin:
        usage.add(dev, expected)
    return out


def _constraint_problems(
    where: str, spec: ClaimSpec, picked: list[tuple[str, Dev, Wire]]
) -> list[str]:
    out = []
    for c in spec.constraints:
        values = [
            (d.name, d.attribute(c.attribute))
            for base, d, _ in picked
            if not c.requests or base in c.requests
        ]
        if any(v is None for _, v in values):
            out.append(f"{where}: {c}: a device lacks the attribute: {values}")
        elif c.kind == "match" and len({v for _, v in values}) > 1:
            out.append(f"{where}: {c}: values differ: {values}")
        elif c.kind == "distinct" and len({v for _, v in values}) != len(values):
            out.append(f"{where}: {c}: values repeat: {values}")
    return out


def _claim_problems(
    world: World, spec: ClaimSpec, allocation: Wire, usage: Usage, nodes: set[str]
) -> list[str]:
    out: list[str] = []
    where = f"claim {spec.name}"
    results: list[Wire] = allocation["devices"]["results"]
    known = {r.result_name(a) for r in spec.requests for a in r.alts}
    out.extend(
        f"{where}: result for unknown request {res['request']!r}"
        for res in results
        if res["request"] not in known
    )
    picked: list[tuple[str, Dev, Wire]] = []  # (request, device, result)
    for req in spec.requests:
        mine = [r for r in results if r["request"].split("/")[0] == req.name]
        names = {r["request"] for r in mine}
        alts = [a for a in req.alts if req.result_name(a) in names]
        if len(alts) != 1 or len(names) != 1:
            out.append(f"{where}, {req.name}: results name {sorted(names)}")
            continue
        alt = alts[0]
        if len(mine) != alt.count:
            out.append(f"{where}, {req.name}: {len(mine)} devices, {alt.count} requested")
        keys = [(r["driver"], r["pool"], r["device"]) for r in mine]
        if len(set(keys)) != len(keys):
            out.append(f"{where}, {req.name}: the same device twice: {keys}")
        for res, key in zip(mine, keys, strict=True):
            dev = world.by_key.get(key)
            if dev is None:
                out.append(f"{where}, {req.name}: unknown device {key}")
                continue
            picked.append((req.name, dev, res))
            out.extend(_result_problems(f"{where}, {req.name}, {dev.name}", alt, dev, res, usage))
    # adminAccess gets a device whoever holds it, but not twice in one claim.
    exclusive = Counter(d.key for _, d, _ in picked if not d.shared)
    out.extend(
        f"{where}: admin-access device {d.name} given twice in the claim"
        for _, d, r in picked
        if r.get("adminAccess") and exclusive[d.key] > 1
    )
    out.extend(_constraint_problems(where, spec, picked))
    mine_nodes = {d.node for _, d, _ in picked}
    nodes.update(mine_nodes)
    if len(mine_nodes) == 1 and allocation.get("nodeSelector") != local_node_selector(
        next(iter(mine_nodes))
    ):
        out.append(f"{where}: nodeSelector {allocation.get('nodeSelector')}")
    return out


def _usage_problems(world: World, usage: Usage) -> list[str]:
    out = [f"device {key} is given {n} times" for key, n in usage.dedicated.items() if n > 1]
    for key, used in usage.shared.items():
        if used > world.by_key[key].memory:
            out.append(f"shared device {key}: {used}Gi consumed of {world.by_key[key].memory}Gi")
    totals: Counter[tuple[str, str, str]] = Counter()
    for key in usage.devices:
        dev = world.by_key[key]
        for name, value in dev.consumes:
            totals[(dev.pool, str(dev.counter_set), name)] += value
    for (pool, set_name, name), value in totals.items():
        limit = world.counter_sets[(pool, set_name)][name]
        if value > limit:
            out.append(f"counter {pool}/{set_name}/{name}: {value} used of {limit}")
    return out


def problems(world: World, allocations: Sequence[Wire]) -> list[str]:
    """Everything wrong with ``allocations`` (one ``status.allocation`` per claim of the world)."""
    if len(allocations) != len(world.claims):
        return [f"{len(allocations)} allocations for {len(world.claims)} claims"]
    usage = Usage()
    for h in world.held:
        if not h.admin:
            usage.add(h.dev, h.consumed)
    out: list[str] = []
    nodes: set[str] = set()
    for spec, allocation in zip(world.claims, allocations, strict=True):
        out.extend(_claim_problems(world, spec, allocation, usage, nodes))
    if len(nodes) > 1:
        out.append(f"devices on several nodes: {sorted(nodes)}")
    return out + _usage_problems(world, usage)


# --- the brute-force oracle ----------------------------------------------------------------


def feasible_on(world: World, node: str) -> bool:
    """Whether any assignment of the node's devices to the requests passes :func:`problems`."""
    devices = [d for d in world.devices if d.node == node]
    held_exclusive = {h.dev.key for h in world.held if not h.admin and not h.dev.shared}
    options: list[list[tuple[Req, Alt, tuple[Dev, ...]]]] = []
    shape: list[int] = []
    for spec in world.claims:
        shape.append(len(spec.requests))
        for req in spec.requests:
            choices: list[tuple[Req, Alt, tuple[Dev, ...]]] = []
            for alt in req.alts:
                eligible = [
                    d
                    for d in devices
                    if alt.selects(d)
                    and alt.tolerated(d)
                    and (alt.admin or d.shared or d.key not in held_exclusive)
                    and (
                        consumption(alt.capacity, d) is not None
                        if d.shared
                        else alt.capacity is None or alt.capacity <= d.memory
                    )
                ]
                choices.extend(
                    (req, alt, combo) for combo in itertools.combinations(eligible, alt.count)
                )
            options.append(choices)
    for choice in itertools.product(*options):
        allocations = []
        picks = iter(choice)
        n = 0
        for size in shape:
            results = []
            for req, alt, combo in itertools.islice(picks, size):
                for d in combo:
                    res: Wire = {
                        "request": req.result_name(alt),
                        "driver": d.driver,
                        "pool": d.pool,
                        "device": d.name,
                    }
                    if alt.admin:
                        res["adminAccess"] = True
                    if alt.tolerations:
                        res["tolerations"] = [t.wire() for t in alt.tolerations]
                    if d.shared:
                        n += 1
                        res["shareID"] = share_id(n)
                        res["consumedCapacity"] = {"memory": gi(consumption(alt.capacity, d) or 0)}
                    results.append(res)
            allocations.append(
                {"devices": {"results": results}, "nodeSelector": local_node_selector(node)}
            )
        if not problems(world, allocations):
            return True
    return False


# --- running the allocator -----------------------------------------------------------------


def make_allocator(world: World, strategy: Literal["first-fit", "topology"]) -> Allocator:
    counter = itertools.count()
    return Allocator(
        list(world.slices),
        class_objects(),
        allocated_claims=world.held_claims(),
        strategy=strategy,
        share_id_factory=lambda: share_id(next(counter)),
    )


def as_dicts(results: list[AllocationResult] | None) -> list[Wire] | None:
    return None if results is None else [r.to_dict() for r in results]


def without_share_ids(allocations: list[Wire] | None) -> list[Wire] | None:
    out = copy.deepcopy(allocations)
    for allocation in out or ():
        for res in allocation["devices"]["results"]:
            if "shareID" in res:
                res["shareID"] = "<share-id>"
    return out


def node_of(results: list[AllocationResult]) -> str | None:
    nodes = {r.node for r in results}
    assert len(nodes) == 1, nodes
    return nodes.pop()


def assert_valid(world: World, results: list[AllocationResult] | None, what: str) -> None:
    if results is None:
        return
    found = problems(world, [r.to_dict() for r in results])
    assert not found, f"{what} returned an invalid allocation:\n" + "\n".join(found)


PROFILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the properties ------------------------------------------------------------------------


@PROFILE
@given(worlds())
def test_first_fit_is_valid_deterministic_and_explained(world: World) -> None:
    claims = world.claim_objects()
    inputs = copy.deepcopy((world.slices, world.claims, claims))
    allocator = make_allocator(world, "first-fit")
    results = allocator.allocate(claims)
    assert_valid(world, results, "first-fit")
    again = allocator.allocate(claims)
    fresh = make_allocator(world, "first-fit").allocate(claims)
    assert as_dicts(fresh) == as_dicts(results)  # same share-id sequence: fully identical
    assert without_share_ids(as_dicts(again)) == without_share_ids(as_dicts(results))
    explanation = allocator.explain(claims)
    assert explanation.satisfiable == (results is not None)
    if results is not None:
        assert explanation.node == node_of(results)
    assert (world.slices, world.claims, claims) == inputs


@PROFILE
@given(worlds())
def test_topology_is_valid_and_succeeds_when_first_fit_does(world: World) -> None:
    claims = world.claim_objects()
    first_fit = make_allocator(world, "first-fit").allocate(claims)
    allocator = make_allocator(world, "topology")
    topology = allocator.allocate(claims)
    assert_valid(world, topology, "topology")
    assert (topology is None) == (first_fit is None)
    assert allocator.explain(claims).satisfiable == (topology is not None)
    again = make_allocator(world, "topology").allocate(claims)
    assert as_dicts(again) == as_dicts(topology)


TINY = worlds(max_devices=6, max_claims=2, max_requests=2, max_count=2, admin=False)


@settings(PROFILE, max_examples=300)
@given(TINY)
def test_complete_and_sound_against_brute_force(world: World) -> None:
    """Tiny worlds: an allocation exists on a node iff the allocator finds one there."""
    claims = world.claim_objects()
    feasible = {node: feasible_on(world, node) for node in world.nodes}
    for strategy in ("first-fit", "topology"):
        allocator = make_allocator(world, strategy)
        for node in world.nodes:
            results = allocator.allocate(claims, node=node)
            assert_valid(world, results, f"{strategy} on {node}")
            assert (results is not None) == feasible[node], (strategy, node, feasible)
            if results is not None:
                assert node_of(results) == node
            assert allocator.explain(claims, node=node).satisfiable == feasible[node]
        results = allocator.allocate(claims)
        assert (results is not None) == any(feasible.values()), (strategy, feasible)
        if results is not None and strategy == "first-fit":
            # first-fit tries nodes in name order: the first feasible one
            assert node_of(results) == next(n for n in world.nodes if feasible[n])


# --- the checker itself must be able to fail -------------------------------------------------


def _two_gpu_world() -> World:
    a = Dev("node-a", "node-a-0", "node-a", "dev-0", "H100", 0, ROOTS[0], 80)
    b = Dev("node-a", "node-a-0", "node-a", "dev-1", "A100", 1, ROOTS[1], 40)
    spec = ClaimSpec(
        "claim-0",
        (Req("r0", (Alt("gpu", 1, min_memory=80),)),),
    )
    slices = (slice_with_devices("node-a-0", "node-a", "node-a", DRIVER, a.wire(), b.wire()),)
    return World(
        devices=(a, b),
        counter_sets={},
        slices=slices,
        held=(),
        claims=(spec,),
        nodes=("node-a",),
        by_key={a.key: a, b.key: b},
    )


def test_checker_rejects_wrong_allocations() -> None:
    world = _two_gpu_world()
    results = make_allocator(world, "first-fit").allocate(world.claim_objects())
    assert results is not None
    good = [r.to_dict() for r in results]
    assert problems(world, good) == []
    assert good[0]["devices"]["results"][0]["device"] == "dev-0"
    wrong = copy.deepcopy(good)
    wrong[0]["devices"]["results"][0]["device"] = "dev-1"  # 40Gi: fails the selector
    assert any("selectors" in p for p in problems(world, wrong))
    twice = copy.deepcopy(good)
    twice[0]["devices"]["results"].append(dict(twice[0]["devices"]["results"][0]))
    assert problems(world, twice)
    assert feasible_on(world, "node-a")
    held = replace(world, held=(Held(world.devices[0]),))
    assert not feasible_on(held, "node-a")
    assert make_allocator(held, "first-fit").allocate(held.claim_objects()) is None


def _counter_world() -> World:
    """A GPU whose counter set is drawn on by a whole-GPU device and by a shared device,
    which an allocated claim already holds a share of: the whole GPU is not available."""
    whole = Dev(
        node="node-a",
        slice="node-a-0",
        pool="node-a",
        name="dev-0",
        model="H100",
        numa=0,
        pcie_root=ROOTS[0],
        memory=80,
        counter_set="gpu-0",
        consumes=(("memory", 80),),
    )
    shared = replace(whole, name="dev-1", shared=True)
    sets = {("node-a", "gpu-0"): {"memory": 80}}
    return World(
        devices=(whole, shared),
        counter_sets=sets,
        slices=tuple(node_slices("node-a", [[whole, shared]], sets)),
        held=(Held(shared, consumed=16),),
        claims=(ClaimSpec("claim-0", (Req("r0", (Alt("gpu", 1),)),)),),
        nodes=("node-a",),
        by_key={whole.key: whole, shared.key: shared},
    )


def test_checker_counts_counters_of_held_shares() -> None:
    world = _counter_world()
    assert not feasible_on(world, "node-a")
    free = replace(world, held=())
    assert feasible_on(free, "node-a")
    allocation = {
        "devices": {
            "results": [{"request": "r0", "driver": DRIVER, "pool": "node-a", "device": "dev-0"}]
        },
        "nodeSelector": local_node_selector("node-a"),
    }
    assert problems(free, [allocation]) == []
    assert problems(world, [allocation]) == ["counter node-a/gpu-0/memory: 160 used of 80"]


def test_held_share_counts_against_counters() -> None:
    world = _counter_world()
    results = make_allocator(world, "first-fit").allocate(world.claim_objects())
    assert results is None, as_dicts(results)

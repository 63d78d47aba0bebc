"""What counting needs to know of the slices and classes alone, found once per inventory:
the *sorts* of devices, the *shapes* the choices ask for, and the *units* of partitioned or
shared devices (see :mod:`dra_jupyter.hub.counting`). Pure.

A sort is a set of devices that agree on everything the DeviceClasses' selectors and the
choices' selectors read (those selectors' own list of what they read, as the allocator's
fast path gives it), so the allocator is asked about one device of each. A unit is the set
of a pool's devices that draw on the same counter sets (one GPU and its MIG placements), or
one device that several claims may share, or a tainted device.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import GPU_CLASSES, MIG_CLASS, TPU_CLASS, build_claim, class_driver
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.model.objects import (
    CounterSet,
    Device,
    DeviceClass,
    DeviceID,
    NodeSelection,
    PoolID,
    ResourceClaim,
    ResourceSlice,
)
from dra_jupyter.model.parse import parse_resource_claim
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors import compile_selector

NAMESPACE = "dra-jupyter-choices"  # of the claims made up while counting
DeviceKey = tuple[str, str, str]  # driver, pool, device: equal to a DeviceID


@dataclass(frozen=True)
class Sort:
    """Devices alike for the selectors of the classes and of the choices."""

    device: Device  # the first one seen
    dev_id: DeviceID
    classes: tuple[str, ...]  # the DeviceClasses whose selectors hold
    model: str | None  # productName (tpuGen for a TPU)
    profile: str | None  # a MIG device's profile
    memory: Quantity | None
    flexible: bool  # in a unit: counters, shares, taints or binding conditions


@dataclass(frozen=True)
class Shape:
    """One kind of device a choice asks for: ``request`` are ``dra.request`` keywords for
    one device; :meth:`keywords` gives them for N."""

    key: str  # the slug's stem: "h200", "mig-3g-71gb"
    device_class: str
    request: Mapping[str, object]
    count_key: str | None  # "gpu", "tpu" or "count"; None: one device only (MIG)
    model: str | None
    profile: str | None
    memory: Quantity | None
    noun: str  # "GPU", "MIG slice", "TPU chip", "device"

    def keywords(self, count: int) -> dict[str, object]:
        request = dict(self.request)
        if self.count_key is not None:
            request[self.count_key] = count
        return request


@dataclass
class Unit:
    """Devices of one pool linked by counter sets (or one shared or tainted device)."""

    node: str
    pool: PoolID
    devices: tuple[Device, ...]
    sorts: tuple[int, ...]
    counter_sets: tuple[CounterSet, ...]
    counter_slice: ResourceSlice | None  # a slice of the pool's counters (its node selection)
    multiple: bool  # a device several claims may share
    structure: int = 0  # units of one structure and holdings give one count
    slices: tuple[ResourceSlice, ...] = ()  # this unit as a pool of its own, made on first use

    def as_pool(self) -> tuple[ResourceSlice, ...]:
        """The unit as a pool of its own: its devices, and a slice of its counter sets."""
        if self.slices:
            return self.slices
        selection = NodeSelection(node_name=self.node)
        n = 2 if self.counter_sets else 1
        devices = ResourceSlice(
            name=f"{self.pool.pool}-unit",
            driver=self.pool.driver,
            pool=self.pool.pool,
            generation=1,
            resource_slice_count=n,
            node_selection=selection,
            devices=self.devices,
        )
        if not self.counter_sets:
            self.slices = (devices,)
            return self.slices
        counters = ResourceSlice(
            name=f"{self.pool.pool}-unit-counters",
            driver=self.pool.driver,
            pool=self.pool.pool,
            generation=1,
            resource_slice_count=n,
            node_selection=self.counter_slice.node_selection
            if self.counter_slice is not None
            else selection,
            shared_counters=self.counter_sets,
        )
        self.slices = (devices, counters)
        return self.slices


@dataclass
class Layout:
    """What counting keeps of one inventory (see the module's docstring)."""

    classes: tuple[DeviceClass, ...]
    sorts: list[Sort]
    shapes: list[Shape]
    claims: list[ResourceClaim]  # per shape: the claim for one device
    shape_sorts: list[frozenset[int]]  # per shape: the sorts it takes
    whole: dict[DeviceKey, tuple[str, int]]  # a whole device: its node and sort
    whole_per_node: list[dict[str, int]]  # per shape: node -> whole devices of it
    units: list[Unit]
    unit_at: dict[DeviceKey, tuple[int, int]]  # a unit's device: (unit, position)
    shape_units: list[list[int]]  # per shape: the units with a device of it
    sort_shapes: list[tuple[int, ...]]  # per sort: the shapes that take it
    unit_shapes: list[tuple[int, ...]]  # per unit: the shapes it has a device of
    odd_nodes: list[str]  # nodes whose pools are counted by the allocator on the node
    everywhere: bool  # slices for many nodes: counted by the allocator on the cluster
    # filled by counting, once: per shape, what idle devices take per node, the counts
    # offered; per (shape, count), the requests idle devices take (and whether capped)
    idle_per_node: list[dict[str, int]] = field(default_factory=list)
    ladders: list[tuple[int, ...]] = field(default_factory=list)
    possible: dict[tuple[int, int], tuple[int, bool]] = field(default_factory=dict)
    modelled: dict[tuple[int, int], int] = field(default_factory=dict)  # of possible: ours
    shared_nodes: list[frozenset[str]] = field(default_factory=list)  # per shape


class _Sorter:
    """Gives each device its sort: devices that agree on what the selectors read share one,
    and the allocator is asked about the first of them."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self.per_driver, self.exact = _reads(tuple(allocator.classes.values()))
        self.sorts: list[Sort] = []
        self._known: dict[object, int] = {}

    def pool(
        self, node: str, pool_id: PoolID, device_slices: Sequence[ResourceSlice]
    ) -> tuple[dict[DeviceKey, tuple[str, int]], list[tuple[Device, int]]] | None:
        """The pool's whole devices (their node and sort) and its flexible ones (with their
        sort), in the pool's order; None for a pool with a device name twice (invalid)."""
        driver, pool = pool_id
        names = self.per_driver.get(driver) or _names_for(driver, self.per_driver)
        exact, sorts, known = self.exact, self.sorts, self._known
        seen: set[str] = set()
        whole: dict[DeviceKey, tuple[str, int]] = {}
        flexible: list[tuple[Device, int]] = []
        for s in sorted(device_slices, key=lambda s: s.name):
            for device in s.devices:
                name = device.name
                if name in seen:
                    return None
                seen.add(name)
                values = tuple(map(device.attributes.get, names))
                key: object = (
                    (
                        driver,
                        values,
                        tuple(map(type, values)),  # True and 1 are equal, but not alike
                        bool(device.consumes_counters),
                        device.allow_multiple_allocations,
                        device.taints,
                        device.binds_to_node,
                        device.binding_conditions,
                    )
                    if exact
                    else (driver, pool, name)  # a class selector without a fast path
                )
                k = known.get(key)
                if k is None:
                    k = known[key] = len(sorts)
                    sorts.append(_sort(self.allocator, device, DeviceID(driver, pool, name)))
                if sorts[k].flexible:
                    flexible.append((device, k))
                else:
                    whole[(driver, pool, name)] = (node, k)
        return whole, flexible


def build_layout(allocator: Allocator) -> Layout:
    """The layout of the allocator's slices and classes (what its catalog holds)."""
    index = allocator.catalog.index
    classes = tuple(allocator.classes.values())
    sorter = _Sorter(allocator)
    whole: dict[DeviceKey, tuple[str, int]] = {}
    units: list[Unit] = []
    odd_nodes: set[str] = set()
    for pool_id, device_slices in index.device_slices.items():
        node = _pool_node(index.by_pool.get(pool_id, []), device_slices)
        if node is None:
            odd_nodes.update(_nodes_of(device_slices))
            continue
        found = sorter.pool(node, pool_id, device_slices)
        made = None
        if found is not None:
            counters = index.counters.get(pool_id, [])
            made = _units(node, pool_id, found[1], counters) if found[1] else []
        if found is None or made is None:
            odd_nodes.add(node)  # the allocator calls the pool invalid, and says why
            continue
        whole.update(found[0])
        units.extend(made)
    sorts = sorter.sorts
    if odd_nodes:  # an odd node is counted by the allocator alone, whole
        whole = {d: v for d, v in whole.items() if v[0] not in odd_nodes}
        units = [u for u in units if u.node not in odd_nodes]
    bad = _number_structures(units)
    if bad:  # a counter its set has not: the allocator calls the pool invalid
        odd_nodes.update(units[u].node for u in bad)
        whole = {d: v for d, v in whole.items() if v[0] not in odd_nodes}
        units = [u for u in units if u.node not in odd_nodes]
        _number_structures(units)
    unit_at = {
        (unit.pool.driver, unit.pool.pool, device.name): (u, pos)
        for u, unit in enumerate(units)
        for pos, device in enumerate(unit.devices)
    }
    shapes = _shapes(sorts, classes)
    claims = [shape_claim(shape, 1, classes) for shape in shapes]
    shape_sorts = [
        frozenset(i for i, sort in enumerate(sorts) if _takes(allocator, claim, sort))
        for claim in claims
    ]
    sort_shapes = [
        tuple(s for s, taken in enumerate(shape_sorts) if k in taken) for k in range(len(sorts))
    ]
    per_node: list[dict[str, int]] = [defaultdict(int) for _ in shapes]
    for node, k in whole.values():
        for s in sort_shapes[k]:
            per_node[s][node] += 1
    unit_shapes = [
        tuple(s for s, taken in enumerate(shape_sorts) if taken.intersection(unit.sorts))
        for unit in units
    ]
    shape_units: list[list[int]] = [[] for _ in shapes]
    for u, of_unit in enumerate(unit_shapes):
        for s in of_unit:
            shape_units[s].append(u)
    return Layout(
        classes=classes,
        sorts=sorts,
        shapes=shapes,
        claims=claims,
        shape_sorts=shape_sorts,
        whole=whole,
        whole_per_node=[dict(d) for d in per_node],
        units=units,
        unit_at=unit_at,
        shape_units=shape_units,
        sort_shapes=sort_shapes,
        unit_shapes=unit_shapes,
        odd_nodes=sorted(odd_nodes),
        everywhere=bool(index.shared),
    )


def shape_claim(shape: Shape, count: int, classes: Sequence[DeviceClass]) -> ResourceClaim:
    """The ResourceClaim ``dra.request`` makes for ``count`` devices of the shape."""
    wire = build_claim(
        f"choice-{shape.key}-x{count}",
        shape.keywords(count),
        namespace=NAMESPACE,
        classes=[c.name for c in classes],
    )
    return parse_resource_claim(wire)


# --- sorts -------------------------------------------------------------------------------------


def _reads(classes: Sequence[DeviceClass]) -> tuple[dict[str, tuple[str, ...]], bool]:
    """Per driver that a class names, the attributes the classes' selectors and the choices'
    selectors read (as published: bare and qualified); and whether every class selector
    has a fast path (only then do devices that agree on those get the same answers)."""
    common: set[str] = set()
    exact = True
    for cls in classes:
        for i, expression in enumerate(cls.selectors):
            reads = compile_selector(
                expression, where=f"DeviceClass {cls.name}, spec.selectors[{i}]"
            ).reads
            if reads is None or reads.capacity or reads.allow:
                exact = False  # (capacity and sharing are not in a sort's key)
                continue
            common.update(reads.attributes)
    drivers = {class_driver(cls.name) for cls in classes}
    return {driver: _with_model(common, driver) for driver in drivers}, exact


def _with_model(common: set[str], driver: str) -> tuple[str, ...]:
    model = "tpuGen" if driver == TPU_CLASS else "productName"
    extra = {model, f"{driver}/{model}", "profile", f"{driver}/profile"}
    return tuple(sorted(common | extra))


def _names_for(driver: str, per_driver: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """What devices of a driver no class names are told apart by (their classes read
    attributes of other drivers, but a class may select any driver)."""
    common = {n for names in per_driver.values() for n in names if "/" in n}
    per_driver[driver] = found = _with_model(common, driver)
    return found


def _attribute(device: Device, driver: str, name: str) -> str | None:
    value = device.attributes.get(name, device.attributes.get(f"{driver}/{name}"))
    return value if isinstance(value, str) and value else None


def _sort(allocator: Allocator, device: Device, dev_id: DeviceID) -> Sort:
    driver = dev_id.driver
    classes = []
    for cls in allocator.classes.values():
        try:
            holds = all(
                allocator.selector_holds(expression, device, dev_id, cls, None, i)
                for i, expression in enumerate(cls.selectors)
            )
        except DraJupyterError:  # a CEL error on this device: the class never takes it
            holds = False
        if holds:
            classes.append(cls.name)
    memory = device.capacity.get("memory")
    return Sort(
        device=device,
        dev_id=dev_id,
        classes=tuple(classes),
        model=_attribute(device, driver, "tpuGen" if driver == TPU_CLASS else "productName"),
        profile=_attribute(device, driver, "profile"),
        memory=memory.value if memory is not None else None,
        flexible=bool(device.consumes_counters)
        or device.allow_multiple_allocations
        or bool(device.taints)
        or device.binds_to_node
        or bool(device.binding_conditions),
    )


def _takes(allocator: Allocator, claim: ResourceClaim, sort: Sort) -> bool:
    """Whether the claim's one-device request takes devices of the sort: the class's and the
    request's selectors hold (the allocator's answer)."""
    exact = claim.requests[0].exactly
    cls = allocator.classes.get(exact.device_class_name) if exact is not None else None
    if exact is None or cls is None or cls.name not in sort.classes:
        return False
    try:
        return allocator.matches(cls, exact, claim, sort.device, sort.dev_id)
    except DraJupyterError:
        return False


# --- pools and units -------------------------------------------------------------------------


def _pool_node(
    every: Sequence[ResourceSlice], device_slices: Sequence[ResourceSlice]
) -> str | None:
    """The node of a pool modelled here: all its device slices are that one node's, of one
    generation, as many slices as it says it has; else None (the allocator counts it)."""
    first = device_slices[0].node_selection
    node = first.node_name if first is not None else None
    if not node:
        return None
    for s in device_slices:
        if s.per_device_node_selection or s.node_selection is None:
            return None
        if s.node_selection.node_name != node:
            return None
    generation = every[0].generation
    if any(s.generation != generation or s.resource_slice_count != len(every) for s in every):
        return None
    return node


def _nodes_of(slices: Iterable[ResourceSlice]) -> set[str]:
    return {
        s.node_selection.node_name
        for s in slices
        if s.node_selection is not None and s.node_selection.node_name
    }


def _units(
    node: str,
    pool: PoolID,
    devices: list[tuple[Device, int]],
    counter_slices: Sequence[ResourceSlice],
) -> list[Unit] | None:
    """The pool's flexible devices grouped by the counter sets they draw on (linked sets
    merged), in the pool's order; None when a device draws on a set the pool does not
    publish (the allocator calls the pool invalid; a counter it does not publish is found
    per structure, :func:`_number_structures`)."""
    sets: dict[str, CounterSet] = {}
    owner: dict[str, ResourceSlice] = {}
    for s in counter_slices:
        for published in s.shared_counters:
            if published.name in sets:
                return None  # a counter set twice: invalid
            sets[published.name] = published
            owner[published.name] = s
    group_of: dict[str, int] = {}  # counter set -> group
    groups: list[list[int]] = []
    merged: list[int] = []  # group -> the group it was merged into (itself if none)
    for i, (device, _) in enumerate(devices):
        uses = device.consumes_counters
        if len(uses) == 1:  # the common case: one GPU's counter set
            use = uses[0]
            if use.counter_set not in sets:
                return None  # (its counters are checked per structure)
            g = group_of.get(use.counter_set)
            if g is None:
                g = group_of[use.counter_set] = len(groups)
                groups.append([])
                merged.append(g)
            while merged[g] != g:
                g = merged[g]
            groups[g].append(i)
            continue
        found: int | None = None
        for use in uses:
            if use.counter_set not in sets:
                return None
            g = group_of.get(use.counter_set)
            if g is None:
                continue
            while merged[g] != g:
                g = merged[g]
            if found is None:
                found = g
            elif g != found:  # a device on two groups' sets: they are one unit
                groups[found].extend(groups[g])
                groups[g] = []
                merged[g] = found
        if found is None:
            found = len(groups)
            groups.append([])
            merged.append(found)
        groups[found].append(i)
        for use in uses:
            group_of[use.counter_set] = found
    out = []
    for members in groups:
        if not members:
            continue
        members.sort()
        chosen = [devices[i] for i in members]
        used = dict.fromkeys(use.counter_set for d, _ in chosen for use in d.consumes_counters)
        out.append(
            Unit(
                node=node,
                pool=pool,
                devices=tuple(d for d, _ in chosen),
                sorts=tuple(k for _, k in chosen),
                counter_sets=tuple(sets[name] for name in used),
                counter_slice=owner[next(iter(used))] if used else None,
                multiple=any(d.allow_multiple_allocations for d, _ in chosen),
            )
        )
    return out


def _number_structures(units: Sequence[Unit]) -> set[int]:
    """Number the units by structure: their devices' sorts, in order; which of the unit's
    counter sets each device draws on and how much; the sets' counters; a shared device's
    capacity; taints and binding conditions. Quantities are told apart by object: the parser
    keeps one object per text, so equal texts give one object (equal values written alike),
    and a structure is never shared by two units that differ. Returns the units that draw on
    a counter their set has not (the allocator calls their pool invalid), checked once per
    structure."""
    known: dict[object, int] = {}
    valid: list[bool] = []
    bad: set[int] = set()
    for u, unit in enumerate(units):
        local = {cs.name: i for i, cs in enumerate(unit.counter_sets)}
        parts: list[object] = [unit.sorts]
        for device in unit.devices:
            for use in device.consumes_counters:  # names (str), then values (int ids)
                counters = use.counters
                parts.append((local[use.counter_set], *counters, *map(id, counters.values())))
            if device.allow_multiple_allocations or device.taints or device.binding_conditions:
                parts.append(
                    (
                        tuple((n, id(c)) for n, c in device.capacity.items()),
                        device.taints,
                        device.binding_conditions,
                    )
                )
            parts.append(None)  # the end of a device
        for cs in unit.counter_sets:
            parts.append((*cs.counters, *map(id, cs.counters.values())))
        key = tuple(parts)
        n = known.get(key)
        if n is None:
            n = known[key] = len(known)
            valid.append(_counters_defined(unit))
        unit.structure = n
        if not valid[n]:
            bad.add(u)
    return bad


def _counters_defined(unit: Unit) -> bool:
    """Whether every counter the unit's devices draw on is one of its set's."""
    sets = {cs.name: cs.counters for cs in unit.counter_sets}
    return all(
        use.counters.keys() <= sets[use.counter_set].keys()
        for device in unit.devices
        for use in device.consumes_counters
    )


# --- shapes ----------------------------------------------------------------------------------


def _shapes(sorts: Sequence[Sort], classes: Sequence[DeviceClass]) -> list[Shape]:
    """One shape per device class and model (per MIG profile for the MIG class), in the
    classes' order, then by model; MIG profiles by size."""
    names = [c.name for c in classes]
    gpu_class = next((c for c in GPU_CLASSES if c in names), GPU_CLASSES[0])
    out: list[Shape] = []
    seen: set[str] = set()
    for cls in names:
        mine = [s for s in sorts if cls in s.classes]
        if not mine:
            continue
        if cls == MIG_CLASS:
            by_profile: dict[str, Sort] = {}
            for s in mine:
                if s.profile is not None:
                    by_profile.setdefault(s.profile, s)
            for profile in sorted(by_profile, key=_profile_order):
                s = by_profile[profile]
                key = _unique(f"mig-{_slug(profile)}", seen)
                out.append(
                    Shape(key, cls, {"mig": profile}, None, s.model, profile, s.memory, "MIG slice")
                )
            continue
        by_model: dict[str | None, Sort] = {}
        for s in mine:
            by_model.setdefault(s.model, s)
        for model in sorted(by_model, key=lambda m: (m is None, m or "")):
            s = by_model[model]
            request: dict[str, object]
            if cls == gpu_class:
                request, count_key, noun = {"gpu": 1}, "gpu", "GPU"
            elif cls == TPU_CLASS:
                request, count_key, noun = {"tpu": 1}, "tpu", "TPU chip"
            else:
                request, count_key = {"device_class": cls, "count": 1}, "count"
                noun = "GPU" if cls in GPU_CLASSES else "device"
            if model is not None:
                request["model"] = model
            stem = _slug(_short_model(model)) if model else _slug(cls)
            if cls == TPU_CLASS:
                stem = f"tpu-{stem}"
            key = _unique(stem if stem not in seen else _slug(f"{stem}-{cls}"), seen)
            out.append(Shape(key, cls, request, count_key, model, None, s.memory, noun))
    return out


def _profile_order(profile: str) -> tuple[int, int, str]:
    """``1g.18gb`` < ``1g.18gb+me`` < ``1g.35gb`` < ``2g.35gb`` < ``7g.141gb``."""
    match = re.match(r"(\d+)g\.(\d+)gb", profile)
    if match is None:
        return (1 << 30, 0, profile)
    return (int(match.group(1)), int(match.group(2)), profile)


def _short_model(model: str) -> str:
    """``NVIDIA H200`` -> ``H200``; ``AMD Instinct MI300X`` -> ``Instinct MI300X``."""
    for vendor in ("NVIDIA ", "AMD ", "AMD_", "Google ", "Intel "):
        if model.startswith(vendor) and len(model) > len(vendor):
            return model[len(vendor) :]
    return model


def _slug(text: str) -> str:
    """Lower case letters, digits and dashes (a DNS label's characters), at most 48."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48].strip("-") or "device"


def _unique(stem: str, seen: set[str]) -> str:
    key, n = stem, 2
    while key in seen:
        key, n = f"{stem}-{n}", n + 1
    seen.add(key)
    return key

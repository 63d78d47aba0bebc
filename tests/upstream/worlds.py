"""A seeded generator of random worlds for the differential test against upstream.

A world is what ``dra-jupyter allocate -f`` reads: DeviceClasses, ResourceSlices,
DeviceTaintRules, Nodes, claims in use (with ``status.allocation``) and the claims to
allocate, as wire dicts.
:func:`world` is a pure function of its seed (:class:`random.Random`), so a mismatch is
reproduced by its seed alone; :func:`feature_names` says which features a world uses (the
agreement is counted per feature).

Most worlds are valid, so that the search is what gets compared; a few carry what
kube-apiserver defaults (``count: 0``) or refuses (a ``matchFields`` with two values, a
request policy off its step, binding conditions without binding-failure conditions, two
slices of one name), so that defaulting and validation are compared too.

The edges that random amounts seldom reach are drawn on purpose, weighted up (issue #31):
negative capacity requests and requests at and past int64 against ranges whose steps
reach the limit (also in All mode), compatibility groups and list-valued attributes (both
off with the 1.37 gates: skipped, and matching no constraint), binding conditions.
"""

from __future__ import annotations

import random
from typing import Any

Wire = dict[str, Any]

GPU, NIC = "gpu.example.com", "nic.example.com"
DRIVERS = (GPU, NIC)
NAMESPACE = "default"

# CEL over every attribute type, by the driver whose devices they read; some fail with a
# runtime error where an attribute is missing (numa is not on every device; a NIC has no
# GPU attributes), which upstream reports as an error of the whole allocation.
GPU_SELECTORS = (
    f'device.attributes["{GPU}"].model == "h100"',
    f'device.attributes["{GPU}"].model.startsWith("a")',
    f'device.capacity["{GPU}"].memory.compareTo(quantity("16Gi")) >= 0',
    f'device.capacity["{GPU}"].memory.isGreaterThan(quantity("8Gi"))',
    f'device.attributes["{GPU}"].driverVersion.isGreaterThan(semver("1.5.0"))',
    f'device.attributes["{GPU}"].driverVersion.major() == 1',
    f'device.attributes["{GPU}"].healthy',
    f'device.attributes["{GPU}"].index % 2 == 0',
    f'"numa" in device.attributes["{GPU}"] && device.attributes["{GPU}"].numa == 0',
    "device.allowMultipleAllocations == true",
)
NIC_SELECTORS = (
    f'device.driver == "{NIC}"',
    f'has(device.attributes["{NIC}"].speed) && device.attributes["{NIC}"].speed >= 100',
    "device.allowMultipleAllocations == true",
    f'device.attributes["{NIC}"].speed == 200',
)
RISKY_SELECTORS = (
    f'device.attributes["{GPU}"].numa == 1',  # a runtime error where numa is missing
    f'device.attributes["{NIC}"].speed >= 100',  # an error on a GPU
    f'device.attributes["{GPU}"].model == "a100"',  # an error on a NIC
)
SELECTORS = GPU_SELECTORS + NIC_SELECTORS + RISKY_SELECTORS
CONSTRAINT_ATTRIBUTES = (f"{GPU}/numa", f"{GPU}/model", f"{GPU}/index", f"{NIC}/speed")
POLICIES: tuple[Wire, ...] = (
    {"default": "1G", "validRange": {"min": "1G", "step": "1G"}},
    {"default": "2G", "validRange": {"min": "1G", "max": "8G", "step": "1G"}},
    {"default": "1G", "validValues": ["1G", "2G", "4G"]},
    {"default": "500m", "validRange": {"min": "100m", "step": "250m"}},
    {"default": "1500m", "validRange": {"min": "1", "step": "500m"}},
    {"default": "1G"},
)
CAPACITY_REQUESTS = ("1G", "2G", "3G", "1500M", "700m", "5G")
INT64_MAX = str(2**63 - 1)
# a device's capacity at the int64 limit, with ranges whose rounding reaches it
EDGE_POLICIES: tuple[Wire | None, ...] = (
    {"default": "0", "validRange": {"min": "0", "step": "2"}},  # INT64_MAX rounds past it
    {"default": "1", "validRange": {"min": "1", "step": "2"}},  # INT64_MAX is on a step
    {"default": "1", "validRange": {"min": "1", "step": "3"}},
    {"default": "1", "validRange": {"min": "1", "step": str(2**62)}},
    {"default": "1", "validRange": {"min": "1", "max": INT64_MAX, "step": "2"}},
    {"default": "1", "validValues": ["1", INT64_MAX]},
    {"default": "1"},
    None,
)
EDGE_REQUESTS = (
    "-1G", "-5", "-1", "0", INT64_MAX, str(2**63 - 2), str(2**63), "10E", "8Ei", "9E", "1e19",
)  # fmt: skip


def _pick(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _quantity(value: str) -> Wire:
    return {"value": value}


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.features: set[str] = set()
        self.devices: list[tuple[str, str, Wire]] = []  # (driver, pool, device) published
        # how likely the edges are in this world: most worlds have none, some many
        rng = self.rng
        self.edges = rng.choice((0.0, 0.0, 0.3, 0.6))  # int64-edge capacities and requests
        self.lists = rng.choice((0.0, 0.0, 0.0, 0.3))  # list-valued attributes
        self.groups = rng.choice((0.0, 0.0, 0.0, 0.5))  # compatibility groups
        self.binding = rng.choice((0.0, 0.0, 0.0, 0.1))  # binding conditions

    # --- inventory ---------------------------------------------------------------------------

    def nodes(self) -> list[Wire]:
        count = self.rng.choice((1, 1, 2, 2, 3))
        out = []
        for i in range(1, count + 1):
            name = f"node-{i}"
            region = self.rng.choice(("r1", "r2"))
            labels = {"kubernetes.io/hostname": name, "region": region}
            out.append(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            )
        return out

    def device(self, driver: str, name: str, index: int, multi: bool) -> Wire:
        rng = self.rng
        attributes: Wire = {}
        capacity: Wire = {}
        if driver == GPU:
            attributes["model"] = {"string": rng.choice(("a100", "h100", "h100"))}
            attributes["index"] = {"int": index}
            attributes["healthy"] = {"bool": rng.random() < 0.8}
            attributes["driverVersion"] = {"version": rng.choice(("1.2.3", "1.10.0", "2.0.0"))}
            if _pick(rng, 0.8):
                attributes["numa"] = {"int": rng.choice((0, 1))}
            if _pick(rng, self.lists):
                # DRAListTypeAttributes is off in 1.37: read, and matching no constraint
                self.features.add("list-attributes")
                attributes["numa"] = {"ints": rng.sample((0, 1), rng.randint(1, 2))}
                if _pick(rng, 0.3):
                    attributes["model"] = {"strings": [rng.choice(("a100", "h100"))]}
            capacity["memory"] = _quantity(rng.choice(("8Gi", "16Gi", "40Gi")))
        else:
            attributes["speed"] = {"int": rng.choice((25, 100, 200))}
            if _pick(rng, self.lists / 2):
                self.features.add("list-attributes")
                attributes["speed"] = {"ints": [rng.choice((25, 100, 200))]}
        device: Wire = {"name": name}
        if attributes:
            device["attributes"] = attributes
        self._capacity(device, capacity, multi)
        self._binding(device)
        if _pick(rng, 0.12):
            self.features.add("taints")
            effect = rng.choice(("NoSchedule", "NoExecute", "None"))
            device["taints"] = [{"key": "k", "value": rng.choice(("v", "w")), "effect": effect}]
        return device

    def _capacity(self, device: Wire, capacity: Wire, multi: bool) -> None:
        """The device's capacities: shared ones with a request policy (some at the int64
        limit), or a plain one."""
        rng = self.rng
        if multi:
            self.features.add("consumable-capacity")
            device["allowMultipleAllocations"] = True
            if _pick(rng, self.edges):
                self.features.add("int64-capacity")
                edge = rng.choice(EDGE_POLICIES)
                capacity["bandwidth"] = {"value": INT64_MAX}
                if edge is not None:
                    capacity["bandwidth"]["requestPolicy"] = dict(edge)
            else:
                policy = rng.choice(POLICIES)
                value = "8G" if _pick(rng, 0.9) else "4G"  # 4G is below one policy's max
                capacity["bandwidth"] = {"value": value, "requestPolicy": policy}
        elif _pick(rng, self.edges / 3):
            self.features.add("int64-capacity")  # a capacity that is not shared
            capacity["bandwidth"] = {"value": rng.choice(("8G", INT64_MAX))}
        if capacity:
            device["capacity"] = capacity

    def _binding(self, device: Wire) -> None:
        """Binding conditions, usually with failure conditions (kube-apiserver wants both)."""
        rng = self.rng
        if _pick(rng, self.binding):
            self.features.add("binding-conditions")
            device["bindingConditions"] = ["example.com/ready"]
            if _pick(rng, 0.9):
                device["bindingFailureConditions"] = ["example.com/failed"]
            else:
                self.features.add("binding-without-failure")  # refused by kube-apiserver
            if _pick(rng, 0.5):
                device["bindsToNode"] = True

    def node_slices(self, node: str, driver: str) -> list[Wire]:
        rng = self.rng
        short = driver.split(".", maxsplit=1)[0]
        pool = f"{node}-{short}"
        count = rng.randint(2, 6)
        partitionable = driver == GPU and _pick(rng, 0.2 + self.groups / 2)
        devices = []
        for i in range(count):
            multi = _pick(rng, 0.15 + self.edges / 2)
            dev = self.device(driver, f"{short}-{i}", i, multi)
            if partitionable:
                use: Wire = {
                    "counterSet": "gpu-counters",
                    "counters": {"memory": _quantity(rng.choice(("20Gi", "40Gi")))},
                }
                if _pick(rng, self.groups):
                    # DRADeviceCompatibilityGroups is off in 1.37: the slice is ignored
                    self.features.add("compatibility-groups")
                    use["compatibilityGroups"] = rng.sample(("a", "b"), rng.randint(1, 2))
                dev["consumesCounters"] = [use]
            devices.append(dev)
        slices = []
        slice_count = 2 if partitionable else 1
        generation = 2
        if _pick(rng, 0.05):
            self.features.add("incomplete-pool")
            slice_count += 1
        spec: Wire = {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": slice_count},
            "devices": devices,
        }
        slices.append(_slice(f"{pool}-devices", spec))
        for dev in devices:
            self.devices.append((driver, pool, dev))
        if partitionable:
            self.features.add("partitionable")
            counters = {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": slice_count},
                "sharedCounters": [
                    {"name": "gpu-counters", "counters": {"memory": _quantity("40Gi")}}
                ],
            }
            slices.append(_slice(f"{pool}-counters", counters))
        if _pick(rng, 0.1):
            self.features.add("obsolete-generation")
            old = {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                "devices": [self.device(driver, f"old-{short}-0", 0, False)],
            }
            slices.append(_slice(f"{pool}-old", old))
        return slices

    def shared_slices(self, nodes: list[Wire]) -> list[Wire]:
        rng = self.rng
        out = []
        if _pick(rng, 0.3):
            self.features.add("all-nodes")
            devices = [
                self.device(NIC, f"shared-{i}", i, _pick(rng, 0.3))
                for i in range(rng.randint(1, 2))
            ]
            out.append(self._pool_slice("shared", {"allNodes": True}, devices))
        if _pick(rng, 0.3):
            self.features.add("node-selector")
            names = [n["metadata"]["name"] for n in nodes]
            if _pick(rng, 0.5):
                term: Wire = {
                    "matchExpressions": [
                        {"key": "region", "operator": "In", "values": [rng.choice(("r1", "r2"))]}
                    ]
                }
            else:
                values = [rng.choice(names)]
                if len(names) > 1 and _pick(rng, 0.25):
                    self.features.add("invalid-match-fields")
                    values = names[:2]
                term = {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": values}]
                }
            devices = [
                self.device(NIC, f"regional-{i}", i, False) for i in range(rng.randint(1, 2))
            ]
            out.append(
                self._pool_slice(
                    "regional", {"nodeSelector": {"nodeSelectorTerms": [term]}}, devices
                )
            )
        if _pick(rng, 0.15):
            self.features.add("per-device-node-selection")
            names = [n["metadata"]["name"] for n in nodes]
            devices = []
            for i in range(rng.randint(1, 3)):
                dev = self.device(GPU, f"fabric-{i}", i, False)
                choice = rng.randrange(3)
                if choice == 0:
                    dev["nodeName"] = rng.choice(names)
                elif choice == 1:
                    dev["allNodes"] = True
                else:
                    dev["nodeSelector"] = {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "region", "operator": "In", "values": ["r1"]}
                                ]
                            }
                        ]
                    }
                devices.append(dev)
            out.append(self._pool_slice("fabric", {"perDeviceNodeSelection": True}, devices, GPU))
        return out

    def _pool_slice(
        self, pool: str, selection: Wire, devices: list[Wire], driver: str = NIC
    ) -> Wire:
        for dev in devices:
            self.devices.append((driver, pool, dev))
        spec = {
            "driver": driver,
            **selection,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        }
        return _slice(f"{pool}-slice", spec)

    def classes(self) -> list[Wire]:
        rng = self.rng
        out = []
        for name, driver in (("gpu", GPU), ("nic", NIC)):
            spec: Wire = {"selectors": [_cel(f'device.driver == "{driver}"')]}
            if _pick(rng, 0.3):
                self.features.add("config")
                spec["config"] = [_opaque(driver, {"class": name})]
            out.append(_class(name, spec))
        if _pick(rng, 0.5):
            out.append(
                _class(
                    "gpu-big",
                    {
                        "selectors": [
                            _cel(f'device.driver == "{GPU}"'),
                            _cel(
                                f'device.capacity["{GPU}"].memory.compareTo(quantity("16Gi")) >= 0'
                            ),
                        ]
                    },
                )
            )
        if _pick(rng, 0.3):
            out.append(_class("any", {}))
        return out

    # --- claims ------------------------------------------------------------------------------

    def exact(self, classes: list[str], *, sub: bool = False) -> Wire:
        rng = self.rng
        cls = rng.choice(classes) if not _pick(rng, 0.01) else "missing"
        out: Wire = {"deviceClassName": cls}
        if _pick(rng, 0.1):
            self.features.add("all")
            out["allocationMode"] = "All"
        else:
            count = rng.choice((1, 1, 1, 1, 2, 2, 3))
            if _pick(rng, 0.04):
                self.features.add("count-zero")
                count = 0
            if count != 1 or _pick(rng, 0.5):
                out["count"] = count
                self.features.add("count")
        if _pick(rng, 0.4):
            self.features.add("cel")
            fitting = (
                NIC_SELECTORS if cls == "nic" else GPU_SELECTORS if "gpu" in cls else SELECTORS
            )
            chosen = []
            for _ in range(rng.choice((1, 1, 2))):
                if _pick(rng, 0.1):
                    self.features.add("cel-runtime-error")
                    chosen.append(rng.choice(RISKY_SELECTORS))
                else:
                    chosen.append(rng.choice(fitting))
            out["selectors"] = [_cel(expression) for expression in chosen]
        if not sub and _pick(rng, 0.05):  # a subrequest has no adminAccess field
            self.features.add("admin-access")
            out["adminAccess"] = True
        if _pick(rng, 0.2):
            self.features.add("tolerations")
            tol: Wire = rng.choice(
                (
                    {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"},
                    {"operator": "Exists"},
                )
            )
            out["tolerations"] = [dict(tol)]
        if _pick(rng, 0.2 + self.edges / 2):
            self.features.add("capacity-request")
            amount = rng.choice(CAPACITY_REQUESTS)
            if _pick(rng, self.edges):
                amount = rng.choice(EDGE_REQUESTS)
                self.features.add(
                    "negative-capacity-request" if amount.startswith("-") else "int64-request"
                )
                if _pick(rng, 0.3) and not sub:
                    out.pop("count", None)
                    out["allocationMode"] = "All"
                    self.features.add("all")
            out["capacity"] = {"requests": {"bandwidth": amount}}
        return out

    def claim(self, name: str, classes: list[str]) -> Wire:
        rng = self.rng
        requests: list[Wire] = []
        names: list[str] = []
        for r in range(rng.choice((1, 1, 2, 2, 3))):
            rname = f"r{r}"
            names.append(rname)
            if _pick(rng, 0.2):
                self.features.add("first-available")
                subs: list[Wire] = []
                for s in range(rng.randint(2, 3)):
                    sub = {"name": f"s{s}", **self.exact(classes, sub=True)}
                    subs.append(sub)
                requests.append({"name": rname, "firstAvailable": subs})
            else:
                requests.append({"name": rname, "exactly": self.exact(classes)})
        devices: Wire = {"requests": requests}
        if len(names) > 1 and _pick(rng, 0.35):
            kind = rng.choice(("matchAttribute", "distinctAttribute"))
            self.features.add(kind)
            constraint: Wire = {kind: rng.choice(CONSTRAINT_ATTRIBUTES)}
            if _pick(rng, 0.5):
                constraint["requests"] = rng.sample(names, rng.randint(1, len(names)))
            devices["constraints"] = [constraint]
        if _pick(rng, 0.3):
            self.features.add("config")
            config: Wire = _opaque(GPU, {"claim": name})
            choice = rng.randrange(3)
            if choice == 1:
                config["requests"] = list(names)
            elif choice == 2:
                config["requests"] = rng.sample(names, 1)
            devices["config"] = [config]
        return _claim(name, {"devices": devices})

    def in_use(self, index: int) -> Wire | None:
        """A claim holding some published devices (shared ones by a share of capacity)."""
        rng = self.rng
        if not self.devices:
            return None
        picked = rng.sample(self.devices, min(len(self.devices), rng.randint(1, 3)))
        results: list[Wire] = []
        admin = _pick(rng, 0.1)
        for driver, pool, dev in picked:
            result: Wire = {"request": "r", "driver": driver, "pool": pool, "device": dev["name"]}
            if dev.get("allowMultipleAllocations"):
                result["shareID"] = f"00000000-0000-4000-8000-{index:06d}{len(results):06d}"
                result["consumedCapacity"] = {"bandwidth": rng.choice(("2G", "4G"))}
            if admin:
                result["adminAccess"] = True
            results.append(result)
        self.features.add("in-use")
        exact: Wire = {"deviceClassName": "gpu", "count": len(results)}
        if admin:
            exact["adminAccess"] = True
        spec = {"devices": {"requests": [{"name": "r", "exactly": exact}]}}
        claim = _claim(f"held-{index}", spec)
        claim["status"] = {"allocation": {"devices": {"results": results}}}
        return claim


def _slice(name: str, spec: Wire) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def _class(name: str, spec: Wire) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _claim(name: str, spec: Wire) -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _cel(expression: str) -> Wire:
    return {"cel": {"expression": expression}}


def _opaque(driver: str, parameters: Wire) -> Wire:
    return {"opaque": {"driver": driver, "parameters": parameters}}


def _taint_rule(name: str, selector: Wire | None, taint: Wire) -> Wire:
    spec: Wire = {"taint": taint}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def taint_rules(seed: int, devices: list[tuple[str, str, Wire]], features: set[str]) -> list[Wire]:
    """DeviceTaintRules for a world whose published devices are ``devices``, drawn from a
    generator of their own (the rest of world ``seed`` is what it was before rules were
    drawn). Selectors by driver, pool and device, alone and together, some matching nothing
    (another pool, a device no slice has), none at all (selects no device) or empty (every
    device); effects NoSchedule, NoExecute and None on the keys the worlds' tolerations name;
    a few rules kube-apiserver refuses, and a name given twice."""
    rng = random.Random(f"taint-rules/{seed}")
    if not devices or not _pick(rng, 0.25):
        return []
    features.add("taint-rules")
    rules: list[Wire] = []
    for i in range(rng.choice((1, 1, 2, 3))):
        driver, pool, dev = rng.choice(devices)
        kind = rng.randrange(9)
        selector: Wire | None
        if kind == 0:
            selector = None
            features.add("taint-rule-no-selector")
        elif kind == 1:
            selector = {}
            features.add("taint-rule-all-devices")
        elif kind == 2:
            selector = {"driver": driver}
        elif kind == 3:
            selector = {"pool": pool}
        elif kind == 4:
            selector = {"device": dev["name"]}
        elif kind == 5:
            selector = {"driver": driver, "pool": pool, "device": dev["name"]}
        elif kind == 6:
            selector = {"pool": pool, "device": dev["name"]}
        elif kind == 7:  # matches nothing: a pool of another driver, or no such device
            features.add("taint-rule-no-match")
            other = NIC if driver == GPU else GPU
            selector = rng.choice(({"driver": other, "pool": pool}, {"device": "missing-0"}))
        else:
            selector = {"driver": driver, "device": dev["name"]}
        effect = rng.choice(("NoSchedule", "NoSchedule", "NoExecute", "None"))
        taint: Wire = {"key": rng.choice(("k", "k", "r")), "effect": effect}
        if _pick(rng, 0.8):
            taint["value"] = rng.choice(("v", "w"))
        if _pick(rng, 0.2):
            taint["timeAdded"] = "2026-09-01T12:00:00Z"
        if _pick(rng, 0.04):
            features.add("invalid-taint-rule")  # refused by kube-apiserver
            taint = rng.choice(
                (
                    {**taint, "effect": "PreferNoSchedule"},
                    {**taint, "key": ""},
                    {**taint, "value": "not a label"},
                )
            )
        rules.append(_taint_rule(f"rule-{i}", selector, taint))
    if len(rules) > 1 and _pick(rng, 0.05):
        features.add("duplicate-names")  # refused: kube-apiserver keeps one per name
        rules[1]["metadata"] = dict(rules[0]["metadata"])
    return rules


def world(seed: int) -> tuple[list[Wire], set[str]]:
    """The objects of world ``seed`` and the names of the features it uses."""
    b = _Builder(seed)
    nodes = b.nodes()
    slices: list[Wire] = []
    for node in nodes:
        for driver in DRIVERS:
            if _pick(b.rng, 0.8 if driver == GPU else 0.5):
                slices.extend(b.node_slices(node["metadata"]["name"], driver))
    slices.extend(b.shared_slices(nodes))
    if len(slices) > 1 and _pick(b.rng, 0.02):
        b.features.add("duplicate-names")  # refused: kube-apiserver keeps one per name
        first, second = b.rng.sample(range(len(slices)), 2)
        slices[second] = {**slices[second], "metadata": dict(slices[first]["metadata"])}
    classes = b.classes()
    class_names = [c["metadata"]["name"] for c in classes]
    held = [c for i in range(b.rng.choice((0, 0, 1, 2))) if (c := b.in_use(i)) is not None]
    count = b.rng.choice((1, 1, 1, 2, 3))
    if count > 1:
        b.features.add("several-claims")
    claims = [b.claim(f"claim-{i}", class_names) for i in range(count)]
    b.rng.shuffle(slices)  # upstream's order does not depend on the order slices are listed
    rules = taint_rules(seed, b.devices, b.features)
    return [*classes, *slices, *rules, *nodes, *held, *claims], b.features


def feature_names(objects: list[Wire]) -> set[str]:
    """Only for a world built elsewhere (a shrunk one): the features visible in its objects."""
    found: set[str] = set()
    text = repr(objects)
    for name, needle in (
        ("all", "'All'"),
        ("first-available", "firstAvailable"),
        ("partitionable", "sharedCounters"),
        ("consumable-capacity", "allowMultipleAllocations"),
        ("taints", "taints"),
        ("taint-rules", "DeviceTaintRule"),
        ("config", "'config'"),
        ("in-use", "'allocation'"),
        ("compatibility-groups", "compatibilityGroups"),
        ("binding-conditions", "bindingConditions"),
        ("list-attributes", "'ints'"),
        ("int64-capacity", INT64_MAX),
    ):
        if needle in text:
            found.add(name)
    return found

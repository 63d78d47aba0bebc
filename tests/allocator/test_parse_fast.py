"""The parser's fast paths for plain devices and slices give what the full parse gives.

``parse_fast.fast_device`` reads a plain, valid device without building field paths; for
anything else it must answer None so that ``parse._device`` parses the device and names the
problem. So: on real devices (whole GPUs, MIG placements, shared GPUs) and on random damage
to them, the fast path either declines or returns a device equal to the full parse's, and it
never accepts a device that the full parse refuses. ``parse_fast.fast_slice`` likewise, for
whole slices (against the full parse with no fast path for devices either). Both remember
wire dicts seen before (``Recall``): damage that compares equal (``True == 1``) must not be
taken for them, and a wire changed in place after a parse is read again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_jupyter.errors import ObjectError
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model import fields, limits, parse, parse_fast
from dra_jupyter.model.objects import Device, ResourceSlice
from dra_jupyter.model.recall import Recall

Wire = dict[str, Any]

DEVICES: list[Wire] = [
    *nvidia.hgx_node("n", nvidia.H200)["spec"]["devices"][:2],
    *nvidia.hgx_node("n", nvidia.H200, shares=4)["spec"]["devices"][:1],
    *mig.h200_mig_node("n", gpus=1)[1]["spec"]["devices"][:4],
]

ODD: st.SearchStrategy[Any] = st.sampled_from(
    [
        None,
        "",
        "x",
        "GPU",
        "a" * 65,
        "1.2.3",
        "1.2",
        "16Gi",
        "-1",
        "1.5m",
        "bad value",
        0,
        1,
        -1,
        2**63,
        -(2**63) - 1,
        True,
        False,
        1.5,
        [],
        ["x"],
        {},
        {"value": "1Gi"},
        {"value": True},
        {"value": "1Gi", "requestPolicy": {"default": "1Gi"}},
        {"string": "a"},
        {"string": "a" * 65},
        {"string": 1},
        {"string": None},
        {"int": 2**63},
        {"int": True},
        {"bool": 1},
        {"version": "x"},
        {"version": "1.2.3-" + "a" * 60},
        {"value": 2},
        {"value": "1e5000"},
        {"value": None},
        {"string": "a", "int": 1},
        {"int": 3},
        {"bool": True},
        {"version": "1.2.3"},
        {"version": "01.2.3"},
        {"strings": ["a"]},
        {"counterSet": "gpu-0-counter-set", "counters": {}},
        {"counterSet": "", "counters": {}},
        "ResourceSlice",
        "ResourceClaim",
        "resource.k8s.io/v1beta2",
        "gpu.nvidia.com",
        "Gpu.nvidia.com",
        "node-1",
        "node_1",
        "a/b",
        2**63 - 1,
        {"nodeSelectorTerms": []},
        {"name": "gpu-0-counter-set", "counters": {"memory": {"value": "1Gi"}}},
        {"name": "gpu-9", "attributes": {"int": {"int": 1}}},
    ]
)
KEYS = st.sampled_from(
    [
        "name",
        "attributes",
        "capacity",
        "consumesCounters",
        "allowMultipleAllocations",
        "bindsToNode",
        "taints",
        "nodeName",
        "productName",
        "gpu.nvidia.com/x",
        "Bad Key",
        "memory",
        "memory-slice-0",
        "counterSet",
        "counters",
        "value",
        "string",
        "kind",
        "apiVersion",
        "metadata",
        "spec",
        "driver",
        "pool",
        "generation",
        "resourceSliceCount",
        "allNodes",
        "nodeSelector",
        "perDeviceNodeSelection",
        "devices",
        "sharedCounters",
    ]
)


def full(raw: Any) -> Device | ObjectError:
    try:
        return parse._device(fields.Ctx("ResourceSlice s"), raw, "spec.devices[0]", False)
    except ObjectError as err:
        return err


def accepted_alike(fast: object, slow: object) -> bool:
    """Whether the fast path accepted; if it did, the full parse accepts the same object."""
    if fast is None:
        return False
    assert not isinstance(slow, ObjectError), f"fast path accepted what is refused: {slow}"
    assert fast == slow
    return True


def agree(raw: Any) -> None:
    accepted_alike(parse_fast.fast_device(raw), full(raw))


def containers(node: Any) -> list[Any]:
    """Every dict and list inside ``node``, itself first."""
    out: list[Any] = []
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            out.extend(containers(v))
    elif isinstance(node, list):
        out.append(node)
        for v in node:
            out.extend(containers(v))
    return out


def test_plain_devices_take_the_fast_path() -> None:
    for raw in [DEVICES[0], DEVICES[1], *DEVICES[3:]]:
        fast = parse_fast.fast_device(raw)
        assert fast is not None
        assert fast == full(raw)


def test_devices_the_fast_path_declines_are_parsed_in_full() -> None:
    shared = DEVICES[2]  # a request policy: the full parse only
    assert parse_fast.fast_device(shared) is None
    assert not isinstance(full(shared), ObjectError)


@settings(max_examples=1000, deadline=None)
@given(
    st.sampled_from(DEVICES),
    st.lists(
        st.tuples(st.integers(0, 10_000), KEYS, ODD, st.sampled_from(["set", "add", "pop"])),
        min_size=1,
        max_size=3,
    ),
)
def test_the_fast_path_agrees_with_the_full_parse(device: Wire, damage: list[Any]) -> None:
    raw = copy.deepcopy(device)
    for where, key, value, how in damage:
        damage_anywhere(raw, where, key, value, how)
    agree(raw)


@pytest.fixture
def fresh_recall() -> Iterator[None]:
    """Nothing recalled yet: what earlier tests left does not decide what is looked up."""
    recalls: dict[str, Any] = {
        name: Recall() for name in ("_ATTRIBUTES", "_CAPACITIES", "_COUNTERS")
    }
    with mock.patch.multiple(parse_fast, **recalls, _CONSUMPTIONS={}):
        yield


@pytest.mark.usefixtures("fresh_recall")
def test_recalled_wires_keep_their_types() -> None:
    """A wire equal to one seen before is not it when a leaf differs in type: 1 == True."""
    base: Wire = {
        "name": "gpu-0",
        "attributes": {"numa": {"int": 1}, "mig": {"bool": True}},
        "capacity": {"memory": {"value": 1}},
        "consumesCounters": [{"counterSet": "s", "counters": {"memory": {"value": 1}}}],
    }
    for _ in range(3):  # seen, then recalled
        agree(copy.deepcopy(base))
        assert parse_fast.fast_device(copy.deepcopy(base)) is not None
    for path, odd in [
        (("attributes", "numa", "int"), True),
        (("attributes", "numa", "int"), 1.0),
        (("attributes", "mig", "bool"), 1),
        (("capacity", "memory", "value"), True),
        (("capacity", "memory", "value"), 1.0),
    ]:
        raw = copy.deepcopy(base)
        raw[path[0]][path[1]][path[2]] = odd
        assert raw == base
        assert parse_fast.fast_device(raw) is None
        assert isinstance(full(raw), ObjectError)
    raw = copy.deepcopy(base)
    raw["consumesCounters"][0]["counters"]["memory"]["value"] = True
    assert parse_fast.fast_device(raw) is None
    assert isinstance(full(raw), ObjectError)


@pytest.mark.usefixtures("fresh_recall")
def test_a_wire_changed_in_place_is_read_again() -> None:
    raw = copy.deepcopy(DEVICES[4])  # a MIG placement
    first = parse_fast.fast_device(raw)
    assert first is not None
    raw["attributes"]["profile"]["string"] = "changed"
    raw["capacity"]["memory"]["value"] = "1Gi"
    raw["consumesCounters"][0]["counters"]["memory"]["value"] = "1Gi"
    again = parse_fast.fast_device(raw)
    assert again is not None
    assert again == full(raw)
    assert again.attributes["profile"] == "changed"
    assert str(again.capacity["memory"].value) == "1Gi"
    assert str(again.consumes_counters[0].counters["memory"]) == "1Gi"


@pytest.mark.usefixtures("fresh_recall")
def test_wires_that_keep_differing_are_still_recalled_when_they_repeat() -> None:
    """Names whose wires all differ are only looked up now and then: a repeat is still found."""
    raws = [copy.deepcopy(DEVICES[0]) for _ in range(40)]
    for i, raw in enumerate(raws):
        raw["attributes"]["uuid"]["string"] = f"GPU-{i}"
        agree(raw)
    for raw in raws:  # every one again, each now maybe recalled
        agree(copy.deepcopy(raw))


SLICES: list[Wire] = [
    nvidia.hgx_node("n", nvidia.H200),
    nvidia.hgx_node("n", nvidia.H200, shares=4),  # request policies: the full parse only
    *mig.h200_mig_node("n", gpus=1),  # a slice of counter sets, one of devices
    {
        **nvidia.hgx_node("all", nvidia.H200),
        "spec": {
            **{k: v for k, v in nvidia.hgx_node("all")["spec"].items() if k != "nodeName"},
            "allNodes": True,
        },
    },
]


def full_slice(raw: Any) -> ResourceSlice | ObjectError:
    """The slice as the full parse reads it, with no fast path for its devices either."""
    with mock.patch.object(parse, "fast_device", lambda m: None):
        try:
            return parse._full_resource_slice(raw)
        except ObjectError as err:
            return err


def agree_slice(raw: Any) -> None:
    fast = parse_fast.fast_slice(raw)
    slow = full_slice(raw)
    if accepted_alike(fast, slow):
        assert fast is not None and isinstance(slow, ResourceSlice)
        assert repr(fast) == repr(slow)  # the same order of attributes, capacities, counters
        assert (fast.pool_id, fast.flexible, fast.local_node) == (
            slow.pool_id,
            slow.flexible,
            slow.local_node,
        )


def test_plain_slices_take_the_fast_path() -> None:
    for raw in [SLICES[0], *SLICES[2:]]:
        fast = parse_fast.fast_slice(raw)
        assert fast is not None
        agree_slice(raw)
        assert parse.parse_resource_slice(raw) == fast
    assert parse_fast.fast_slice(SLICES[1]) is None
    assert not isinstance(full_slice(SLICES[1]), ObjectError)


FIELDS = [
    ("kind",),
    ("apiVersion",),
    ("metadata",),
    ("metadata", "name"),
    ("spec",),
    ("spec", "driver"),
    ("spec", "pool"),
    ("spec", "pool", "name"),
    ("spec", "pool", "generation"),
    ("spec", "pool", "resourceSliceCount"),
    ("spec", "nodeName"),
    ("spec", "allNodes"),
    ("spec", "nodeSelector"),
    ("spec", "perDeviceNodeSelection"),
    ("spec", "devices"),
    ("spec", "devices", 0),
    ("spec", "devices", 0, "name"),
    ("spec", "sharedCounters"),
    ("spec", "sharedCounters", 0),
    ("spec", "sharedCounters", 0, "name"),
    ("spec", "sharedCounters", 0, "counters"),
]
SLICE_ODD = st.one_of(
    ODD,
    st.sampled_from(
        [
            [{"name": "gpu-0-counter-set", "counters": {"memory": {"value": "1Gi"}}}],
            [{"name": "gpu-9", "capacity": {"memory": {"value": "1Gi"}}}],
            {"memory": {"value": "1Gi"}},
            {"memory": {"value": True}},
            {"name": "x", "generation": 1, "resourceSliceCount": 1},
            {"name": "n"},
        ]
    ),
)


def poke(raw: Wire, path: tuple[str | int, ...], value: Any, how: str) -> None:
    """Set or remove the field at ``path`` (when its parent is there)."""
    parent: Any = raw
    for step in path[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return
    last = path[-1]
    if isinstance(parent, dict) and isinstance(last, str):
        if how == "pop":
            parent.pop(last, None)
        else:
            parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        if how == "pop":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(value)


def damage_anywhere(raw: Wire, where: int, key: str, value: Any, how: str) -> None:
    """A dict anywhere in ``raw`` given ``key`` (add), its ``where``-th key set to ``value``
    (set) or taken out (pop); or a list's entry twice (dup)."""
    if how == "dup":  # a device name, a counter set twice
        lists = [c for c in containers(raw) if isinstance(c, list) and c]
        if lists:
            entries = lists[where % len(lists)]
            entries.append(copy.deepcopy(entries[where % len(entries)]))
        return
    targets = [c for c in containers(raw) if isinstance(c, dict)]
    target = targets[where % len(targets)]
    keys = sorted(target)
    if how == "add" or not keys:
        target[key] = copy.deepcopy(value)
    elif how == "set":
        target[keys[where % len(keys)]] = copy.deepcopy(value)
    else:
        target.pop(keys[where % len(keys)])


@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from(SLICES),
    st.lists(
        st.one_of(
            st.tuples(
                st.just("field"),
                st.sampled_from(FIELDS),
                SLICE_ODD,
                st.sampled_from(["set", "pop"]),
            ),
            st.tuples(
                st.integers(0, 10_000), KEYS, ODD, st.sampled_from(["set", "add", "pop", "dup"])
            ),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_the_slice_fast_path_agrees_with_the_full_parse(slice_: Wire, damage: list[Any]) -> None:
    raw = copy.deepcopy(slice_)
    for first, second, value, how in damage:
        if first == "field":
            poke(raw, second, value, how)
        else:
            damage_anywhere(raw, first, second, value, how)
    agree_slice(raw)


def test_slices_at_their_limits() -> None:
    """Devices, counter sets and devices that consume counters, up to the limit and one more."""
    gpu = SLICES[0]["spec"]["devices"][0]
    placement = DEVICES[4]
    counter_set = SLICES[2]["spec"]["sharedCounters"][0]

    def numbered(entry: Wire, count: int, name: str) -> list[Wire]:
        return [{**copy.deepcopy(entry), "name": f"{name}-{i}"} for i in range(count)]

    cases = [
        ("devices", numbered(gpu, limits.MAX_DEVICES_PER_SLICE, "gpu"), True),
        ("devices", numbered(gpu, limits.MAX_DEVICES_PER_SLICE + 1, "gpu"), False),
        ("devices", numbered(placement, limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS, "m"), True),
        (
            "devices",
            numbered(placement, limits.MAX_DEVICES_PER_SLICE_WITH_EXTRAS + 1, "m"),
            False,
        ),
        (
            "sharedCounters",
            numbered(counter_set, limits.MAX_COUNTER_SETS_PER_SLICE, "s"),
            True,
        ),
        (
            "sharedCounters",
            numbered(counter_set, limits.MAX_COUNTER_SETS_PER_SLICE + 1, "s"),
            False,
        ),
    ]
    for field, entries, valid in cases:
        raw = copy.deepcopy(SLICES[0])
        raw["spec"].pop("devices")
        raw["spec"][field] = entries
        assert (parse_fast.fast_slice(raw) is not None) == valid, (field, len(entries))
        assert isinstance(full_slice(raw), ObjectError) != valid
        agree_slice(raw)
    both = copy.deepcopy(SLICES[0])  # since Kubernetes 1.35, devices or counter sets
    both["spec"]["sharedCounters"] = [counter_set]
    assert parse_fast.fast_slice(both) is None
    assert isinstance(full_slice(both), ObjectError)

"""The parser's fast path for plain devices gives what the full parse gives.

``_fast_device`` reads a plain, valid device without building field paths; for anything
else it must answer None so that ``_device`` parses the device and names the problem. So:
on real devices (whole GPUs, MIG placements, shared GPUs) and on random damage to them,
the fast path either declines or returns a device equal to the full parse's, and it never
accepts a device that the full parse refuses.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_jupyter.errors import ObjectError
from dra_jupyter.inventory import mig, nvidia
from dra_jupyter.model import parse
from dra_jupyter.model.objects import Device

Wire = dict[str, Any]

DEVICES: list[Wire] = [
    *nvidia.hgx_node("n", nvidia.H200)["spec"]["devices"][:2],
    *nvidia.hgx_node("n", nvidia.H200, shares=4)["spec"]["devices"][:1],
    *mig.h200_mig_node("n", gpus=1)[1]["spec"]["devices"][:4],
]

ODD = st.sampled_from(
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
    ]
)


def full(raw: Any) -> Device | ObjectError:
    try:
        return parse._device(parse._Ctx("ResourceSlice s"), raw, "spec.devices[0]", False)
    except ObjectError as err:
        return err


def agree(raw: Any) -> None:
    fast = parse._fast_device(raw)
    slow = full(raw)
    if fast is not None:
        assert not isinstance(slow, ObjectError), f"fast path accepted what is refused: {slow}"
        assert fast == slow


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
        fast = parse._fast_device(raw)
        assert fast is not None
        assert fast == full(raw)


def test_devices_the_fast_path_declines_are_parsed_in_full() -> None:
    shared = DEVICES[2]  # a request policy: the full parse only
    assert parse._fast_device(shared) is None
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
        targets = [c for c in containers(raw) if isinstance(c, dict)]
        target = targets[where % len(targets)]
        keys = sorted(target)
        if how == "add" or not keys:
            target[key] = copy.deepcopy(value)
        elif how == "set":
            target[keys[where % len(keys)]] = copy.deepcopy(value)
        else:
            target.pop(keys[where % len(keys)])
    agree(raw)

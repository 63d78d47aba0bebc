"""The choices of the spawn form (dra_jupyter.hub.choices): what each choice counts is what
our allocator gives when it allocates the same request again and again on the whole world;
never-possible choices are left out; the rest say why not and since when; the admin's rules
restrict them and give each its lease and idle timeout; KubeSpawner gets its profile_list."""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.fuzzing  # noqa: F401  (registers the suite's hypothesis profiles)
from dra_jupyter.allocator import Allocator, Strategy
from dra_jupyter.allocator.cache import AllocatorCache
from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.hub.choices import (
    NONE,
    TIMES,
    UNLIMITED,
    Choice,
    ChoicePolicy,
    World,
    choices,
    find,
    kernel_specs,
    kubespawner_profiles,
    restrict,
)
from dra_jupyter.hub.counting import ChoiceCache
from dra_jupyter.hub.kernelspecs import write_kernel_specs
from dra_jupyter.inventory import nvidia, simulated
from dra_jupyter.kube.simulate import slice_for_node
from dra_jupyter.model.objects import DeviceClass, ResourceClaim, ResourceSlice
from dra_jupyter.model.parse import (
    parse_device_class,
    parse_many,
    parse_resource_claim,
    parse_resource_slice,
)

Wire = dict[str, Any]
NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=dt.UTC)


# --- worlds ---------------------------------------------------------------------------------


def nodes_of(name: str, count: int, prefix: str) -> list[Wire]:
    """The slices of ``count`` copies of a bundled inventory's node, named prefix-1 ..."""
    inv = simulated.load(name)
    [original] = inv.nodes
    return [
        slice_for_node(s, original, f"{prefix}-{i + 1}") for i in range(count) for s in inv.slices
    ]


def classes_of(*names: str) -> list[Wire]:
    seen: dict[str, Wire] = {}
    for name in names:
        for cls in simulated.load(name).device_classes:
            seen.setdefault(cls["metadata"]["name"], cls)
    return list(seen.values())


def taken(
    slices: Sequence[Wire],
    classes: Sequence[Wire],
    requests: Sequence[Mapping[str, object]],
    strategy: Strategy = "first-fit",
) -> list[Wire]:
    """Allocated claims: each request allocated in turn (those that fit)."""
    parsed = parse_many(slices, parse_resource_slice, ResourceSlice)
    kinds = parse_many(classes, parse_device_class, DeviceClass)
    names = [c.name for c in kinds]
    cache = AllocatorCache()
    held: list[Wire] = []
    for i, spec in enumerate(requests):
        claim = build_claim(f"held-{i}", spec, classes=names)
        try:
            found = Allocator(parsed, kinds, held, strategy, cache=cache).allocate([claim])
        except InvalidInputError:  # a class this inventory has not
            continue
        if found is not None:
            held = [*held, {**claim, "status": {"allocation": found[0].to_dict()}}]
    return held


def parsed(world: World) -> World:
    """The world as model objects (parsed once, as a long-running caller holds them)."""
    return World(
        parse_many(world.slices, parse_resource_slice, ResourceSlice),
        parse_many(world.device_classes, parse_device_class, DeviceClass),
        parse_many(world.claims, parse_resource_claim, ResourceClaim),
        world.since,
        world.nodes,
    )


def oracle(world: World, request: Mapping[str, object], strategy: Strategy = "first-fit") -> int:
    """How many times the allocator allocates the request on the (parsed) world, one after
    the other, each allocation held by the next."""
    classes = parse_many(world.device_classes, parse_device_class, DeviceClass)
    held = list(world.claims)
    claim = build_claim("probe", request, classes=[c.name for c in classes])
    cache = AllocatorCache()
    for n in range(10_000):
        found = Allocator(world.slices, classes, held, strategy, cache=cache).allocate([claim])
        if found is None:
            return n
        held = [*held, ResourceClaim(name=f"probe-{n}", allocation=found[0])]
    raise AssertionError("the oracle did not stop")


def assert_counts_agree(world: World, strategy: Strategy = "first-fit") -> list[Choice]:
    world = parsed(world)
    found = choices(world, strategy=strategy, now=NOW)
    assert found[0].slug == NONE and found[0].available == UNLIMITED
    for choice in found[1:]:
        assert choice.available == oracle(world, choice.request, strategy), choice
        assert (choice.available == 0) == (choice.reason is not None), choice
    # never possible: what idle devices cannot take is left out, the rest is offered
    idle = World(world.slices, world.device_classes)
    for choice in found[1:]:
        assert oracle(idle, choice.request, strategy) > 0, choice
    return found


REQUESTS: list[Mapping[str, object]] = [
    {"gpu": 1},
    {"gpu": 2},
    {"gpu": 4},
    {"gpu": 1, "model": "H100"},
    {"mig": "1g.18gb"},
    {"mig": "3g.71gb"},
    {"mig": "2g.35gb"},
    {"mig": "7g.141gb"},
    {"tpu": 1},
    {"tpu": 4},
]


# --- counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", simulated.names())
def test_every_bundled_inventory_counts_as_the_allocator_allocates(name: str) -> None:
    inv = simulated.load(name)
    idle = World(inv.slices, inv.device_classes)
    found = assert_counts_agree(idle)
    assert len(found) > 1
    assert all(c.available > 0 and c.reason is None for c in found)
    busy = World(inv.slices, inv.device_classes, taken(inv.slices, inv.device_classes, REQUESTS))
    assert_counts_agree(busy)
    assert_counts_agree(busy, "topology")


def test_an_idle_h200_node_offers_one_to_eight_gpus() -> None:
    inv = simulated.load("h200-8x")
    found = choices(World(inv.slices, inv.device_classes), now=NOW)
    assert [(c.slug, c.available) for c in found] == [
        ("none", UNLIMITED),
        ("h200-x1", 8),
        ("h200-x2", 4),
        ("h200-x4", 2),
        ("h200-x8", 1),
    ]
    two = find(found, "h200-x2")
    assert two is not None
    assert two.request == {"gpu": 2, "model": "NVIDIA H200"}
    assert two.display_name == f"2{TIMES} NVIDIA H200 (140.4 GiB)"
    assert two.description == "4 can start now"


def test_a_node_of_six_devices_offers_six_as_well() -> None:
    inv = simulated.load("h200-8x")
    slices = copy.deepcopy(list(inv.slices))
    del slices[0]["spec"]["devices"][6:]
    found = choices(World(slices, inv.device_classes), now=NOW)
    assert [c.slug for c in found] == ["none", "h200-x1", "h200-x2", "h200-x4", "h200-x6"]


@given(
    seed=st.integers(0, 2**32 - 1),
    requests=st.integers(0, 24),
    strategy=st.sampled_from(["first-fit", "topology"]),
)
@settings(settings.get_profile("dra-in-suite"), max_examples=25)
def test_counts_on_mixed_clusters_agree_with_the_allocator(
    seed: int, requests: int, strategy: Strategy
) -> None:
    rng = random.Random(seed)
    slices = (
        nodes_of("h200-8x", rng.randint(0, 2), "hgx")
        + nodes_of("h200-mig", rng.randint(1, 2), "mig")
        + nodes_of("workstation-4gpu", rng.randint(0, 2), "ws")
    )
    classes = classes_of("h200-8x")
    wanted = [rng.choice(REQUESTS) for _ in range(requests)]
    world = World(slices, classes, taken(slices, classes, wanted, strategy))
    assert_counts_agree(world, strategy)


@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12))
@settings(settings.get_profile("dra-in-suite"), max_examples=15)
def test_a_kept_cache_follows_claims_that_come_and_go(seed: int, steps: int) -> None:
    """Counted from the last call's holdings (only devices whose holding changed counted
    again), the choices are those a fresh cache gives, call after call."""
    rng = random.Random(seed)
    slices = parse_many(
        nodes_of("h200-mig", 2, "mig") + nodes_of("h200-8x", 1, "hgx"),
        parse_resource_slice,
        ResourceSlice,
    )
    classes = parse_many(classes_of("h200-8x"), parse_device_class, DeviceClass)
    names = [c.name for c in classes]
    kept = ChoiceCache()
    held: list[ResourceClaim] = []
    for step in range(steps):
        if held and rng.random() < 0.4:
            gone = rng.choice(held)
            held = [c for c in held if c is not gone]
        else:
            claim = build_claim(f"s{step}", rng.choice(REQUESTS), classes=names)
            try:
                found = Allocator(slices, classes, held).allocate([claim])
            except InvalidInputError:
                found = None
            if found is not None:
                held = [*held, ResourceClaim(name=f"s{step}", allocation=found[0])]
        world = World(slices, classes, held)
        fresh = choices(world, now=NOW)
        assert choices(world, cache=kept, now=NOW) == fresh
        assert choices(world, cache=kept, now=NOW) == fresh  # nothing changed: kept


def test_shared_devices_are_counted_by_the_allocator_for_several_devices() -> None:
    inv = simulated.load("h200-shared")
    held = taken(inv.slices, inv.device_classes, [{"gpu": 1, "share": "40Gi"}] * 3 + [{"gpu": 2}])
    assert_counts_agree(World(inv.slices, inv.device_classes, held))


def test_pools_it_does_not_model_are_counted_by_the_allocator() -> None:
    """A pool published in two slices of two generations, one spread over two nodes'
    slices, and one split in slices not all published yet: the allocator counts them (the
    incomplete one gives nothing, so its node's choices are left out)."""
    inv = simulated.load("h200-8x")
    [hgx] = nodes_of("h200-8x", 1, "odd")
    old = copy.deepcopy(hgx)
    old["metadata"]["name"] += "-old"
    old["spec"]["pool"]["generation"] = 0  # an older generation left behind
    half = copy.deepcopy(hgx)
    half["metadata"]["name"] = "half"
    half["spec"]["pool"]["name"] = "half"
    half["spec"]["pool"]["resourceSliceCount"] = 2  # the other slice is not published
    slices = [*inv.slices, hgx, old, half]
    held = taken(slices, inv.device_classes, [{"gpu": 2}, {"gpu": 4}, {"gpu": 1}])
    found = assert_counts_agree(World(slices, inv.device_classes, held))
    eight = find(found, "h200-x8")
    assert eight is not None and eight.available == 1  # the odd node, idle
    assert_counts_agree(World(slices, inv.device_classes))


def test_a_pool_that_draws_on_counters_it_has_not_is_counted_by_the_allocator() -> None:
    """A MIG placement that draws on a counter its set does not publish: the allocator calls
    the pool invalid, and so nothing of that node is offered; the other node is."""
    slices = nodes_of("h200-mig", 2, "mig")
    broken = next(
        s for s in slices if s["spec"]["nodeName"] == "mig-2" and s["spec"].get("devices")
    )
    use = broken["spec"]["devices"][-1]["consumesCounters"][0]
    use["counters"]["no-such-counter"] = {"value": "1"}
    found = assert_counts_agree(World(slices, classes_of("h200-mig")))
    assert (find(found, "mig-1g-18gb-x1") or found[0]).available == 7  # mig-1's GPU only


def test_slices_for_many_nodes_are_counted_on_the_cluster() -> None:
    inv = simulated.load("workstation-4gpu")
    shared = copy.deepcopy(inv.slices[0])
    shared["metadata"]["name"] = "network-attached"
    shared["spec"]["pool"]["name"] = "network"
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    slices = [*inv.slices, shared]
    held = taken(slices, inv.device_classes, [{"gpu": 2}, {"gpu": 1}])
    assert_counts_agree(World(slices, inv.device_classes, held))


def test_never_possible_choices_are_left_out() -> None:
    """Tainted devices no request tolerates, and a pool not yet published whole, give no
    choice: an 8-GPU node with 5 tainted GPUs offers 1 to 3, never 4 or 8."""
    inv = simulated.load("h200-8x")
    slices = copy.deepcopy(list(inv.slices))
    for device in slices[0]["spec"]["devices"][3:]:
        device["taints"] = [{"key": "gpu-health", "value": "xid-79", "effect": "NoSchedule"}]
    found = assert_counts_agree(World(slices, inv.device_classes))
    assert [c.slug for c in found] == ["none", "h200-x1", "h200-x2", "h200-x3"]
    half = copy.deepcopy(list(inv.slices))
    half[0]["spec"]["pool"]["resourceSliceCount"] = 2
    assert [c.slug for c in choices(World(half, inv.device_classes), now=NOW)] == ["none"]
    none_match = [
        {**c, "spec": {"selectors": [{"cel": {"expression": "false"}}]}} for c in inv.device_classes
    ]
    assert [c.slug for c in choices(World(inv.slices, none_match), now=NOW)] == ["none"]


def test_mig_profiles_are_choices_of_one_slice_each() -> None:
    inv = simulated.load("h200-mig")
    found = choices(World(inv.slices, inv.device_classes), now=NOW)
    mig = [c for c in found if c.slug.startswith("mig-")]
    assert [(c.slug, c.available) for c in mig] == [
        ("mig-1g-18gb-x1", 7),
        ("mig-1g-18gb-me-x1", 1),
        ("mig-1g-35gb-x1", 4),
        ("mig-2g-35gb-x1", 3),
        ("mig-3g-71gb-x1", 2),
        ("mig-4g-71gb-x1", 1),
        ("mig-7g-141gb-x1", 1),
    ]
    three = find(found, "mig-3g-71gb-x1")
    assert three is not None
    assert three.request == {"mig": "3g.71gb"}
    assert three.display_name == "MIG 3g.71gb (NVIDIA H200)"


# --- reasons and times ----------------------------------------------------------------------


def test_what_cannot_start_now_says_why_and_since_when() -> None:
    inv = simulated.load("h200-8x")
    held = taken(inv.slices, inv.device_classes, [{"gpu": 4}, {"gpu": 2}, {"gpu": 1}])
    since = {"default/held-0": NOW.timestamp() - 7200, "default/held-2": NOW.timestamp() - 780}
    found = choices(World(inv.slices, inv.device_classes, held, since), now=NOW)
    one, two = find(found, "h200-x1"), find(found, "h200-x2")
    assert one is not None and two is not None
    assert (one.available, one.reason, one.description) == (1, None, "1 can start now")
    assert two.available == 0
    assert two.description == "none free now: only 1 of 8 free (since 14:47)"
    assert two.reason == "on gpu-node-1: 1 of 8 GPUs are not held by other claims, 2 needed"
    assert two.changed == NOW - dt.timedelta(seconds=780)
    everything = taken(inv.slices, inv.device_classes, [{"gpu": 8}])
    everything[0]["metadata"]["creationTimestamp"] = "2026-11-30T09:05:00Z"
    full = choices(World(inv.slices, inv.device_classes, everything), now=NOW)
    eight = find(full, "h200-x8")
    assert eight is not None
    assert eight.description == "none free now: 8 of 8 held (since Nov 30 09:05)"


def test_reasons_do_not_name_other_claims() -> None:
    inv = simulated.load("h200-mig")
    held = taken(inv.slices, inv.device_classes, [{"mig": "3g.71gb"}, {"mig": "1g.18gb"}])
    for claim in held:
        claim["metadata"]["name"] = "alice-secret-project"
    for choice in choices(World(inv.slices, inv.device_classes, held), now=NOW):
        assert "alice" not in (choice.reason or "") + choice.description
        if choice.slug == "mig-3g-71gb-x1":
            assert choice.reason == (
                "on h200-mig-1: 0 of 1 MIG slice is not blocked by partitions in use, 1 needed"
            )


def test_the_cache_keeps_the_layout_and_follows_the_claims() -> None:
    inv = simulated.load("h200-8x")
    cache = ChoiceCache()
    idle = choices(World(inv.slices, inv.device_classes), cache=cache, now=NOW)
    held = taken(inv.slices, inv.device_classes, [{"gpu": 8}])
    busy = choices(World(inv.slices, inv.device_classes, held), cache=cache, now=NOW)
    assert [c.available for c in idle[1:]] == [8, 4, 2, 1]
    assert [c.available for c in busy[1:]] == [0, 0, 0, 0]
    assert cache.layouts_built == 1  # the same slices: the layout was kept
    again = simulated.load("h200-8x")  # equal slices, read again: the layout is kept
    choices(World(again.slices, again.device_classes), cache=cache, now=NOW)
    assert cache.layouts_built == 1
    changed = copy.deepcopy(again.slices)  # a slice that changed: laid out again
    del changed[0]["spec"]["devices"][0]
    fewer = choices(World(changed, again.device_classes), cache=cache, now=NOW)
    assert cache.layouts_built == 2
    assert [(c.slug, c.available) for c in fewer[1:]] == [
        ("h200-x1", 7),
        ("h200-x2", 3),
        ("h200-x4", 1),
        ("h200-x7", 1),
    ]


# --- who may choose what --------------------------------------------------------------------


def offered() -> list[Choice]:
    inv = simulated.load("h200-mig")
    return choices(World(inv.slices, inv.device_classes), now=NOW)


def test_rules_restrict_choices_to_users_and_groups() -> None:
    policy = ChoicePolicy.from_table(
        [
            {"match": "mig-7g-*", "groups": ["ml-admins"], "users": ["carol"]},
            {"match": "h200-*", "users": ["alice"]},
        ]
    )
    slugs = {
        who: [c.slug for c in restrict(offered(), who, groups, policy)]
        for who, groups in (
            ("alice", ()),
            ("bob", ("students",)),
            ("carol", ()),
            ("dan", ("ml-admins",)),
        )
    }
    assert "mig-7g-141gb-x1" not in slugs["alice"] and "h200-x1" in slugs["alice"]
    assert "mig-7g-141gb-x1" not in slugs["bob"] and "h200-x1" not in slugs["bob"]
    assert "mig-7g-141gb-x1" in slugs["carol"] and "mig-7g-141gb-x1" in slugs["dan"]
    assert all("mig-1g-18gb-x1" in s and NONE in s for s in slugs.values())


def test_a_callable_restricts_choices_too() -> None:
    def small_for_students(user: str, groups: frozenset[str], choice: Choice) -> bool:
        return "students" not in groups or choice.slug in (NONE, "mig-1g-18gb-x1")

    policy = ChoicePolicy(allow=small_for_students)
    assert [c.slug for c in restrict(offered(), "bob", {"students"}, policy)] == [
        NONE,
        "mig-1g-18gb-x1",
    ]
    assert len(restrict(offered(), "alice", (), policy)) == len(offered())


def test_each_setting_comes_from_the_first_rule_that_has_it() -> None:
    policy = ChoicePolicy.from_table(
        [
            {"match": "mig-1g-*", "idle_timeout": "30m"},
            {"match": "mig-*", "lease": "8h", "idle_timeout": "1h"},
            {"match": "*", "lease": "24h"},
            {"match": "mig-3g-71gb-x1", "default": True},
        ]
    )
    got = {
        c.slug: (c.lease, c.idle_timeout, c.default) for c in restrict(offered(), "bob", (), policy)
    }
    assert got["mig-1g-18gb-x1"] == ("8h", "30m", False)
    assert got["mig-2g-35gb-x1"] == ("8h", "1h", False)
    assert got["mig-3g-71gb-x1"] == ("8h", "1h", True)
    assert got["h200-x1"] == ("24h", None, False)
    assert got[NONE] == ("24h", None, False)


def test_exactly_one_choice_is_the_default() -> None:
    plain = restrict(offered(), "bob")
    assert [c.slug for c in plain if c.default] == [NONE]
    no_none = ChoicePolicy(allow=lambda user, groups, choice: choice.slug != NONE)
    assert [c.slug for c in restrict(offered(), "bob", (), no_none) if c.default] == ["h200-x1"]
    both = ChoicePolicy.from_table([{"match": "mig-*", "default": True}])
    assert [c.slug for c in restrict(offered(), "bob", (), both) if c.default] == ["mig-1g-18gb-x1"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("h200-*", "profile rule 1: expected a table"),
        ({"match": "*", "group": ["x"]}, "unknown key 'group'"),
        ({"match": ""}, "match must be a pattern"),
        ({"users": "alice"}, "users must be a list of names"),
        ({"lease": "forever"}, "lease: 'forever' is not a duration"),
        ({"lease": "0"}, "lease: must be more than 0"),
        ({"idle_timeout": -1}, "idle_timeout: must not be negative"),
        ({"default": "yes"}, "default must be true or false"),
        ({"kernels_only": 1}, "kernels_only must be true or false"),
        ({"share": "mps"}, "profile rule 1: share must be a table of sharing keywords"),
        ({"share": {"share": "mps", "thread": 25}}, "share: unknown key 'thread'"),
        ({"share": {"share": "spread"}}, "share='spread' is not a way to share a GPU"),
        ({"share": {"share": "20Gi"}}, "share='20Gi' is not a way to share a GPU"),
        ({"share": {"share": "mps", "threads": 250}}, "threads"),
        ({"share": {"share": "time-slicing", "threads": 25}}, "threads= is a limit of"),
    ],
)
def test_a_rule_that_is_not_one_is_refused_saying_where(row: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        ChoicePolicy.from_table([row])


def test_a_share_rule_adds_a_shared_choice_beside_each_single_device_it_matches() -> None:
    """#40 item 4: "Shared NVIDIA H200 (MPS, 25%)" and "Time-sliced NVIDIA H200" beside the
    whole H200; the rule's settings are the shared choices', and the live count says how
    many servers share each claim now."""
    policy = ChoicePolicy.from_table(
        [
            {"match": "h200-x1", "share": {"share": "mps", "threads": 25}, "groups": ["team"]},
            {"match": "h200-*", "share": {"share": "time-slicing"}, "idle_timeout": "2h"},
            {"match": "mig-3g-*", "share": {"share": "mps"}},
            {"match": "mig-1g-*", "share": {"share": "time-slicing"}},  # not a MIG's: none
            {"match": "h200-x1", "lease": "8h"},
        ]
    )
    sharing = {"dra-shared-h200-x1-mps-25": 3}
    mine = {c.slug: c for c in restrict(offered(), "bob", {"team"}, policy, sharing)}
    mps, sliced = mine["h200-x1-mps-25"], mine["h200-x1-time-sliced"]
    whole = mine["h200-x1"].display_name  # 1x NVIDIA H200 (140 GiB)
    assert mps.display_name == f"Shared {whole} (MPS, 25%)"
    assert sliced.display_name == f"Time-sliced {whole}"
    assert mps.request == {"gpu": 1, "model": "NVIDIA H200", "share": "mps", "threads": 25}
    assert sliced.request == {"gpu": 1, "model": "NVIDIA H200", "share": "time-slicing"}
    assert mps.shared and sliced.shared and not mine["h200-x1"].shared
    assert mps.description == "shared by 3 now (MPS, 25%)"
    assert sliced.description.startswith("no one shares it now: ")
    # the rule's settings go to what it made, not to what it matched; other rules by slug
    assert (mps.lease, mps.idle_timeout) == (None, None)
    assert (sliced.idle_timeout, mine["h200-x1"].idle_timeout) == ("2h", None)
    assert mine["h200-x1"].lease == "8h"
    assert "h200-x2-time-sliced" not in mine  # one device only
    assert "mig-3g-71gb-x1-mps" in mine
    assert not any(slug.startswith("mig-1g-18gb-x1-") for slug in mine)
    # who: the rule's groups
    others = {c.slug for c in restrict(offered(), "eve", (), policy, sharing)}
    assert "h200-x1-mps-25" not in others and "h200-x1-time-sliced" in others
    # without a count of the cluster's shared claims (one machine): no shared choice
    assert not any(c.shared for c in restrict(offered(), "bob", {"team"}, policy))
    profile = next(p for p in kubespawner_profiles([mps]))
    assert profile["kubespawner_override"]["dra_shared"] is True
    assert kernel_specs([mps]) == {}  # its claim is the hub's to make


# --- KubeSpawner ---------------------------------------------------------------------------


def test_kubespawner_profiles_carry_the_request_lease_and_idle_timeout() -> None:
    policy = ChoicePolicy.from_table([{"match": "mig-*", "lease": "8h", "idle_timeout": "1h"}])
    profiles = kubespawner_profiles(restrict(offered(), "bob", (), policy))
    assert profiles[0] == {
        "display_name": "No GPU",
        "slug": "none",
        "description": "no devices: CPU only",
        "default": True,
        "kubespawner_override": {
            "dra_request": {},
            "dra_lease": None,
            "dra_idle_timeout": None,
            "dra_kernels_only": False,
            "dra_shared": False,
        },
    }
    mig = next(p for p in profiles if p["slug"] == "mig-3g-71gb-x1")
    assert mig["kubespawner_override"] == {
        "dra_request": {"mig": "3g.71gb"},
        "dra_lease": "8h",
        "dra_idle_timeout": "1h",
        "dra_kernels_only": False,
        "dra_shared": False,
    }
    assert all(
        set(p) == {"display_name", "slug", "description", "default", "kubespawner_override"}
        for p in profiles
    )


def test_a_gpu_kernels_only_rule_gives_the_devices_to_kernel_pods() -> None:
    """kernels_only: the profile says so (dra_kernels_only, and in its description), for
    choices with devices only ("no GPU" has none to give)."""
    policy = ChoicePolicy.from_table([{"match": "h200-*", "kernels_only": True}])
    mine = restrict(offered(), "bob", (), policy)
    assert {c.slug for c in mine if c.kernels_only} == {
        c.slug for c in mine if c.slug.startswith("h200-")
    }
    everything = ChoicePolicy.from_table([{"kernels_only": True}])
    none = find(restrict(offered(), "bob", (), everything), NONE)
    assert none is not None and not none.kernels_only
    profiles = {p["slug"]: p for p in kubespawner_profiles(mine)}
    one = profiles["h200-x1"]
    assert one["kubespawner_override"]["dra_kernels_only"] is True
    assert one["kubespawner_override"]["dra_request"] == {"gpu": 1, "model": "NVIDIA H200"}
    assert one["description"].endswith(
        "(GPU kernels only: the server runs without devices, its kernels get them)"
    )
    assert profiles["mig-3g-71gb-x1"]["kubespawner_override"]["dra_kernels_only"] is False
    assert "GPU kernels only" not in profiles["mig-3g-71gb-x1"]["description"]


def test_kernel_specs_run_each_choice_with_devices_in_a_pod_of_its_own() -> None:
    policy = ChoicePolicy.from_table([{"match": "mig-*", "idle_timeout": "1h"}])
    specs = kernel_specs(restrict(offered(), "bob", (), policy))
    assert "dra-none" not in specs  # "no GPU": the server's own kernel
    mig = specs["dra-mig-3g-71gb-x1"]
    assert mig["argv"] == ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert mig["display_name"].startswith("Python 3 \u00b7 ")
    assert mig["interrupt_mode"] == "message"
    assert mig["metadata"]["kernel_provisioner"] == {
        "provisioner_name": "dra-kubernetes",
        "config": {"request": {"mig": "3g.71gb"}},
    }
    assert mig["metadata"]["dra_jupyter"]["idle_timeout"] == "1h"
    assert len(specs) == len(offered()) - 1


def test_gpu_classes_other_than_the_first_are_asked_for_by_class() -> None:
    slices = nodes_of("mi300x-8", 1, "amd") + nodes_of("h200-8x", 1, "nv")
    classes = classes_of("h200-8x", "mi300x-8")
    found = assert_counts_agree(World(slices, classes))
    amd = next(c for c in found if "MI300X" in c.display_name and c.slug.endswith("-x2"))
    assert amd.request == {
        "device_class": "gpu.amd.com",
        "count": 2,
        "model": "AMD_Instinct_MI300X_OAM",
    }
    assert find(found, "h200-x8") is not None


def test_tpu_choices_count_chips() -> None:
    inv = simulated.load("tpu-v5e-8")
    found = assert_counts_agree(World(inv.slices, inv.device_classes))
    assert [c.slug for c in found] == [
        "none",
        "tpu-v5litepod-x1",
        "tpu-v5litepod-x2",
        "tpu-v5litepod-x4",
        "tpu-v5litepod-x8",
    ]
    assert found[2].display_name.startswith(f"2{TIMES} TPU v5litepod")


def test_model_names_tell_apart_gpus_of_one_class() -> None:
    slices = nodes_of("h200-8x", 1, "a") + nodes_of("h100-8x", 1, "b")
    found = assert_counts_agree(World(slices, classes_of("h200-8x")))
    assert {c.slug for c in found} >= {"h200-x8", "h100-80gb-hbm3-x8"}
    assert nvidia.H100_SXM.product_name in {str(c.request.get("model")) for c in found}


def test_kernel_specs_are_written_and_stale_ones_removed(tmp_path: Path) -> None:
    (tmp_path / "kernels" / "dra-gone").mkdir(parents=True)
    (tmp_path / "kernels" / "dra-gone" / "kernel.json").write_text("{}")
    (tmp_path / "kernels" / "python3").mkdir()
    (tmp_path / "kernels" / "python3" / "kernel.json").write_text("{}")
    specs = kernel_specs(restrict(offered(), "bob"))
    written = write_kernel_specs(tmp_path, specs)
    assert sorted(p.parent.name for p in written) == sorted(specs)
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == sorted([*specs, "python3"])
    name = next(iter(specs))
    assert json.loads((tmp_path / "kernels" / name / "kernel.json").read_text()) == specs[name]

"""Where ``topology`` puts claims written without constraints, on the NVIDIA driver's shapes:
each test is a state where first-fit places badly and topology must not."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from dra_jupyter.allocator import Allocator
from dra_jupyter.allocator.core import exact_counts
from dra_jupyter.allocator.placements import Counters, blocked_by
from dra_jupyter.allocator.pools import usable_devices
from dra_jupyter.allocator.topology import claims_need
from dra_jupyter.inventory import mig, nvidia
from tests.allocator.test_properties import PROFILE, World, make_allocator, node_of, worlds

Wire = dict[str, Any]
DRIVER = nvidia.DRIVER


def held(name: str, node: str, *devices: str, share: bool = False) -> Wire:
    """An allocated claim holding ``devices`` of ``node``'s pool (a 20Gi share with ``share``)."""
    results = []
    for i, device in enumerate(devices):
        result: Wire = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
        if share:
            result["shareID"] = f"00000000-0000-0000-0000-00000000000{i}"
            result["consumedCapacity"] = {"memory": "20Gi", "shares": "1"}
        results.append(result)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }},
    }  # fmt: skip


def wanted(count: int = 1, *, profile: str | None = None, memory: str | None = None) -> Wire:
    exactly: Wire = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if profile is not None:
        cel = f"device.attributes['{DRIVER}'].profile == '{profile}'"
        exactly = {"deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": cel}}]}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "new", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def placed(slices: list[Wire], allocated: list[Wire], claim: Wire, strategy: str) -> set[str]:
    allocator = Allocator(slices, nvidia.device_classes(), allocated, strategy)  # type: ignore[arg-type]
    found = allocator.allocate([claim])
    assert found is not None
    return {f"{r.device.pool}/{r.device.device}" for r in found[0].results}


def test_two_gpus_share_a_pcie_root() -> None:
    slices = [nvidia.hgx_node("n1")]
    allocated = [held("a", "n1", "gpu-0")]
    assert placed(slices, allocated, wanted(2), "first-fit") == {"n1/gpu-1", "n1/gpu-2"}
    assert placed(slices, allocated, wanted(2), "topology") == {"n1/gpu-2", "n1/gpu-3"}


def test_four_gpus_share_a_numa_node() -> None:
    slices = [nvidia.hgx_node("n1")]
    allocated = [held("a", "n1", "gpu-1")]
    assert placed(slices, allocated, wanted(4), "first-fit") == {
        "n1/gpu-0", "n1/gpu-2", "n1/gpu-3", "n1/gpu-4"}  # fmt: skip
    assert placed(slices, allocated, wanted(4), "topology") == {
        "n1/gpu-4", "n1/gpu-5", "n1/gpu-6", "n1/gpu-7"}  # fmt: skip


def test_a_single_gpu_completes_a_started_pair() -> None:
    slices = [nvidia.hgx_node("n1")]
    allocated = [held("a", "n1", "gpu-3")]
    assert placed(slices, allocated, wanted(1), "first-fit") == {"n1/gpu-0"}
    assert placed(slices, allocated, wanted(1), "topology") == {"n1/gpu-2"}
    allocated = [held("a", "n1", "gpu-0", "gpu-1", "gpu-7")]  # gpu-7's root is half used
    assert placed(slices, allocated, wanted(1), "topology") == {"n1/gpu-6"}


def test_a_used_node_is_filled_before_an_untouched_one() -> None:
    slices = [nvidia.hgx_node("n1"), nvidia.hgx_node("n2")]
    allocated = [held("a", "n2", "gpu-0")]
    assert placed(slices, allocated, wanted(1), "first-fit") == {"n1/gpu-0"}
    assert placed(slices, allocated, wanted(1), "topology") == {"n2/gpu-1"}


def test_whole_gpus_leave_mig_gpus_alone_while_plain_ones_are_free() -> None:
    slices = [nvidia.hgx_node("n2"), *mig.h200_mig_node("n1", gpus=8)]
    allocated = [
        held("a", "n1", "gpu-0-mig-1g18gb-19-0"),
        held("b", "n2", "gpu-0"),
    ]
    assert placed(slices, allocated, wanted(1), "first-fit") == {"n1/gpu-1"}
    assert placed(slices, allocated, wanted(1), "topology") == {"n2/gpu-1"}


def test_whole_gpus_leave_the_last_whole_gpu_of_a_mig_node_in_use() -> None:
    """A MIG node in use is filled before an untouched plain node, but a whole-GPU claim
    does not take its last whole GPU: that one stays for MIG claims, which only it serves."""
    allocated = [held("a", "n1", "gpu-0-mig-1g18gb-19-0")]
    two = [nvidia.hgx_node("n2"), *mig.h200_mig_node("n1", gpus=2)]
    assert placed(two, allocated, wanted(1), "topology") == {"n2/gpu-0"}
    three = [nvidia.hgx_node("n2"), *mig.h200_mig_node("n1", gpus=3)]
    assert placed(three, allocated, wanted(1), "topology") in ({"n1/gpu-1"}, {"n1/gpu-2"})
    assert placed(three, allocated, wanted(2), "topology") == {"n2/gpu-0", "n2/gpu-1"}
    # with no untouched plain node to break, the last whole GPU is taken after all
    used = [*allocated, held("b", "n2", *(f"gpu-{i}" for i in range(7)))]
    assert placed(two, used, wanted(1), "topology") == {"n2/gpu-7"}
    assert placed(two, [*used, held("c", "n2", "gpu-7")], wanted(1), "topology") == {"n1/gpu-1"}


def test_a_shared_device_counts_for_every_request_it_can_serve() -> None:
    """A node with fewer free devices than the claim's requests is not ranked out when one
    of them allows several allocations: the used shares node serves three shares from its
    one free GPU before an untouched one is started."""
    slices = [nvidia.hgx_node("n1", shares=4), nvidia.hgx_node("n2", shares=4)]
    allocated = [
        held("whole", "n1", *(f"gpu-{i}" for i in range(7))),
        held("share", "n1", "gpu-7", share=True),
    ]
    request: Wire = {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
        "capacity": {"requests": {"memory": "20Gi"}},
    }
    claim = wanted()
    claim["spec"]["devices"]["requests"] = [{"name": f"r{i}", "exactly": request} for i in range(3)]
    assert placed(slices, allocated, claim, "topology") == {"n1/gpu-7"}


def test_a_mig_slice_keeps_a_3g_placement_open() -> None:
    slices = mig.h200_mig_node("n1", gpus=2)
    allocated = [held("a", "n1", "gpu-0-mig-1g18gb-19-6")]
    claim = wanted(profile="1g.18gb")
    assert placed(slices, allocated, claim, "first-fit") == {"n1/gpu-0-mig-1g18gb-19-0"}
    found = placed(slices, allocated, claim, "topology")
    assert found <= {"n1/gpu-0-mig-1g18gb-19-4", "n1/gpu-0-mig-1g18gb-19-5"}, found
    # the 3g at start 0 of GPU 0 stays open, and GPU 1 stays whole
    after = [*allocated, held("b", "n1", found.pop().split("/")[1])]
    three = placed(slices, after, wanted(profile="3g.71gb"), "topology")
    assert three == {"n1/gpu-0-mig-3g71gb-9-0"}


def test_gpus_of_one_shape_share_their_blocking_counts_and_no_other() -> None:
    """A MIG placement's blocking count is worked out once for GPUs used alike (the same
    counters left, the same placements): it is the count worked out for the GPU itself."""
    slices = mig.h200_mig_node("n1", gpus=4)
    allocated = [
        held("a", "n1", "gpu-1-mig-1g18gb-19-6"),
        held("b", "n1", "gpu-3-mig-1g18gb-19-6"),  # GPU 3 used as GPU 1: one shape
        held("c", "n1", "gpu-2-mig-2g35gb-14-0"),
    ]
    allocator = Allocator(slices, nvidia.device_classes(), allocated, "topology")
    [pool] = allocator.catalog.own_pools("n1")
    shared = Counters(pool, allocator.state)
    devices = [d for s in pool.slices for d in s.devices if d.consumes_counters]
    assert len(devices) == 4 * 26
    for device in devices:
        alone = Counters(pool, allocator.state)
        assert shared.blocking(device) == blocked_by(alone.needs(device), alone), device.name
    shapes = {name: shared._shape(f"gpu-{name}-counter-set") for name in range(4)}
    assert shapes[1] == shapes[3]
    assert len({shapes[0], shapes[1], shapes[2]}) == 3


def test_shares_fill_a_gpu_already_shared() -> None:
    slices = [nvidia.hgx_node("n1", shares=4)]
    allocated = [held("a", "n1", "gpu-5", share=True)]
    assert placed(slices, allocated, wanted(memory="20Gi"), "first-fit") == {"n1/gpu-0"}
    assert placed(slices, allocated, wanted(memory="20Gi"), "topology") == {"n1/gpu-5"}


@settings(PROFILE, max_examples=200)
@given(worlds(admin=False))
def test_an_untouched_node_is_used_only_when_no_used_node_can_take_the_claims(
    world: World,
) -> None:
    """... unless the used node has partitionable or shared devices and the claims, which
    other nodes could serve, would take its last free whole device."""
    claims = world.claim_objects()
    allocator = make_allocator(world, "topology")
    found = allocator.allocate(claims)
    if found is None:
        return
    held = allocator.state.dedicated | allocator.state.shared

    def used(name: str) -> bool:
        pools = allocator.pools_for(allocator.node(name))
        return any(dev_id in held for *_, dev_id in usable_devices(pools))

    chosen = node_of(found)
    assert chosen is not None
    if used(chosen):
        return
    parsed = allocator._prepare(claims)
    needed, _ = claims_need(parsed)
    plain = exact_counts(parsed) and not allocator.node_filter.plain_nodes_hopeless(parsed)
    for name in world.nodes:
        if name != chosen and used(name):
            cap = allocator._node_capacity(name)
            if plain and cap.flexible and cap.whole() <= needed:
                continue  # a node with MIG or shares keeps its last whole device
            assert make_allocator(world, "topology").allocate(claims, node=name) is None, name

"""End-to-end tests of the ``dra-jupyter`` command line.

Every case writes an OBJECTS.yaml file the way ``kubectl get -o yaml`` prints objects
(multi-document YAML, or one ``kind: List``), runs the command and checks the exit
code and what a user reads:

* 0: stdout is a v1 List of the pending claims with ``status.allocation``;
* 1: no allocation exists; stderr says which request of which claim failed and why;
* 2: invalid input; exactly one line on stderr, ``error: <object>, <field>: <problem>;
  <remedy>``, never a traceback.

The inventory is shaped as the NVIDIA DRA driver publishes it: an 8x H200 HGX node
(:func:`dra_jupyter.inventory.nvidia.hgx_node`) and, for MIG, the DynamicMIG layout
(``/work/shared/reference/dra-drivers.md`` §1.3): a slice of shared counters with one
counter set per GPU (``multiprocessors``, ``memory`` and ``memory-slice-<i>``), then one
slice per GPU holding the full GPU (consuming every counter of its set) and one ``mig``
device per profile and placement (consuming its memory slices).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_jupyter.allocator.explain import STAGE_TEXT, STAGES
from dra_jupyter.cli import main
from dra_jupyter.inventory import nvidia

Wire = dict[str, Any]

NODE = "gpu-node-1"
NODE2 = "gpu-node-2"
GPU = "gpu.nvidia.com"  # the driver, and the DeviceClass of full GPUs
MIG = "mig.nvidia.com"  # the DeviceClass of MIG devices
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
PARENT_UUID = "gpu.nvidia.com/parentUUID"

BIG_MEMORY = f"device.capacity['{GPU}'].memory.compareTo(quantity('200Gi')) >= 0"
PROFILE_1G = f"device.attributes['{GPU}'].profile == '1g.18gb'"
PROFILE_3G = f"device.attributes['{GPU}'].profile == '3g.71gb'"

# gpu-<minor> of hgx_node(): its PCIe root (two GPUs per root).
HGX_ROOTS = {f"gpu-{i}": root for i, root in enumerate(["15", "15", "37", "37", "97", "97"])}
HGX_ROOTS.update({"gpu-6": "b7", "gpu-7": "b7"})


# --- objects --------------------------------------------------------------------------


def selector(expression: str) -> Wire:
    return {"cel": {"expression": expression}}


def request(
    name: str,
    device_class: str = GPU,
    count: int = 1,
    *selectors: str,
    tolerations: Sequence[Wire] = (),
) -> Wire:
    exactly: Wire = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [selector(s) for s in selectors]
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"name": name, "exactly": exactly}


def claim(
    name: str, *requests: Wire, constraints: Sequence[Wire] = (), namespace: str = "default"
) -> Wire:
    devices: Wire = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def same(attribute: str) -> Wire:
    return {"matchAttribute": attribute}


def allocated(name: str, node: str, *devices: str, request_name: str = "gpu") -> Wire:
    """A claim already allocated (``status.allocation``) to ``devices`` of ``node``."""
    out = claim(name, request(request_name, GPU, len(devices)))
    out["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": request_name, "driver": GPU, "pool": node, "device": d}
                    for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    return out


def hgx(node: str = NODE) -> list[Wire]:
    """The DeviceClasses and the ResourceSlice of one 8x H200 node."""
    return [*nvidia.device_classes(), nvidia.hgx_node(node)]


def tainted_hgx(node: str = NODE) -> Wire:
    """hgx_node() with an XID 79 health taint (NoSchedule) on every GPU."""
    slice_ = nvidia.hgx_node(node)
    for device in slice_["spec"]["devices"]:
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    return slice_


# Two DynamicMIG profiles of an H200 (132 SMs, 8 memory slices): profile -> (GI profile id,
# memory slices used, multiprocessors, memory, placement starts).
MIG_PROFILES: dict[str, tuple[int, int, int, str, tuple[int, ...]]] = {
    "1g.18gb": (19, 1, 16, "16896Mi", (0, 1, 2, 3, 4, 5, 6)),
    "3g.71gb": (9, 4, 60, "71424Mi", (0, 4)),
}
MEMORY_SLICES = 8
MIG_DEVICES_PER_GPU = 1 + sum(len(p[4]) for p in MIG_PROFILES.values())  # full GPU + MIG


def _counters(values: dict[str, str]) -> Wire:
    return {name: {"value": value} for name, value in values.items()}


def mig_node(node: str = NODE, gpus: int = 2) -> list[Wire]:
    """The ResourceSlices of a DynamicMIG node with ``gpus`` H200s (Kubernetes >= 1.35 layout).

    Slice 0 holds only ``sharedCounters`` (``gpu-<minor>-counter-set`` per GPU); slice
    ``1 + minor`` holds the full GPU ``gpu-<minor>`` (consumes every counter of its set)
    and the MIG devices ``gpu-<minor>-mig-<profile>-<GI id>-<start>``.
    """
    pool = {"name": node, "generation": 1, "resourceSliceCount": gpus + 1}
    counter_sets: list[Wire] = []
    slices: list[Wire] = []
    for minor in range(gpus):
        counter_set = f"gpu-{minor}-counter-set"
        total = {
            "multiprocessors": "132",
            "memory": nvidia.H200.memory,
            **{f"memory-slice-{i}": "1" for i in range(MEMORY_SLICES)},
        }
        counter_sets.append({"name": counter_set, "counters": _counters(total)})
        full = nvidia.gpu_device(
            node,
            minor,
            nvidia.H200,
            nvidia.GpuPlacement(f"0000:{0x18 + 0x10 * minor:02x}:00.0", "pci0000:15", 0),
        )
        full["consumesCounters"] = [{"counterSet": counter_set, "counters": _counters(total)}]
        devices = [full]
        for profile, (gi_id, size, sms, memory, starts) in MIG_PROFILES.items():
            for start in starts:
                attributes = {k: v for k, v in full["attributes"].items() if k != "uuid"}
                attributes["type"] = {"string": "mig"}
                attributes["parentUUID"] = full["attributes"]["uuid"]
                attributes["profile"] = {"string": profile}
                used = {
                    "multiprocessors": str(sms),
                    "memory": memory,
                    **{f"memory-slice-{i}": "1" for i in range(start, start + size)},
                }
                devices.append(
                    {
                        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{gi_id}-{start}",
                        "attributes": attributes,
                        "capacity": {
                            "multiprocessors": {"value": str(sms)},
                            "memory": {"value": memory},
                        },
                        "consumesCounters": [
                            {"counterSet": counter_set, "counters": _counters(used)}
                        ],
                    }
                )
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{GPU}-gpu-{minor}"},
                "spec": {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices},
            }
        )
    counters_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{GPU}-counters"},
        "spec": {"driver": GPU, "nodeName": node, "pool": pool, "sharedCounters": counter_sets},
    }
    return [*nvidia.device_classes(), counters_slice, *slices]


# --- running the command --------------------------------------------------------------


def write_documents(path: Path, objects: Sequence[Wire]) -> Path:
    """Multi-document YAML, as ``kubectl get ... -o yaml`` of several objects is concatenated."""
    path.write_text(
        "# objects for dra-jupyter\n---\n" + yaml.safe_dump_all(objects, sort_keys=False),
        encoding="utf-8",
    )
    return path


def write_list(path: Path, objects: Sequence[Wire]) -> Path:
    """One ``kind: List``, as ``kubectl get resourceslices,resourceclaims -o yaml`` prints."""
    document = {
        "apiVersion": "v1",
        "kind": "List",
        "items": list(objects),
        "metadata": {"resourceVersion": ""},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def allocate(tmp_path: Path, objects: Sequence[Wire], *extra: str) -> tuple[int, str, str]:
    path = write_documents(tmp_path / "objects.yaml", objects)
    return cli("allocate", "-f", str(path), *extra)


def console_script() -> Path:
    script = Path(sys.executable).parent / "dra-jupyter"
    assert script.exists(), f"{script} is missing: run 'make install' to install the console script"
    return script


def items(stdout: str, output: str = "yaml") -> list[Wire]:
    document = json.loads(stdout) if output == "json" else yaml.safe_load(stdout)
    assert document["apiVersion"] == "v1"
    assert document["kind"] == "List"
    result: list[Wire] = document["items"]
    return result


def devices_of(item: Wire) -> list[str]:
    return [r["device"] for r in item["status"]["allocation"]["devices"]["results"]]


def node_of(item: Wire) -> str:
    """The node of a node-local allocation (its nodeSelector: field metadata.name In [node])."""
    [term] = item["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert list(term) == ["matchFields"]
    [field] = term["matchFields"]
    assert (field["key"], field["operator"]) == ("metadata.name", "In")
    [node] = field["values"]
    assert isinstance(node, str)
    return node


def assert_unsatisfiable(code: int, out: str, err: str) -> str:
    """Exit 1, nothing on stdout, and an explanation (no traceback, no 'error:')."""
    assert code == 1, err
    assert out == ""
    assert "Traceback" not in err
    assert err.startswith("no allocation exists"), err
    return err


def assert_one_error_line(code: int, out: str, err: str) -> str:
    """Exit 2: exactly one line on stderr, starting with 'error: ', never a traceback."""
    assert code == 2, (out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    assert lines[0].startswith("error: "), err
    return lines[0]


# --- exit 0 ---------------------------------------------------------------------------


def test_allocate_yaml_from_multi_document_file(tmp_path: Path) -> None:
    objects = [*hgx(), claim("nb-2", request("gpu", GPU, 2), constraints=[same(PCIE_ROOT)])]
    code, out, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")
    [item] = items(out)
    assert item["metadata"] == {"name": "nb-2", "namespace": "default"}
    assert item["spec"] == objects[-1]["spec"]  # the claim is printed as given
    assert item["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": GPU, "pool": NODE, "device": "gpu-0"},
        {"request": "gpu", "driver": GPU, "pool": NODE, "device": "gpu-1"},
    ]
    assert node_of(item) == NODE


def test_allocate_json_from_list_file(tmp_path: Path) -> None:
    objects = [
        *hgx(),
        allocated("nb-1", NODE, "gpu-0"),
        claim("train", request("gpu", GPU, 4), constraints=[same(NUMA_NODE)]),
        claim("nb-3", request("gpu", GPU, 1)),
    ]
    path = write_list(tmp_path / "objects.yaml", objects)
    code, out, err = cli("allocate", "-f", str(path), "-o", "json")
    assert (code, err) == (0, "")
    # Only the pending claims come out, in file order, allocated together on one node.
    train, nb3 = items(out, "json")
    assert train["metadata"]["name"] == "train"
    assert nb3["metadata"]["name"] == "nb-3"
    assert devices_of(train) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]  # NUMA 0 has 3 free
    assert devices_of(nb3) == ["gpu-1"]  # gpu-0 is held by nb-1
    assert node_of(train) == node_of(nb3) == NODE


def test_allocate_reads_a_json_list_as_kubectl_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "objects.json"
    document = {"apiVersion": "v1", "kind": "List", "items": [*hgx(), claim("a", request("gpu"))]}
    path.write_text(json.dumps(document, indent=4), encoding="utf-8")
    code, out, err = cli("allocate", "-f", str(path))
    assert (code, err) == (0, "")
    assert [devices_of(i) for i in items(out)] == [["gpu-0"]]


def test_allocate_mig_devices_on_one_parent(tmp_path: Path) -> None:
    objects = [
        *mig_node(),
        claim(
            "mig-pair",
            request("a", MIG, 1, PROFILE_1G),
            request("b", MIG, 1, PROFILE_1G),
            constraints=[same(PARENT_UUID)],
        ),
    ]
    code, out, err = allocate(tmp_path, objects, "-o", "json")
    assert (code, err) == (0, "")
    [item] = items(out, "json")
    results = item["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [
        ("a", "gpu-0-mig-1g18gb-19-0"),
        ("b", "gpu-0-mig-1g18gb-19-1"),
    ]
    assert node_of(item) == NODE


def test_node_option_restricts_the_nodes(tmp_path: Path) -> None:
    held = allocated("all-of-node-1", NODE, *(f"gpu-{i}" for i in range(8)))
    objects = [*hgx(NODE), nvidia.hgx_node(NODE2), held, claim("nb", request("gpu"))]
    code, out, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")
    assert node_of(items(out)[0]) == NODE2  # node 1 is full: the next node in name order

    code, out, err = allocate(tmp_path, objects, "--node", NODE2)
    assert (code, err) == (0, "")
    [item] = items(out)
    assert node_of(item) == NODE2
    assert {r["pool"] for r in item["status"]["allocation"]["devices"]["results"]} == {NODE2}

    code, out, err = allocate(tmp_path, objects, "--node", NODE)
    err = assert_unsatisfiable(code, out, err)
    assert f"node {NODE}" in err
    assert "default/all-of-node-1" in err
    assert NODE2 not in err  # only the node asked for is considered


def test_node_option_with_an_unknown_node_names_the_known_ones(tmp_path: Path) -> None:
    code, out, err = allocate(
        tmp_path, [*hgx(), claim("nb", request("gpu"))], "--node", "gpu-nod-1"
    )
    assert code in (1, 2), err
    if code == 2:
        assert_one_error_line(code, out, err)
    # A typo in --node must be visible: the node has no devices at all, and the nodes
    # that do have devices are named.
    assert "gpu-nod-1" in err
    assert NODE in err, err


def test_first_fit_takes_upstream_order(tmp_path: Path) -> None:
    objects = [*hgx(), allocated("nb-1", NODE, "gpu-0"), claim("pair", request("gpu", GPU, 2))]
    code, out, err = allocate(tmp_path, objects, "--strategy", "first-fit")
    assert (code, err) == (0, "")
    assert devices_of(items(out)[0]) == ["gpu-1", "gpu-2"]


def test_topology_strategy_keeps_a_request_on_one_pcie_root(tmp_path: Path) -> None:
    objects = [*hgx(), allocated("nb-1", NODE, "gpu-0"), claim("pair", request("gpu", GPU, 2))]
    code, out, err = allocate(tmp_path, objects, "--strategy", "topology")
    assert (code, err) == (0, "")
    [item] = items(out)
    devices = devices_of(item)
    assert len(devices) == 2
    assert "gpu-0" not in devices
    assert len({HGX_ROOTS[d] for d in devices}) == 1, devices  # first-fit: gpu-1, gpu-2
    assert node_of(item) == NODE


def test_the_default_strategy_is_topology_as_the_readme_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DRA_JUPYTER_STRATEGY", raising=False)
    objects = [*hgx(), allocated("nb-1", NODE, "gpu-0"), claim("pair", request("gpu", GPU, 2))]
    default = allocate(tmp_path, objects)
    assert default == allocate(tmp_path, objects, "--strategy", "topology")
    monkeypatch.setenv("DRA_JUPYTER_STRATEGY", "first-fit")
    assert devices_of(items(allocate(tmp_path, objects)[1])[0]) == ["gpu-1", "gpu-2"]


def test_topology_strategy_honours_constraints(tmp_path: Path) -> None:
    objects = [
        *hgx(),
        claim("pair", request("gpu", GPU, 2), constraints=[same(PCIE_ROOT)]),
        claim("quad", request("gpu", GPU, 4), constraints=[same(NUMA_NODE)]),
    ]
    code, out, err = allocate(tmp_path, objects, "--strategy", "topology", "-o", "json")
    assert (code, err) == (0, "")
    pair, quad = items(out, "json")
    assert len({HGX_ROOTS[d] for d in devices_of(pair)}) == 1
    numa = {d: 0 if int(d.split("-")[1]) < 4 else 1 for d in devices_of(quad)}
    assert len(set(numa.values())) == 1
    assert not set(devices_of(pair)) & set(devices_of(quad))


def test_allocate_from_stdin_with_the_console_script(tmp_path: Path) -> None:
    objects = [*hgx(), claim("nb", request("gpu", GPU, 2), constraints=[same(PCIE_ROOT)])]
    text = yaml.safe_dump_all(objects, sort_keys=False)
    done = subprocess.run(
        [str(console_script()), "allocate", "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    [item] = items(done.stdout)
    assert devices_of(item) == ["gpu-0", "gpu-1"]
    assert node_of(item) == NODE


def test_console_script_exit_2_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-file.yaml"
    done = subprocess.run(
        [str(console_script()), "allocate", "-f", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    line = assert_one_error_line(done.returncode, done.stdout, done.stderr)
    assert str(missing) in line


def test_console_script_exit_1_explains(tmp_path: Path) -> None:
    path = write_documents(
        tmp_path / "objects.yaml", [*hgx(), claim("big", request("gpu", GPU, 1, BIG_MEMORY))]
    )
    done = subprocess.run(
        [str(console_script()), "allocate", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    err = assert_unsatisfiable(done.returncode, done.stdout, done.stderr)
    assert "default/big" in err


def test_allocate_from_stdin_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = [*hgx(), claim("nb", request("gpu"))]
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(objects)))
    code, out, err = cli("allocate", "-f", "-", "-o", "json")
    assert (code, err) == (0, "")
    assert devices_of(items(out, "json")[0]) == ["gpu-0"]


# --- exit 1 ---------------------------------------------------------------------------


def test_selector_that_matches_no_device(tmp_path: Path) -> None:
    code, out, err = allocate(tmp_path, [*hgx(), claim("big", request("gpu", GPU, 1, BIG_MEMORY))])
    err = assert_unsatisfiable(code, out, err)
    line = next(line for line in err.splitlines() if "default/big" in line)
    assert "request gpu" in line
    assert f"node {NODE}" in line
    # the selector, shortened to what a reader needs, and what the devices have instead
    assert (
        "selector memory.compareTo(quantity('200Gi')) >= 0 matches none of the 8 GPUs "
        "(the most memory is 140.4Gi, gpu-0), 1 needed"
    ) in line
    assert "selector #" not in line


def test_every_device_held_by_allocated_claims(tmp_path: Path) -> None:
    objects = [
        *hgx(),
        allocated("trainer", NODE, *(f"gpu-{i}" for i in range(6))),
        allocated("nb-7", NODE, "gpu-6", "gpu-7"),
        claim("late", request("gpu")),
    ]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    assert "default/late" in err
    assert "request gpu" in err
    assert "0 of the 8 matching GPUs are free" in err
    assert "default/trainer (6)" in err
    assert "default/nb-7 (2)" in err


def test_taint_not_tolerated(tmp_path: Path) -> None:
    objects = [*nvidia.device_classes(), tainted_hgx(), claim("nb", request("gpu"))]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    assert "default/nb" in err
    assert "request gpu" in err
    assert "gpu.nvidia.com/xid=79:NoSchedule" in err
    assert "0 of the 8 free GPUs are not marked unusable" in err


def test_tolerated_taint_allocates(tmp_path: Path) -> None:
    tolerate = {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
    objects = [
        *nvidia.device_classes(),
        tainted_hgx(),
        claim("nb", request("gpu", GPU, 1, tolerations=[tolerate])),
    ]
    code, out, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")
    [result] = items(out)[0]["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0"
    assert result["tolerations"] == [tolerate]


def xid_rule(name: str, selector: Wire | None, effect: str = "NoSchedule") -> Wire:
    """A DeviceTaintRule with the NVIDIA driver's XID taint (``selector`` None: none given)."""
    spec: Wire = {"taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_device_taint_rule_in_the_file_keeps_its_devices_free(tmp_path: Path) -> None:
    """A NoSchedule rule on 7 of the 8 GPUs: one claim gets the last GPU, two cannot, and
    the explanation names the rule (as kube-scheduler's slice tracker applies it)."""
    rules = [
        xid_rule(f"xid-gpu-{i}", {"driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{i}"})
        for i in range(7)
    ]
    objects = [*hgx(), *rules, claim("nb", request("gpu"))]
    code, out, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")
    assert devices_of(items(out)[0]) == ["gpu-7"]
    objects[-1] = claim("nb", request("gpu", GPU, 2))
    err = assert_unsatisfiable(*allocate(tmp_path, objects))
    assert "1 of the 8 free GPUs are not marked unusable" in err
    assert "gpu.nvidia.com/xid=79:NoSchedule (DeviceTaintRule xid-gpu-0)" in err


def test_device_taint_rule_without_selector_or_effect_none_changes_nothing(
    tmp_path: Path,
) -> None:
    rules = [xid_rule("nothing-selected", None), xid_rule("marked", {}, effect="None")]
    objects = [*hgx(), *rules, claim("nb", request("gpu", GPU, 8))]
    code, _, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")


def test_invalid_device_taint_rule_is_one_error_line(tmp_path: Path) -> None:
    bad = xid_rule("bad", {}, effect="PreferNoSchedule")
    objects = [*hgx(), bad, claim("nb", request("gpu"))]
    line = assert_one_error_line(*allocate(tmp_path, objects))
    assert "DeviceTaintRule bad, spec.taint.effect: 'PreferNoSchedule'" in line


# (held claim, its devices, the pending request) for both directions of MIG counters.
COUNTER_CASES = {
    "full-gpus-block-mig": (
        ("train", ["gpu-0", "gpu-1"], "gpu"),
        request("mig", MIG, 1, PROFILE_1G),
    ),
    "mig-blocks-full-gpus": (
        ("small", ["gpu-0-mig-1g18gb-19-3", "gpu-1-mig-1g18gb-19-3"], "mig"),
        request("gpu", GPU, 1),
    ),
}


@pytest.mark.parametrize("case", COUNTER_CASES)
def test_counters_exhausted_exit_1(tmp_path: Path, case: str) -> None:
    (holder, held, held_request), pending = COUNTER_CASES[case]
    objects = [
        *mig_node(),
        allocated(holder, NODE, *held, request_name=held_request),
        claim("want", pending),
    ]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    assert "default/want" in err
    assert f"request {pending['name']}" in err
    assert "are blocked by partitions in use" in err


@pytest.mark.parametrize("case", COUNTER_CASES)
def test_counters_exhausted_names_the_counter_and_holder(tmp_path: Path, case: str) -> None:
    """Which counter ran out, and who holds it: what a user needs to act on."""
    (holder, held, held_request), pending = COUNTER_CASES[case]
    objects = [
        *mig_node(),
        allocated(holder, NODE, *held, request_name=held_request),
        claim("want", pending),
    ]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    # in device words: the GPU whose parts are taken, and by whom; no counter names
    if case == "full-gpus-block-mig":
        assert f"gpu-0 is taken whole by claim default/{holder}" in err, err
    else:
        taken = f"the memory slices and other parts of gpu-0 are taken by claim default/{holder}"
        assert taken in err, err
    assert "counter" not in err, err
    assert "memory-slice-" not in err, err


def test_mig_partition_placement_still_free(tmp_path: Path) -> None:
    """A 1g slice at start 3 blocks the 3g at start 0 but not the one at start 4."""
    objects = [
        *mig_node(),
        allocated(
            "small", NODE, "gpu-0-mig-1g18gb-19-3", "gpu-1-mig-1g18gb-19-3", request_name="mig"
        ),
        claim("big", request("mig", MIG, 2, PROFILE_3G)),
    ]
    code, out, err = allocate(tmp_path, objects)
    assert (code, err) == (0, "")
    assert devices_of(items(out)[0]) == ["gpu-0-mig-3g71gb-9-4", "gpu-1-mig-3g71gb-9-4"]


def test_match_attribute_that_cannot_hold(tmp_path: Path) -> None:
    objects = [*hgx(), claim("three", request("gpu", GPU, 3), constraints=[same(PCIE_ROOT)])]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    assert "default/three" in err
    assert f"matchAttribute {PCIE_ROOT}" in err
    assert "at most 2" in err
    assert "3 needed" in err


def test_claims_that_only_fail_together(tmp_path: Path) -> None:
    objects = [*hgx(), claim("a", request("gpu", GPU, 5)), claim("b", request("gpu", GPU, 5))]
    code, out, err = allocate(tmp_path, objects)
    err = assert_unsatisfiable(code, out, err)
    assert "together" in err


# --- exit 2 ---------------------------------------------------------------------------


def _write(objects: Sequence[Wire]) -> Callable[[Path], Path]:
    def write(tmp_path: Path) -> Path:
        return write_documents(tmp_path / "objects.yaml", objects)

    return write


def _text(text: str) -> Callable[[Path], Path]:
    def write(tmp_path: Path) -> Path:
        path = tmp_path / "objects.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


def _v1beta1() -> list[Wire]:
    old = claim("old", request("gpu"))
    old["apiVersion"] = "resource.k8s.io/v1beta1"
    return [*hgx(), old]


_ATTRS = f"device.attributes['{GPU}']"
_NESTED = f"{_ATTRS}.all(a, {_ATTRS}.all(b, {_ATTRS}.all(c, {_ATTRS}.all(d, a == d))))"
_REQ0 = "spec.devices.requests[0].exactly"

# id -> (writes the file, substrings the one line must hold, whether a remedy must follow ";")
INVALID: dict[str, tuple[Callable[[Path], Path], tuple[str, ...], bool]] = {
    "unknown-device-class": (
        _write([*hgx(), claim("x", request("gpu", "gpu.nvidia.comm"))]),
        ("ResourceClaim default/x", f"{_REQ0}.deviceClassName", "gpu.nvidia.comm", GPU, MIG),
        True,
    ),
    "cel-syntax-error": (
        _write([*hgx(), claim("x", request("gpu", GPU, 1, f"{_ATTRS}.type =="))]),
        ("ResourceClaim default/x", f"{_REQ0}.selectors[0]", "syntax"),
        False,
    ),
    "cel-over-cost-limit": (
        _write([*hgx(), claim("x", request("gpu", GPU, 1, _NESTED))]),
        ("ResourceClaim default/x", f"{_REQ0}.selectors[0]", "cost", "1000000"),
        True,
    ),
    # count 0 is not given (omitempty) and defaults to 1, as kube-apiserver does
    "count-negative": (
        _write([*hgx(), claim("x", request("gpu", GPU, -1))]),
        ("ResourceClaim default/x", f"{_REQ0}.count", "-1"),
        True,
    ),
    "request-name-upper-case": (
        _write([*hgx(), claim("x", request("GPU"))]),
        ("ResourceClaim default/x", "spec.devices.requests[0].name", "'GPU'"),
        True,
    ),
    "more-than-32-requests": (
        _write([*hgx(), claim("x", *(request(f"r{i}") for i in range(33)))]),
        ("ResourceClaim default/x", "spec.devices.requests", "33", "32"),
        True,
    ),
    "missing-file": (
        lambda tmp_path: tmp_path / "missing.yaml",
        ("missing.yaml", "cannot read"),
        False,
    ),
    "yaml-syntax-error": (
        _text("kind: ResourceClaim\nmetadata: {name: x\nspec: 3\n"),
        ("objects.yaml", "line 3", "YAML"),
        False,
    ),
    "unknown-kind-pod": (
        _write([*hgx(), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}]),
        ("objects.yaml", "document 4", "kind", "Pod"),
        True,
    ),
    "no-pending-claim": (
        _write([*hgx(), allocated("done", NODE, "gpu-0")]),
        ("ResourceClaim", "status.allocation"),
        True,
    ),
    "api-version-v1beta1": (
        _write(_v1beta1()),
        (
            "ResourceClaim default/old",
            "apiVersion",
            "resource.k8s.io/v1beta1",
            "resource.k8s.io/v1",
        ),
        True,
    ),
    "cel-runtime-error": (
        _write([*hgx(), claim("x", request("gpu", GPU, 1, f"{_ATTRS}.index == 0"))]),
        (
            "ResourceClaim default/x",
            f"{_REQ0}.selectors[0]",
            "gpu-0",  # the device it failed on
            "index",  # the missing attribute
        ),
        True,
    ),
}


@pytest.mark.parametrize("case", INVALID)
def test_invalid_input_exit_2_one_line(tmp_path: Path, case: str) -> None:
    write, expected, remedy = INVALID[case]
    path = write(tmp_path)
    line = assert_one_error_line(*cli("allocate", "-f", str(path)))
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"
    if remedy:
        assert "; " in line, f"no remedy in {line!r}"


@pytest.mark.parametrize("case", ["unknown-device-class", "cel-syntax-error", "missing-file"])
def test_explain_invalid_input_exit_2_one_line(tmp_path: Path, case: str) -> None:
    write, expected, _ = INVALID[case]
    line = assert_one_error_line(*cli("explain", "-f", str(write(tmp_path))))
    for text in expected:
        assert text in line


# --- explain --------------------------------------------------------------------------


def test_explain_text_when_satisfiable(tmp_path: Path) -> None:
    path = write_documents(
        tmp_path / "o.yaml", [*hgx(), allocated("nb-1", NODE, "gpu-0"), claim("nb", request("gpu"))]
    )
    code, out, err = cli("explain", "-f", str(path))
    assert (code, err) == (0, "")
    assert out.startswith(f"Claims are allocatable on node {NODE}.")
    assert "claim default/nb, request gpu (class gpu.nvidia.com, needs 1):" in out
    for stage in STAGES:
        assert STAGE_TEXT[stage] in out
    assert re.search(r"^\s+8  devices on the node$", out, re.MULTILINE)
    assert re.search(r"^\s+7  are not held by other claims$", out, re.MULTILINE)
    assert "=>" not in out


def test_explain_text_when_unsatisfiable_exits_0(tmp_path: Path) -> None:
    path = write_documents(
        tmp_path / "o.yaml", [*hgx(), claim("big", request("gpu", GPU, 1, BIG_MEMORY))]
    )
    code, out, err = cli("explain", "-f", str(path))
    assert (code, err) == (0, "")
    assert out.startswith("Claims are NOT allocatable.")
    for stage in STAGES:
        assert STAGE_TEXT[stage] in out
    assert re.search(r"^\s+0  match the request's selectors$", out, re.MULTILINE)
    assert "=> selector memory.compareTo(quantity('200Gi')) >= 0 matches none of the 8 GPUs" in out


def test_explain_json_funnel_of_mig_counters(tmp_path: Path) -> None:
    objects = [
        *mig_node(),
        allocated("train", NODE, "gpu-0", "gpu-1"),
        claim("m", request("mig", MIG, 1, PROFILE_1G)),
    ]
    path = write_list(tmp_path / "o.yaml", objects)
    code, out, err = cli("explain", "-f", str(path), "-o", "json", "--node", NODE)
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["satisfiable"] is False
    assert document["node"] is None
    [node] = document["nodes"]
    assert node["node"] == NODE
    assert node["satisfiable"] is False
    [req] = node["requests"]
    assert (req["claim"], req["request"], req["device_class"], req["needed"]) == (
        "default/m",
        "mig",
        MIG,
        1,
    )
    assert req["funnel"] == {
        "devices": 2 * MIG_DEVICES_PER_GPU,
        "class": 2 * (MIG_DEVICES_PER_GPU - 1),
        "selectors": 14,
        "free": 14,
        "capacity": 14,
        "counters": 0,
        "taints": 0,
    }
    assert len(req["reasons"]) == 1
    assert "are blocked by partitions in use" in req["reasons"][0]


def test_explain_json_when_satisfiable(tmp_path: Path) -> None:
    path = write_documents(tmp_path / "o.yaml", [*hgx(), claim("nb", request("gpu", GPU, 2))])
    code, out, err = cli("explain", "-f", str(path), "-o", "json", "--strategy", "topology")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["satisfiable"] is True
    assert document["node"] == NODE
    [req] = document["nodes"][0]["requests"]
    assert req["funnel"] == dict.fromkeys(STAGES, 8)
    assert req["reasons"] == []


# --- demo -----------------------------------------------------------------------------


def test_demo() -> None:
    code, out, err = cli("demo")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    for name in ("nb-1", "nb-2", "train-4", "sweep", "too-big"):
        assert any(line.startswith(f"claim {name} ") for line in lines), name
    index = next(i for i, line in enumerate(lines) if line.startswith("claim too-big "))
    assert lines[index].endswith("cannot be allocated")
    reason = lines[index + 1]
    assert "demo/too-big" in reason
    assert "matches none of the 8 GPUs" in reason
    assert "claim nb-1 (one GPU): gpu-0 (gpu)" in lines


def test_demo_shows_the_first_available_fallback() -> None:
    """The 'eight GPUs, else one' claim exists to show firstAvailable falling back to one."""
    code, out, _ = cli("demo")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith("claim sweep ")]
    assert "cannot be allocated" not in line, out
    assert line.count("(gpus/one)") == 1, line


def test_make_lab_puts_the_command_line_on_the_terminals_path() -> None:
    """JupyterLab's terminals inherit the server's PATH: `make lab` starts it with the
    virtual environment's bin first, so `dra-jupyter` works in them."""
    root = Path(__file__).parents[1]
    shown = subprocess.run(
        ["make", "-n", "-o", "install", "--no-print-directory", "lab"],
        cwd=root, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    [command] = [line for line in shown.splitlines() if "jupyter lab" in line]
    assert command.startswith(f'PATH="{root / ".venv" / "bin"}:$PATH" '), command

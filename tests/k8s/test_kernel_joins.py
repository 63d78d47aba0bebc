"""GPU kernels that join a claim that exists (``dra.request(join=...)``, #40 items 2 and 3):
a teammate's shared claim (``share="mps"``), used by two kernels' pods by name
(``resourceClaimName``), both on its one device; the claim lists both pods; a joiner cannot
delete it, and a joiner that ends (shut down, or idle) stops its own pod only: the claim
stays, and the other kernel keeps running on it. A real jupyter_server, real kernels, the
real kube-scheduler; the stand-in kubelet runs the pods (see test_kernels.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s.conftest import wait_for
from tests.k8s.kernelserver import Server, execute, gone, kernel_pods, server_events
from tests.k8s.test_backend import session
from tests.k8s.test_kernel_moves import moved, running_kernel_pod, start_cpu_kernel
from tests.k8s.test_scheduling import Cluster, pod

UUID = re.compile(r"GPU-[0-9a-f-]+")
SHARED = "team-gpu"
DEVICE = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"


def teammates_claim(kubeconfig: Path, namespace: str) -> None:
    """bob's shared claim: one H200 shared through MPS, made as his notebook makes it."""
    bob = session(kubeconfig, namespace, user="bob")
    bob.request(gpu=1, share="mps", threads=50, name=SHARED)


def read_claim(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    resource = client.ResourceV1Api(api)
    return to_wire(api, resource.read_namespaced_resource_claim(SHARED, namespace))


def reserved_for(api: client.ApiClient, namespace: str) -> list[str]:
    reserved = (read_claim(api, namespace).get("status") or {}).get("reservedFor") or ()
    return sorted(r["name"] for r in reserved)


def joined(
    server: Server, api: client.ApiClient, namespace: str, *, idle: bool = False
) -> tuple[str, str]:
    """A kernel started on the server that joins the claim: its id and its pod's name, once
    it runs there (from the server's log where it may be idle, and gone, by then)."""
    kernel = start_cpu_kernel(server)
    asyncio.run(
        execute(server, kernel, f"dra.request(join={SHARED!r})\nprint('never')", answer=False)
    )
    moved(server, kernel, "moved into pod")
    if idle:
        log = (server.root.parent / "server.log").read_text()
        found = re.search(rf"kernel {kernel} moved into pod (\S+) with the shared claim", log)
        assert found is not None, log[-3000:]
        return kernel, found.group(1)
    pod = running_kernel_pod(api, namespace, kernel)
    assert pod["spec"]["resourceClaims"] == [{"name": "dra", "resourceClaimName": SHARED}]
    return kernel, str(pod["metadata"]["name"])


def test_two_kernels_that_join_one_claim_share_its_device_and_one_ending_leaves_it(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    teammates_claim(kubeconfig, namespace)
    first, first_pod = joined(server, api, namespace)
    second, second_pod = joined(server, api, namespace)
    devices = {asyncio.run(execute(server, k, DEVICE)).strip() for k in (first, second)}
    assert len(devices) == 1 and UUID.fullmatch(devices.pop()), devices
    assert reserved_for(api, namespace) == sorted([first_pod, second_pod])
    # no template of the joiners' own: the claim is the one device of both
    resource = client.ResourceV1Api(api)
    assert resource.list_namespaced_resource_claim_template(namespace).items == []
    assert len(resource.list_namespaced_resource_claim(namespace).items) == 1
    # the listing says which pods use it (the kernel's dra.claims(), everyone's)
    listed = asyncio.run(
        execute(
            server,
            second,
            "import dra_jupyter as dra\n"
            "[row] = [r for r in dra.claims(all_users=True).rows if r.claim == 'team-gpu']\n"
            "print(row.used_by)",
        )
    )
    assert sorted(listed.strip().split(", ")) == sorted([first_pod, second_pod]), listed
    # the server's REST answer: bob's claim is not the server user's, but its kernels joined it
    said = server.call("GET", "/dra/api/claims")["joined"]
    assert sorted((j["kernel_id"], j["claim"], j["user"]) for j in said) == sorted(
        [(first, SHARED, "bob"), (second, SHARED, "bob")]
    )
    for one in said:
        assert sorted(one["used_by"]) == sorted([first_pod, second_pod])
        assert len(one["devices"]) == 1
    of_first = server.call("GET", f"/dra/api/kernels/{first}/claims")["joined"]
    assert [j["kernel_id"] for j in of_first] == [first]
    # and %dra status --all, in the state of the claim's row
    status = asyncio.run(
        execute(
            server,
            first,
            "from dra_jupyter.api.defaults import default_session\n"
            "from dra_jupyter.magics.reports import status_table\n"
            "table = status_table(default_session(), all_users=True)\n"
            "print([r.state for r in table.rows if r.claim == 'team-gpu'][0])",
        )
    )
    assert status.startswith("reserved by kernel-"), status
    assert {first_pod, second_pod} <= set(status.strip().removeprefix("reserved by ").split(", "))
    # a joiner cannot delete the claim it joined: bob's
    refused = asyncio.run(
        execute(
            server,
            first,
            "import dra_jupyter as dra\n"
            "from dra_jupyter.errors import ForbiddenError\n"
            "try:\n"
            f"    dra.release({SHARED!r})\n"
            "except ForbiddenError as error:\n"
            "    print(error)",
        )
    )
    assert refused.strip() == (
        f"claim {SHARED} belongs to user bob; only its owner can release it"
    ), refused
    # the first ends: its pod goes, the claim stays, the second keeps running on it
    server.call("DELETE", f"/api/kernels/{first}")
    wait_for("the first kernel's pod to go", lambda: kernel_pods(api, namespace, first) == [])
    wait_for(
        "the claim to list the second pod only",
        lambda: reserved_for(api, namespace) == [second_pod],
    )
    assert read_claim(api, namespace)["metadata"].get("deletionTimestamp") is None
    again = asyncio.run(execute(server, second, DEVICE)).strip()
    assert UUID.fullmatch(again), again
    server.call("DELETE", f"/api/kernels/{second}")
    wait_for("the second kernel's pod to go", lambda: kernel_pods(api, namespace, second) == [])
    wait_for("no pod to use the claim", lambda: reserved_for(api, namespace) == [])
    assert not gone(resource.read_namespaced_resource_claim, SHARED, namespace)  # bob's still


def test_join_is_refused_in_the_cell_in_one_line_and_the_kernel_stays(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    teammates_claim(kubeconfig, namespace)
    kernel = start_cpu_kernel(server)
    for code, says in [
        (
            "dra.request(join='nope')",
            "dra.request: join='nope': there is no claim nope in namespace "
            f"{namespace}; kubectl get resourceclaims -n {namespace} lists them",
        ),
        (
            f"dra.request(join={SHARED!r}, gpu=1)",
            f"dra.request: join={SHARED!r} uses that claim's devices and sharing as its maker "
            "made them; leave out gpu= (the claim decides)",
        ),
    ]:
        with pytest.raises(AssertionError, match=re.escape(says)):
            asyncio.run(execute(server, kernel, code))
    assert asyncio.run(execute(server, kernel, "print('still here')")) == "still here\n"
    assert kernel_pods(api, namespace, kernel) == []
    server.call("DELETE", f"/api/kernels/{kernel}")


def test_an_idle_joiner_leaves_its_pod_and_the_claim_stays(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    published: SimulatedCluster,
    idle_server: Server,
) -> None:
    """Idle release of a kernel that joined: warned before, as a holder is (the idle
    warning, ``joined``: its pod stops, the claim stays), its pod is stopped, the claim
    (bob's) is not deleted; the kernel is back on the server, and its next cell says so and
    how to join again."""
    server = idle_server
    teammates_claim(kubeconfig, namespace)
    kernel, pod = joined(server, api, namespace, idle=True)
    core = client.CoreV1Api(api)
    wait_for("the idle joiner's pod to go", lambda: gone(core.read_namespaced_pod, pod, namespace))
    moved(server, kernel, "is back on the server")
    # once per deadline: one that moved later (the kernel's start in its pod moves it) is
    # warned of again, as a holder's is
    warnings = [w for w in server_events(server, "idle_warning") if w["kernel_id"] == kernel]
    assert warnings
    assert {(w["claim"], w["joined"], str(w["devices"])) for w in warnings} == {
        (SHARED, True, "[]")
    }
    assert all(w["seconds_left"] > 0 for w in warnings)
    assert len({w["deadline"] for w in warnings}) == len(warnings)
    [back] = [
        m
        for m in server_events(server, "kernel_moved")
        if m["kernel_id"] == kernel and m["where"] == "server"
    ]
    assert back["__timestamp__"] >= warnings[-1]["__timestamp__"]  # the warning came first
    wait_for("no pod to use the claim", lambda: reserved_for(api, namespace) == [])
    assert read_claim(api, namespace)["metadata"].get("deletionTimestamp") is None
    printed = asyncio.run(execute(server, kernel, "print('next')"))
    note, rest = printed.split("\n", 1)
    assert note == (
        f"dra: this kernel's pod on the shared claim {SHARED} was stopped (idle for 8 s), so "
        f"its variables are gone; the claim stays, its maker's; dra.request(join={SHARED!r}) "
        "starts it again on it (in JupyterLab: Restart kernel with its devices)"
    ), printed
    assert rest == "next\n"
    server.call("DELETE", f"/api/kernels/{kernel}")


def test_the_rest_answer_says_which_pods_use_a_claim(
    api: client.ApiClient,
    namespace: str,
    published: SimulatedCluster,
    server: Server,
) -> None:
    """``GET /dra/api/claims``: ``used_by`` lists the pods that use each claim now (its
    ``reservedFor``), as ``dra.claims()`` does; the lab's claim card shows them."""
    made = server.call("POST", "/dra/api/claims", {"gpu": 1})
    assert made["used_by"] == []
    k = Cluster(api, namespace)
    for name in ("notebook-a", "notebook-b"):
        k.create_pod(pod(name, {"resourceClaimName": made["name"]}))

    def listed() -> list[str] | None:
        [claim] = server.call("GET", "/dra/api/claims")["claims"]
        return sorted(claim["used_by"]) if len(claim["used_by"]) == 2 else None

    assert wait_for("both pods in used_by", listed) == ["notebook-a", "notebook-b"]
    assert reserved_for_claim(api, namespace, made["name"]) == ["notebook-a", "notebook-b"]
    for name in ("notebook-a", "notebook-b"):
        k.delete_pod(name)


def reserved_for_claim(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    resource = client.ResourceV1Api(api)
    claim = to_wire(api, resource.read_namespaced_resource_claim(name, namespace))
    return sorted(r["name"] for r in (claim.get("status") or {}).get("reservedFor") or ())

"""A costly request holds no one up: it is worked out off the daemon's loop, under the
policy's CPU budget per request (``request_cpu``), while every other user is served; past
the budget it is refused in one line (``TooCostlyError``, exit 2) that says what to do.

Costly here is what the limits allow: requests with CEL selectors under the cost limit
that each take the engine most of a second per device (nested ``map`` over list literals).
Behaviour, not timing: the order in which the answers come."""

from __future__ import annotations

import os
import select
from typing import Any

from dra_jupyter import errors
from dra_jupyter.api import Session
from dra_jupyter.selectors import MAX_COST, compile_selector
from dra_jupyter.service import protocol
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.service.accounts import DEADLINE, Child, User, raw_connect, read_line, run_as, service
from tests.service.test_isolation import admin_policy


def costly_selector(n: int, seed: int) -> str:
    """Two nested ``map`` over list literals: near the cost limit, about a second per
    device on the engine (``seed`` makes each one new to the allocator's caches)."""
    outer = ",".join(str(i + seed) for i in range(n))
    inner = ",".join(str(i) for i in range(n))
    return f"size([{outer}].map(x, [{inner}].map(y, y))) > 0"


def claim(selectors: list[str], requests: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": f"r{i}",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 1,
                            "selectors": [{"cel": {"expression": s}} for s in selectors],
                        },
                    }
                    for i in range(requests)
                ]
            }
        },
    }


def heaviest(seed: int) -> dict[str, Any]:
    """4 requests of 4 costly selectors each (the limits allow 32 of 32)."""
    return claim([costly_selector(260, seed + i) for i in range(4)], 4)


def ask(socket_path: Any, op: str, args: dict[str, Any], signal_fd: int = -1) -> dict[str, Any]:
    """One frame on a connection of its own, and its answer (``signal_fd``: written to once
    the frame is sent)."""
    sock = raw_connect(socket_path)
    try:
        sock.sendall(protocol.request_frame(1, op, args))
        if signal_fd >= 0:
            os.write(signal_fd, b"s")
        return read_line(sock)
    finally:
        sock.close()


def test_the_selectors_are_within_the_limits() -> None:
    compiled = compile_selector(costly_selector(260, 0), where="t")
    assert 0.8 * MAX_COST < compiled.cost <= MAX_COST
    assert not compiled.has_fast_path
    assert errors.TooCostlyError.exit_code == errors.EXIT_INVALID


def test_a_costly_request_holds_no_other_user_up_and_is_refused_past_its_budget(
    users: dict[str, User],
) -> None:
    alice, bob = users["alice"], users["bob"]
    policy = admin_policy(users, "request_cpu = 1\n")
    with service(policy) as svc:
        sent_r, sent_w = os.pipe()
        heavy = Child(
            alice,
            svc.env(),
            lambda: ask(svc.socket, "request", {"claim": heaviest(1), "timeout": 0}, sent_w),
        )
        try:
            ready, _, _ = select.select([sent_r], [], [], DEADLINE)
            assert ready, "alice's request was not sent"

            def small() -> list[Any]:
                hello = ask(svc.socket, "hello", {})
                s = Session(Settings.from_env(), owner=Owner.current())
                made = s.request(gpu=1, apply_env=False)
                s.release(made.name)
                return [hello["ok"], hello["result"]["user"], made.name]

            served = run_as(bob, svc.env(), small)
            assert served.get("ok") == [True, bob.name, f"{bob.name}-1"], served
            # bob was served while alice's request was being worked out: its answer is later
            assert not heavy.answered()
            answer = heavy.result()
        finally:
            heavy.kill()
            os.close(sent_r)
            os.close(sent_w)
        refusal = answer["ok"]
        assert refusal["ok"] is False
        assert refusal["error"]["type"] == "TooCostlyError"
        assert refusal["error"]["message"] == (
            "request: working out its allocation took more than 1s of CPU, the service's "
            "budget per request (request_cpu); ask for fewer requests or devices, or use "
            "simpler selectors (no loops over long lists)"
        )
        # the daemon serves on, and alice's next request is hers to make
        again = run_as(alice, svc.env(), lambda: ask(svc.socket, "hello", {}))
        assert again["ok"]["ok"] is True


def test_a_costly_request_within_its_budget_is_allocated_and_explained(
    users: dict[str, User],
) -> None:
    """Worked out off the loop, then committed by the daemon as any other claim; and its
    explanation, worked out the same way."""
    alice = users["alice"]
    with service(admin_policy(users)) as svc:
        middling = claim([costly_selector(90, 3)], 2)  # well over the loop's share, quick

        def request() -> list[Any]:
            backend = Session(Settings.from_env(), owner=Owner.current()).backend
            made = backend.allocate(middling, checked=True)
            explained = ask(svc.socket, "explain", {"claim": middling})
            return [made.name, made.device_keys, explained]

        answer = run_as(alice, svc.env(), request)
        assert "ok" in answer, answer
        name, devices, explained = answer["ok"]
        assert name == f"{alice.name}-1"
        assert len(devices) == 2
        assert explained["ok"] is True, explained
        assert isinstance(explained["result"], dict)


def test_a_user_has_one_costly_request_worked_out_at_a_time(users: dict[str, User]) -> None:
    """Two at once on two connections: one is worked out (and refused past the budget),
    the other refused at once, over the limit."""
    alice = users["alice"]
    with service(admin_policy(users, "request_cpu = 1\n")) as svc:

        def two() -> list[dict[str, Any]]:
            first, second = raw_connect(svc.socket), raw_connect(svc.socket)
            args = {"claim": heaviest(10), "timeout": 0}
            first.sendall(protocol.request_frame(1, "request", args))
            hello = ask(svc.socket, "hello", {})  # the first one is in: it was read before
            second.sendall(protocol.request_frame(2, "request", {**args, "claim": heaviest(20)}))
            answers = [read_line(second), read_line(first), hello]
            first.close()
            second.close()
            return answers

        answer = run_as(alice, svc.env(), two)
        assert "ok" in answer, answer
        refused, spent, hello = answer["ok"]
        assert hello["ok"] is True
        assert refused["error"] == {
            "type": "LimitError",
            "message": f"user {alice.name}: limit 1 costly request worked out at a time; "
            "wait for the answer of the one being worked out",
        }
        assert spent["error"]["type"] == "TooCostlyError"


def mig_claim(requests: int, constraint: dict[str, str]) -> dict[str, Any]:
    """``requests`` requests of one MIG slice each, under one constraint."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": f"r{i}", "exactly": {"deviceClassName": "mig.nvidia.com"}}
                    for i in range(requests)
                ],
                "constraints": [constraint],
            }
        },
    }


def request_and_explain(svc: Any, user: User, claim: dict[str, Any]) -> list[dict[str, Any]]:
    """``user``'s request of ``claim`` (not waiting), then its explanation: the answers."""

    def both() -> list[dict[str, Any]]:
        return [
            ask(svc.socket, "request", {"claim": claim, "timeout": 0}),
            ask(svc.socket, "explain", {"claim": claim}),
        ]

    answer = run_as(user, svc.env(), both)
    assert "ok" in answer, answer
    answers: list[dict[str, Any]] = answer["ok"]
    return answers


def test_a_wide_search_is_worked_out_off_the_loop_too(users: dict[str, User]) -> None:
    """Cheap selectors, but a search the loop gives up on (five MIG slices of five profiles
    on one H200: thousands of steps, no bound cuts them): worked out off the loop, with the
    full search, and answered as on the embedded backend (it can never be met). The budget
    is ample: whether the search fits the default one depends on the machine's speed (a
    slower CI machine once spent it), and the budget has tests of its own above."""
    alice = users["alice"]
    wide = mig_claim(5, {"distinctAttribute": "gpu.nvidia.com/profile"})
    with service(admin_policy(users, "request_cpu = 120\n"), inventory="h200-mig") as svc:
        request, explained = request_and_explain(svc, alice, wide)
        assert request["error"]["type"] == "NeverPossibleError", request
        assert explained["ok"] is True and explained["result"]["satisfiable"] is False
        assert "gave up" not in str(explained["result"])  # the full search, not the loop's
        assert svc.log.read_text().count("worked out off the loop") >= 1


def test_more_mig_slices_than_fit_are_refused_on_the_loop(users: dict[str, User]) -> None:
    """Twenty MIG slices on one PCIe root of an H200 (seven fit): the counters' bound of the
    search says so at once, so the loop answers (never possible) with no job and no budget
    spent. Before the bound it took the search seconds of CPU, near the default budget of
    5 s: on a slower machine the answer was TooCostlyError."""
    alice = users["alice"]
    wide = mig_claim(20, {"matchAttribute": "resource.kubernetes.io/pcieRoot"})
    with service(admin_policy(users), inventory="h200-mig") as svc:
        request, explained = request_and_explain(svc, alice, wide)
        assert request["error"]["type"] == "NeverPossibleError", request
        assert explained["ok"] is True and explained["result"]["satisfiable"] is False
        assert "gave up" not in str(explained["result"])
        assert "worked out off the loop" not in svc.log.read_text()

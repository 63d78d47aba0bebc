"""What a Jupyter server tells the service and its users of reclaim under pressure, without
a server: each warning told once, running cells reported again only every RENEW seconds."""

from __future__ import annotations

from dra_jupyter.server.reclaims import RENEW, SOON, BusyReports, Told, warning_event
from dra_jupyter.types import ClaimRecord, Owner, ReclaimNotice


def notice(claim: str, warned: float, deadline: float = 400.0) -> ReclaimNotice:
    return ReclaimNotice(
        claim=claim,
        waiter="bob",
        what="1× NVIDIA H200",
        deadline=deadline,
        keeps_left=1,
        message=f"bob is waiting for 1× NVIDIA H200; your {claim}, idle for 3 h, will be "
        "released in 5:00",
        warned=warned,
    )


def test_each_warning_is_told_once_and_a_withdrawn_one_never_again() -> None:
    told = Told()
    first = notice("alice-1", warned=100.0)
    assert told.new([first]) == [first]
    kept = notice("alice-1", warned=100.0, deadline=700.0)  # a Keep: a new deadline
    assert told.new([kept]) == []  # the same warning
    assert told.new([]) == []  # withdrawn: nothing to tell
    again = notice("alice-1", warned=900.0)  # warned anew later
    assert told.new([again]) == [again]
    told.forget([again])  # not told after all (the claims could not be read)
    assert told.new([again]) == [again]


def test_a_running_cell_is_reported_again_only_every_renew_seconds() -> None:
    reports = BusyReports()
    reports.started("k1", 0.0)  # told at the cell's start
    assert reports.due(["k1", "k2"], 1.0) == ["k2"]  # k2 ran before it was watched
    assert reports.due(["k1", "k2"], RENEW - 1) == []
    assert reports.due(["k1", "k2"], RENEW) == ["k1"]
    reports.ended("k2")
    assert reports.due(["k1"], RENEW + 1) == []
    assert reports.due(["k2"], RENEW + 2) == ["k2"]  # k1 idle now: forgotten


def test_a_running_cell_whose_kernel_held_no_claim_is_reported_again_soon() -> None:
    """The cell may make its claim, then work for long (``dra.request(...); train()``)."""
    reports = BusyReports()
    reports.started("k1", 0.0, claims=0)
    assert reports.due(["k1"], SOON - 1) == []
    assert reports.due(["k1"], SOON) == ["k1"]


def test_the_event_carries_the_waiter_the_deadline_and_the_keeps_left() -> None:
    record = ClaimRecord(
        name="alice-1",
        namespace="default",
        owner=Owner(user="alice", host="h", pid=7, kernel_id="k1"),
        spec={},
        allocation={"devices": {"results": []}},
        created=0.0,
        last_activity=0.0,
    )
    event = warning_event(notice("alice-1", warned=100.0), record, now=100.0)
    assert event == {
        "claim": "alice-1",
        "user": "alice",
        "kernel_id": "k1",
        "devices": [],
        "waiter": "bob",
        "what": "1× NVIDIA H200",
        "deadline": 400.0,
        "seconds_left": 300.0,
        "keeps_left": 1,
        "message": "bob is waiting for 1× NVIDIA H200; your alice-1, idle for 3 h, will be "
        "released in 5:00",
    }

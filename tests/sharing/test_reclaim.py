"""Reclaim under pressure as tables: the order of the holders that give way, no reclaim
without a waiter, never a busy kernel on a busy GPU by default, the grace, the bounded Keep,
the words."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dra_jupyter.sharing.fairshare import Standing
from dra_jupyter.sharing.reclaim import (
    GpuUse,
    Holder,
    Notice,
    ReclaimSettings,
    Waiter,
    candidates,
    choose,
    countdown,
    keep,
    plan,
)

H = 3600.0
NOW = 100 * H
OVER = Standing("x", share=0.5, usage=1.0, used=8 * H)
UNDER = Standing("x", share=0.5, usage=0.0, used=0.0)
SETTINGS = ReclaimSettings()  # grace 5 min, 1 Keep, min_runtime 1 h, idle after 10 min
BOB = Waiter(key="bob-1", user="bob", what="1× H200", since=NOW - 1)


def holder(
    claim: str,
    *,
    user: str = "alice",
    idle: float | None = 3 * H,
    gpu: GpuUse = GpuUse.UNKNOWN,
    held: float = 4 * H,
    standing: Standing | None = OVER,
) -> Holder:
    return Holder(
        user=user,
        claim=claim,
        devices=(f"gpu.nvidia.com/node/{claim}",),
        idle_since=None if idle is None else NOW - idle,
        gpu=gpu,
        held_since=NOW - held,
        standing=standing,
    )


def any_one(holders: Sequence[Holder]) -> bool:
    return len(holders) >= 1


@pytest.mark.parametrize(
    ("holders", "settings", "order"),
    [
        # idle and over share first, then idle the longest
        (
            [
                holder("a", idle=5 * H, standing=UNDER),
                holder("b", idle=1 * H),
                holder("c", idle=2 * H),
            ],
            SETTINGS,
            ["c", "b", "a"],
        ),
        # idle the longest first among equals
        ([holder("a", idle=1 * H), holder("b", idle=3 * H)], SETTINGS, ["b", "a"]),
        # a GPU idle by the sampler is idle; a GPU active is not, whatever the kernel says
        (
            [holder("a", gpu=GpuUse.IDLE), holder("b", gpu=GpuUse.ACTIVE)],
            SETTINGS,
            ["a"],
        ),
        # a busy kernel on a busy GPU: never by default, over share or not
        ([holder("a", idle=None, gpu=GpuUse.ACTIVE)], SETTINGS, []),
        # not idle long enough yet (reclaim_idle)
        ([holder("a", idle=60.0)], SETTINGS, []),
        ([holder("a", idle=60.0)], ReclaimSettings(idle_after=30.0), ["a"]),
        # the waiter's own claims never give way to it
        ([holder("a", user="bob")], SETTINGS, []),
        # reclaim_active: in use and over share, after min_runtime, after every idle one
        (
            [
                holder("busy-long", idle=None, gpu=GpuUse.ACTIVE, held=3 * H),
                holder("busy-short", idle=None, gpu=GpuUse.ACTIVE, held=0.5 * H),
                holder("busy-fair", idle=None, gpu=GpuUse.ACTIVE, standing=UNDER),
                holder("idle", idle=1 * H, standing=UNDER),
            ],
            ReclaimSettings(reclaim_active=True),
            ["idle", "busy-long"],
        ),
        # unknown standing: not over its share
        ([holder("a", standing=None), holder("b", idle=1 * H)], SETTINGS, ["b", "a"]),
    ],
)
def test_candidates_order(
    holders: list[Holder], settings: ReclaimSettings, order: list[str]
) -> None:
    found = candidates(BOB, holders, settings, NOW)
    assert [c.holder.claim for c in found] == order


def test_candidates_say_why() -> None:
    found = candidates(
        BOB,
        [holder("a", idle=3 * H), holder("b", idle=90.0 * 60, standing=UNDER)],
        SETTINGS,
        NOW,
    )
    assert [(c.rank, c.why) for c in found] == [
        (1, "idle for 3 h, over its fair share"),
        (2, "idle for 1.5 h"),
    ]


def test_choose_takes_the_fewest_in_order() -> None:
    holders = [holder("a", idle=3 * H), holder("b", idle=2 * H), holder("c", idle=1 * H)]

    def needs_b_and_c(freed: Sequence[Holder]) -> bool:  # only b's and c's devices fit
        return {"b", "c"} <= {h.claim for h in freed}

    assert [c.holder.claim for c in choose(BOB, holders, SETTINGS, NOW, needs_b_and_c)] == [
        "b",
        "c",
    ]
    assert [c.holder.claim for c in choose(BOB, holders, SETTINGS, NOW, any_one)] == ["a"]
    assert choose(BOB, holders, SETTINGS, NOW, lambda freed: False) == []  # none would do


def test_no_waiter_nothing_is_reclaimed() -> None:
    holders = [holder("a"), holder("b")]
    assert plan(NOW, [], holders, {}, SETTINGS) == plan(NOW, [], [], {}, SETTINGS)
    assert plan(NOW, [], holders, {}, SETTINGS).warn == ()


def test_warn_then_release_at_the_deadline() -> None:
    holders = [holder("gpu-3", idle=3 * H)]
    first = plan(NOW, [(BOB, any_one)], holders, {}, SETTINGS)
    assert first.release == () and first.withdraw == ()
    (notice,) = first.warn
    assert notice.deadline == NOW + 300
    assert notice.message(NOW) == (
        "bob is waiting for 1× H200; your gpu-3, idle for 3 h, over its fair share, "
        "will be released in 5:00"
    )
    notices = {"gpu-3": notice}
    before = plan(NOW + 299, [(BOB, any_one)], holders, notices, SETTINGS)
    assert before == plan(NOW + 299, [(BOB, any_one)], holders, notices, SETTINGS)
    assert before.warn == () and before.release == ()  # warned once, not again
    assert plan(NOW + 300, [(BOB, any_one)], holders, notices, SETTINGS).release == (notice,)


def test_withdrawn_when_nobody_waits_or_the_gpu_works_again() -> None:
    notice = plan(NOW, [(BOB, any_one)], [holder("a")], {}, SETTINGS).warn[0]
    gone = plan(NOW + 10, [], [holder("a")], {"a": notice}, SETTINGS)
    assert gone.withdraw == (notice,) and gone.release == ()
    working = [holder("a", gpu=GpuUse.ACTIVE)]
    back = plan(NOW + 10, [(BOB, any_one)], working, {"a": notice}, SETTINGS)
    assert back.withdraw == (notice,) and back.warn == ()
    # released meanwhile (by its user): nothing to withdraw
    assert plan(NOW + 10, [], [], {"a": notice}, SETTINGS) == plan(NOW, [], [], {}, SETTINGS)


def test_two_waiters_take_different_holders() -> None:
    carol = Waiter(key="carol-1", user="carol", what="1× H200", since=NOW)
    holders = [holder("a", idle=3 * H), holder("b", idle=2 * H)]
    warned = plan(NOW, [(BOB, any_one), (carol, any_one)], holders, {}, SETTINGS).warn
    assert [(n.waiter, n.claim) for n in warned] == [("bob", "a"), ("carol", "b")]


def test_keep_is_bounded_under_pressure() -> None:
    notice = Notice(
        claim="gpu-3",
        holder="alice",
        devices=("gpu.nvidia.com/node/gpu-3",),
        waiter_key="bob-1",
        waiter="bob",
        what="1× H200",
        why="idle for 3 h",
        warned=NOW,
        deadline=NOW + 300,
    )
    first = keep(notice, SETTINGS, NOW + 200)
    assert first.allowed and first.notice.keeps == 1
    assert first.notice.deadline == NOW + 500  # at most grace from the Keep
    assert first.message == (
        "claim gpu-3: kept while bob waits for 1× H200; released in 5:00 (0 more Keeps allowed)"
    )
    second = keep(first.notice, SETTINGS, NOW + 400)
    assert not second.allowed and second.notice == first.notice
    assert second.message == (
        "claim gpu-3: Keep refused: bob is waiting for 1× H200, and the 1 Keep allowed while "
        "someone waits is used (keeps_under_pressure); it will be released in 1:40: save "
        "your work, or release it now"
    )
    assert "\n" not in second.message
    # more Keeps where the admin allows them; none where it allows none
    assert keep(first.notice, ReclaimSettings(keeps=2), NOW + 400).allowed
    assert not keep(notice, ReclaimSettings(keeps=0), NOW).allowed


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300, "5:00"), (299.2, "5:00"), (61, "1:01"), (0, "0:00"), (-3, "0:00"), (3723, "1:02:03")],
)
def test_countdown(seconds: float, text: str) -> None:
    assert countdown(seconds) == text


def test_withdrawn_when_the_kernel_works_again_unless_reclaim_active() -> None:
    """A cell that runs (reported busy: no idle time) or ran since the warning (idle for
    less than reclaim_idle) withdraws it; a busy kernel is not warned again meanwhile."""
    notice = plan(NOW, [(BOB, any_one)], [holder("a")], {}, SETTINGS).warn[0]
    for working in (holder("a", idle=None), holder("a", idle=5.0)):
        back = plan(NOW + 10, [(BOB, any_one)], [working], {"a": notice}, SETTINGS)
        assert back.withdraw == (notice,) and back.warn == () and back.release == ()
    active = ReclaimSettings(reclaim_active=True)
    kept = plan(NOW + 10, [(BOB, any_one)], [holder("a", idle=None)], {"a": notice}, active)
    assert kept.withdraw == ()

"""Fair share as a table: shares, decayed usage, standings, and the line's order and words."""

from __future__ import annotations

import math

import pytest

from dra_jupyter.accounting.book import DevicePart, Interval
from dra_jupyter.sharing.fairshare import (
    DEFAULT_SHARE,
    Arrival,
    decayed_usage,
    order_line,
    share_of,
    standings,
)

DAY = 86400.0
NOW = 10 * DAY


def held(user: str, start: float, end: float | None, gpus: float = 1.0) -> Interval:
    return Interval(
        claim=f"{user}-{start}",
        uid="1000",
        user=user,
        groups=(),
        devices=tuple(DevicePart(f"gpu/node/gpu-{i}", gpus) for i in range(1)),
        start=start,
        end=end,
    )


@pytest.mark.parametrize(
    ("user", "groups", "users", "group_shares", "expected"),
    [
        ("alice", (), {}, {}, DEFAULT_SHARE),  # equal by default
        ("alice", (), {"alice": 3.0}, {}, 3.0),  # the user's own
        ("alice", ("lab", "staff"), {}, {"lab": 2.0, "staff": 5.0}, 5.0),  # the largest group's
        ("alice", ("lab",), {"alice": 0.5}, {"lab": 2.0}, 0.5),  # the user's wins over groups
        ("alice", ("other",), {}, {"lab": 2.0}, DEFAULT_SHARE),  # groups not hers
    ],
)
def test_share_of(
    user: str,
    groups: tuple[str, ...],
    users: dict[str, float],
    group_shares: dict[str, float],
    expected: float,
) -> None:
    assert share_of(user, groups, users, group_shares) == expected


@pytest.mark.parametrize(
    ("intervals", "half_life", "expected"),
    [
        ([], DAY, {}),
        # an hour just now: almost a full GPU-hour
        ([held("a", NOW - 3600, NOW)], DAY, {"a": pytest.approx(3600, rel=0.02)}),
        # the same hour a day ago counts half, two days ago a quarter
        ([held("a", NOW - DAY - 3600, NOW - DAY)], DAY, {"a": pytest.approx(1800, rel=0.02)}),
        (
            [held("a", NOW - 2 * DAY - 3600, NOW - 2 * DAY)],
            DAY,
            {"a": pytest.approx(900, rel=0.02)},
        ),
        # still held: counts up to now; two GPUs count twice
        ([held("a", NOW - 3600, None, gpus=2.0)], DAY, {"a": pytest.approx(7200, rel=0.02)}),
        # a MIG slice counts its part of the GPU
        ([held("a", NOW - 3600, NOW, gpus=0.25)], DAY, {"a": pytest.approx(900, rel=0.02)}),
        # forever ago: nothing left; a shorter half-life forgets sooner
        ([held("a", 0, 3600)], DAY, {"a": pytest.approx(0, abs=5)}),
        ([held("a", NOW - DAY - 3600, NOW - DAY)], 3600.0, {"a": pytest.approx(0, abs=1e-3)}),
        # per user, summed
        (
            [
                held("a", NOW - 3600, NOW),
                held("a", NOW - 7200, NOW - 3600),
                held("b", NOW - 60, NOW),
            ],
            DAY,
            {"a": pytest.approx(7200, rel=0.05), "b": pytest.approx(60, rel=0.02)},
        ),
    ],
)
def test_decayed_usage(intervals: list[Interval], half_life: float, expected: object) -> None:
    assert decayed_usage(intervals, NOW, half_life) == expected


def test_standings_compare_share_and_usage() -> None:
    table = standings({"alice": 1.0, "bob": 1.0}, {"alice": 8 * 3600.0})
    assert (table["alice"].share, table["alice"].usage) == (0.5, 1.0)
    assert table["alice"].over and table["alice"].deficit == -0.5
    assert not table["bob"].over and table["bob"].deficit == 0.5
    # users not counted now still count in the total used
    table = standings({"bob": 1.0}, {"bob": 100.0, "carol": 300.0})
    assert table["bob"].usage == 0.25 and not table["bob"].over
    # a larger share is worth more of the machine; nobody used anything: nobody over
    table = standings({"alice": 3.0, "bob": 1.0}, {})
    assert table["alice"].share == 0.75 and not table["alice"].over


def line(*waiters: tuple[str, float]) -> list[Arrival]:
    return [Arrival(key=i, user=u, since=s) for i, (u, s) in enumerate(waiters)]


@pytest.mark.parametrize(
    ("arrivals", "used", "order", "whys"),
    [
        # nobody used anything: first come first
        (
            line(("alice", 1), ("bob", 2)),
            {},
            ["alice", "bob"],
            ["first in line", "behind alice, who asked first (your shares are used alike)"],
        ),
        # who used less goes first, even if they came later
        (
            line(("alice", 1), ("carol", 2)),
            {"alice": 8 * 3600.0},
            ["carol", "alice"],
            [
                "first in line",
                "behind carol, who has used less of their share (0 GPU-s against your "
                "8.0 GPU-h, halved every 24 h)",
            ],
        ),
        # a user's own requests keep their order
        (
            line(("bob", 1), ("bob", 2)),
            {},
            ["bob", "bob"],
            ["first in line", "behind your own earlier request"],
        ),
        # nearly equal use (within 1 % of the machine): first come first
        (
            line(("alice", 1), ("bob", 2)),
            {"alice": 1000.0, "bob": 995.0},
            ["alice", "bob"],
            ["first in line", "behind alice, who asked first (your shares are used alike)"],
        ),
    ],
)
def test_order_line(
    arrivals: list[Arrival], used: dict[str, float], order: list[str], whys: list[str]
) -> None:
    table = standings({a.user: 1.0 for a in arrivals}, used)
    places = order_line(arrivals, table, DAY)
    assert [p.arrival.user for p in places] == order
    assert [p.position for p in places] == list(range(1, len(order) + 1))
    assert [p.why for p in places] == whys


def test_order_line_says_use_in_its_unit() -> None:
    arrivals = line(("alice", 1), ("bob", 2))
    for used, text in ((90.0, "2 GPU-min"), (30.0, "30 GPU-s"), (5400.0, "1.5 GPU-h")):
        table = standings({"alice": 1.0, "bob": 1.0}, {"alice": used})
        why = order_line(arrivals, table, DAY)[1].why
        assert why == (
            f"behind bob, who has used less of their share (0 GPU-s against your {text}, "
            "halved every 24 h)"
        )


def test_order_line_weighs_shares() -> None:
    """Equal usage, unequal shares: the larger share has the larger deficit."""
    arrivals = line(("alice", 1), ("bob", 2))
    table = standings({"alice": 1.0, "bob": 3.0}, {"alice": 3600.0, "bob": 3600.0})
    assert [p.arrival.user for p in order_line(arrivals, table, DAY)] == ["bob", "alice"]
    assert math.isclose(table["bob"].deficit, 0.25)

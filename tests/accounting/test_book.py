"""The book's arithmetic: a window's part of each interval, GPU-equivalents, and books that
close (held = active + idle + unknown; the sum over users is the sum over devices) for any
book and any window."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_jupyter.accounting.book import (
    Book,
    DevicePart,
    Interval,
    Totals,
    daily,
    dimensions_of,
    in_window,
    report,
    window,
)
from dra_jupyter.accounting.weights import Weights
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import mig, simulated
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.magics.parsing import parse_line


def interval(
    start: float,
    end: float | None,
    gpus: tuple[float, ...] = (1.0,),
    *,
    user: str = "alice",
    groups: tuple[str, ...] = ("ml",),
    active: float = 0.0,
    idle: float = 0.0,
    energy: float | None = None,
) -> Interval:
    return Interval(
        claim=f"{user}-1",
        uid="u",
        user=user,
        groups=groups,
        devices=tuple(DevicePart(f"d/p/gpu-{i}", g, "H200") for i, g in enumerate(gpus)),
        start=start,
        end=end,
        active_s=active,
        idle_s=idle,
        energy_j=energy,
    )


def test_a_window_counts_the_part_of_an_interval_inside_it() -> None:
    # held 100..200 with 2 GPUs, reported active 60 s and idle 20 s, 1000 J
    held = interval(100, 200, (1.0, 1.0), active=60, idle=20, energy=1000)
    assert in_window(held, 0, 1000, 1000) == Totals(100, 60, 20, 20, 1000)
    assert in_window(held, 150, 1000, 1000) == Totals(50, 30, 10, 10, 500)
    assert in_window(held, 300, 400, 1000) == Totals()
    (row,) = report([held], 150, 1000, 1000, ("user",))
    assert row.key == ("alice",)
    assert row.totals == Totals(100, 60, 20, 20, 500)  # seconds times 2 GPUs; joules not
    assert row.totals.idle_share == pytest.approx(0.25)


def test_an_open_interval_ends_now_and_reports_beyond_its_length_are_scaled() -> None:
    still = interval(100, None, active=300, idle=100)  # 400 s reported of 100 s held
    assert in_window(still, 0, 200, now=200) == Totals(100, 75, 25, 0, 0)
    assert math.isnan(Totals(10).idle_share)  # nothing known: no share


def test_groups_overlap_and_the_primary_group_counts_once() -> None:
    book = [interval(0, 10, groups=("ml", "vision")), interval(0, 10, user="bob", groups=())]
    by_group = {r.key: r.totals.held for r in report(book, 0, 10, 10, ("group",))}
    assert by_group == {("ml",): 10, ("vision",): 10, ("(none)",): 10}
    primary = {r.key: r.totals.held for r in report(book, 0, 10, 10, ("primary_group",))}
    assert primary == {("ml",): 10, ("(none)",): 10}


def test_by_device_splits_an_interval_by_its_devices_worth() -> None:
    book = [interval(0, 100, (1.0, 0.25), energy=500)]
    rows = {r.key: r.totals for r in report(book, 0, 100, 100, dimensions_of("device"))}
    assert rows[("d/p/gpu-0", "H200")].held == 100
    assert rows[("d/p/gpu-1", "H200")].held == 25
    assert rows[("d/p/gpu-1", "H200")].energy == pytest.approx(100)


def test_words_that_are_not_known_are_refused_in_one_line() -> None:
    with pytest.raises(InvalidInputError, match=r"^by='team' is not known; use one of user"):
        dimensions_of("team")
    with pytest.raises(InvalidInputError, match="since: '1y' is not a duration"):
        window("1y")
    assert window("7d") == 7 * 86400
    assert parse_line("usage --since 30d --by=group").spec == {"since": "30d", "by": "group"}
    with pytest.raises(InvalidInputError, match="--since needs a value"):
        parse_line("usage --since")


def test_a_mig_instance_and_a_share_count_their_part_of_the_gpus_memory() -> None:
    node = mig.h200_mig_node("n1", gpus=2)
    weights = Weights(Inventory("m", "m", tuple(node), (), True, "simulated:m"))
    small = weights.of_key("gpu.nvidia.com/n1/gpu-0-mig-1g18gb-19-0")
    assert small.gpus == pytest.approx(16 / 140, abs=1e-6)
    assert small.model == "NVIDIA H200"
    assert weights.of_key("gpu.nvidia.com/n1/gpu-1").gpus == 1.0
    assert weights.of_key("gpu.nvidia.com/n1/gpu-0-mig-7g141gb-0-0").gpus == 1.0
    shared = Weights(simulated.load("h200-shared"))
    quarter = shared.part(
        {
            "driver": "gpu.nvidia.com",
            "pool": "gpu-shared-1",
            "device": "gpu-0",
            "shareID": "s1",
            "consumedCapacity": {"memory": "35942Mi", "shares": "1"},
        }
    )
    assert quarter.gpus == pytest.approx(0.25, abs=1e-4)


def test_gpu_hours_per_day_oldest_first() -> None:
    day = 86400.0
    now = 10 * day
    book = [
        interval(now - 1.5 * day, now - 0.5 * day, (1.0, 1.0)),  # 12 h yesterday, 12 h today
        interval(now - 2 * day, None, user="bob"),  # another user's
    ]
    assert daily(book, "alice", 3, now) == pytest.approx([0, 24, 24])
    assert daily(book, "nobody", 2, now) == [0, 0]


def test_a_book_travels_as_json_and_back() -> None:
    book = Book((interval(1, 2, energy=3.0), interval(1, None)), -math.inf, 10.0)
    assert Book.from_dict(book.to_dict()) == book


# --- books that close, for any book and any window ----------------------------------------

USERS = st.sampled_from(["alice", "bob", "carol"])
GROUPS = st.lists(st.sampled_from(["ml", "vision", "ops"]), max_size=3, unique=True)


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    start = draw(st.floats(0, 10_000))
    length = draw(st.floats(0, 5_000))
    end = draw(st.one_of(st.none(), st.just(start + length)))
    gpus = tuple(
        draw(st.lists(st.sampled_from([1.0, 0.5, 0.25, 16 / 140]), min_size=1, max_size=4))
    )
    return interval(
        start,
        end,
        gpus,
        user=draw(USERS),
        groups=tuple(draw(GROUPS)),
        active=draw(st.floats(0, 8_000)),
        idle=draw(st.floats(0, 8_000)),
        energy=draw(st.one_of(st.none(), st.floats(0, 1e6))),
    )


def _sum(rows: list[Totals]) -> Totals:
    total = Totals()
    for t in rows:
        total = total + t
    return total


@settings(max_examples=300, deadline=None)
@given(
    st.lists(intervals(), max_size=12),
    st.floats(0, 16_000),
    st.floats(0, 16_000),
)
def test_books_close_over_any_window(book: list[Interval], a: float, b: float) -> None:
    since, until = min(a, b), max(a, b)
    now = 16_000.0
    by_user = report(book, since, until, now, ("user",))
    by_device = report(book, since, until, now, ("device",))
    by_claim = report(book, since, until, now, dimensions_of("claim"))
    users, devices = _sum([r.totals for r in by_user]), _sum([r.totals for r in by_device])
    for t in [users, *(r.totals for r in by_user + by_device + by_claim)]:
        assert t.held == pytest.approx(t.active + t.idle + t.unknown, rel=0.01, abs=1e-6)
        assert min(t.active, t.idle, t.unknown) >= 0
    assert devices.held == pytest.approx(users.held, rel=0.01, abs=1e-6)
    assert devices.active == pytest.approx(users.active, rel=0.01, abs=1e-6)
    assert devices.energy == pytest.approx(users.energy, rel=0.01, abs=1e-6)
    assert _sum([r.totals for r in by_claim]).held == pytest.approx(users.held, abs=1e-6)
    # the held GPU-seconds are each interval's overlap with the window, times its GPUs
    expected = sum(
        max(0.0, min(max(i.start, now if i.end is None else i.end), until) - max(i.start, since))
        * i.gpus
        for i in book
    )
    assert users.held == pytest.approx(expected, rel=0.01, abs=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.lists(intervals(), max_size=8), st.floats(1, 15_000))
def test_two_windows_side_by_side_add_up_to_both(book: list[Interval], cut: float) -> None:
    now = 16_000.0
    whole = _sum([r.totals for r in report(book, 0, now, now, ("user",))])
    left = _sum([r.totals for r in report(book, 0, cut, now, ("user",))])
    right = _sum([r.totals for r in report(book, cut, now, now, ("user",))])
    both = left + right
    for field in ("held", "active", "idle", "unknown", "energy"):
        assert getattr(both, field) == pytest.approx(getattr(whole, field), rel=0.01, abs=1e-6)

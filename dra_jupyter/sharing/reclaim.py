"""Reclaim under pressure: which holders give way to a request that waits, warned first.

Pure (no I/O, no clock of its own): the caller says what is held, who waits, what time it
is, and whether releasing some claims would let a waiter be allocated (``frees``, the
allocator's answer); this module says whom to warn, whom to release, which warnings to
withdraw, and whether a Keep is allowed.

Without a waiter nothing is reclaimed: the idle timeout alone decides, as before. With
one, the holders that could free what it needs are ordered (:func:`candidates`):

1. idle (the kernel idle for ``idle_after`` at least and, where the signal exists, the
   GPU idle) **and** over their fair share (:class:`~dra_jupyter.sharing.fairshare.Standing`),
   idle the longest first;
2. then the other idle holders, idle the longest first;
3. then, only where the admin turns it on (``reclaim_active``), holders in use but over
   their fair share that have held their claim ``min_runtime`` at least, the longest held
   first.

A busy kernel (a cell running, as its Jupyter server reports with the service's
``activity``) or a busy GPU is never reclaimed by default, and a warning is withdrawn when
its holder works again; nor is a claim of the waiter's own user (and the caller leaves out
those that live by their lease alone, the CLI's: no kernel to be idle). The fewest of
them, in that order, that free what the waiter needs are warned (:func:`choose`,
:func:`plan`): "bob is waiting for 1× H200; your gpu-3, idle for 3 h, will be released in
5:00". At the deadline (``grace`` later) they are released.
A Keep (:func:`keep`) postpones the deadline to ``grace`` from then, ``keeps`` times while
someone waits; the next is refused in one line that says why and when the release comes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from dra_jupyter.sharing.fairshare import Standing

DEFAULT_GRACE = 300.0  # seconds from the warning to the release
DEFAULT_KEEPS = 1  # Keeps allowed while someone waits
DEFAULT_MIN_RUNTIME = 3600.0  # seconds a claim in use is held before reclaim_active may take it
DEFAULT_IDLE_AFTER = 600.0  # seconds without activity before a holder counts as idle
MOST_CANDIDATES = 64  # holders tried for one waiter (each try is an allocation)


class GpuUse(enum.Enum):
    """A claim's GPU as the sampler sees it; UNKNOWN where there is no signal."""

    IDLE = "idle"
    ACTIVE = "active"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ReclaimSettings:
    """The service's knobs (``[service]`` of its TOML), in seconds."""

    grace: float = DEFAULT_GRACE  # reclaim_grace
    keeps: int = DEFAULT_KEEPS  # keeps_under_pressure
    min_runtime: float = DEFAULT_MIN_RUNTIME  # min_runtime
    reclaim_active: bool = False  # reclaim_active: holders in use, over share, after min_runtime
    idle_after: float = DEFAULT_IDLE_AFTER  # reclaim_idle


@dataclass(frozen=True)
class Waiter:
    """A request in line: a key of the caller's, its user, what it asks in words (``1×
    H200``), when it arrived."""

    key: object
    user: str
    what: str
    since: float


@dataclass(frozen=True)
class Holder:
    """A claim that holds devices: whose, which, since when its kernel has been idle (None:
    busy now, or no kernel: a claim that lives by its lease), its GPU, since when it is held,
    and its user's fair-share standing (None: unknown, not over)."""

    user: str
    claim: str
    devices: tuple[str, ...]
    idle_since: float | None
    gpu: GpuUse
    held_since: float
    standing: Standing | None = None

    @property
    def over_share(self) -> bool:
        return self.standing is not None and self.standing.over

    def idle_for(self, now: float) -> float | None:
        return None if self.idle_since is None else max(0.0, now - self.idle_since)


@dataclass(frozen=True)
class Candidate:
    """A holder that could give way, its rank (1, 2, 3: see the module docstring) and why."""

    holder: Holder
    rank: int
    why: str


def candidates(
    waiter: Waiter, holders: Iterable[Holder], settings: ReclaimSettings, now: float
) -> list[Candidate]:
    """The holders that may give way to ``waiter``, in the order they do (module docstring)."""
    found: list[tuple[tuple[int, float, str], Candidate]] = []
    for holder in holders:
        if holder.user == waiter.user:
            continue
        idle_for = holder.idle_for(now)
        if idle_for is not None and idle(holder, settings, now):
            rank = 1 if holder.over_share else 2
            why = f"idle for {duration_words(idle_for)}" + (
                ", over its fair share" if rank == 1 else ""
            )
            found.append(((rank, -idle_for, holder.claim), Candidate(holder, rank, why)))
            continue
        held = now - holder.held_since
        if settings.reclaim_active and holder.over_share and held >= settings.min_runtime:
            why = f"in use for {duration_words(held)}, over its fair share"
            found.append(((3, -held, holder.claim), Candidate(holder, 3, why)))
    return [c for _, c in sorted(found, key=lambda f: f[0])]


def idle(holder: Holder, settings: ReclaimSettings, now: float) -> bool:
    """Whether ``holder`` is idle: its kernel has run nothing for ``idle_after`` at least (a
    cell running now is never idle) and its GPU is not active."""
    idle_for = holder.idle_for(now)
    return (
        idle_for is not None and idle_for >= settings.idle_after and holder.gpu is not GpuUse.ACTIVE
    )


Frees = Callable[[Sequence[Holder]], bool]  # would releasing these let the waiter in?


def choose(
    waiter: Waiter,
    holders: Iterable[Holder],
    settings: ReclaimSettings,
    now: float,
    frees: Frees,
) -> list[Candidate]:
    """The fewest candidates, taken in order, whose release ``frees`` what ``waiter`` needs
    (the first that together do, less each that is not needed); [] when none do."""
    ordered = candidates(waiter, holders, settings, now)[:MOST_CANDIDATES]
    chosen: list[Candidate] = []
    for candidate in ordered:
        chosen.append(candidate)
        if frees([c.holder for c in chosen]):
            break
    else:
        return []
    for candidate in reversed(chosen[:-1]):  # the last one was needed: it made the fit
        rest = [c for c in chosen if c is not candidate]
        if frees([c.holder for c in rest]):
            chosen = rest
    return chosen


@dataclass(frozen=True)
class Notice:
    """A warning in force: ``claim`` of ``holder`` is released at ``deadline`` so that
    ``waiter`` (a user, waiting for ``what``) gets its devices; ``keeps`` Keeps used."""

    claim: str
    holder: str
    devices: tuple[str, ...]
    waiter_key: object
    waiter: str
    what: str
    why: str
    warned: float
    deadline: float
    keeps: int = 0

    def message(self, now: float) -> str:
        """In the holder's words: "bob is waiting for 1× H200; your gpu-3, idle for 3 h,
        will be released in 5:00"."""
        return (
            f"{self.waiter} is waiting for {self.what}; your {self.claim}, {self.why}, "
            f"will be released in {countdown(self.deadline - now)}"
        )


@dataclass(frozen=True)
class Plan:
    """What to do now: warn these (new notices), release these (their deadline came), and
    withdraw these (nobody waits for them any more, or their GPU is in use again)."""

    warn: tuple[Notice, ...] = ()
    release: tuple[Notice, ...] = ()
    withdraw: tuple[Notice, ...] = ()


def plan(
    now: float,
    waiters: Sequence[tuple[Waiter, Frees]],
    holders: Sequence[Holder],
    notices: Mapping[str, Notice],
    settings: ReclaimSettings,
) -> Plan:
    """One turn of reclaim under pressure. ``waiters``: the line in its order, each with
    whether releasing some holders would let it in; ``notices``: those in force, by claim.

    A notice stays (its deadline too) while its waiter waits and its claim is held; where
    the waiter left or was served, or the holder is no longer idle (a cell runs or ran since,
    or its GPU is in use again; and ``reclaim_active`` is off), it is withdrawn: a kernel
    at work is never released under pressure by default. Each waiter not yet covered by its notices
    gets the fewest candidates (:func:`choose`) among the holders not warned for another
    waiter; those not yet warned are warned, with ``grace`` until the release."""
    by_claim = {h.claim: h for h in holders}
    waiting = {w.key for w, _ in waiters}
    kept: dict[str, Notice] = {}
    withdraw: list[Notice] = []
    for claim, notice in notices.items():
        holder = by_claim.get(claim)
        if holder is None:
            continue  # released meanwhile: nothing to withdraw
        in_use = not settings.reclaim_active and not idle(holder, settings, now)
        if notice.waiter_key not in waiting or in_use:
            withdraw.append(notice)
        else:
            kept[claim] = notice
    release = tuple(n for n in kept.values() if n.deadline <= now)
    warn: list[Notice] = []
    taken = set(kept)
    for waiter, frees in waiters:
        mine = [by_claim[c] for c, n in kept.items() if n.waiter_key == waiter.key]
        if mine and frees(mine):
            continue
        free = [h for h in holders if h.claim not in taken or h in mine]
        for candidate in choose(waiter, free, settings, now, frees):
            holder = candidate.holder
            if holder.claim in kept:
                continue
            notice = Notice(
                claim=holder.claim,
                holder=holder.user,
                devices=holder.devices,
                waiter_key=waiter.key,
                waiter=waiter.user,
                what=waiter.what,
                why=candidate.why,
                warned=now,
                deadline=now + settings.grace,
            )
            warn.append(notice)
            taken.add(holder.claim)
    return Plan(tuple(warn), release, tuple(withdraw))


@dataclass(frozen=True)
class Kept:
    """A Keep's verdict: ``allowed`` (then ``notice`` has the new deadline), and the words
    for the holder."""

    allowed: bool
    notice: Notice
    message: str


def keep(notice: Notice, settings: ReclaimSettings, now: float) -> Kept:
    """A Keep of a warned claim: allowed ``settings.keeps`` times while its waiter waits,
    each postponing the release to ``grace`` from now (never sooner than it was); the next
    is refused, in one line."""
    if notice.keeps < settings.keeps:
        postponed = replace(
            notice, keeps=notice.keeps + 1, deadline=max(notice.deadline, now + settings.grace)
        )
        left = settings.keeps - postponed.keeps
        return Kept(
            True,
            postponed,
            f"claim {notice.claim}: kept while {notice.waiter} waits for {notice.what}; "
            f"released in {countdown(postponed.deadline - now)} "
            f"({left} more Keep{'s' if left != 1 else ''} allowed)",
        )
    plural = "s" if settings.keeps != 1 else ""
    return Kept(
        False,
        notice,
        f"claim {notice.claim}: Keep refused: {notice.waiter} is waiting for {notice.what}, "
        f"and the {settings.keeps} Keep{plural} allowed while someone waits "
        f"{'is' if settings.keeps == 1 else 'are'} used (keeps_under_pressure); "
        f"it will be released in {countdown(notice.deadline - now)}: save your work, or "
        "release it now",
    )


def countdown(seconds: float) -> str:
    """``5:00``, ``1:02:03``: minutes and seconds (hours where there are some), rounded up."""
    total = max(0, math.ceil(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def duration_words(seconds: float) -> str:
    """``3 h``, ``12 min``, ``40 s``: the largest whole unit, for a warning."""
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h" if seconds >= 36000 else f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds // 60:.0f} min"
    return f"{seconds:.0f} s"

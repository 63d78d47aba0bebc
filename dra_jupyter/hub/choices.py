"""The choices of a JupyterHub spawn form, from a cluster's (or one machine's) devices: pure,
no I/O, no JupyterHub, no Kubernetes client.

>>> world = World(slices, device_classes, allocated_claims)          # doctest: +SKIP
>>> offered = restrict(choices(world), "alice", {"students"}, policy) # doctest: +SKIP
>>> c.KubeSpawner.profile_list = kubespawner_profiles(offered)        # doctest: +SKIP

:func:`choices` gives one :class:`Choice` per device class and model at 1, 2, 4, 8 ...
devices up to the most one node holds (and that most), one per MIG profile, and "no GPU";
each says how many such requests could be allocated now (:mod:`dra_jupyter.hub.counting`,
with our allocator). A choice no node could ever meet, even with every device idle, is left
out; one that cannot be met now says why (our explanation, on the node where the most are
free) and since when (the latest claim that took such devices).

:func:`restrict` applies an admin's :class:`ChoicePolicy`: who may choose what (a table of
rules, and a callable), the lease and idle timeout of each choice, and the default.
:func:`kubespawner_profiles` gives KubeSpawner ``profile_list`` entries whose
``kubespawner_override`` carries ``dra_request``, ``dra_lease``, ``dra_idle_timeout`` and
``dra_kernels_only``; :func:`kernel_specs` (:func:`kernel_spec` for one) the kernel specs
that run a kernel with a choice's devices in a pod of its own.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dra_jupyter.allocator import Strategy
from dra_jupyter.allocator.explain import STAGE_TEXT, STAGES
from dra_jupyter.durations import parse_duration, parse_lease
from dra_jupyter.errors import DraJupyterError, InvalidInputError, shown
from dra_jupyter.hub.counting import ChoiceCache, Count, Counting, World, count
from dra_jupyter.hub.layout import shape_claim
from dra_jupyter.sharing.gpushare import (
    NVIDIA_DRIVER,
    SHARING_KEYS,
    parse_sharing,
    strategy_name,
    unknown_strategy,
)
from dra_jupyter.sharing.joins import shared_claim_name
from dra_jupyter.tables import human_bytes

__all__ = [
    "NONE",
    "TIMES",
    "UNLIMITED",
    "Allow",
    "Choice",
    "ChoiceCache",
    "ChoicePolicy",
    "Rule",
    "World",
    "choices",
    "find",
    "kernel_spec",
    "kernel_specs",
    "kubespawner_profiles",
    "restrict",
]

NONE = "none"  # the slug of the choice without devices
UNLIMITED = 2**31 - 1  # what "no GPU" has available: it asks for nothing
TIMES = "\u00d7"  # the multiplication sign of "2x NVIDIA H200", as people write it
KERNEL_PROVISIONER = "dra-kubernetes"  # dra_jupyter.kube.kernels.provisioner's entry point
PYTHON_ARGV = ("python", "-m", "ipykernel_launcher", "-f", "{connection_file}")


@dataclass(frozen=True)
class Choice:
    """One entry of the spawn form."""

    slug: str  # "h200-x2", "mig-3g-71gb-x1", "none"
    display_name: str  # "2\u00d7 NVIDIA H200 (140.4 GiB)" (a multiplication sign)
    description: str  # "3 can start now" / "none free now: 8 of 8 held (since 14:02)"
    request: Mapping[str, object]  # dra.request keywords, {"gpu": 2, "model": "NVIDIA H200"}
    available: int  # such requests that could be allocated now (UNLIMITED for "none")
    reason: str | None  # why none can be now (one line), None when available > 0
    changed: dt.datetime | None  # when the latest claim holding such devices got them
    lease: str | None = None  # from the admin's rules: how long the devices are held at most
    idle_timeout: str | None = None  # from the admin's rules: idle release
    default: bool = False  # the one chosen unless the user picks another (see restrict)
    kernels_only: bool = False  # from the admin's rules: the devices go to kernel pods
    shared: bool = False  # one claim for everyone who chooses it (a rule's share)


def choices(
    world: World,
    *,
    cache: ChoiceCache | None = None,
    strategy: Strategy = "first-fit",
    now: dt.datetime | None = None,
) -> list[Choice]:
    """Every choice the world offers: "no GPU" first, then per device class and model (in
    the classes' order) each count, then the MIG profiles by size. Times are shown in the
    time zone of ``now`` (default: this machine's)."""
    now = now or dt.datetime.now().astimezone()
    counting = count(world, strategy=strategy, cache=cache)
    out = [
        Choice(
            slug=NONE,
            display_name="No GPU",
            description="no devices: CPU only",
            request={},
            available=UNLIMITED,
            reason=None,
            changed=None,
        )
    ]
    for c in counting.counts:
        out.append(_choice(counting, c, now))
    return out


def _choice(counting: Counting, c: Count, now: dt.datetime) -> Choice:
    shape = c.shape
    changed = dt.datetime.fromtimestamp(c.changed, tz=now.tzinfo) if c.changed is not None else None
    since = f" (since {_when(changed, now)})" if changed is not None else ""
    if c.available > 0:
        n = f"{c.available}+" if c.at_least else str(c.available)
        description, reason = f"{n} can start now", None
    else:
        held = c.places - c.free
        if c.free == 0:
            description = f"none free now: {held} of {c.places} held{since}"
        elif c.best_free == c.free:  # all on one node
            description = f"none free now: only {c.free} of {c.places} free{since}"
        else:
            description = (
                f"none free now: {c.free} of {c.places} free, at most {c.best_free} on one "
                f"node{since}"
            )
        reason = _reason(counting, c)
    return Choice(
        slug=f"{shape.key}-x{c.count}",
        display_name=_display(c),
        description=description,
        request=shape.keywords(c.count),
        available=c.available,
        reason=reason,
        changed=changed,
    )


def _display(c: Count) -> str:
    shape = c.shape
    memory = human_bytes(shape.memory) if shape.memory is not None else ""
    memory = memory.replace("Ti", " TiB").replace("Gi", " GiB").replace("Mi", " MiB")
    if shape.profile is not None:
        return f"MIG {shape.profile}" + (f" ({shape.model})" if shape.model else "")
    what = shape.model or shape.device_class
    if shape.noun == "TPU chip":
        what = f"TPU {what}"
    return f"{c.count}{TIMES} {what}" + (f" ({memory})" if memory else "")


def _when(changed: dt.datetime, now: dt.datetime) -> str:
    """``14:02`` today, ``Nov 30 14:02`` another day (in ``now``'s time zone)."""
    if changed.date() == now.date():
        return changed.strftime("%H:%M")
    return f"{changed:%b} {changed.day} {changed:%H:%M}"


def _reason(counting: Counting, c: Count) -> str:
    """Why no request of the choice can be allocated now, in one line: our explanation's
    funnel on the node where the most devices of the kind are free (it never names other
    claims or their owners). Kept with the counts."""
    key = (c.shape.key, c.count)
    found = counting.reasons.get(key)
    if found is None:
        found = counting.reasons[key] = _explained(counting, c)
    return found


def _explained(counting: Counting, c: Count) -> str:
    layout = counting.layout
    shape = c.shape
    s = layout.shapes.index(shape)
    claim = layout.claims[s] if c.count == 1 else shape_claim(shape, c.count, layout.classes)
    where = c.best_node
    try:
        explanation = counting.allocator.explain([claim], node=where)
    except DraJupyterError as err:  # e.g. a CEL error on a device: say it
        return str(err).splitlines()[0]
    for report in explanation.nodes:
        node = f"on {report.node}" if report.node else "nowhere"
        if report.reasons:
            return f"{node}: {report.reasons[0]}"
        for request in report.requests:
            if request.enough:
                continue
            return f"{node}: {_funnel(request.funnel, request.needed, shape.noun)}"
    if explanation.satisfiable:  # allocatable on the freest node after all: a node the
        return "it fits now; the count was made a moment ago"  # counting missed (a race)
    return "no node has these devices free together"


def _funnel(funnel: Mapping[str, int], needed: int | str, noun: str) -> str:
    """``5 of 8 GPUs are not held by other claims, 8 needed``: the first stage of the
    funnel with fewer devices than the request needs."""
    want = needed if isinstance(needed, int) else 1
    previous = funnel.get("devices", 0)
    for stage in STAGES[1:]:
        n = funnel.get(stage, 0)
        if n < want:
            text = STAGE_TEXT[stage]
            if previous == 1:  # "1 GPU is ...", "1 GPU matches ...", "1 GPU has ..."
                verb, _, rest = text.partition(" ")
                text = f"{_SINGULAR.get(verb, verb)} {rest}"
            return (
                f"{n} of {previous} {noun if previous == 1 else noun + 's'} {text}, {want} needed"
            )
        previous = n
    return f"{previous} {noun}s would do, {want} needed"


_SINGULAR = {"are": "is", "match": "matches", "have": "has"}


# --- who may choose what -------------------------------------------------------------------

Allow = Callable[[str, frozenset[str], Choice], bool]
"""An admin's test: ``allow(user, groups, choice)``; False leaves the choice out."""

RULE_KEYS = (
    "match", "users", "groups", "lease", "idle_timeout", "default", "kernels_only", "share",
)  # fmt: skip
SHARE_KEYS = ("share", *SHARING_KEYS)  # a rule's share: how the shared choice shares its GPU
KERNELS_ONLY_NOTE = "GPU kernels only: the server runs without devices, its kernels get them"


@dataclass(frozen=True)
class Rule:
    """One row of an admin's table, for the choices whose slug matches ``match`` (a shell
    pattern: ``h200-*``, ``mig-*``, ``*``). Each setting of a choice comes from the first
    rule that matches it and has that setting: ``users`` / ``groups`` (together: who may
    choose it; a rule with neither says nothing of who), ``lease``, ``idle_timeout``,
    ``default``, ``kernels_only`` ("GPU kernels only": on Kubernetes the server pod gets no
    device and its kernels, in pods of their own, get the choice's).

    A rule with ``share`` (``{"share": "mps", "threads": 25}``: ``dra.request``'s sharing
    keywords) adds, beside each one-device choice it matches, a shared choice ("Shared
    NVIDIA H100 (MPS, 25%)", slug ``<slug>-mps-25``) whose servers all use one claim with
    that sharing (DRAKubeSpawner's ``dra_shared``); the rule's other settings are the shared
    choice's, not the matched one's."""

    match: str = "*"
    users: frozenset[str] | None = None
    groups: frozenset[str] | None = None
    lease: str | None = None
    idle_timeout: str | None = None
    default: bool | None = None
    kernels_only: bool | None = None
    share: tuple[tuple[str, object], ...] = ()  # the sharing keywords, in SHARE_KEYS' order

    def matches(self, slug: str) -> bool:
        return fnmatch.fnmatchcase(slug, self.match)


@dataclass(frozen=True)
class ChoicePolicy:
    """Who may choose what, and each choice's lease and idle timeout: ``rules`` (see
    :class:`Rule`) and ``allow`` (see :data:`Allow`); a choice must pass both."""

    rules: tuple[Rule, ...] = ()
    allow: Allow | None = field(default=None, compare=False)

    @classmethod
    def from_table(
        cls, rows: Iterable[Mapping[str, Any]], allow: Allow | None = None
    ) -> ChoicePolicy:
        """A policy from rows of ``match``, ``users``, ``groups``, ``lease``,
        ``idle_timeout``, ``default`` and ``kernels_only`` (as ``c.DRAProfiles.rules`` gives
        them); a row that is not one is refused, naming the row and the key."""
        return cls(tuple(_rule(i, row) for i, row in enumerate(rows)), allow)


def _rule(i: int, row: Any) -> Rule:
    where = f"profile rule {i + 1}"
    if not isinstance(row, Mapping):
        raise InvalidInputError(f"{where}: expected a table (a dict), not {shown(row)}")
    unknown = sorted(set(row) - set(RULE_KEYS))
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown key {shown(unknown[0])}; use {', '.join(RULE_KEYS)}"
        )
    match = row.get("match", "*")
    if not isinstance(match, str) or not match:
        raise InvalidInputError(
            f"{where}: match must be a pattern such as 'h200-*', not {shown(match)}"
        )
    lease, idle = row.get("lease"), row.get("idle_timeout")
    if lease is not None:
        parse_lease(lease, what=f"{where}: lease")
    if idle is not None:
        parse_duration(idle, what=f"{where}: idle_timeout")
    share = _share(row.get("share"), where)
    default, kernels_only = row.get("default"), row.get("kernels_only")
    for key, flag in (("default", default), ("kernels_only", kernels_only)):
        if flag is not None and not isinstance(flag, bool):
            raise InvalidInputError(f"{where}: {key} must be true or false, not {shown(flag)}")
    return Rule(
        match=match,
        users=_names(row, "users", where),
        groups=_names(row, "groups", where),
        lease=None if lease is None else str(lease),
        idle_timeout=None if idle is None else str(idle),
        default=default,
        kernels_only=kernels_only,
        share=share,
    )


def _share(value: Any, where: str) -> tuple[tuple[str, object], ...]:
    """A rule's ``share`` as keywords (checked as ``dra.request`` checks them), or ()."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or "share" not in value:
        raise InvalidInputError(
            f"{where}: share must be a table of sharing keywords such as "
            f"{{'share': 'mps', 'threads': 25}}, not {shown(value)}"
        )
    unknown = sorted(set(value) - set(SHARE_KEYS))
    if unknown:
        raise InvalidInputError(
            f"{where}: share: unknown key {shown(unknown[0])}; use {', '.join(SHARE_KEYS)}"
        )
    if strategy_name(value["share"]) is None:
        raise unknown_strategy(value["share"], f"{where}: share")
    parse_sharing(value, device_class=NVIDIA_DRIVER, mig=False, at=f"{where}: share")
    return tuple((k, value[k]) for k in SHARE_KEYS if value.get(k) is not None)


def _one_device(choice: Choice) -> bool:
    return choice.request.get("gpu") == 1 or (
        "mig" in choice.request and choice.request.get("count", 1) == 1
    )


def shared_choice(choice: Choice, rule: Rule, users: int | None) -> Choice | None:
    """The shared choice ``rule`` makes of ``choice`` (None where its sharing does not apply:
    more than one device, time-slicing of a MIG partition); ``users``: the servers that use
    its claim now (None: no such claim now)."""
    keywords = dict(rule.share)
    mig = "mig" in choice.request
    if not _one_device(choice) or (mig and strategy_name(keywords["share"]) != "mps"):
        return None
    sharing = parse_sharing(keywords, device_class=NVIDIA_DRIVER, mig=mig)
    assert sharing is not None  # a rule's share names a strategy (_share)
    if sharing.strategy == "mps":
        words = "MPS" + (f", {sharing.threads}%" if sharing.threads else "")
        slug = "mps" + (f"-{sharing.threads}" if sharing.threads else "")
        shown_as = f"Shared {choice.display_name} ({words})"
    else:
        words = "time-sliced" + (f", {sharing.interval} turns" if sharing.interval else "")
        slug = "time-sliced" + (f"-{sharing.interval}" if sharing.interval else "")
        shown_as = f"Time-sliced {choice.display_name}"
    if users:
        description = f"shared by {users} now ({words})"
        available, reason = UNLIMITED, None
    else:
        description = f"no one shares it now: {choice.description}"
        available, reason = choice.available, choice.reason
    return replace(
        choice,
        slug=f"{choice.slug}-{slug}",
        display_name=shown_as,
        description=description,
        request={**choice.request, **keywords},
        available=available,
        reason=reason,
        shared=True,
    )


def _names(row: Mapping[str, Any], key: str, where: str) -> frozenset[str] | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Collection):
        raise InvalidInputError(f"{where}: {key} must be a list of names, not {shown(value)}")
    if not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{where}: {key} must be a list of names, not {shown(value)}")
    return frozenset(value)


def _with_shared(
    offered: Sequence[Choice], policy: ChoicePolicy, sharing: Mapping[str, int] | None
) -> list[tuple[Choice, list[Rule]]]:
    """Each choice with the rules that settle it: the rules without ``share`` that match it,
    and after it the shared choices its ``share`` rules make (where ``sharing``, the users of
    each shared claim now by name, is given: a cluster's), each settled by the rule that made
    it first."""
    plain = [r for r in policy.rules if not r.share]
    out: list[tuple[Choice, list[Rule]]] = []
    for choice in offered:
        out.append((choice, [r for r in plain if r.matches(choice.slug)]))
        if sharing is None:
            continue
        for rule in (r for r in policy.rules if r.share and r.matches(choice.slug)):
            made = shared_choice(choice, rule, None)
            if made is None:
                continue
            made = shared_choice(choice, rule, sharing.get(shared_claim_name(made.slug)))
            assert made is not None
            out.append((made, [rule, *(r for r in plain if r.matches(made.slug))]))
    return out


def restrict(
    offered: Sequence[Choice],
    user: str,
    groups: Collection[str] = (),
    policy: ChoicePolicy | None = None,
    sharing: Mapping[str, int] | None = None,
) -> list[Choice]:
    """The choices ``user`` (in ``groups``) may make, with the policy's lease, idle timeout,
    default and "GPU kernels only" (only of a choice with devices), and the shared choices of
    its ``share`` rules where ``sharing`` (the servers that use each shared claim now, by
    its name) is given; exactly one is the default: the first a rule makes default, else
    "no GPU", else the first that can start now, else the first."""
    policy = policy or ChoicePolicy()
    member_of = frozenset(groups)
    out: list[Choice] = []
    for choice, rules in _with_shared(offered, policy, sharing):
        who = next((r for r in rules if r.users is not None or r.groups is not None), None)
        if who is not None and not (
            user in (who.users or ()) or member_of.intersection(who.groups or ())
        ):
            continue
        settled = replace(
            choice,
            lease=next((r.lease for r in rules if r.lease is not None), choice.lease),
            idle_timeout=next(
                (r.idle_timeout for r in rules if r.idle_timeout is not None), choice.idle_timeout
            ),
            default=next((r.default for r in rules if r.default is not None), False),
            kernels_only=bool(choice.request)
            and next((r.kernels_only for r in rules if r.kernels_only is not None), False),
        )
        if policy.allow is not None and not policy.allow(user, member_of, settled):
            continue
        out.append(settled)
    first = next((i for i, c in enumerate(out) if c.default), None)
    if first is None:
        first = next((i for i, c in enumerate(out) if c.slug == NONE), None)
    if first is None:
        first = next((i for i, c in enumerate(out) if c.available > 0), 0 if out else None)
    return [replace(c, default=i == first) for i, c in enumerate(out)]


def find(offered: Sequence[Choice], slug: str) -> Choice | None:
    return next((c for c in offered if c.slug == slug), None)


def kubespawner_profiles(offered: Sequence[Choice]) -> list[dict[str, Any]]:
    """KubeSpawner ``profile_list`` entries, one per choice: ``display_name``, ``slug``,
    ``description``, ``default`` and ``kubespawner_override`` with ``dra_request`` (the
    ``dra.request`` keywords; {} for no devices), ``dra_lease``, ``dra_idle_timeout``,
    ``dra_kernels_only`` (the description then says so) and ``dra_shared``."""
    return [
        {
            "display_name": c.display_name,
            "slug": c.slug,
            "description": f"{c.description} ({KERNELS_ONLY_NOTE})"
            if c.kernels_only
            else c.description,
            "default": c.default,
            "kubespawner_override": {
                "dra_request": dict(c.request),
                "dra_lease": c.lease,
                "dra_idle_timeout": c.idle_timeout,
                "dra_kernels_only": c.kernels_only,
                "dra_shared": c.shared,
            },
        }
        for c in offered
    ]


def kernel_spec(
    shown_as: str,
    request: Mapping[str, object],
    *,
    slug: str,
    description: str = "",
    lease: str | None = None,
    idle_timeout: str | None = None,
    display: str = "Python 3",
    argv: Sequence[str] = PYTHON_ARGV,
    language: str = "python",
    join: str = "",
) -> dict[str, Any]:
    """The kernel spec (``kernel.json``) that runs a kernel in a pod of its own with the
    devices of ``request`` (``dra.request`` keywords; the ``dra-kubernetes`` provisioner),
    shown as ``Python 3 · <shown_as>``. Interrupts go as messages (no signal reaches
    another pod). ``slug``, ``description``, ``lease`` and ``idle_timeout`` are kept in
    ``metadata.dra_jupyter`` for those who list the specs. ``join``: the kernels use that
    claim (a profile's shared claim) instead of making one of ``request``."""
    return {
        "argv": list(argv),
        "display_name": f"{display} \u00b7 {shown_as}",
        "language": language,
        "interrupt_mode": "message",
        "metadata": {
            "kernel_provisioner": {
                "provisioner_name": KERNEL_PROVISIONER,
                "config": {"join": join} if join else {"request": dict(request)},
            },
            "dra_jupyter": {
                "slug": slug,
                "description": description,
                "lease": lease,
                "idle_timeout": idle_timeout,
            },
        },
    }


def kernel_specs(
    offered: Sequence[Choice],
    *,
    display: str = "Python 3",
    argv: Sequence[str] = PYTHON_ARGV,
    language: str = "python",
) -> dict[str, dict[str, Any]]:
    """Kernel specs (:func:`kernel_spec`) that run a kernel in a pod of its own with a
    choice's devices, one per choice with devices, named ``dra-<slug>`` and shown as
    ``Python 3 · 2x NVIDIA H200 (140.4 GiB)``; "no GPU" is the server's own kernel."""
    return {
        f"dra-{c.slug}": kernel_spec(
            c.display_name,
            c.request,
            slug=c.slug,
            description=c.description,
            lease=c.lease,
            idle_timeout=c.idle_timeout,
            display=display,
            argv=argv,
            language=language,
        )
        for c in offered
        if c.request and not c.shared  # a shared choice's claim is the hub's to make
    }

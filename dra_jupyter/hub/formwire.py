"""The spawn form's choices as the hub's shared view serves them (``GET <prefix>api/choices``,
specification/shared-view-api.yml) and as the spawner reads them back, and the explanation
of a waiting spawn it gives the hub (``POST <prefix>api/explain``): pure, no I/O.

The view counts the choices on its watched state (:func:`dra_jupyter.hub.choices.choices`);
who may choose what, the leases and the default stay the hub's (:func:`~.choices.restrict`
on the hub's own ``c.DRAProfiles``). Where the view does not answer, the form keeps the
choices it last had, each saying in one line that the counts are unavailable and why
(:func:`uncounted`), never a count it cannot vouch for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypedDict

from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub.choices import NONE, UNLIMITED, Choice

__all__ = [
    "CHOICES_PATH",
    "EXPLAIN_PATH",
    "UNCOUNTED",
    "ChoiceModel",
    "ExplainAsk",
    "Explained",
    "SharedChoices",
    "choices_answer",
    "choices_of",
    "explain_ask",
    "explain_asked",
    "explained_of",
    "uncounted",
]

CHOICES_PATH = "api/choices"  # under the shared view's URL
EXPLAIN_PATH = "api/explain"  # why a spawn waits, there too
UNCOUNTED = "device counts unavailable"  # the form's one line where the view does not answer


class ChoiceModel(TypedDict):
    """One choice of the spawn form, counted by the view (the hub's rules not applied)."""

    slug: str
    display_name: str
    description: str
    request: dict[str, Any]
    available: int
    reason: str | None
    changed: float | None  # seconds since the epoch


class SharedChoices(TypedDict):
    """The view's answer: the cluster in words, every choice it offers, and the servers that
    use each shared claim of the namespace asked about now (by the claim's name)."""

    inventory: str
    choices: list[ChoiceModel]
    sharing: dict[str, int]


class ExplainAsk(TypedDict):
    """What the hub asks the view to explain: a spawn's claim (its name and namespace, which
    the explanation leaves out of the holders, and its spec) and the profile's
    ``dra.request`` keywords (null where there are none: then no hint in words)."""

    namespace: str
    claim: dict[str, Any]
    request: dict[str, Any] | None


class Explained(TypedDict):
    """Why the claim waits, in lines (:func:`dra_jupyter.kube.spawn.explain_on`'s text)."""

    explanation: str


def explain_ask(
    namespace: str, claim: Mapping[str, Any], request: Mapping[str, Any] | None
) -> ExplainAsk:
    """The question for ``claim`` (a generated claim or a template's, of ``namespace``):
    its name, namespace and spec only."""
    meta = claim.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace") if isinstance(meta.get(k), str)}
    return ExplainAsk(
        namespace=namespace,
        claim={"metadata": kept, "spec": claim.get("spec") or {}},
        request=dict(request) if request is not None else None,
    )


def explain_asked(body: object) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """The namespace, claim and request of a question ``body`` (its JSON); ValueError, in
    one line, for a body that is not one."""
    if not isinstance(body, Mapping):
        raise ValueError('expected {"namespace": "...", "claim": {...}, "request": {...}}')
    namespace, claim, request = body.get("namespace"), body.get("claim"), body.get("request")
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("the question names no namespace")
    if not isinstance(claim, dict) or not isinstance(claim.get("spec", {}), dict):
        raise ValueError("the question's claim is not a claim")
    if not isinstance(claim.get("metadata", {}), dict):
        raise ValueError("the question's claim is not a claim")
    if request is not None and not isinstance(request, dict):
        raise ValueError("the question's request is not dra.request's keywords")
    return namespace, claim, request


def explained_of(body: object) -> str:
    """The explanation of the view's answer ``body``; :class:`UnavailableError` for an
    answer that is not one."""
    text = body.get("explanation") if isinstance(body, Mapping) else None
    if not isinstance(text, str):
        raise UnavailableError("the shared view answered an explanation that is not one")
    return text


def choices_answer(
    inventory: str, offered: Sequence[Choice], sharing: Mapping[str, int]
) -> SharedChoices:
    return SharedChoices(
        inventory=inventory,
        choices=[
            ChoiceModel(
                slug=c.slug,
                display_name=c.display_name,
                description=c.description,
                request=dict(c.request),
                available=min(c.available, UNLIMITED),
                reason=c.reason,
                changed=c.changed.timestamp() if c.changed is not None else None,
            )
            for c in offered
        ],
        sharing=dict(sharing),
    )


def _not_choices(what: str) -> UnavailableError:
    return UnavailableError(f"the shared view answered {what}")


def choices_of(body: object) -> tuple[list[Choice], dict[str, int]]:
    """The choices and the sharing of the view's answer ``body`` (its JSON);
    :class:`UnavailableError`, in one line, for an answer that is not one."""
    if not isinstance(body, Mapping):
        raise _not_choices("something that is not its JSON")
    listed, sharing = body.get("choices"), body.get("sharing", {})
    if not isinstance(listed, list) or not isinstance(sharing, Mapping):
        raise _not_choices("choices that are not choices")
    if not all(isinstance(k, str) and type(v) is int for k, v in sharing.items()):
        raise _not_choices("a sharing that is not counts")
    return [_choice(found) for found in listed], dict(sharing)


def _choice(found: object) -> Choice:
    if not isinstance(found, Mapping):
        raise _not_choices("a choice that is not one")
    texts = [found.get(k) for k in ("slug", "display_name", "description")]
    request, available = found.get("request"), found.get("available")
    reason, changed = found.get("reason"), found.get("changed")
    if (
        not all(isinstance(t, str) for t in texts)
        or not isinstance(request, dict)
        or type(available) is not int
        or not (reason is None or isinstance(reason, str))
        or not (changed is None or type(changed) in (int, float))
    ):
        raise _not_choices("a choice that is not one")
    slug, display_name, description = (str(t) for t in texts)
    when = None
    if changed is not None:
        when = dt.datetime.fromtimestamp(float(changed), tz=dt.UTC).astimezone()
    return Choice(
        slug=slug,
        display_name=display_name,
        description=description,
        request=request,
        available=available,
        reason=reason,
        changed=when,
    )


def uncounted(known: Sequence[Choice], why: str) -> list[Choice]:
    """The form where the view does not answer: the choices last known (else "no GPU"
    alone), each with devices saying ``device counts unavailable: <why>`` in place of its
    counts (and left to the scheduler to decide); where there are none, "no GPU" says it."""
    line = f"{UNCOUNTED}: {' '.join(why.split())}"
    offered = list(known) or [
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
    if not any(c.request for c in offered):
        return [replace(c, description=f"{c.description}; {line}") for c in offered]
    return [
        c if not c.request else replace(c, description=line, available=1, reason=None)
        for c in offered
    ]

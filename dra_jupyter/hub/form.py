"""The shared box's spawn form, pure: the world the choices are counted on, from the
shared-machine service's answers; the form's HTML; and what a submitted form chose.

The service's holders are the claims of every user of the machine: the hub (root) sees
their names, the users of the form must not (the service's ``visibility = "own"``), so the
world names them ``held-1``, ``held-2``, ... (and the choices' reasons never name claims).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dra_jupyter.errors import InvalidInputError, shown
from dra_jupyter.hub.choices import Choice, World
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.types import ClaimRecord

FIELD = "profile"  # the form's field, and the user_options key: the choice's slug
SLUG = re.compile(r"[a-z0-9]([a-z0-9-]{0,78}[a-z0-9])?")
PROFILE_OPTION = "profile-option-"  # KubeSpawner's keys of a profile's options


def read_at_start(spawner: Any, user_options: Mapping[str, Any]) -> None:
    """JupyterHub's ``apply_user_options`` hook of our spawners: the profile (and
    KubeSpawner's profile options) are read and checked when the server starts, so there
    is nothing to apply now; JupyterHub would log every spawn's ``profile`` as unhandled
    without a hook. Keys that nothing reads are still logged, as JupyterHub does."""
    unread = [k for k in user_options if k != FIELD and not str(k).startswith(PROFILE_OPTION)]
    if unread:
        spawner.log.warning(
            "Received unhandled user_options for %s: %s",
            spawner._log_name,  # JupyterHub's name of a server in its logs
            ", ".join(map(str, unread)),
        )


def service_world(inventory: Inventory, holders: Sequence[ClaimRecord]) -> World:
    """The machine's devices and every live claim, the claims named only by number."""
    claims: list[dict[str, Any]] = []
    since: dict[str, float] = {}
    for i, record in enumerate(holders, 1):
        name = f"held-{i}"
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"devices": {"requests": []}},
                "status": {"allocation": record.allocation},
            }
        )
        since[f"default/{name}"] = record.created
    return World(inventory.patched_slices, inventory.device_classes, claims, since)


def chosen(formdata: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The ``user_options`` of a submitted form: ``{"profile": slug}``."""
    values = formdata.get(FIELD) or []
    if len(values) != 1:
        raise InvalidInputError(f"the spawn form: choose one of the devices offered ({FIELD})")
    return {FIELD: slug_of(values[0])}


def slug_of(value: Any) -> str:
    """A choice's slug as the form or the REST API's ``user_options`` gives it."""
    if not isinstance(value, str) or SLUG.fullmatch(value) is None:
        raise InvalidInputError(
            f"user_options {FIELD}: expected the slug of a choice such as 'h200-x1', not "
            f"{shown(value)}"
        )
    return value


def render(
    offered: Sequence[Choice], *, inventory: str = "", problem: str = "", choose: str = ""
) -> str:
    """The form's HTML (Bootstrap 5, as JupyterHub's pages): one radio button per choice,
    with what it would get now; the ones that cannot start now are shown, not chosen.
    ``choose``: the slug to check (the user's last choice), else the default."""
    rows = []
    checked = choose if any(c.slug == choose and c.available > 0 for c in offered) else ""
    if not checked:
        checked = next((c.slug for c in offered if c.default and c.available > 0), "")
    for choice in offered:
        ident = f"dra-profile-{choice.slug}"
        can = choice.available > 0
        notes = []
        if choice.lease:
            notes.append(f"lease {choice.lease}")
        if choice.idle_timeout:
            notes.append(f"stops after {choice.idle_timeout} idle")
        why = "" if can else f'<div class="form-text text-muted">{_e(choice.reason or "")}</div>'
        rows.append(
            f'<div class="form-check mb-2" data-available="{choice.available}">'
            f'<input class="form-check-input" type="radio" name="{FIELD}" id="{ident}" '
            f'value="{_e(choice.slug)}"{" checked" if choice.slug == checked else ""}'
            f"{'' if can else ' disabled'}>"
            f'<label class="form-check-label" for="{ident}"><strong>'
            f"{_e(choice.display_name)}</strong> &mdash; {_e(choice.description)}"
            + (f" ({_e(', '.join(notes))})" if notes else "")
            + f"</label>{why}</div>"
        )
    head = f'<p class="text-muted">{_e(inventory)}</p>' if inventory else ""
    if problem:
        head += f'<p class="alert alert-warning">{_e(problem)}</p>'
    return (
        '<fieldset class="dra-jupyter-profiles"><legend>Devices</legend>'
        + head
        + "".join(rows)
        + "</fieldset>"
    )


def _e(text: str) -> str:
    return html.escape(text, quote=True)

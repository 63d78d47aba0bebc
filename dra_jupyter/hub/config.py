"""The admin's say over the spawn form's choices, as JupyterHub configuration::

    c.DRAProfiles.rules = [
        {"match": "h200-x8", "groups": ["ml-admins"]},           # only they may take 8 GPUs
        {"match": "h200-*", "lease": "8h", "idle_timeout": "1h"},
        {"match": "mig-*", "idle_timeout": "30m"},
        {"match": "h200-x1", "kernels_only": True},   # on Kubernetes: the GPU in kernel pods
        {"match": "h200-x1", "share": {"share": "mps", "threads": 25}},  # and a shared one
        {"match": "none", "default": True},
    ]
    c.DRAProfiles.allow = lambda user, groups, choice: ...    # and/or a test of your own

Each setting of a choice comes from the first rule that matches its slug (a shell pattern)
and has that setting (:class:`~dra_jupyter.hub.choices.Rule`). Both spawners of
:mod:`dra_jupyter.hub` read it; traitlets only, no JupyterHub import.
"""

from __future__ import annotations

from typing import Any

from traitlets import Callable, Dict, List
from traitlets.config import Configurable

from dra_jupyter.hub.choices import ChoicePolicy


class DRAProfiles(Configurable):
    """Who may choose which devices in the spawn form, and each choice's lease and idle
    timeout."""

    rules = List(
        Dict(),
        config=True,
        help="""Rules over the choices' slugs (h200-x2, mig-3g-71gb-x1, none; shell
        patterns: h200-*): each a dict of match (the pattern, default '*'), users and
        groups (who may choose the matching choices; a rule with neither does not restrict),
        lease ('8h': the devices' lease), idle_timeout ('30m'), default (true: the
        choice the form starts with), kernels_only (true: "GPU kernels only", for
        DRAKubeSpawner: the server pod gets no device, its kernels get the choice's, each in
        a pod of its own, stopped on idle) and share (a table of dra.request's sharing
        keywords, {"share": "mps", "threads": 25}: for DRAKubeSpawner, beside each
        one-device choice it matches, a shared choice whose servers all use one claim with
        that sharing, "Shared 1x NVIDIA H200 (MPS, 25%)", with how many share it now; the
        rule's other settings are the shared choice's). Each setting comes from the first
        matching rule that has it. Default: no rules (everyone may choose everything, no
        lease or timeout).""",
    )
    allow = Callable(
        None,
        allow_none=True,
        config=True,
        help="""A test of your own, allow(user, groups, choice) -> bool, applied after the
        rules: False leaves the choice out of the user's form (and refuses it when asked
        for by the REST API). choice is a dra_jupyter.hub.choices.Choice (slug, request,
        available, lease, ...).""",
    )

    def policy(self) -> ChoicePolicy:
        """The rules and the test as a :class:`ChoicePolicy` (rules that are not rules are
        refused, saying which and why)."""
        allow: Any = self.allow
        return ChoicePolicy.from_table(self.rules, allow)

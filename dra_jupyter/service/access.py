"""Who may do what under the policy in force: admins, whose claims a caller sees, the limits
of each user (kept until the policy is reloaded), and whose claims a caller may change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from dra_jupyter.errors import ForbiddenError
from dra_jupyter.service.peer import Peer, user_groups
from dra_jupyter.service.policy import Limits, Policy
from dra_jupyter.types import ClaimRecord, Owner, claim_prefix

MOST_KEPT = 4096  # users' limits kept (by user and groups) before they are worked out again


class Access:
    """The policy in force (:attr:`policy`) as the daemon asks it, per caller and claim."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._groups: dict[str, tuple[str, ...]] = {}
        self._limits: dict[tuple[str, tuple[str, ...]], Limits] = {}  # by user and groups

    def replace(self, policy: Policy) -> None:
        """Put ``policy`` in force (a reload): the limits and groups kept are forgotten."""
        self.policy = policy
        self._groups.clear()
        self._limits.clear()

    def admin(self, peer: Peer) -> bool:
        return self.policy.is_admin(peer.uid, peer.groups)

    def visible(self, peer: Peer, record: ClaimRecord) -> bool:
        return record.owner.user == peer.user or self.policy.visibility == "all" or self.admin(peer)

    def sees_usage_of_everyone(self, peer: Peer) -> bool:
        """Whether ``peer`` reads every user's usage (an admin), or only their own."""
        return self.admin(peer)

    def limits_of(self, user: str, groups: tuple[str, ...] | None = None) -> Limits:
        """The limits of ``user`` (its groups looked up once where not given)."""
        if groups is None:
            groups = self._groups.get(user)
            if groups is None:
                groups = self._groups[user] = user_groups(user)
        key = (user, groups)
        limits = self._limits.get(key)
        if limits is None:  # the same until the policy is reloaded
            if len(self._limits) >= MOST_KEPT:
                self._limits.clear()
            limits = self._limits[key] = self.policy.limits(user, groups)
        return limits

    def own_name(self, peer: Peer, name: str) -> str:
        """The claim ``name`` as ``peer`` means it. With ``visibility = "own"``, a user's
        names are their own (an admin's are as given): one that does not begin with the
        user's prefix (``bob-``) gets it (``train`` is ``bob-train``), so that no other
        user's name can be asked for, and none reads differently for being held by another
        user than for being free."""
        if self.policy.visibility != "own" or self.admin(peer):
            return name
        prefix = f"{claim_prefix(peer.user)}-"
        return name if name.startswith(prefix) else prefix + name

    def named(self, peer: Peer, name: str, held: Iterable[ClaimRecord]) -> ClaimRecord | None:
        """The claim of ``held`` that ``peer`` means by ``name`` (:meth:`own_name`; else one
        of the user's own named so before names were theirs, an imported one), if ``peer``
        may see it: another user's, where hidden, is as one that does not exist."""
        own = self.own_name(peer, name)
        by_name = {r.name: r for r in held}
        record = by_name.get(own)
        if record is None and own != name:
            plain = by_name.get(name)
            record = plain if plain is not None and plain.owner.user == peer.user else None
        return record if record is not None and self.visible(peer, record) else None

    def shown(self, peer: Peer, held: list[ClaimRecord]) -> list[ClaimRecord]:
        """``held`` as ``peer`` may see it: others' claims, where hidden, keep their devices
        (so that boards and explanations are right) but not their names or owners."""
        out = []
        for i, record in enumerate(held, 1):
            if self.visible(peer, record):
                out.append(record)
                continue
            name = f"hidden-{i}"
            meta = {"name": name, "namespace": record.namespace}
            out.append(
                replace(
                    record,
                    name=name,
                    owner=Owner(user="another user", host="", pid=0),
                    spec={**record.spec, "metadata": meta},
                )
            )
        return out

    def may_change(self, peer: Peer, record: ClaimRecord, what: str) -> None:
        """Nothing when ``peer`` owns ``record`` or is an admin; ForbiddenError otherwise."""
        if record.owner.user == peer.user or self.admin(peer):
            return
        whose = f"user {record.owner.user}" if self.visible(peer, record) else "another user"
        raise ForbiddenError(
            f"claim {record.name} belongs to {whose}; only its owner or an admin can {what} it"
        )

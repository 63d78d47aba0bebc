"""Why a claim of the namespace went when this server did not delete it: a deleted claim
leaves nothing in the cluster, so the namespace's watched claims view keeps the last state
of each claim it heard deleted (or being deleted), and dra-jupyter says why before it
deletes one (:data:`RELEASE_ANNOTATION`: the reason and who, set by every
:meth:`~dra_jupyter.kube.backend.KubernetesBackend.release`: a kernel's ``c.release()``,
the command line, another server, an admin's REST release).

A claim deleted without it was deleted in the cluster (``kubectl delete``, an admin's
script): reason ``deleted``, which the lab announces; one owned by another object (a pod's
claim from its template) went with its owner, as the garbage collector does, and is not
said (None, as where nothing is watched).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from dra_jupyter.accounting.book import admin_words
from dra_jupyter.kube.records import to_record
from dra_jupyter.model.objects import Wire
from dra_jupyter.types import Ended

RELEASE_ANNOTATION = "dra-jupyter/release"  # "<reason> <user>", set just before a deletion
DELETED = "deleted"  # the reason of a claim deleted in the cluster, not by dra-jupyter
DELETED_WORDS = "deleted in the cluster, outside dra-jupyter (kubectl, an admin or a script)"
KEPT = 1000  # deleted claims remembered
# how long a read of why a claim went waits for the view's handler (the view drops the
# claim just before it tells its handlers)
WAIT_S = 0.2


def release_note(reason: str, by: str) -> dict[str, str]:
    """The annotation dra-jupyter sets on a claim before it deletes it."""
    return {RELEASE_ANNOTATION: f"{reason} {by}"}


class Deletions:
    """The last state of the claims a view heard deleted, by name (a handler of the view)."""

    def __init__(self) -> None:
        self._gone: OrderedDict[str, tuple[Wire, float]] = OrderedDict()
        self._cond = threading.Condition()

    def hear(self, event: str, obj: Wire) -> None:
        meta = obj.get("metadata") or {}
        if event != "DELETED" and not meta.get("deletionTimestamp"):
            return
        name = str(meta.get("name"))
        with self._cond:
            if event != "DELETED" and name in self._gone:
                return  # being deleted: the first word is kept until it is gone
            self._gone.pop(name, None)
            self._gone[name] = (obj, time.time())
            while len(self._gone) > KEPT:
                self._gone.popitem(last=False)
            self._cond.notify_all()

    def ended(self, name: str, wait: float = WAIT_S) -> Ended | None:
        """Why the claim ``name`` went, as far as the cluster tells; None where unknown."""
        with self._cond:
            self._cond.wait_for(lambda: name in self._gone, wait)
            found = self._gone.get(name)
        return None if found is None else ended_of(*found)


def ended_of(obj: Wire, when: float) -> Ended | None:
    """The release of a claim deleted as ``obj`` last was (see the module)."""
    meta = obj.get("metadata") or {}
    record = to_record(obj)
    said = (meta.get("annotations") or {}).get(RELEASE_ANNOTATION)
    if said:
        reason, _, by = str(said).partition(" ")
        return Ended(record, reason, when, admin_words(reason, by))
    if meta.get("ownerReferences"):
        return None  # it went with its owner (a pod's claim from its template)
    return Ended(record, DELETED, when, DELETED_WORDS)

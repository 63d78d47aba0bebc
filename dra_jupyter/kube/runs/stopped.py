"""Why a run's pod stopped when the cluster does not say it: a device of the pod was taken
out (a ``NoExecute`` device taint, a DeviceTaintRule of an admin or a health checker) and
kube-controller-manager's device taint eviction deleted the pod.

The pod's condition (``DisruptionTarget``, ``DeletionByDeviceTaintManager``) names no
device, and the claims made from a run's template go with their pod; so the devices are
noted while the pod runs (each time the run's status is read: the claims are read for it
anyway), and when the pod is evicted, or gone before it ended, the taints on those devices
now say why (:func:`dra_jupyter.kube.evictions.taken_out_now`). A Job retries such a pod
(its ``podFailurePolicy`` ignores disruptions) and its status never mentions it: the run
object remembers it, so that its status and logs still say the first pod was taken out.

What a run remembers lives in its object: a run found again from another kernel knows only
what it saw itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dra_jupyter.kube.evictions import taken_out_now
from dra_jupyter.model.takenout import HeldDevice, evicted_for_device_taint
from dra_jupyter.types.runs import ENDED, RunProcess

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.model.objects import Wire

EVICTED = "kube-controller-manager evicted it for a NoExecute taint on its device"


def held_of(row: RunProcess) -> tuple[HeldDevice, ...]:
    """The devices of a row (``driver/pool/device``)."""
    held = []
    for device in row.devices:
        driver, _, rest = device.partition("/")
        pool, _, name = rest.rpartition("/")
        held.append(HeldDevice(driver, pool, name))
    return tuple(held)


class StoppedPods:
    """What one run object saw of its pods: their last rows while they held devices, and
    the pods stopped because a device was taken out, with the line that says it."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api
        self._lock = threading.Lock()  # logs(follow=True) reads the status from its loop
        self._seen: dict[str, RunProcess] = {}  # pod -> its last row that had devices
        self._judged: set[str] = set()  # pods whose end was looked into
        self._stopped: dict[str, str] = {}  # pod -> why, in one line

    def note(self, pods: Sequence[Wire], rows: Mapping[str, RunProcess]) -> None:
        """Read the pods now (``rows``: their rows by name): note the devices of those that
        hold some, and look into the end of those evicted or gone before they ended."""
        present = {p["metadata"]["name"]: p for p in pods}
        with self._lock:
            for name, row in rows.items():
                if row.devices and row.phase not in ENDED:
                    self._seen[name] = row
            ended = [
                n
                for n, p in present.items()
                if evicted_for_device_taint(p) and n not in self._judged
            ]
            ended += [
                n
                for n, r in self._seen.items()
                if n not in present and n not in self._judged and r.phase not in ENDED
            ]
            for name in ended:
                self._judged.add(name)
                last = self._seen.get(name)
                why = taken_out_now(self._api, held_of(last)) if last is not None else None
                if why is None and name in present:
                    why = EVICTED
                if why is not None:
                    self._stopped[name] = why

    def stopped_for(self) -> dict[str, str]:
        """Why each pod stopped, by name, for the pods stopped for a device taken out."""
        with self._lock:
            return dict(self._stopped)

    def gone(self, present: Sequence[str]) -> list[RunProcess]:
        """Rows of the pods stopped for a device taken out that are gone now (not in
        ``present``): failed, with the reason."""
        with self._lock:
            return [
                replace(self._seen[n], phase="Failed", reason=why)
                for n, why in self._stopped.items()
                if n not in present and n in self._seen
            ]

"""What a hub user is told while the server's devices are found: the claim's states (made
from the template and pending, allocated on a node with its devices, reserved by the pod),
the pod bound to a node, Kueue's reason and place while the pod waits in its line, and, when
kube-scheduler cannot place the pod, its reason and our explanation. JupyterHub progress
events (``{"progress", "message", "html_message"}``), each change once; and the
interleaving of these with KubeSpawner's own (pure: pod and claim are wire dicts the spawner
read).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

Event = dict[str, Any]
T = TypeVar("T")

# progress (out of 100) at each stage; KubeSpawner's own events approach 90
STAGES = {"requested": 10, "pending": 20, "allocated": 40, "bound": 50, "reserved": 55}


def _devices(allocation: Mapping[str, Any]) -> list[str]:
    results = (allocation.get("devices") or {}).get("results") or ()
    return [f"{r.get('pool')}/{r.get('device')}" for r in results]


def allocated_node(allocation: Mapping[str, Any]) -> str | None:
    """The node an allocation of node-local devices is for (``nodeSelector``), else None."""
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ()
    for term in terms:
        for field_ in term.get("matchFields") or ():
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return str(field_["values"][0])
    return None


def scheduler_condition(pod: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(reason, message)`` of a ``PodScheduled=False`` condition, else None."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("reason") or ""), str(condition.get("message") or "")
    return None


def event(progress: int | None, message: str, html_message: str) -> Event:
    out: Event = {"message": message, "html_message": html_message}
    if progress is not None:
        out["progress"] = progress
    return out


@dataclass
class DeviceProgress:
    """The events of one spawn's devices, from what the spawner sees each time it looks.

    ``request`` is the request as typed (``gpu=1 memory=80Gi``); ``template`` the
    ResourceClaimTemplate's name."""

    request: str
    template: str
    seen: set[str] = field(default_factory=set)  # stages announced
    reason: str = ""  # the scheduler's last reason shown
    unschedulable_since: float | None = None  # when the pod was first found unschedulable
    pending_since: float | None = None  # when the claim was first found unallocated
    explanation: str = ""  # our explain, once computed
    queue_word: str = ""  # Kueue's last word shown

    def requested(self) -> Event:
        self.seen.add("requested")
        text = f"Devices requested: {self.request} (ResourceClaimTemplate {self.template})"
        return event(
            STAGES["requested"],
            text,
            f"Devices requested: <code>{html.escape(self.request)}</code> "
            f"(ResourceClaimTemplate <code>{html.escape(self.template)}</code>)",
        )

    def update(
        self, pod: Mapping[str, Any] | None, claim: Mapping[str, Any] | None, now: float
    ) -> list[Event]:
        """The events for what changed since the last call."""
        out: list[Event] = []
        status = (claim or {}).get("status") or {}
        name = ((claim or {}).get("metadata") or {}).get("name", "")
        allocation = status.get("allocation") or {}
        if claim is not None and "pending" not in self.seen:
            self.seen.add("pending")
            out.append(
                event(
                    STAGES["pending"],
                    f"Claim {name} made from the template: pending, waiting for kube-scheduler",
                    f"Claim <code>{html.escape(name)}</code> made from the template: "
                    "<b>pending</b>, waiting for kube-scheduler",
                )
            )
        if claim is not None and not allocation and self.pending_since is None:
            self.pending_since = now
        if allocation and "allocated" not in self.seen:
            self.seen.add("allocated")
            node = allocated_node(allocation) or (pod or {}).get("spec", {}).get("nodeName")
            where = f" on node {node}" if node else ""
            devices = ", ".join(_devices(allocation)) or "(no devices listed)"
            out.append(
                event(
                    STAGES["allocated"],
                    f"Claim {name} allocated{where}: {devices}",
                    f"Claim <code>{html.escape(name)}</code> <b>allocated</b>"
                    + (f" on node <code>{html.escape(node)}</code>" if node else "")
                    + f": <code>{html.escape(devices)}</code>",
                )
            )
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if node and "bound" not in self.seen:
            self.seen.add("bound")
            out.append(
                event(
                    STAGES["bound"],
                    f"Pod bound to node {node}",
                    f"Pod <b>bound</b> to node <code>{html.escape(str(node))}</code>",
                )
            )
        if status.get("reservedFor") and "reserved" not in self.seen:
            self.seen.add("reserved")
            out.append(
                event(
                    STAGES["reserved"],
                    f"Claim {name} reserved for the pod",
                    f"Claim <code>{html.escape(name)}</code> <b>reserved</b> for the pod",
                )
            )
        condition = None if node else scheduler_condition(pod)
        if condition is not None and condition[0] == "Unschedulable":
            if self.unschedulable_since is None:
                self.unschedulable_since = now
            if condition[1] and condition[1] != self.reason:
                self.reason = condition[1]
                out.append(
                    event(
                        None,
                        f"kube-scheduler cannot place the server: {self.reason}",
                        '<span class="text-danger">kube-scheduler cannot place the server: '
                        f"{html.escape(self.reason)}</span>",
                    )
                )
        elif node:
            self.unschedulable_since = None
        return out

    def queued(self, word: str) -> list[Event]:
        """An event when Kueue's word on the waiting pod changed (:func:`.kueue.word`:
        ``waiting in Kueue's queue gpus, 2 of 3: couldn't assign flavors …``); none for
        "" (admitted, or not read)."""
        if not word or word == self.queue_word:
            return []
        self.queue_word = word
        text = f"The server is {word}"
        return [event(None, text, f'<span class="text-warning">{html.escape(text)}</span>')]

    def wants_explanation(self, now: float, after: float) -> bool:
        """Whether to explain now: the pod is unschedulable, or its claim has been
        pending for ``after`` seconds without the pod being bound; once a spawn."""
        if self.explanation or "bound" in self.seen:
            return False
        if self.unschedulable_since is not None:
            return True
        return self.pending_since is not None and now - self.pending_since >= after

    def explained(self, text: str) -> Event:
        self.explanation = text
        lines = text.splitlines() or ["(no explanation)"]
        return event(
            None,
            f"Why: {self.request}: " + "; ".join(lines),
            f"Why <code>{html.escape(self.request)}</code> is not met: "
            '<pre class="dra-explain">' + html.escape("\n".join(lines)) + "</pre>",
        )

    def failure(self) -> tuple[str, str]:
        """The spawn's failure, as text and HTML: the scheduler's reason and why."""
        why = "; ".join(self.explanation.splitlines())
        text = (
            f"no devices for {self.request}: kube-scheduler cannot place the server "
            f"({self.reason or 'unschedulable'}); {why}; choose another profile or try "
            "again once devices are released"
        )
        markup = (
            f"No devices for <code>{html.escape(self.request)}</code>: kube-scheduler cannot "
            f"place the server ({html.escape(self.reason or 'unschedulable')})."
            f'<pre class="dra-explain">{html.escape(self.explanation)}</pre>'
            "Choose another profile, or try again once devices are released."
        )
        return text, markup


def never_back(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``events`` with a progress that never goes down (two sources share one bar)."""

    async def clamped() -> AsyncIterator[Event]:
        most = 0
        async for item in events:
            if "progress" in item:
                most = max(most, int(item["progress"]))
                yield {**item, "progress": most}
            else:
                yield item

    return clamped()


async def interleave(*sources: AsyncIterator[T]) -> AsyncIterator[T]:
    """The items of ``sources`` as each comes; ends when every source has ended. Closing
    it closes them."""
    pending: dict[asyncio.Future[T], AsyncIterator[T]] = {
        asyncio.ensure_future(anext(s)): s for s in sources
    }
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: list(pending).index(t)):
                source = pending.pop(task)
                try:
                    item = task.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(source))] = source
                yield item
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for source in sources:
            close = getattr(source, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

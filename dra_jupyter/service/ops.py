"""The ops the daemon serves, one method each, and :data:`HANDLERS`, the table that
dispatches them: checked at import to serve exactly the protocol's ops
(:data:`~dra_jupyter.service.protocol.OPS`), in its order.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from dra_jupyter.accounting.book import releaser
from dra_jupyter.errors import (
    ForbiddenError,
    InvalidInputError,
    KeepRefusedError,
    LimitError,
    shown,
)
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import Ledger
from dra_jupyter.local.shapes import shape_summary
from dra_jupyter.local.sweeps import reclaim_reason
from dra_jupyter.metrics import MetricsSource, Sample, source_for
from dra_jupyter.service import protocol
from dra_jupyter.service.access import Access
from dra_jupyter.service.args import (
    claim_arg,
    duration_text,
    kernel_id_arg,
    labelled,
    name_arg,
    probe,
    process_owner,
    seconds_arg,
)
from dra_jupyter.service.connections import Connection
from dra_jupyter.service.gpus import ANOTHER_USER
from dra_jupyter.service.line import Line
from dra_jupyter.service.peer import HOST
from dra_jupyter.service.work import INLINE_STEPS, Bounded, costly
from dra_jupyter.types import ClaimRecord, Owner

# The reasons of the releases the service or an admin makes: an admin's, a lease's end, a
# dead holder's, a failed device's, fair share's and a limit's. A user may not give one for
# his own release: the usage book would then read as if the service or an admin had.
SERVICE_REASONS: Final = frozenset(
    {"admin", "expired", "reclaimed", "device-failed", "fair-share", "limit"}
)

if TYPE_CHECKING:
    from dra_jupyter.service.gpus import GpuSampler
    from dra_jupyter.service.pressure import Pressure

log = logging.getLogger("dra_jupyter.service")

# What an op returns when its answer comes later (a request waiting in line).
WAITING: Final = object()

Args = dict[str, Any]


class Ops:
    """The daemon's ops over its ``ledger``, ``local`` backend and ``line``, under the
    rules of ``access``; ``watch`` is given each new holder of claims."""

    def __init__(
        self,
        access: Access,
        ledger: Ledger,
        local: LocalBackend,
        devices: Inventory,
        line: Line,
        watch: Callable[[Owner], None],
    ) -> None:
        self.access = access
        self.ledger = ledger
        self.local = local
        self.devices = devices
        self.line = line
        self._watch = watch
        self._metrics: MetricsSource | None = None  # made on the first metrics op
        self._samples: list[Sample] = []
        self._sampled = -math.inf  # time.monotonic() of that read
        self.metrics_reads = 0
        self.gpus: GpuSampler | None = None  # the daemon's GPU sampler (its source, processes)
        self.pressure: Pressure | None = None  # reclaim under pressure: its notices, Keeps

    def close(self) -> None:
        """Let go of the metrics source (NVML), if one was made."""
        if self._metrics is not None:
            with contextlib.suppress(Exception):  # NVML's shutdown: nothing to do about it
                self._metrics.close()

    def _find(self, conn: Connection, args: Args) -> ClaimRecord | None:
        """The live claim ``args`` names, as the caller means it (:meth:`Access.named`)."""
        return self.access.named(conn.peer, name_arg(args), self.ledger.read_claims())

    def op_hello(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """Who the daemon says the caller is, and the policy that applies to them."""
        peer = conn.peer
        return {
            "version": protocol.VERSION,
            "user": peer.user,
            "uid": peer.uid,
            "pid": peer.pid,
            "groups": list(peer.groups),
            "admin": self.access.admin(peer),
            "visibility": self.access.policy.visibility,
            "limits": self.access.limits_of(peer.user, peer.groups).to_dict(),
        }

    def op_inventory(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """The machine's devices, with the ledger's taints as DeviceTaintRules (a GPU the
        health watcher took out, an admin's taint)."""
        return protocol.inventory_to_wire(self.local.inventory())

    def op_list(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """The caller's live claims (``all_users``: every one it may see)."""
        everyone = args.get("all_users") is True
        held = self.local.claims(all_users=True)  # reclaims first
        shown_ = [
            r
            for r in held
            if r.owner.user == conn.peer.user or (everyone and self.access.visible(conn.peer, r))
        ]
        return [protocol.record_to_wire(r) for r in shown_]

    def op_holders(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """Every claim that holds devices (others' hidden unless visible)."""
        held = self.access.shown(conn.peer, self.local.claims(all_users=True))
        return [protocol.record_to_wire(r) for r in held]

    def op_waiting(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """The line in its order (fair share, then first come first): who waits (another
        user's name hidden unless visible, in the owner and in why), for what, since when,
        at which position and why there."""
        peer = conn.peer
        everyone = self.access.policy.visibility == "all" or self.access.admin(peer)
        hidden = {w.owner.user for w in self.line.waits if w.owner.user != peer.user}
        answer = []
        ago = time.time() - time.monotonic()  # a wait's start is on the monotonic clock
        for w, place in self.line.places():
            why = place.why
            if not everyone:
                for user in hidden:
                    why = why.replace(f"behind {user},", "behind another user,")
            answer.append(
                {
                    "owner": (
                        w.owner
                        if w.owner.user == peer.user or everyone
                        else Owner(user="another user", host="", pid=0)
                    ).to_dict(),
                    "what": shape_summary(w.shape),
                    "since": w.start + ago,
                    "position": place.position,
                    "why": why,
                }
            )
        return answer

    def op_notices(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """The warnings of reclaim under pressure in force on the caller's claims (an
        admin's: all): who waits for what, the deadline, the Keeps left, in words."""
        if self.pressure is None:
            return []
        return self.pressure.shown(conn.peer, time.time())

    def op_record(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """One live claim the caller may see, or how its own (or, an admin's, any) released
        one ended."""
        record = self._find(conn, args)
        if record is not None:
            return {
                "record": protocol.record_to_wire(record),
                "released_at": None,
                "released": None,
            }
        name = name_arg(args)
        gone = self.ledger.released(self.access.own_name(conn.peer, name))
        if gone is None:  # one of the caller's named so before names were theirs
            gone = self.ledger.released(name)
        if gone is None or not (gone.owner.user == conn.peer.user or self.access.admin(conn.peer)):
            return {"record": None, "released_at": None, "released": None}
        released = None
        if gone.record is not None:  # a release of a version-1 ledger kept only its time
            released = {
                "record": protocol.record_to_wire(gone.record),
                "reason": gone.reason,
                "time": gone.time,
                "message": gone.message,
            }
        return {"record": None, "released_at": gone.time, "released": released}

    def op_keep(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """Activity on a claim (its idle countdown starts again); False if it is gone (or
        another user's, hidden). A claim warned under pressure (someone waits for it) is
        kept ``keeps_under_pressure`` times, each postponing its release by at most
        ``reclaim_grace``; the next Keep is refused (KeepRefusedError, one line)."""
        record = self._find(conn, args)
        if record is None:
            return False
        self.access.may_change(conn.peer, record, "keep")
        now = time.time()
        kept = self.pressure.keep(record.name, now) if self.pressure is not None else None
        if kept is not None:
            if not kept.allowed:
                raise KeepRefusedError(kept.message)
            return True  # postponed, not touched: the holder stays idle for the next warning
        return self.local.touch(record.name, now)

    def op_activity(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """A Jupyter server says the claims of one of its kernels (``kernel_id``: the
        caller's user's claims of it), or one claim (``name``: authorized as ``keep``), were
        active now, and whether a cell runs (``busy``). Their idle countdown starts again, and
        reclaim under pressure takes a busy one for busy until the report that it ended (or
        :data:`~dra_jupyter.service.pressure.BUSY_HOLD` without a new one). Never a Keep: it
        uses none of those allowed under pressure, and a warned claim whose kernel works again
        is no longer idle (its warning is withdrawn). Answers how many claims it recorded."""
        busy = args.get("busy", False)
        if not isinstance(busy, bool):
            raise InvalidInputError(f"activity: busy {shown(busy)} is not true or false")
        kernel_id = kernel_id_arg(args)
        if (kernel_id is None) == ("name" not in args):
            raise InvalidInputError("activity: name one claim (name) or one kernel (kernel_id)")
        if kernel_id is None:
            record = self._find(conn, args)
            if record is None:
                return 0
            self.access.may_change(conn.peer, record, "record activity on")
            records = [record]
        else:
            records = [
                r
                for r in self.ledger.read_claims()
                if r.owner.kernel_id == kernel_id and r.owner.user == conn.peer.user
            ]
        now = time.time()
        recorded = [r.name for r in records if self.local.touch(r.name, now)]
        if self.pressure is not None:
            self.pressure.active(recorded, now, busy=busy)
        return len(recorded)

    def op_release(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """Give a claim back (for ``reason``); False if it is gone (or another user's,
        hidden). An admin's release of another user's claim says who: reason ``admin``
        (where ``user`` was asked), and the words ``released by admin carol``."""
        reason = args.get("reason", "user")
        if (
            not isinstance(reason, str)
            or not 0 < len(reason) <= protocol.MAX_REASON
            or not set(reason) <= protocol.REASON_CHARACTERS
        ):
            raise InvalidInputError(
                f"release: reason {shown(reason)}; use at most {protocol.MAX_REASON} "
                "lower-case letters and '-'"
            )
        peer = conn.peer
        if reason in SERVICE_REASONS and not self.access.admin(peer):
            raise ForbiddenError(
                f"release: reason '{reason}' is what the service or an admin says of a "
                "release; give your own reason, or none ('user')"
            )
        message = None
        with self.ledger.transaction() as tx:
            record = self.access.named(peer, name_arg(args), Ledger.claims(tx))
            if record is None:
                return False
            name = record.name
            self.access.may_change(peer, record, "release")
            if record.owner.user != peer.user:  # an admin's release of another user's claim
                message = f"released by admin {peer.user}"
                if reason == "user":
                    reason = "admin"
                else:
                    message += f" ({reason})"
            by = peer.user if message else releaser(reason, peer.user)  # an admin's: theirs
            Ledger.delete(tx, record, reason, time.time(), message, by=by)
        log.info(
            "claim %s of %s released by %s (%s)", name, record.owner.user, conn.peer.user, reason
        )
        self.line.serve()
        return True

    def op_explain(self, conn: Connection, request_id: protocol.RequestId, args: Args) -> Any:
        """Why a claim could or could not be allocated now (a costly one: worked out off
        the loop, answered later)."""
        claim = claim_arg(args)
        held = self.access.shown(conn.peer, self.local.claims(all_users=True))
        if not costly(claim, len(self.line.kinds)):
            bounded = self.local.allocator(held, max_steps=INLINE_STEPS, kind=Bounded)
            assert isinstance(bounded, Bounded)
            explained = bounded.explain([probe(claim)])
            if not bounded.exhausted:
                return explained.to_dict()
        self.line.explain_off(conn, request_id, claim, held)  # off the loop
        return WAITING

    def op_metrics(self, conn: Connection, _id: protocol.RequestId, _args: Args) -> Any:
        """The devices' metrics, read at most once per ``metrics_max_age`` (the policy's) for
        every client (the machine's NVML is read by the daemon alone, not by each server),
        and the processes on them as the GPU sampler last saw them (what the caller may
        see; None without a GPU signal)."""
        if self._metrics is None:
            self._metrics = self.gpus.source() if self.gpus else source_for(self.devices)
        if time.monotonic() - self._sampled >= self.access.policy.metrics_max_age:
            held = {d for r in self.ledger.read_claims() for d in r.device_keys}
            self._samples = self._metrics.sample(held, time.time())
            self._sampled = time.monotonic()
            self.metrics_reads += 1
        return {
            "source": self._metrics.name,
            "simulated": self._metrics.simulated,
            "problem": self._metrics.problem,
            "time": max((s.time for s in self._samples), default=None),
            "reads": self.metrics_reads,
            "samples": [s.to_dict() for s in self._samples],
            "processes": self.gpus.processes(conn.peer) if self.gpus else None,
        }

    def op_usage(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """The usage book's intervals of the last ``last`` seconds (None: all): an admin's
        of every user, anyone else's own."""
        last = seconds_arg(args, "last", None)
        everyone = self.access.sees_usage_of_everyone(conn.peer)
        book = self.local.usage_book(
            math.inf if last is None else last, user=None if everyone else conn.peer.user
        )
        return book.to_dict()

    def op_health(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """The record of the GPUs the health watcher took out (``device``: one GPU's), for
        anyone: a device's failures are the machine's; the claims hit are named as the
        caller may see them (another user's, where hidden: "another user")."""
        device = args.get("device")
        if device is not None and (not isinstance(device, str) or not 0 < len(device) <= 253):
            raise InvalidInputError(f"health: device {shown(device)} is not a device name")
        peer = conn.peer
        everyone = self.access.admin(peer) or self.access.policy.visibility == "all"
        out = []
        for event in self.local.health_events(device=device):
            data = event.to_dict()
            data["claims"] = [
                c if everyone or c["user"] == peer.user else {"name": "", "user": ANOTHER_USER}
                for c in data["claims"]
            ]
            out.append(data)
        return out

    def op_taints(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """The devices' taints (``history``: removed ones too), for anyone: an admin's and
        the health watcher's."""
        history = args.get("history") is True
        return [t.to_dict() for t in self.local.taints(history=history)]

    def op_taint(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """An admin taints a device (``device``, ``effect``, ``reason``, ``key``), recorded
        as theirs; anyone else is refused."""
        device, effect, reason, key = (
            _text_arg(args, k, "taint") for k in ("device", "effect", "reason", "key")
        )
        self._admin_only(conn, "taint")
        made = self.local.taint(device, effect, reason, key, by=conn.peer.user)
        log.info("%s tainted by %s: %s %s (%s)", made.device, conn.peer.user, key, effect, reason)
        return made.to_dict()

    def op_untaint(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """An admin takes a taint off (``device``, ``key``): the device is given again."""
        device, key = (_text_arg(args, k, "untaint") for k in ("device", "key"))
        self._admin_only(conn, "untaint")
        gone = self.local.untaint(device, key, by=conn.peer.user)
        log.info("%s untainted by %s: %s", gone.device, conn.peer.user, key)
        self.line.serve()  # what waited for it may have it now
        return gone.to_dict()

    def _admin_only(self, conn: Connection, command: str) -> None:
        if not self.access.admin(conn.peer):
            raise ForbiddenError(
                f"{command}: only the service's admins (root, admin_groups) take devices out "
                "of use or put them back; ask one"
            )

    def op_adopt(self, conn: Connection, _id: protocol.RequestId, args: Args) -> Any:
        """The caller's process holds the caller's claims of ``kernel_id`` from now on (a
        Jupyter server, before it restarts that kernel)."""
        kernel_id = kernel_id_arg(args)
        if kernel_id is None:
            raise InvalidInputError("adopt: kernel_id is missing")
        holder = process_owner(conn.peer, kernel_id, HOST)
        kept, released = [], []
        now = time.time()
        with self.ledger.transaction() as tx:
            for record in Ledger.claims(tx):
                if record.owner.kernel_id != kernel_id or record.owner.user != conn.peer.user:
                    continue
                reason = reclaim_reason(record, now)
                if reason is not None:
                    Ledger.delete(tx, record, reason, now)
                    released.append({"record": protocol.record_to_wire(record), "reason": reason})
                    continue
                Ledger.set_owner(tx, record.name, holder)
                kept.append(protocol.record_to_wire(replace(record, owner=holder)))
        if kept:
            self._watch(holder)
        if released:
            self.line.serve()
        return {"kept": kept, "released": released}

    def op_request(self, conn: Connection, request_id: protocol.RequestId, args: Args) -> Any:
        """Allocate a claim now, or wait in line for it (:data:`WAITING`: answered later),
        within the caller's limits of waiting and of leases."""
        peer = conn.peer
        claim = claim_arg(args)
        limits = self.access.limits_of(peer.user, peer.groups)
        timeout = seconds_arg(args, "timeout", 0.0)
        lease = seconds_arg(args, "lease", None)
        wait_max = limits.wait_max
        if wait_max.value:
            if timeout is None:
                timeout = wait_max.value
            elif timeout > wait_max.value:
                raise LimitError(
                    f"user {peer.user}: limit {duration_text(wait_max.value)} of waiting in line "
                    f"({wait_max.source}); pass a shorter timeout"
                )
        lease_max = limits.lease_max
        if lease is None:  # none named: the default, else the longest allowed, else none
            lease = limits.lease_default.value or lease_max.value or None
        if lease_max.value and lease is not None and lease > lease_max.value:
            raise LimitError(
                f"user {peer.user}: limit {duration_text(lease_max.value)} lease "
                f"({lease_max.source}); a lease of {duration_text(lease)} asked; pass a "
                "shorter lease"
            )
        detached = args.get("detached") is True
        kernel_id = kernel_id_arg(args)
        if detached:
            owner = Owner(user=peer.user, host=HOST, pid=0, kernel_id=kernel_id)
        else:
            owner = process_owner(peer, kernel_id, HOST)
        claim = labelled(claim, peer.user)
        name = claim["metadata"].get("name")
        if name:
            claim = {
                **claim,
                "metadata": {**claim["metadata"], "name": self.access.own_name(peer, name)},
            }
        allocated = self.line.join(conn, request_id, claim, owner, lease, timeout)
        return WAITING if allocated is None else allocated


Handler = Callable[[Ops, Connection, protocol.RequestId, Args], Any]


def checked(table: dict[str, Handler]) -> dict[str, Handler]:
    """``table`` when it serves exactly the protocol's ops, in the protocol's order; a
    RuntimeError naming what differs otherwise (an op added to one and not the other)."""
    if tuple(table) != protocol.OPS:
        missing = [op for op in protocol.OPS if op not in table]
        unknown = [op for op in table if op not in protocol.OPS]
        raise RuntimeError(
            "the daemon's ops are not the protocol's: "
            f"not served {missing}, not in protocol.OPS {unknown}, or in another order"
        )
    return table


def _text_arg(args: Args, key: str, command: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or len(value) > 2048:
        raise InvalidInputError(f"{command}: {key} {shown(value)} is not text")
    return value


# Every op of the protocol, and what serves it (as jupyter_server's default_handlers).
HANDLERS: Final = checked(
    {
        "hello": Ops.op_hello,
        "inventory": Ops.op_inventory,
        "request": Ops.op_request,
        "release": Ops.op_release,
        "keep": Ops.op_keep,
        "activity": Ops.op_activity,
        "list": Ops.op_list,
        "holders": Ops.op_holders,
        "waiting": Ops.op_waiting,
        "record": Ops.op_record,
        "explain": Ops.op_explain,
        "adopt": Ops.op_adopt,
        "metrics": Ops.op_metrics,
        "usage": Ops.op_usage,
        "notices": Ops.op_notices,
        "health": Ops.op_health,
        "taints": Ops.op_taints,
        "taint": Ops.op_taint,
        "untaint": Ops.op_untaint,
    }
)

"""What a backend offers (:class:`Backend`, :class:`Capabilities` and its optional facets:
accounting, health, taints, reclaim), and what only a cluster backend does
(:class:`ClusterOps`: ``reserve``). Its runs are a facet of their own, every backend's
(:class:`dra_jupyter.types.runs.Runs`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dra_jupyter.accounting.book import Book
from dra_jupyter.model.objects import Wire

if TYPE_CHECKING:  # annotations only: importing the API loads no metrics module
    from dra_jupyter.accounting.prometheus import ViewCounts
    from dra_jupyter.allocator import Allocator
    from dra_jupyter.inventory.base import Inventory
    from dra_jupyter.metrics.activity import GpuReport
    from dra_jupyter.metrics.base import MetricsSource


from dra_jupyter.types.owner import Owner
from dra_jupyter.types.records import ClaimRecord, Ended, ReclaimNotice, Waiter, Waiting

# --- what only a cluster does --------------------------------------------------------------


class ClusterOps(Protocol):
    """What a cluster backend does beyond the :class:`Backend` every kind has
    (``backend.cluster``): allocate a made claim now. Its runs are a facet every backend
    has (:class:`~dra_jupyter.types.runs.Runs`, :func:`dra_jupyter.backends.open_runs`)."""

    def reserve(self, record: ClaimRecord) -> ClaimRecord:
        """Allocate a made claim now with our allocator (``dra.request(reserve=True)``); the
        claim is deleted if that fails."""

    def find(self, name: str) -> dict[str, Any] | None:
        """The ResourceClaim ``name`` of the namespace as it is now, any claim (dra-jupyter's
        or not: one a teammate or an admin made to share), None where there is none."""


# --- backends ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Capabilities:
    """What a backend does, so that callers ask this instead of which backend it is."""

    where: str  # in messages: "this machine", "the Kubernetes backend"
    devices_here: bool  # the devices are this machine's: env and metrics apply here
    waits: bool  # a request may wait in line for busy devices (timeout=)
    leases: bool  # claims can end by themselves after a lease
    allocates_later: bool  # claims are created pending; a scheduler allocates them later
    claim_states: bool  # claims have states beyond allocated (pending, reserved)
    # sees the claims of every user of its devices (the service, a cluster); False: only
    # those of its ledger's (each user's own embedded ledger)
    every_user: bool = True
    # a daemon that always runs releases the claims on a device tainted NoExecute once its
    # grace is over (the service); False: a Jupyter server or ``health --watch`` does, while
    # one runs on the machine (else at its start)
    releases_taken_out: bool = False


OnWait = Callable[[Waiting], None]
# Why the server releases a claim (``idle``, ``kernel-shutdown``, ...), or None to keep it.
Select = Callable[[ClaimRecord], str | None]


@dataclass(frozen=True)
class Sweep:
    """What :meth:`Backend.sweep` (or :meth:`Backend.adopt`) left and what it released."""

    kept: list[ClaimRecord] = field(default_factory=list)
    released: list[tuple[ClaimRecord, str]] = field(default_factory=list)  # with the reason
    # Of those released by another process (the service's daemon), its account by claim
    # name: when, and the words it said (its idle limit, say), for whoever reads them later
    ended: dict[str, Ended] = field(default_factory=dict)
    # True when ``kept`` is every live claim the backend knows (the local ledger's), so a
    # caller needs no other listing; False when it is the server's claims only (Kubernetes)
    complete: bool = False


@runtime_checkable
class Accounting(Protocol):
    """What a backend that keeps the usage book does (the local ledger, the service; not
    Kubernetes): ``accounting_of(backend)`` is the backend where it does, else None."""

    def usage_book(self, last: float) -> Book:
        """The intervals of the book that overlap the last ``last`` seconds (``inf``: all)
        which this user may see (the service: an admin every user's, a user their own;
        the local ledger: every row), read now (by the backend's clock)."""


def accounting_of(backend: object) -> Accounting | None:
    """``backend``'s usage book, where it keeps one."""
    return backend if isinstance(backend, Accounting) else None


@runtime_checkable
class ActivityBook(Protocol):
    """A backend whose usage book the caller's own GPU sampler fills (the local ledger: a
    Jupyter server samples its machine; not the service, whose daemon samples itself)."""

    def add_activities(self, reports: Sequence[GpuReport]) -> object:
        """One sampling tick's reports, ``(claim, active_s, idle_s, unknown_s, energy_j)``
        each, added to the claims' intervals at once."""


def activity_book_of(backend: object) -> ActivityBook | None:
    return backend if isinstance(backend, ActivityBook) else None


@dataclass(frozen=True)
class DeviceTaint:
    """A taint an admin put on one device by hand (``dra-jupyter taint``): the device
    (``driver/pool/device``), its key, effect and reason, who put it and when (``added``),
    and, once removed (the ledger's history), who removed it and when. ``rule``: the
    DeviceTaintRule that carries it. ``uid``: the tainting process's, where the backend
    knows it (the ledger; a cluster knows its user's name only)."""

    device: str
    key: str
    effect: str
    reason: str
    user: str
    added: float | None  # None: a cluster's rule not stamped yet
    uid: int | None = None
    removed: float | None = None
    removed_by: str | None = None
    removed_uid: int | None = None
    rule: str = ""
    value: str = ""  # the taint's value where it has its own (the health watcher's: "79")

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True)
class HealthEvent:
    """A GPU that the health watcher took out of service (``dra-jupyter health``): the GPU
    (``driver/pool/device``), when, what NVML said (``source``: ``xid``, ``ecc``,
    ``remapped-rows`` or ``lost``; ``what``: the XID, the count, ...), the taint it put on
    the GPU and its MIG partitions (``key``, ``value``, ``effect``), its meaning in words,
    and the claims that held the GPU or a partition of it then (``(name, user)``)."""

    device: str
    time: float
    source: str
    what: str
    key: str
    value: str
    effect: str
    meaning: str
    claims: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["claims"] = [{"name": n, "user": u} for n, u in self.claims]
        return out


@runtime_checkable
class HealthRecord(Protocol):
    """A backend that keeps the record of its devices' health (the local ledger):
    ``health_record_of(backend)`` is it, else None."""

    def health_events(self, *, device: str | None = None) -> list[HealthEvent]:
        """The health events, oldest first (``device``'s only, as devices name it)."""


def health_record_of(backend: object) -> HealthRecord | None:
    return backend if isinstance(backend, HealthRecord) else None


class Watching(Protocol):
    """A running health watcher (:mod:`dra_jupyter.local.watcher`)."""

    def enforce(self) -> list[tuple[ClaimRecord, str]]:
        """Release the holders of GPUs taken out ``NoExecute`` whose grace has passed."""

    def stop(self) -> None:
        """Stop watching (and let another watcher take over)."""


@runtime_checkable
class Tainting(Protocol):
    """A backend on which admins taint devices by hand (the local ledger, a cluster's
    DeviceTaintRules): ``tainting_of(backend)`` is the backend where it does, else None.
    Errors: InvalidInputError for a bad effect, key, reason or device; NotFoundError for
    an ``untaint`` of a taint that is not there; ForbiddenError where the caller may not."""

    def taint(self, device: str, effect: str, reason: str, key: str) -> DeviceTaint:
        """Taint ``device`` (as ``dra-jupyter devices`` names it): no new claim gets it."""

    def untaint(self, device: str, key: str) -> DeviceTaint:
        """Take the taint ``key`` off ``device``."""

    def taints(self, *, history: bool = False) -> list[DeviceTaint]:
        """The taints put by hand (``history``: and those taken off, where kept)."""


def tainting_of(backend: object) -> Tainting | None:
    return backend if isinstance(backend, Tainting) else None


@runtime_checkable
class TakingOut(Protocol):
    """A backend of this machine that releases the claims on devices tainted ``NoExecute``
    once their grace is over (the local ledger; :mod:`dra_jupyter.outofservice`):
    ``taking_out_of(backend)`` is it, else None (the service's daemon does it itself, a
    cluster evicts pods instead)."""

    def release_taken_out(
        self, grace: float, now: float | None = None
    ) -> list[tuple[ClaimRecord, str]]:
        """Release (reason ``device-failed``, with words naming the device and the taint)
        the claims on a device tainted ``NoExecute`` at least ``grace`` seconds ago (none
        for a GPU lost); what was released. Errors: the ledger's, as a release's."""


def taking_out_of(backend: object) -> TakingOut | None:
    return backend if isinstance(backend, TakingOut) else None


@runtime_checkable
class Reclaiming(Protocol):
    """A backend that reclaims idle claims for users who wait (the shared-machine
    service's reclaim under pressure): ``reclaiming_of(backend)`` is the backend where it
    does, else None. A Jupyter server tells it of its kernels' cells, and reads its
    warnings for their users (:mod:`dra_jupyter.server.reclaims`). Errors: UnavailableError
    where the service cannot be reached; ForbiddenError for another user's claim."""

    def activity(
        self, *, kernel_id: str | None = None, name: str | None = None, busy: bool = False
    ) -> int:
        """This user's claims of ``kernel_id`` (or the claim ``name``) were active now, and
        a cell runs (``busy``); not a Keep. How many claims it recorded."""

    def notices(self) -> list[ReclaimNotice]:
        """The warnings of reclaim under pressure in force on this user's claims."""


def reclaiming_of(backend: object) -> Reclaiming | None:
    return backend if isinstance(backend, Reclaiming) else None


@runtime_checkable
class WatchedViews(Protocol):
    """A backend that keeps views of the cluster by watching (Kubernetes, where
    ``settings.watch`` asks): ``watched_views_of(backend)`` is it, else None (the local
    ledger and the service watch nothing)."""

    def watch_stats(self) -> list[ViewCounts]:
        """The counters of each view running now (lists, relists, watches, restarts,
        errors, objects held), as plain data; starts none."""

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        """Call ``listener(topic)`` on each change a view hears (``claims``: the
        namespace's claims; ``runs``: its pods and Jobs; ``devices``: the cluster's slices,
        classes, taint rules and claims, once a read has started those views), on the
        views' threads; what removes it. None: this backend does not watch (no changes to
        tell)."""


def watched_views_of(backend: object) -> WatchedViews | None:
    return backend if isinstance(backend, WatchedViews) else None


class Backend(Protocol):
    """Where claims are made, kept and given back, for one :class:`Owner`.

    Implemented by :class:`~dra_jupyter.local.backend.LocalBackend` (this machine, the
    SQLite ledger, the embedded allocator) and
    :class:`~dra_jupyter.kube.backend.KubernetesBackend` (ResourceClaims in a namespace,
    allocated by kube-scheduler when a pod uses them). Errors are those of
    :mod:`dra_jupyter.errors`: :class:`~dra_jupyter.errors.NeverPossibleError` for what
    could never be met, :class:`~dra_jupyter.errors.BusyError` for what cannot be met now,
    :class:`~dra_jupyter.errors.ForbiddenError` for another user's claim."""

    owner: Owner
    namespace: str

    @property
    def capabilities(self) -> Capabilities:
        """What this backend does."""

    @property
    def cluster(self) -> ClusterOps | None:
        """What only a cluster does (claims allocated now by our allocator); None where the
        devices are one machine's (local, service)."""

    def inventory(self, *, refresh: bool = False) -> Inventory:
        """The devices (read again from their source with ``refresh``)."""

    def check_possible(self, claim: Wire, *, explain: bool = True) -> None:
        """Raise NeverPossibleError when the claim could never be met on these devices (with
        the allocator's explanation, unless not ``explain``: then only that it never can)."""

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: OnWait | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        """Make the claim (the local backend allocates it at once, or waits in line)."""

    def release(
        self, name: str, reason: str = "user", *, any_owner: bool = False, by: str | None = None
    ) -> bool:
        """Give the claim back; False when it was gone already. Only the owner's user may,
        unless ``any_owner`` (the server's own decisions: idle, kernel gone). ``by``: the
        user who releases it where not this backend's (a server's REST caller; with reason
        ``admin``, the admin, whose name the release's words and the usage book keep)."""

    def record(self, name: str) -> ClaimRecord | None:
        """The live claim of that name, read now; None when it is gone."""

    def claims(self, *, all_users: bool = False) -> list[ClaimRecord]:
        """This user's live claims (everyone's with ``all_users``)."""

    def claims_with_state(self, *, all_users: bool = False) -> list[tuple[ClaimRecord, str]]:
        """:meth:`claims`, each with its :meth:`state`."""

    def holders(self) -> list[ClaimRecord]:
        """Every claim that holds devices, as far as this user may see."""

    def allocator(self, held: list[ClaimRecord]) -> Allocator:
        """The embedded allocator over these devices, with ``held`` taken (for explain)."""

    def state(self, name: str) -> str:
        """``allocated``, ``pending``, ``reserved``, ``released``, or ``deleted`` (gone, not
        by this process's release)."""

    def released_at(self, name: str) -> float | None:
        """When the claim was released, where the backend remembers (else None)."""

    def ended(self, name: str) -> Ended | None:
        """The latest release of the claim ``name``, by whichever process released it, where
        the backend remembers it (the local ledger, the service; not Kubernetes): None."""

    def waiting(self) -> list[Waiter]:
        """The requests that wait in line now, oldest first (none where requests do not
        wait: Kubernetes)."""

    def metrics_source(self) -> MetricsSource | None:
        """Where this backend's device metrics come from when it serves them (the service:
        read by the daemon once for every client of the machine); None: the caller reads
        the inventory's own source (``dra_jupyter.metrics.source_for``)."""

    def touch(self, name: str, now: float) -> bool:
        """Record activity on the claim (the idle countdown starts again); False if gone."""

    def with_owner(self, owner: Owner) -> Backend:
        """The same devices, store and settings for another owner (the server's users)."""

    def sweep(
        self,
        select: Select | None,
        now: float,
        live_kernels: Collection[str],
        *,
        wait: bool = True,
    ) -> Sweep:
        """What a Jupyter server's periodic check does: every live claim it watches, after
        releasing (as any owner, each with its reason) those ``select`` names a reason
        for, and those the backend reclaims by itself. ``live_kernels``: the kernel ids
        running on the server now. Local: the whole ledger (every process of the
        machine); it reclaims expired leases and claims whose holder process is gone.
        Kubernetes: the claims labelled with this server's id (``settings.server_id``);
        it reclaims those whose holder process (on this host) is gone, and those of a
        kernel that is not live whose holder is unknown. ``wait=False`` (a read): never
        wait for another writer; what cannot be released at once is left out of ``kept``
        and released by a later sweep."""

    def where(self) -> str:
        """Where its claims are kept, in one phrase for a log line: ``the ledger
        ~/.local/state/dra-jupyter/ledger.sqlite (8x NVIDIA H200 …)``, ``the service at
        /run/dra-jupyter/socket``, ``namespace alice of the cluster at https://…``."""
        ...

    def close(self) -> None:
        """Let go of what the backend keeps running for a long-lived process (Kubernetes:
        its watched views, :mod:`dra_jupyter.kube.views`; elsewhere nothing); the server
        calls it as it stops. A read after it still answers (from the store itself)."""

    def batch(self) -> AbstractContextManager[None]:
        """Group the writes made inside (on this thread) into one durable commit at the
        end (local: one ledger transaction, a savepoint per call); nothing done inside is
        durable before the end. Kubernetes: nothing to group."""

    def adopt(self, kernel_id: str, holder: Owner, now: float) -> Sweep:
        """Before a restart with claims: ``holder`` (the server's process) holds every live
        claim of ``kernel_id`` from now on (keeping its user and kernel id); claims whose
        holder is gone already are released instead. Where the kernel cannot use its
        claims' devices (Kubernetes) this raises InvalidInputError."""

"""The Kubernetes backend: ``dra.request()`` creates a ResourceClaim in the user's namespace,
labelled with owner, kernel and Jupyter server, annotated with the process that holds it;
kube-scheduler allocates it when a pod uses it (``dra.run``), so a new claim is ``pending``.
``release()`` deletes it; a deletion the Jupyter server decides (idle, kernel gone, server
stop) leaves an Event on the claim saying why (:mod:`.events`).

Requests that could never be met on the cluster's ResourceSlices and DeviceClasses (our own
allocator, on idle devices) are refused before anything is created. An API server that cannot
be reached is retried with a bounded, doubling backoff, then reported in one line.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import ClusterError, ForbiddenError, InvalidInputError
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.inventory.resolve import resolve_device
from dra_jupyter.kube import taints as _taints
from dra_jupyter.kube.claims import (
    ACTIVITY_ANNOTATION,
    HOLDER_ANNOTATION,
    RESOURCE,
    ClaimClient,
    forbidden,
)
from dra_jupyter.kube.cluster import KubeCluster
from dra_jupyter.kube.connect import api_client, cluster_error, to_wire
from dra_jupyter.kube.deletions import release_note
from dra_jupyter.kube.events import ClaimEvents
from dra_jupyter.kube.records import claim_state, holder_annotation, to_record
from dra_jupyter.kube.taints import read_taint_rules
from dra_jupyter.kube.views import CLAIMS, RULES, NamespaceViews
from dra_jupyter.kube.watching import Reflector
from dra_jupyter.model.admintaints import check_key, check_taint
from dra_jupyter.model.objects import Wire
from dra_jupyter.settings import SERVICE_ACCOUNT_DIR, Settings
from dra_jupyter.types import (
    SERVER_LABEL,
    USER_ANNOTATION,
    USER_LABEL,
    Capabilities,
    ClaimRecord,
    DeviceTaint,
    Ended,
    OnWait,
    Owner,
    Select,
    Sweep,
    Waiter,
    claim_prefix,
    label_value,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.accounting.prometheus import ViewCounts

CAPABILITIES = Capabilities(
    where="the Kubernetes backend",
    devices_here=False,
    waits=False,
    leases=False,
    allocates_later=True,
    claim_states=True,
)

T = TypeVar("T")
Sleep = Callable[[float], None]
log = logging.getLogger("dra_jupyter")


def default_namespace(
    kubeconfig: str | None = None, service_account: Path = SERVICE_ACCOUNT_DIR
) -> str:
    """The pod's namespace, else the kubeconfig's current context's, else ``default``."""
    namespace = service_account / "namespace"
    if (service_account / "token").is_file() and namespace.is_file():  # in a pod
        return namespace.read_text().strip() or "default"
    try:
        _, active = config.list_kube_config_contexts(kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError):
        return "default"
    return str((active or {}).get("context", {}).get("namespace") or "default")


class KubernetesBackend:
    """Claims of one user in one namespace of a cluster."""

    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: Settings,
        owner: Owner,
        *,
        api: ApiClient | None = None,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.settings = settings
        self.owner = owner
        self.sleep = sleep
        self._api = api
        self.namespace = settings.namespace or default_namespace(settings.kubeconfig)
        self._inventory: Inventory | None = None
        self.slices_readable = True  # False: RBAC hides the slices, nothing is checked here
        self._events: ClaimEvents | None = None
        # the namespace's watched views, where settings.watch asks (:mod:`.views`)
        self.views = NamespaceViews(
            lambda: self.api,
            self.namespace,
            enabled=settings.watch,
            cluster_wide=not settings.shared_view_url,
        )

    def with_owner(self, owner: Owner) -> KubernetesBackend:
        """The same cluster, namespace and API client for another owner (the server's
        users)."""
        twin = KubernetesBackend(
            replace(self.settings, namespace=self.namespace), owner, api=self.api, sleep=self.sleep
        )
        twin._inventory = self._inventory
        twin.slices_readable = self.slices_readable
        twin._events = self.events
        twin.views = self.views
        return twin

    @property
    def api(self) -> ApiClient:
        if self._api is None:
            self._api = api_client(self.settings.kubeconfig)
        return self._api

    @property
    def cluster(self) -> KubeCluster:
        """What only a cluster does: ``reserve`` (:mod:`.cluster`); made on each use (it
        holds nothing but this backend, which does not hold it)."""
        return KubeCluster(self)

    @property
    def claim_client(self) -> ClaimClient:
        """The namespace's claims; what it writes shows at once in the watched view, if one
        runs (a write starts none)."""
        return ClaimClient(self.api, self.namespace, self.running(CLAIMS))

    def watched(self, kind: str) -> Reflector | None:
        """The namespace's watched view of ``kind`` (``resourceclaims``, ``pods``, ``jobs``
        of dra-jupyter: :data:`.views.SELECTORS`) while it is synced and well, where
        ``settings.watch`` asks; None: read from the API server (:mod:`.views`)."""
        return self.views.view(kind)

    def running(self, kind: str) -> Reflector | None:
        """The namespace's view of ``kind`` if one runs, well or not: what a write tells
        (read-your-writes); starts none."""
        return self.views.running(kind)

    def where(self) -> str:
        return f"namespace {self.namespace} of the cluster at {self.api.configuration.host}"

    def watch_stats(self) -> list[ViewCounts]:
        """The counters of the watched views running now (:meth:`.views.NamespaceViews.stats`)."""
        return self.views.stats()

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None] | None:
        """Tell ``listener`` of each change the watched views hear
        (:meth:`.views.NamespaceViews.on_change`)."""
        return self.views.on_change(listener)

    def close(self) -> None:
        """Stop the watched views of this backend's API client (its twins' too); reads
        after it go to the API server."""
        self.views.close()

    def _listed_claims(self, user: str | None = None, server: str | None = None) -> list[Wire]:
        """The namespace's dra-jupyter claims (of ``user``'s and ``server``'s labels, if
        given): from the watched view while it is synced and well, else listed now (with
        today's retries and errors: a view never answers stale)."""
        view = self.watched(CLAIMS)
        if view is not None:
            labels = {USER_LABEL: user} if user is not None else {}
            if server is not None:
                labels[SERVER_LABEL] = server
            return view.list(labels)
        return self.retrying(lambda: self.claim_client.list(user=user, server=server))

    @property
    def events(self) -> ClaimEvents:
        """Where deletions are recorded (as the server's id, else this host)."""
        if self._events is None:
            self._events = ClaimEvents(self.api, self.settings.server_id or socket.gethostname())
        return self._events

    def retrying(self, call: Callable[[], T]) -> T:
        """``call()``, again after a doubling backoff while the API server cannot be reached
        (``kube_retries`` attempts in all); its last error says how often it was tried."""
        attempts = max(1, self.settings.kube_retries)
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except ClusterError as error:
                if error.status != 0 or "cannot reach" not in str(error):
                    raise
                if attempt == attempts:
                    again = f"{error.message} ({attempts} attempts)"
                    raise ClusterError(again).said_by(error.caller) from error
                self.sleep(self.settings.kube_backoff * 2 ** (attempt - 1))
        raise AssertionError("unreachable")  # pragma: no cover

    # --- the cluster's devices ---------------------------------------------------------------

    def inventory(self, *, refresh: bool = False) -> Inventory:
        """The cluster's ResourceSlices, DeviceClasses and DeviceTaintRules: from the
        cluster's watched views where they answer (:mod:`.views`), else read on first use,
        and again with ``refresh``. With a shared view (``settings.shared_view_url``): none
        (the hub's view counts them; kube-scheduler decides what can be met)."""
        if self.settings.shared_view_url:  # the hub's shared view counts them: none read here
            self.slices_readable = False
            host = self.api.configuration.host
            return Inventory(
                name="kubernetes",
                description=(
                    f"the cluster at {host} (its devices are counted by the hub's shared view "
                    f"at {self.settings.shared_view_url})"
                ),
                slices=(),
                device_classes=(),
                simulated=False,
                source=f"kubernetes:{host}",
            )
        watched = self.views.inventory()  # where the cluster's views answer: as they are now
        if watched is not None:
            self.slices_readable = True
            self._inventory = watched
            return watched
        if self._inventory is not None and not refresh:
            return self._inventory
        resource = client.ResourceV1Api(self.api)

        host = self.api.configuration.host

        def read() -> Inventory:
            try:
                slices = resource.list_resource_slice().items
                classes = resource.list_device_class().items
            except ApiException as error:
                if error.status != 403:
                    what = "dra.devices: reading ResourceSlices"
                    raise cluster_error(error, what, self.api) from error
                self.slices_readable = False
                return Inventory(
                    name="kubernetes",
                    description=f"the cluster at {host} (RBAC hides its ResourceSlices)",
                    slices=(),
                    device_classes=(),
                    simulated=False,
                    source=f"kubernetes:{host}",
                )
            except urllib3.exceptions.HTTPError as error:
                raise cluster_error(
                    error, "dra.devices: reading ResourceSlices", self.api
                ) from error
            self.slices_readable = True  # again, where RBAC allows it now
            return Inventory(
                name="kubernetes",
                description=f"the cluster at {host}",
                slices=tuple(to_wire(self.api, s) for s in slices),
                device_classes=tuple(to_wire(self.api, c) for c in classes),
                simulated=False,
                source=f"kubernetes:{host}",
                taint_rules=read_taint_rules(self.api),
            )

        self._inventory = self.retrying(read)
        return self._inventory

    @property
    def current(self) -> Inventory:
        return self.inventory()

    # --- taints an admin puts by hand (DeviceTaintRules, :mod:`.taints`) ---------------------

    def taint(self, device: str, effect: str, reason: str, key: str) -> DeviceTaint:
        """Create the DeviceTaintRule that taints ``device``; kube-scheduler honours it."""
        check_taint("taint", effect, key, reason)
        full = self._device(device, "taint")
        made = self.retrying(
            lambda: _taints.create(self.api, full, key, effect, reason, self.owner.user)
        )
        self._inventory = None  # read again with the rule
        return made

    def untaint(self, device: str, key: str) -> DeviceTaint:
        """Delete the DeviceTaintRule ``taint`` made for this device and key."""
        check_key("untaint", key)
        full = self._device(device, "untaint")
        gone = self.retrying(lambda: _taints.delete(self.api, full, key))
        self._inventory = None
        return gone

    def _device(self, device: str, command: str) -> str:
        """``driver/pool/device`` of ``device`` on the cluster's slices, read now (an account
        that may not read them lacks the admin's role: said so)."""
        inventory = self.inventory(refresh=True)
        if not self.slices_readable:
            raise ForbiddenError(f"{command}: reading ResourceSlices: {_taints.RBAC}")
        return resolve_device(inventory, device, what=command)

    def taints(self, *, history: bool = False) -> list[DeviceTaint]:
        """The cluster's DeviceTaintRules as taints, every one (dra-jupyter's or not); a
        cluster keeps no history of deleted ones (``history`` changes nothing)."""
        view = self.views.cluster(RULES)
        if view is not None:
            return [_taints.taint_of(r) for r in view.list()]
        rules = self.retrying(lambda: read_taint_rules(self.api))
        return [_taints.taint_of(r) for r in rules]

    def allocator(self, held: list[ClaimRecord]) -> Allocator:
        inv = self.current
        return Allocator(
            inv.patched_slices,
            inv.device_classes,
            [r.to_object() for r in held],
            self.settings.strategy,
        )

    def check_possible(self, claim: Wire, *, explain: bool = True) -> None:
        """Refuse what could never be met on idle devices (why, with ``explain``); nothing
        when the slices are hidden (the API server and kube-scheduler will say)."""
        if not self.current.slices and not self.slices_readable:
            return
        current = self.current
        idle = Allocator(current.patched_slices, current.device_classes, [], "first-fit")
        idle.check_idle(claim, current.description, explain=explain)

    def holders(self, *, cluster_wide: bool = False) -> list[ClaimRecord]:
        """Every allocated claim the user may see: cluster-wide, else (unless
        ``cluster_wide``) in the namespace; from the cluster's view of claims where it
        answers. With a shared view (``settings.shared_view_url``), unless ``cluster_wide``:
        dra-jupyter's claims of the namespace only (the hub's view holds the others)."""
        if self.settings.shared_view_url and not cluster_wide:  # the namespace's only
            return [to_record(c) for c in self._listed_claims() if claim_state(c) != "pending"]
        view = self.views.cluster(CLAIMS)
        if view is not None:
            return [to_record(c) for c in view.list() if claim_state(c) != "pending"]
        resource = client.ResourceV1Api(self.api)

        def read() -> list[Wire]:
            try:
                try:
                    listed = resource.list_resource_claim_for_all_namespaces()
                except ApiException as error:
                    if error.status != 403:
                        raise
                    if cluster_wide:
                        raise forbidden(
                            error, "list", RESOURCE, "(all)", "dra.request(reserve=True)"
                        ) from error
                    listed = resource.list_namespaced_resource_claim(self.namespace)
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                raise cluster_error(error, "dra.devices: reading claims", self.api) from error
            return [to_wire(self.api, c) for c in listed.items]

        return [to_record(c) for c in self.retrying(read) if claim_state(c) != "pending"]

    # --- claims ------------------------------------------------------------------------------

    def allocate(
        self,
        claim: Wire,
        *,
        timeout: float | None = 0.0,
        lease: float | None = None,
        on_wait: OnWait | None = None,
        checked: bool = False,
    ) -> ClaimRecord:
        """Create the claim (``pending``: kube-scheduler allocates it for a pod that uses it).
        ``timeout``, ``lease`` and ``on_wait`` do not apply here."""
        if not checked:
            self.check_possible(claim)
        meta = dict(claim["metadata"], namespace=self.namespace)
        # the user in full: the label may be a cut with a hash (types.label_value)
        meta["annotations"] = {**(meta.get("annotations") or {}), USER_ANNOTATION: self.owner.user}
        if self.owner.pid > 0:  # a process holds it: a Jupyter server follows that process
            annotations = {**(meta.get("annotations") or {})}
            annotations[HOLDER_ANNOTATION] = holder_annotation(self.owner)
            meta["annotations"] = annotations
        if not meta.get("name"):
            meta["name"] = f"{claim_prefix(self.owner.user)}-{secrets.token_hex(3)}"
        body = {**claim, "metadata": meta}
        created = self.retrying(lambda: self.claim_client.create(body))
        return to_record(created)

    def get(self, name: str) -> Wire | None:
        """The claim (None: gone); from the watched view where one answers (which holds
        dra-jupyter's claims only: another claim is not found there)."""
        view = self.watched(CLAIMS)
        if view is not None:
            return view.get(name)
        return self.retrying(lambda: self.claim_client.get(name))

    def record(self, name: str) -> ClaimRecord | None:
        got = self.get(name)
        return None if got is None else to_record(got)

    def state(self, name: str) -> str:
        return claim_state(self.get(name))

    def claims(self, *, all_users: bool = False) -> list[ClaimRecord]:
        return [record for record, _ in self.claims_with_state(all_users=all_users)]

    def claims_with_state(self, *, all_users: bool = False) -> list[tuple[ClaimRecord, str]]:
        user = None if all_users else label_value(self.owner.user)
        listed = self._listed_claims(user)
        found = [(to_record(c), claim_state(c)) for c in listed]
        # the label selects; the full name in the annotation decides (types.label_value)
        return [(r, state) for r, state in found if all_users or r.owner.user == self.owner.user]

    def release(
        self, name: str, reason: str = "user", *, any_owner: bool = False, by: str | None = None
    ) -> bool:
        """Delete the claim; False if it was gone. Only its owner may, unless
        ``any_owner``. Any ``reason`` but ``user`` is recorded as an Event on the claim
        (``by``: who released it, an admin's name)."""
        got = self.get(name)
        if got is None:
            return False
        user = to_record(got).owner.user
        if not any_owner and user != self.owner.user:
            raise ForbiddenError(
                f"claim {name} belongs to user {user or '(not dra-jupyter)'}; only its owner "
                "can release it"
            )
        return self._delete(got, reason, by)

    def _delete(self, claim: Wire, reason: str, by: str | None = None) -> bool:
        """Delete ``claim``, having noted on it why and who (:mod:`.deletions`: what the
        servers watching it announce); a note refused (a role without patch) leaves the
        deletion to read as made in the cluster."""
        name = claim["metadata"]["name"]
        note = release_note(reason, by or self.owner.user)
        try:
            if not self.claim_client.annotate(name, note, action="release"):
                return False
        except ClusterError as error:
            log.debug("dra_jupyter: noting why claim %s is released: %s", name, error)
        if not self.retrying(lambda: self.claim_client.delete(name)):
            return False
        if reason != "user":  # the user knows why; the server's decisions are explained
            self.events.deleted(claim, reason, by)
        return True

    # --- what a Jupyter server does -----------------------------------------------------

    def sweep(
        self,
        select: Select | None,
        now: float,
        live_kernels: Collection[str],
        *,
        wait: bool = True,  # no lock here to wait for: the API server orders the writes
    ) -> Sweep:
        """The claims labelled with this server's id (every dra-jupyter claim of the
        namespace when it has none), after deleting those ``select`` names a reason for
        and, of this server's, those whose holder process on this host is gone
        (``kernel-shutdown`` for a kernel's, else ``reclaimed``), and those of a kernel not
        in ``live_kernels`` whose holder is unknown (no annotation) or on another host:
        what a restarted server finds of its previous kernels. Claims being deleted
        already (a pod still uses them) are neither kept nor released again."""
        server = self.settings.server_id or None
        listed = self._listed_claims(server=server)
        live = set(live_kernels)
        swept = Sweep()
        for claim in listed:
            if claim["metadata"].get("deletionTimestamp"):
                continue
            record = to_record(claim)
            reason = select(record) if select is not None else None
            if reason is None and server is not None:
                reason = _reclaim_reason(record.owner, live)
            if reason is None:
                swept.kept.append(record)
            elif self._delete(claim, reason):
                swept.released.append((record, reason))
        return swept

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to group: each write is one request to the API server."""
        return contextlib.nullcontext()

    def adopt(self, kernel_id: str, holder: Owner, now: float) -> Sweep:
        """Refused: adopting claims gives a restarted kernel their devices' environment, and
        here those go to the pods that use the claims, never to the kernel. (The server
        extension's restart-with-claims moves the kernel into a pod instead:
        :mod:`dra_jupyter.server.moves`.)"""
        raise InvalidInputError(
            f"kernel {kernel_id}: restart-with-claims starts a kernel with its claims' "
            "devices, but on the Kubernetes backend a claim's devices go to the pods that use "
            "it (dra.run), never to the kernel; restart the kernel normally (its claims are "
            "released) or keep it running"
        )

    def waiting(self) -> list[Waiter]:
        """None: a cluster's claims are created at once (kube-scheduler queues pods)."""
        return []

    def released_at(self, name: str) -> float | None:
        """Unknown: a deleted claim leaves nothing in the cluster."""
        return None

    def ended(self, name: str) -> Ended | None:
        """Why the claim went, where the namespace's watched claims view heard its deletion
        (:mod:`.deletions`: the reason dra-jupyter noted on it, else ``deleted`` in the
        cluster); None where unknown (nothing watched: a deleted claim leaves nothing)."""
        return self.views.deleted_claim(name)

    def metrics_source(self) -> None:
        """None: the caller reads the inventory's own source."""

    def touch(self, name: str, now: float) -> bool:
        """Record activity on the claim (annotation ``dra-jupyter/last-activity``)."""
        stamp = f"{now:.3f}"
        return self.retrying(lambda: self.claim_client.annotate(name, {ACTIVITY_ANNOTATION: stamp}))


def _reclaim_reason(owner: Owner, live: Collection[str]) -> str | None:
    """Why a claim of this server goes without being asked (see ``sweep``)."""
    if owner.pid > 0 and owner.host == socket.gethostname():
        if owner.is_alive():
            return None
        return "kernel-shutdown" if owner.kernel_id else "reclaimed"
    if owner.kernel_id and owner.kernel_id not in live:
        return "kernel-shutdown"
    return None

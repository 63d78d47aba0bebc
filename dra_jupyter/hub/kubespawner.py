"""KubeSpawner with devices through Dynamic Resource Allocation.

:class:`DRAKubeSpawner` gives a hub user's server the devices of the chosen profile::

    c.JupyterHub.spawner_class = "dra_jupyter.hub.kubespawner.DRAKubeSpawner"
    c.DRAKubeSpawner.profile_list = [
        {"display_name": "1 H200", "slug": "h200",
         "kubespawner_override": {"dra_request": {"gpu": 1, "model": "H200"},
                                  "dra_lease": "8h", "dra_idle_timeout": "1h"}},
        {"display_name": "No GPU", "slug": "cpu",
         "kubespawner_override": {"dra_request": {}}},
    ]

On start it creates a ResourceClaimTemplate for ``dra_request`` (``dra.request``
keywords, :mod:`dra_jupyter.claimspec`) named for the server's pod, and adds to the pod
``spec.resourceClaims`` (the template) and the notebook container's ``resources.claims``,
keeping its ``resources.limits`` and ``requests``. The resourceclaim controller makes the
pod's claim from the template, owned by the pod; kube-scheduler allocates it and binds
the pod. Why a template (:mod:`dra_jupyter.kube.spawn`): its claim goes with the pod,
and Kueue counts templates that pods reference. The template is owned by the pod once
the pod exists, and deleted when the server stops, with any claim left of it.

The progress stream (the spawn page) interleaves KubeSpawner's pod events with the
claim's states; when the pod cannot be scheduled, the scheduler's reason and our
explanation come within seconds, and (``dra_fail_unschedulable_after``) the spawn fails
with them instead of waiting for ``start_timeout``.

The single-user server runs the dra-jupyter server extension on the Kubernetes backend
(``DRA_JUPYTER_BACKEND=kubernetes``, the namespace, the pod's name as server id), so
``%dra`` claims made from notebooks belong to the hub user (``JUPYTERHUB_USER``) and are
released when idle (``dra_idle_timeout``; needs ``cmd``, as zero-to-jupyterhub sets it).

**GPU kernels only** (``dra_kernels_only``, per profile): the server pod gets no claim;
its kernels get the profile's devices, each in a pod of its own (the ``dra-kubernetes``
kernel provisioner, :mod:`dra_jupyter.kube.kernels.provisioner`). The server is given the
kernel spec that does so, as its default kernel (``$DRA_JUPYTER_KERNEL_SPECS`` and
``$DRA_JUPYTER_DEFAULT_KERNEL``, written by its extension:
:mod:`dra_jupyter.server.givenspecs`), named ``dra-<profile slug>`` and shown as
``Python 3 · <the profile's display name>``. Why: a server pod holds its claim for its whole
life, and idle release cannot free what a running pod holds; a kernel pod is stopped on idle,
and its devices are free at once. Stopping the server deletes any kernel pod it left.

The profiles can come from the cluster itself: ``c.DRAKubeSpawner.profile_list =
cluster_profiles`` (:func:`cluster_profiles`) offers one choice per device class, model,
count and MIG profile (and "No GPU"), each with how many could start now, counted with our
allocator over the cluster's ResourceSlices and allocated claims, and restricted by the
admin's ``c.DRAProfiles`` rules (:mod:`dra_jupyter.hub.config`).

Stock KubeSpawner: the three hooks :func:`pre_spawn_hook`, :func:`modify_pod_hook` and
:func:`after_pod_created_hook` do the same without the progress (the template then goes
with the pod, by its owner reference).
"""

from __future__ import annotations

import asyncio
import copy
import html
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kubespawner import KubeSpawner
from traitlets import Bool, Dict, Float, List, Unicode, default

from dra_jupyter.claimspec import CLAIM_KEYS, build_claim
from dra_jupyter.durations import parse_duration, parse_lease
from dra_jupyter.errors import AllocationError, DraJupyterError, InvalidInputError, shown
from dra_jupyter.hub.choices import (
    ChoiceCache,
    choices,
    kernel_spec,
    kubespawner_profiles,
    restrict,
)
from dra_jupyter.hub.config import DRAProfiles
from dra_jupyter.hub.failures import SpawnFailure
from dra_jupyter.hub.form import read_at_start, service_world
from dra_jupyter.hub.formview import FormView, explain_waiting, form_view
from dra_jupyter.hub.pod import add_claim
from dra_jupyter.hub.progress import DeviceProgress, Event, event, interleave, never_back
from dra_jupyter.kube import kueue
from dra_jupyter.kube.sharedclaims import SHARED_LABEL, SharedClaims
from dra_jupyter.kube.spawn import (
    POD_CLAIM,
    ServerDevices,
    claim_template,
    generated_claim,
    hub_devices,
)
from dra_jupyter.settings import check_server_id, default_server_id
from dra_jupyter.sharing.joins import SHARED_PREFIX, shared_claim_name
from dra_jupyter.verdicts import describe

DRA_TRAITS = (
    "dra_request",
    "dra_lease",
    "dra_idle_timeout",
    "dra_kueue_queue",
    "dra_kernels_only",
    "dra_shared",
)
# The server extension's (dra_jupyter.server.givenspecs; the hub does not import the server)
KERNEL_SPECS_ENV = "DRA_JUPYTER_KERNEL_SPECS"
DEFAULT_KERNEL_ENV = "DRA_JUPYTER_DEFAULT_KERNEL"
POLL_S = 1.0  # how often a spawn looks at its pod and claim


class SpawnDevicesError(SpawnFailure):
    """A spawn failed for its devices: JupyterHub shows the message (and the HTML) on the
    spawn page, answers with an allocation error's status, and logs no traceback."""

    def __init__(self, message: str, html_message: str | None = None, *, status: int = 0) -> None:
        status_code = status or AllocationError.http_status
        super().__init__(
            message, reason="devices", status_code=status_code, html=html_message or ""
        )


def _devices(kubeconfig: str, namespace: str, *, watch: bool = True) -> ServerDevices:
    """The hub's, for the life of the process (:func:`.hub_devices`: the cluster read from
    one watched view per kind, shared by every render of the spawn form and every spawn;
    without ``watch``, where the shared view serves the form and explains a waiting spawn,
    read only where the view does not answer)."""
    return hub_devices(kubeconfig, namespace, watch=watch)


class _Counted:
    """What the counts of :func:`cluster_profiles` share between calls (one at a time)."""

    lock = threading.Lock()
    cache = ChoiceCache()


async def cluster_profiles(spawner: Any) -> list[dict[str, Any]]:
    """A callable ``profile_list`` (``c.DRAKubeSpawner.profile_list = cluster_profiles``):
    the spawn form's choices from the cluster's DeviceClasses, ResourceSlices and allocated
    claims now, counted with our allocator (:mod:`dra_jupyter.hub.choices`: "3 can start
    now", or why none can and since when; never-possible ones left out), those the admin's
    ``c.DRAProfiles`` rules and test give the spawner's user and groups, as KubeSpawner
    profiles whose ``kubespawner_override`` carries ``dra_request``, ``dra_lease`` and
    ``dra_idle_timeout``. The cluster is read in a thread (the official client blocks).

    Where the hub runs the shared view (``dra_shared_view_service``), the choices are the
    view's, counted on its watched state (:mod:`dra_jupyter.hub.formview`: one local call,
    no call to the API server); if it does not answer, the choices say so in one line."""
    return await asyncio.to_thread(_cluster_profiles, spawner)


def _form_view(spawner: Any) -> FormView | None:
    """The form's reader of the hub's shared view, None where the hub runs none (in its
    ``c.JupyterHub.services``: a list, or appended to without one, as traitlets keeps it)."""
    config = getattr(spawner, "config", None)
    services: Any = config.JupyterHub.get("services") if config is not None else None
    if hasattr(services, "get_value"):  # c.JupyterHub.services.append(...) alone
        services = services.get_value([])
    return form_view(services, str(getattr(spawner, "dra_shared_view_service", "") or ""))


def _cluster_profiles(spawner: Any) -> list[dict[str, Any]]:
    view = _form_view(spawner)
    if view is not None:
        offered, sharing, _ = view.choices(spawner.namespace)
    else:
        devices = _devices(getattr(spawner, "dra_kubeconfig", ""), spawner.namespace)
        inventory, holders = devices.devices()
        with _Counted.lock:
            offered = choices(service_world(inventory, holders), cache=_Counted.cache)
        sharing = {  # the servers that use each profile's shared claim now (dra_shared)
            h.name: len(h.users)
            for h in holders
            if h.namespace == spawner.namespace and h.name.startswith(SHARED_PREFIX)
        }
    policy = DRAProfiles(parent=spawner).policy()
    groups = {g.name for g in getattr(spawner.user, "groups", ()) or ()}
    return kubespawner_profiles(restrict(offered, spawner.user.name, groups, policy, sharing))


def template_name(pod_name: str) -> str:
    return f"{pod_name}-{POD_CLAIM}"[:253]


def profile_kernel_specs(
    request: Mapping[str, Any],
    slug: str,
    shown_as: str,
    *,
    lease: str | None = None,
    idle_timeout: str | None = None,
    join: str = "",
) -> dict[str, dict[str, Any]]:
    """The kernel spec of a "GPU kernels only" profile, by its name ``dra-<slug>`` (as a
    kernel's name: lower case, ``[a-z0-9._-]``): a kernel in a pod of its own with
    ``request``'s devices, shown as ``Python 3 · <shown_as>``
    (:func:`dra_jupyter.hub.choices.kernel_spec`)."""
    name = "dra-" + (re.sub(r"[^a-z0-9._-]+", "-", slug.lower()).strip("-._")[:56] or "kernel")
    spec = kernel_spec(
        shown_as,
        request,
        slug=slug,
        description=f"{describe(dict(request))} in a pod of its own",
        lease=lease,
        idle_timeout=idle_timeout,
        join=join,
    )
    return {name: spec}


def kernels_env(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """What tells the server of its kernel specs (the first is its default kernel)."""
    if not specs:
        return {}
    return {KERNEL_SPECS_ENV: json.dumps(specs), DEFAULT_KERNEL_ENV: next(iter(specs))}


def checked_request(request: Mapping[str, Any], allowed: list[str], where: str) -> dict[str, Any]:
    """``request`` when each keyword is one ``allowed``; else InvalidInputError."""
    if not isinstance(request, Mapping):
        raise InvalidInputError(f"{where}: dra_request must be a dict of dra.request keywords")
    for key in request:
        if key not in allowed:
            known = ", ".join(k for k in allowed)
            raise InvalidInputError(
                f"{where}: dra_request keyword {shown(key)} is not allowed here; use "
                f"{known} (lease and idle timeout are dra_lease and dra_idle_timeout)"
            )
    return dict(request)


class DRAKubeSpawner(KubeSpawner):  # type: ignore[misc]  # KubeSpawner is untyped
    """KubeSpawner whose profiles ask for devices with ``dra.request`` keywords."""

    dra_request = Dict(
        config=True,
        help="""The server's devices as dra.request keywords ({"gpu": 1, "memory":
        "80Gi"}, {"mig": "3g.71gb"}); {} for none. Set per profile in
        kubespawner_override.""",
    )
    dra_lease = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""Longest the server may hold its devices ("8h"): the pod's
        activeDeadlineSeconds (the pod, and so its claim, ends then). None: no limit.""",
    )
    dra_idle_timeout = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""The idle release of claims made from the server's notebooks ("1h"), as
        c.DRAExtensionApp.idle_timeout of its server extension (passed as an argument, so
        KubeSpawner.cmd must be set). None: the extension's default.""",
    )
    dra_kernels_only = Bool(
        False,
        config=True,
        help="""GPU kernels only: the server pod gets no claim; it is given a kernel spec
        whose kernels run each in a pod of its own with dra_request's devices (the
        dra-kubernetes provisioner), as its default kernel, named dra-<profile slug>. Idle
        release (dra_idle_timeout) then stops such a kernel, which frees its devices at once;
        a server pod's own claim is freed only when the server stops. dra_lease is not the
        server pod's deadline then. Set per profile in kubespawner_override.""",
    )
    dra_shared = Bool(
        False,
        config=True,
        help="""One claim shared by everyone who chooses the profile: the hub makes the
        claim dra-shared-<profile slug> of dra_request (with its sharing keywords, e.g.
        {"gpu": 1, "share": "mps", "threads": 25}: each server's processes get a quarter of
        the GPU's threads through MPS) when the first such server starts, every such
        server's pod (or, with dra_kernels_only, every GPU kernel's) uses it by name, and
        the hub deletes it when the last such server stops. The users' servers must be in
        one namespace (a claim is used from its own namespace only). Set per profile in
        kubespawner_override.""",
    )
    dra_kueue_queue = Unicode(
        "",
        config=True,
        help="""A Kueue LocalQueue: the pod gets the label kueue.x-k8s.io/queue-name, so
        that cluster quota counts its devices (Kueue counts templates referenced from
        pods), and the server's dra.run Jobs go through it too (DRA_JUPYTER_KUEUE_QUEUE).
        Empty: no label.""",
    )
    dra_namespace = Unicode(
        "",
        config=True,
        help="""The namespace of the claims made from the server's notebooks
        (DRA_JUPYTER_NAMESPACE). Empty: the pod's namespace. The pod's own template is
        always in the pod's namespace.""",
    )
    dra_shared_view_url = Unicode(
        "",
        config=True,
        help="""The URL of the hub's shared view of the cluster's devices, as a server pod
        reaches it (the service of dra_jupyter.hub.sharedview.shared_view_service: through
        the proxy, http://proxy-public/services/dra-devices/ under zero-to-jupyterhub, or
        the service's own URL), given to the server as DRA_JUPYTER_SHARED_VIEW_URL: the
        server then asks it for the cluster's counts and watches only its namespace, so its
        service account needs no cluster-wide RBAC. Empty: each server watches the cluster
        itself (deploy/singleuser-cluster-rbac.yaml).""",
    )
    dra_shared_view_service = Unicode(
        "dra-devices",
        config=True,
        help="""The service of c.JupyterHub.services that is the hub's shared view of the
        cluster's devices (dra_jupyter.hub.sharedview.shared_view_service's name): where
        there is one with a URL, cluster_profiles reads the spawn form's choices from it (at
        its URL, with its api_token), and the hub itself watches no ResourceSlice or claim.
        Empty, or no such service: the hub watches the cluster itself.""",
    )
    dra_kubeconfig = Unicode(
        "",
        config=True,
        help="""A kubeconfig for the hub's own calls (templates, claims, slices). Empty:
        the pod's service account, else $KUBECONFIG, else ~/.kube/config, as KubeSpawner
        finds them.""",
    )
    dra_allowed_keys = List(
        Unicode(),
        default_value=list(CLAIM_KEYS),
        config=True,
        help="""The dra.request keywords a profile's dra_request may use; a spawn whose
        request uses another is refused before anything is created.""",
    )
    dra_fail_unschedulable_after = Float(
        5.0,
        allow_none=True,
        config=True,
        help="""Seconds the pod may stay unschedulable (explained) before the spawn fails
        with the scheduler's reason and why; None waits for start_timeout.""",
    )
    dra_explain_after = Float(
        8.0,
        config=True,
        help="""Seconds a claim may stay pending without the pod being unschedulable
        before the spawn explains it anyway.""",
    )

    _start_future: asyncio.Future[Any] | None  # KubeSpawner's: what progress() follows

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # KubeSpawner merges a profile's dict overrides into the trait: each spawn starts
        # again from what was configured, not from the previous spawn's profile
        self._dra_configured = {k: copy.deepcopy(getattr(self, k)) for k in DRA_TRAITS}
        self._dra_progress: DeviceProgress | None = None
        self._dra_events: list[Event] = []
        self._dra_profile: tuple[str, str] = ("", "")  # the chosen profile's slug and name
        self._dra_shared_claim = ""  # the shared claim the server uses (kept in its state)
        self._dra_rejoin: dict[str, Any] | None = None  # joined again once the pod exists

    # --- options -----------------------------------------------------------------------------

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        return read_at_start  # KubeSpawner reads the profile in load_user_options

    async def load_user_options(self) -> None:
        if "dra_request" in (self.user_options or {}):
            raise SpawnDevicesError(
                f"spawn {self._log_name}: user_options may not carry dra_request; choose "
                "one of the profiles",
                status=InvalidInputError.http_status,
            )
        for key, value in self._dra_configured.items():
            setattr(self, key, copy.deepcopy(value))
        self._dra_profile = ("", "")
        try:
            await super().load_user_options()
        except ValueError as err:  # KubeSpawner's "No such profile: h200. Options include: ..."
            raise SpawnDevicesError(
                f"spawn {self._log_name}: {err}", status=InvalidInputError.http_status
            ) from None
        try:  # a profile's settings, refused in one line (JupyterHub: no traceback)
            where = f"spawn {self._log_name}"
            checked_request(self.dra_request, list(self.dra_allowed_keys), where)
            parse_lease(self.dra_lease, what=f"{where}: dra_lease")
            parse_duration(self.dra_idle_timeout, what=f"{where}: dra_idle_timeout")
        except DraJupyterError as err:
            raise SpawnDevicesError(str(err), status=err.http_status) from None

    def _load_profile(self, slug: str | None, profile_list: list[dict[str, Any]]) -> None:
        """KubeSpawner's (its overrides applied), the profile's slug and name kept: a GPU
        kernels only profile names its kernel spec for them."""
        super()._load_profile(slug, profile_list)
        profile = self._get_profile(slug, profile_list)
        self._dra_profile = (str(profile.get("slug") or ""), str(profile["display_name"]))

    def dra_kernel_specs(self) -> dict[str, dict[str, Any]]:
        """The kernel spec of a GPU kernels only profile ({} for any other); with
        ``dra_shared``, its kernels use the profile's shared claim."""
        if not (self.dra_kernels_only and self.dra_request):
            return {}
        slug, shown_as = self._dra_profile
        return profile_kernel_specs(
            self.dra_request,
            slug or "kernel",
            shown_as or describe(dict(self.dra_request)),
            lease=self.dra_lease,
            idle_timeout=self.dra_idle_timeout,
            join=self.dra_shared_claim_name() if self.dra_shared else "",
        )

    def dra_shared_claim_name(self) -> str:
        return shared_claim_name(self._dra_profile[0] or self._dra_profile[1] or "profile")

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().get_state()
        if self._dra_shared_claim:  # left when the server stops, also after a hub restart
            state["dra_shared_claim"] = self._dra_shared_claim
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._dra_shared_claim = str(state.get("dra_shared_claim") or "")

    def clear_state(self) -> None:
        super().clear_state()
        self._dra_shared_claim = ""

    @property
    def _dra(self) -> ServerDevices:
        return _devices(self.dra_kubeconfig, self.namespace, watch=_form_view(self) is None)

    def dra_server_id(self) -> str:
        return check_server_id(default_server_id(self.pod_name), "DRAKubeSpawner server id")

    def get_env(self) -> dict[str, str]:
        env: dict[str, str] = super().get_env()
        env.setdefault("DRA_JUPYTER_BACKEND", "kubernetes")
        env.setdefault("DRA_JUPYTER_NAMESPACE", self.dra_namespace or self.namespace)
        env.setdefault("DRA_JUPYTER_SERVER_ID", self.dra_server_id())
        if self.dra_kueue_queue:  # dra.run's Jobs go through the same queue
            env.setdefault("DRA_JUPYTER_KUEUE_QUEUE", self.dra_kueue_queue)
        if self.dra_shared_view_url:
            env.setdefault("DRA_JUPYTER_SHARED_VIEW_URL", self.dra_shared_view_url)
        env.update(kernels_env(self.dra_kernel_specs()))
        return env

    def get_args(self) -> list[str]:
        args: list[str] = super().get_args()
        idle = parse_duration(self.dra_idle_timeout, what="dra_idle_timeout")
        if idle is not None:
            args.append(f"--DRAExtensionApp.idle_timeout={idle:g}")
        return args

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's pod, with the template of ``dra_request`` (created here, just
        before the pod is) as its claim; the lease as activeDeadlineSeconds. GPU kernels
        only: no claim and no deadline (the devices are the kernel pods')."""
        pod = await super().get_pod_manifest()
        lease = parse_lease(self.dra_lease, what="dra_lease")
        labels = {kueue.QUEUE_LABEL: self.dra_kueue_queue} if self.dra_kueue_queue else {}
        shared = ""
        if self.dra_shared and self.dra_request:
            shared = await self._dra_join()
            labels[SHARED_LABEL] = shared
        if self.dra_kernels_only and self.dra_request:
            [name] = self.dra_kernel_specs()
            text = f"GPU kernels only: {describe(dict(self.dra_request))} in kernel pods"
            self._dra_events.append(
                event(
                    None,
                    f"{text} (kernel spec {name}); the server itself gets no devices",
                    f"{html.escape(text)} (kernel spec <code>{html.escape(name)}</code>); "
                    "the server itself gets no devices",
                )
            )
            self.log.info("dra: %s: GPU kernels only, kernel spec %s", self._log_name, name)
            return add_claim(pod, None, labels=labels)
        if not self.dra_request:
            return add_claim(pod, None, labels=labels, active_deadline=lease)
        if shared:
            return add_claim(pod, None, claim=shared, labels=labels, active_deadline=lease)
        name = template_name(self.pod_name)
        request = dict(self.dra_request)
        self._dra_progress = DeviceProgress(describe(request), name)
        dra = self._dra
        classes = await asyncio.to_thread(dra.device_classes)
        template = claim_template(
            name,
            request,
            namespace=self.namespace,
            user=self.user.name,
            pod=self.pod_name,
            classes=classes,
            lease=lease,
        )
        await asyncio.to_thread(dra.create_template, template)
        self._dra_events.append(self._dra_progress.requested())
        self.log.info("dra: %s asks for %s (template %s)", self._log_name, describe(request), name)
        return add_claim(pod, name, labels=labels, active_deadline=lease)

    async def _dra_join(self) -> str:
        """Join the profile's shared claim (made here if there is none; see
        :mod:`dra_jupyter.kube.sharedclaims`) and say so; its name."""
        name = self.dra_shared_claim_name()
        request = dict(self.dra_request)
        dra = self._dra
        classes = await asyncio.to_thread(dra.device_classes)
        shared = SharedClaims(dra)
        try:
            claim = build_claim(name, request, namespace=self.namespace, classes=classes)
            await asyncio.to_thread(shared.join, claim, self._dra_profile[0])
            others = await asyncio.to_thread(shared.users, name, leaving=self.pod_name)
        except DraJupyterError as err:
            message = f"spawn {self._log_name}: {err}"
            raise SpawnDevicesError(message, status=err.http_status) from None
        self._dra_shared_claim = name
        self._dra_rejoin = claim
        who = f"with {len(others)} other server(s) now" if others else "the first to use it"
        text = f"{describe(request)}, shared: claim {name}, {who}"
        self._dra_events.append(event(None, text, html.escape(text)))
        self.log.info("dra: %s uses the shared claim %s (%s)", self._log_name, name, who)
        return name

    async def _dra_rejoined(self) -> None:
        """Join the shared claim again once the pod exists (made anew if the last server
        of the profile stopped and deleted it between the join and the pod)."""
        claim, reflector = self._dra_rejoin, self.pod_reflector
        if claim is None or reflector is None:
            return
        if reflector.pods.get(f"{self.namespace}/{self.pod_name}") is None:
            return
        self._dra_rejoin = None
        shared = SharedClaims(self._dra)
        await asyncio.to_thread(shared.join, claim, self._dra_profile[0])

    # --- start, stop -------------------------------------------------------------------------

    def start(self) -> asyncio.Future[Any]:
        self._dra_progress = None
        self._dra_events = []
        self._dra_rejoin = None
        self._start_future = asyncio.ensure_future(self._dra_start())
        return self._start_future

    async def _dra_start(self) -> Any:
        start = asyncio.ensure_future(self._start())
        watch = asyncio.ensure_future(self._dra_watch())
        try:
            done, _ = await asyncio.wait({start, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done:
                watch.result()  # it ends only to fail the spawn
            url = await start
            watch.cancel()
            # the pod runs: what changed since the last look is told all the same
            await self._dra_observe(fail=False)
            return url
        finally:
            for task in (start, watch):
                task.cancel()
            await asyncio.gather(start, watch, return_exceptions=True)

    async def _dra_watch(self) -> None:
        """Follow the pod and its claim while the spawn runs (:meth:`_dra_observe`, each
        second) until it fails the spawn."""
        owned = False
        while True:
            await asyncio.sleep(POLL_S)
            await self._dra_rejoined()
            owned = await self._dra_observe(fail=True, owned=owned)

    async def _dra_observe(self, *, fail: bool, owned: bool = False) -> bool:
        """Look at the pod and its claim once: announce each change, own the template by
        the pod (once; returns whether it is), explain a pod that cannot be placed, and
        (``fail``) fail the spawn when it stays so (raises SpawnDevicesError)."""
        progress = self._dra_progress
        reflector = self.pod_reflector
        if progress is None or reflector is None:
            return owned
        pod = reflector.pods.get(f"{self.namespace}/{self.pod_name}")
        if pod is None:
            return owned
        dra = self._dra
        if not owned and pod.get("metadata", {}).get("uid"):
            uid = pod["metadata"]["uid"]
            await asyncio.to_thread(dra.own_template, progress.template, self.pod_name, uid)
            owned = True
        name = generated_claim(pod)
        claim = await asyncio.to_thread(dra.claim, name) if name else None
        now = time.monotonic()
        self._dra_events.extend(progress.update(pod, claim, now))
        if self.dra_kueue_queue and kueue.gated(pod):  # in Kueue's line: its word
            uid = str(pod.get("metadata", {}).get("uid") or "")
            self._dra_events.extend(progress.queued(await asyncio.to_thread(dra.kueue_word, uid)))
        if fail and progress.wants_explanation(now, self.dra_explain_after):
            subject = claim or await asyncio.to_thread(dra.template, progress.template)
            if subject is not None and "devices" not in (subject.get("spec") or {}):
                subject = {**subject, "spec": subject["spec"]["spec"]}  # a template's claim
            text = await asyncio.to_thread(
                explain_waiting, _form_view(self), dra, subject or {}, dict(self.dra_request)
            )
            self._dra_events.append(progress.explained(text))
        limit = self.dra_fail_unschedulable_after
        since = progress.unschedulable_since
        failing = fail and limit is not None and since is not None and now - since >= limit
        if failing and progress.explanation:
            message, markup = progress.failure()
            self.log.warning("dra: %s: %s", self._log_name, message)
            raise SpawnDevicesError(f"spawn {self._log_name}: {message}", markup)
        return owned

    async def stop(self, now: bool = False) -> None:
        """KubeSpawner's stop (the pod deleted), then the kernel pods the server left
        (GPU kernels), the template and any claim left."""
        try:
            await super().stop(now)
        finally:
            await self._dra_cleanup()

    async def _dra_cleanup(self) -> None:
        dra = self._dra
        for pod in await asyncio.to_thread(dra.delete_kernel_pods, self.dra_server_id()):
            self.log.info("dra: deleted kernel pod %s left by %s", pod, self._log_name)
        name = template_name(self.pod_name)
        if await asyncio.to_thread(dra.delete_template, name):
            self.log.info("dra: deleted template %s of %s", name, self._log_name)
        for claim in await asyncio.to_thread(dra.delete_claims_of, self.pod_name):
            self.log.info("dra: deleted claim %s of %s", claim, self._log_name)
        shared = self._dra_shared_claim
        if not shared:
            return
        leave = SharedClaims(dra).leave
        if await asyncio.to_thread(leave, shared, self.pod_name):
            self.log.info("dra: deleted shared claim %s: %s was its last", shared, self._log_name)

    # --- progress ----------------------------------------------------------------------------

    async def progress(self) -> AsyncIterator[Event]:
        """KubeSpawner's events interleaved with the devices' (:mod:`.progress`)."""
        async for item in never_back(interleave(super().progress(), self._dra_stream())):
            yield item

    async def _dra_stream(self) -> AsyncIterator[Event]:
        sent = 0
        while True:
            future = self._start_future
            done = future is not None and future.done()
            while sent < len(self._dra_events):
                yield self._dra_events[sent]
                sent += 1
            if done:
                return
            await asyncio.sleep(POLL_S / 2)


# --- stock KubeSpawner ------------------------------------------------------------------------


def pre_spawn_hook(spawner: Any) -> None:
    """``c.KubeSpawner.pre_spawn_hook``: the dra_* settings a profile's
    kubespawner_override sets, reset for this spawn (stock KubeSpawner has no such
    traits; its override merges dicts into what is there)."""
    for key in DRA_TRAITS:
        setattr(spawner, key, {} if key == "dra_request" else None)


async def modify_pod_hook(spawner: Any, pod: Any) -> Any:
    """``c.KubeSpawner.modify_pod_hook``: the template of ``spawner.dra_request`` created
    and added to the pod, as :class:`DRAKubeSpawner` does (no progress, no early failure);
    the server extension's environment set. GPU kernels only (``dra_kernels_only``): no
    template, the kernel spec ``dra-<profile slug>`` given instead (shown with the
    request's keywords: stock KubeSpawner keeps no profile's name)."""
    request = checked_request(
        getattr(spawner, "dra_request", None) or {}, list(CLAIM_KEYS), "modify_pod_hook"
    )
    lease = parse_lease(getattr(spawner, "dra_lease", None), what="dra_lease")
    queue = getattr(spawner, "dra_kueue_queue", None)
    labels = {kueue.QUEUE_LABEL: queue} if queue else {}
    container = pod.spec.containers[0]
    env = list(container.env or [])
    names = {
        getattr(e, "name", None) or (e.get("name") if isinstance(e, dict) else None) for e in env
    }
    kernels_only = bool(getattr(spawner, "dra_kernels_only", False)) and bool(request)
    specs = {}
    if kernels_only:
        slug = str((getattr(spawner, "user_options", None) or {}).get("profile") or "kernel")
        specs = profile_kernel_specs(
            request,
            slug,
            describe(request),
            lease=getattr(spawner, "dra_lease", None),
            idle_timeout=getattr(spawner, "dra_idle_timeout", None),
        )
    for key, value in (
        ("DRA_JUPYTER_BACKEND", "kubernetes"),
        ("DRA_JUPYTER_NAMESPACE", spawner.namespace),
        ("DRA_JUPYTER_SERVER_ID", default_server_id(spawner.pod_name)),
        *([("DRA_JUPYTER_KUEUE_QUEUE", queue)] if queue else []),
        *kernels_env(specs).items(),
    ):
        if key not in names:
            env.append({"name": key, "value": value})
    container.env = env
    if kernels_only:
        return add_claim(pod, None, labels=labels)
    if not request:
        return add_claim(pod, None, labels=labels, active_deadline=lease)
    dra = _devices("", spawner.namespace)
    name = template_name(spawner.pod_name)
    classes = await asyncio.to_thread(dra.device_classes)
    template = claim_template(
        name,
        request,
        namespace=spawner.namespace,
        user=spawner.user.name,
        pod=spawner.pod_name,
        classes=classes,
        lease=lease,
    )
    await asyncio.to_thread(dra.create_template, template)
    return add_claim(pod, name, labels=labels, active_deadline=lease)


async def after_pod_created_hook(spawner: Any, pod: Mapping[str, Any]) -> None:
    """``c.KubeSpawner.after_pod_created_hook``: the pod owns its template, so that the
    template is deleted with the pod."""
    if getattr(spawner, "dra_request", None) and not getattr(spawner, "dra_kernels_only", False):
        uid = pod["metadata"]["uid"]
        dra = _devices("", spawner.namespace)
        await asyncio.to_thread(
            dra.own_template, template_name(spawner.pod_name), spawner.pod_name, uid
        )

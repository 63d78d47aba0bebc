"""Kernels that change where they run, keeping their kernel id (the notebook stays open):
into a pod of their own with devices (Kubernetes: ``dra.request(..., restart=True)``, the
Devices panel's restart with devices), and back to a kernel without devices on the server
when those devices are released (idle release, their user), so that the next execution
says what happened instead of failing on a kernel that is gone.

jupyter_client makes a kernel's provisioner once, from its kernel spec, and keeps it across
restarts. A move therefore tells the kernel's manager to make its next start from another
kernel spec (:func:`start_next_with`: the ``dra-kubernetes`` provisioner with the devices,
or jupyter_client's local provisioner with a note), and then restarts it the usual way, so
jupyter_server's restart bookkeeping (its events, the websocket's nudge, activity watching)
is the one every restart gets.

A kernel moved back to the server runs ``python -m dra_jupyter.kernel.notes``: an IPython
kernel that prints :data:`NOTE_ENV` once, at its first execution.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dra_jupyter.errors import (
    DraJupyterError,
    InvalidInputError,
    KernelNotFoundError,
    KernelRestartError,
)
from dra_jupyter.identity import current_user
from dra_jupyter.kernel.notes import NOTE_ENV
from dra_jupyter.types import ClaimRecord

POD_PROVISIONER = (
    "dra-kubernetes"  # dra_jupyter.kube.kernels.provisioner.NAME (not imported: no kube here)
)
LOCAL_ARGV = [sys.executable, "-m", "dra_jupyter.kernel.notes", "-f", "{connection_file}"]
LOOPBACK = "127.0.0.1"
MAX_CLAIM_BYTES = 64 * 1024  # a moving kernel's claim spec, as JSON
ANSWER_S = 60.0  # for a restarted kernel to answer kernel_info
MOVED = "moved"  # the reason a kernel's claim goes once its pod's own claim holds the devices


@dataclass(frozen=True)
class PodDevices:
    """What a kernel pod is started with: the provisioner's ``claim`` (a ResourceClaim
    spec) or ``request`` (``dra.request`` keywords), or ``join``, a claim that exists which
    the pod uses (``dra.request(join=...)``), and how its user asks for it again."""

    claim: Mapping[str, Any] | None = None
    request: Mapping[str, Any] = field(default_factory=dict)
    join: str = ""

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"request": dict(self.request)}
        if self.join:
            config["join"] = self.join
        if self.claim is not None:
            config["claim"] = dict(self.claim)
        return config

    def again(self) -> str:
        """The one command that starts the kernel on such devices again, when the request's
        keywords are known."""
        if self.join:
            return f"dra.request(join={self.join!r})"
        if not self.request:
            return ""
        words = ", ".join(f"{k}={v!r}" for k, v in self.request.items())
        return f"dra.request({words}, restart=True)"

    def said(self) -> str:
        """The devices, as typed: ``gpu=1, model='H200'`` (or ``its claim's devices``, or
        ``the shared claim team-gpu``)."""
        if self.join:
            return f"the shared claim {self.join}"
        if self.request:
            return ", ".join(f"{k}={v!r}" for k, v in self.request.items())
        return "its claim's devices"


def pod_devices(provisioner: Any) -> PodDevices | None:
    """The devices of a kernel that runs in a pod with them (the ``dra-kubernetes``
    provisioner's ``devices_in_pod``); None for any other kernel."""
    if not getattr(provisioner, "devices_in_pod", False):
        return None
    claim = dict(getattr(provisioner, "claim", {}) or {}) or None
    return PodDevices(
        claim=claim,
        request=dict(getattr(provisioner, "request", {}) or {}),
        join=str(getattr(provisioner, "join", "") or ""),
    )


def in_pod_spec(spec: Any, devices: PodDevices) -> Any:
    """A copy of the kernel spec ``spec`` whose kernel runs in a pod with ``devices``."""
    moved = _copy(spec)
    metadata = dict(moved.metadata or {})
    current = metadata.get("kernel_provisioner") or {}
    config = (
        dict(current.get("config") or {})
        if current.get("provisioner_name") == (POD_PROVISIONER)
        else {}
    )
    config.pop("claim", None)
    config.pop("join", None)
    config.update(devices.config())
    metadata["kernel_provisioner"] = {"provisioner_name": POD_PROVISIONER, "config": config}
    moved.metadata = metadata
    moved.interrupt_mode = "message"  # no signal reaches another pod
    return moved


def on_server_spec(spec: Any) -> Any:
    """A copy of ``spec`` whose kernel runs here, without devices (jupyter_client's local
    provisioner), and says :data:`NOTE_ENV` at its first execution."""
    moved = _copy(spec)
    metadata = dict(moved.metadata or {})
    metadata.pop("kernel_provisioner", None)
    moved.metadata = metadata
    moved.argv = list(LOCAL_ARGV)
    return moved


def _copy(spec: Any) -> Any:
    """A new kernel spec (jupyter_client's ``KernelSpec``) equal to ``spec``."""
    return type(spec)(resource_dir=spec.resource_dir, **copy.deepcopy(spec.to_dict()))


def start_next_with(kernel: Any, spec: Any, *, ip: str | None = None) -> None:
    """Make the next (re)start of ``kernel`` (a jupyter_client ``KernelManager``) run from
    ``spec``: a fresh provisioner from it (the old one, already cleaned up for the restart,
    gives back its ports), and ``ip`` as the kernel's address where given (a kernel back on
    the server listens on loopback, not at its pod's address). Once: later restarts keep
    the new spec."""
    original = kernel._async_pre_start_kernel

    async def pre_start(**kw: Any) -> Any:
        del kernel._async_pre_start_kernel  # the class's method again
        old = kernel.provisioner
        if old is not None:
            await old.cleanup(restart=False)
        kernel.provisioner = None
        kernel._kernel_spec = spec
        if ip is not None:
            kernel.ip = ip
        return await original(**kw)

    kernel._async_pre_start_kernel = pre_start


def noted(kernel: Any, note: str) -> None:
    """``note`` in the environment of the kernel's next start ('' clears it)."""
    kernel.update_env(env={NOTE_ENV: note})


def moved_event(kernel_id: str, where: str, devices: PodDevices, message: str) -> dict[str, Any]:
    """The kernel_moved event's data (``events/kernel_moved.json``)."""
    return {
        "kernel_id": kernel_id,
        "user": current_user(),  # the server's: its kernels' user
        "where": where,
        "devices": devices.said(),
        "again": devices.again(),
        "message": message,
    }


def checked_claim(spec: Any, where: str) -> dict[str, Any]:
    """A claim spec a kernel sent (``dra.request(..., restart=True)``): a JSON object of
    bounded size with requests; the API server checks the rest when the template is made."""
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), dict):
        raise InvalidInputError(f"{where}: the claim to move with is not a claim spec")
    if len(json.dumps(spec)) > MAX_CLAIM_BYTES:
        raise InvalidInputError(
            f"{where}: the claim to move with is over {MAX_CLAIM_BYTES // 1024} KiB"
        )
    if not spec["devices"].get("requests"):
        raise InvalidInputError(f"{where}: the claim to move with requests no devices")
    return spec


class Host(Protocol):
    """What a move needs of the server extension
    (:class:`~dra_jupyter.server.app.DRAExtensionApp`)."""

    keeping: dict[str, int]

    @property
    def server(self) -> Any: ...

    @property
    def log(self) -> Any: ...

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...


@dataclass
class Moves:
    """The server's kernel moves: into a pod with devices and back (see the module)."""

    host: Host
    kernel_claims: Callable[[str], Awaitable[list[ClaimRecord]]]  # a kernel's live claims
    release: Callable[[list[str], str], Awaitable[None]]  # claims by name, with a reason
    # told of each move done: the kernel_moved event's data
    on_moved: Callable[[dict[str, Any]], None] = lambda data: None
    # a kernel moved back to the server -> the devices it had, to start it on them again
    parked: dict[str, PodDevices] = field(default_factory=dict)
    origins: dict[str, Any] = field(default_factory=dict)  # kernel -> its first kernel spec

    def _kernel(self, kernel_id: str) -> Any:
        km = self.host.server.kernel_manager
        if kernel_id not in km:
            raise KernelNotFoundError(f"kernel {kernel_id} is not running on this server")
        return km.get_kernel(kernel_id)

    async def to_pod(self, kernel_id: str, devices: PodDevices | None = None) -> list[ClaimRecord]:
        """Restart ``kernel_id`` in a pod of its own with ``devices``; by default with the
        devices of the one claim it made (which goes once the pod's own claim holds them),
        the devices of its pod (a new pod), or those it had before it was moved back. On a
        failed start the kernel comes back on the server without devices, and says why at
        its next execution; the error is raised too. The kernel's claims after the move."""
        kernel = self._kernel(kernel_id)
        where = f"kernel {kernel_id}"
        current = pod_devices(kernel.provisioner)
        own_pod = getattr(kernel.provisioner, "made", None) if current else None
        made = [
            r
            for r in await self.kernel_claims(kernel_id)
            if not (own_pod and r.name.startswith(f"{own_pod}-"))
        ]
        if devices is None:
            if len(made) > 1:
                raise InvalidInputError(
                    f"{where}: it made {len(made)} claims ({', '.join(r.name for r in made)}) "
                    "and a kernel pod takes one; release all but one, or request the devices "
                    "together in one dra.request"
                )
            if made:
                devices = PodDevices(claim=dict(made[0].spec.get("spec") or {}))
            else:
                devices = current or self.parked.get(kernel_id)
            if devices is None:
                raise InvalidInputError(
                    f"{where}: it has no devices to restart with; request some first "
                    "(dra.request(gpu=1, restart=True) in the notebook, or the Devices panel)"
                )
        spec = in_pod_spec(self._origin(kernel_id, kernel), devices)
        start_next_with(kernel, spec)
        noted(kernel, "")
        try:
            await self._restart(kernel_id)
        except DraJupyterError as err:
            self.host.log.warning("dra_jupyter: %s: could not move into a pod: %s", where, err)
            await self.to_server(
                kernel_id,
                f"dra: this kernel could not start in a pod with {devices.said()}: "
                f"{str(err).splitlines()[0]}",
                devices,
            )
            raise
        self.parked.pop(kernel_id, None)
        made = [r for r in made if r.name != devices.join]  # a claim it joins stays
        if made:
            await self.release([r.name for r in made], MOVED)
        pod = getattr(kernel.provisioner, "pod_name", None)
        self.host.log.info(
            "dra_jupyter: kernel %s moved into pod %s with %s", kernel_id, pod, devices.said()
        )
        self.on_moved(
            moved_event(
                kernel_id,
                "pod",
                devices,
                f"The kernel runs in pod {pod} with {devices.said()} now; its variables are gone.",
            )
        )
        return await self.kernel_claims(kernel_id)

    async def to_server(self, kernel_id: str, note: str, devices: PodDevices | None) -> None:
        """Restart ``kernel_id`` on the server without devices; its next execution prints
        ``note`` (one line). ``devices``: what restarting it with its devices gives."""
        kernel = self._kernel(kernel_id)
        if devices is not None:
            self.parked[kernel_id] = devices
        start_next_with(kernel, on_server_spec(self._origin(kernel_id, kernel)), ip=LOOPBACK)
        noted(kernel, note)
        try:
            await self._restart(kernel_id)
        finally:
            noted(kernel, "")  # said once: a plain restart later starts a quiet kernel
        self.host.log.info(
            "dra_jupyter: kernel %s is back on the server, without devices", kernel_id
        )
        self.on_moved(
            moved_event(kernel_id, "server", devices or PodDevices(), note.removeprefix("dra: "))
        )

    def _origin(self, kernel_id: str, kernel: Any) -> Any:
        """The kernel spec the kernel was started from, before any move."""
        return self.origins.setdefault(kernel_id, kernel.kernel_spec)

    def forget(self, kernel_id: str) -> None:
        """The kernel shut down."""
        self.parked.pop(kernel_id, None)
        self.origins.pop(kernel_id, None)

    async def _restart(self, kernel_id: str) -> None:
        """Restart the kernel the usual way, then wait until the new one answers. Not with
        the future jupyter_server's restart returns: a moved kernel has new ports (how
        jupyter_server learns that its address changed), and that future is then never
        resolved (its restart cleanup runs at once). Then the kernel's open websockets are
        closed: their channels lead to the old address, and the frontends reconnect."""
        km = self.host.server.kernel_manager
        self.host.keeping[kernel_id] = self.host.keeping.get(kernel_id, 0) + 1
        try:
            ready = await km.restart_kernel(kernel_id)
        except DraJupyterError:
            self.host.keeping[kernel_id] -= 1
            raise
        except Exception as err:
            self.host.keeping[kernel_id] -= 1
            raise KernelRestartError(f"kernel {kernel_id} could not be restarted ({err})") from err
        ready.add_done_callback(lambda done: done.cancelled() or done.exception())
        kernel = km.get_kernel(kernel_id)
        client = kernel.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=ANSWER_S)
        except RuntimeError as err:  # also jupyter_client's timeout
            raise KernelRestartError(
                f"kernel {kernel_id} was restarted but did not answer ({err}); check the server log"
            ) from err
        finally:
            client.stop_channels()
        reconnect_websockets(kernel_id)


def reconnect_websockets(kernel_id: str) -> None:
    """Close the open websockets of ``kernel_id`` (jupyter_server's, by session), so that
    their frontends connect again, to the kernel's address now."""
    try:
        from jupyter_server.services.kernels.connection.channels import (  # noqa: PLC0415
            ZMQChannelsWebsocketConnection,
        )
    except ImportError:  # another jupyter_server: the frontends reconnect by themselves
        return
    sessions = getattr(ZMQChannelsWebsocketConnection, "_open_sessions", {})
    for key, handler in list(sessions.items()):
        if key.startswith(f"{kernel_id}:"):
            handler.close()

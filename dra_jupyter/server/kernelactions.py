"""The kernel actions: what the server does with its kernels' claims when a kernel starts,
restarts or shuts down (jupyter_server's ``kernel_actions`` events), when the claim of a
kernel in a pod of its own is released, and when a kernel or the REST API asks for a
restart with devices.

A kernel that starts or restarts is watched (its cells: :class:`ExecutionWatcher`); a
plain restart and a shutdown release its claims; a restart with claims keeps them and
starts the kernel with their environment, or, where devices go to pods (Kubernetes), moves
it into a pod with them (:mod:`dra_jupyter.server.moves`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from jupyter_server.serverapp import ServerApp

from dra_jupyter.errors import DraJupyterError, InvalidInputError, KernelRestartError
from dra_jupyter.outofservice import DEVICE_MOVED
from dra_jupyter.server.claims import Caller, ClaimService, release_message
from dra_jupyter.server.kernels import ExecutionWatcher
from dra_jupyter.server.moves import MOVED, Moves, PodDevices, checked_claim, pod_devices
from dra_jupyter.types import ClaimRecord

T = TypeVar("T")

KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


class Host(Protocol):
    """What the kernel actions need of the server extension
    (:class:`~dra_jupyter.server.app.DRAExtensionApp`)."""

    keeping: dict[str, int]  # kernel -> restarts with claims under way (moves.py too)

    @property
    def server(self) -> ServerApp: ...

    @property
    def log(self) -> Any: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def idle_timeout(self) -> float: ...

    @property
    def gpu_idle_timeout(self) -> float: ...

    def live_kernels(self) -> list[str]: ...

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def read(self, fn: Callable[..., T], *args: Any) -> T: ...


class KernelActions:
    """The server's kernels: followed as they start, restart and stop, restarted with their
    claims, moved (see the module)."""

    def __init__(
        self,
        host: Host,
        service: ClaimService,
        watcher: ExecutionWatcher,
        on_moved: Callable[[dict[str, Any]], None],
    ) -> None:
        self.host = host
        self.service = service
        self.watcher = watcher
        self.moves = Moves(host, self.kernel_claims, self.release_named, on_moved)
        self.known_kernels: set[str] = set()  # every kernel this server has run
        self.leaving: set[str] = set()  # joiners whose idle pod is being stopped

    def watch(self, kernel_id: str) -> None:
        """Follow the cells of ``kernel_id`` (once it runs on this server)."""
        self.known_kernels.add(kernel_id)
        km = self.host.server.kernel_manager
        if kernel_id in km:
            self.watcher.attach(km, kernel_id)

    def _not_busy(self, kernel_id: str) -> None:
        """A restart during a cell: jupyter_server keeps that cell's ``busy`` (it means to
        say ``starting`` after a restart and sets it on its manager, not on the kernel), and
        a new kernel's first status is not one it tracks; busy for ever, the kernel would
        never be idle (its claims, a joiner's pod) and JupyterLab would say Busy. The new
        kernel runs nothing yet: ``starting``, which jupyter_server turns into ``idle`` at
        the kernel's next status."""
        km: Any = self.host.server.kernel_manager  # jupyter_server's methods are untyped
        kernel: Any = km.get_kernel(kernel_id) if kernel_id in km else None
        if getattr(kernel, "execution_state", None) == "busy":
            kernel.execution_state = "starting"

    async def kernel_claims(self, kernel_id: str) -> list[ClaimRecord]:
        records = await self.host.read(partial(self.service.live_claims, wait=False))
        return [r for r in records if r.owner.kernel_id == kernel_id]

    async def release_named(self, names: list[str], reason: str) -> None:
        await self.host.call(
            self.service.live_claims, lambda r: reason if r.name in names else None
        )

    async def on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """A ``kernel_actions`` event: a kernel started, restarted or shut down."""
        kernel_id: str | None = data.get("kernel_id")
        if self.host.stopped or not kernel_id or data.get("status") != "success":
            return
        action = data.get("action")
        keeping = self.host.keeping
        if action == "start":
            self.watch(kernel_id)
        elif action == "restart":
            # a kernel in a pod has a new address after a restart: follow the new one
            self.watcher.detach(kernel_id)
            self.watch(kernel_id)
            self._not_busy(kernel_id)
            if keeping.get(kernel_id, 0) > 0:
                keeping[kernel_id] -= 1  # our own restart with claims
                return
            # a plain restart (or the restarter's, after the kernel died) ends the claims
            await self.host.call(
                self.service.live_claims,
                lambda r: "kernel-shutdown" if r.owner.kernel_id == kernel_id else None,
            )
        elif action == "shutdown":
            self.watcher.detach(kernel_id)
            self.moves.forget(kernel_id)
            await self.host.call(
                self.service.live_claims,
                lambda r: "kernel-shutdown" if r.owner.kernel_id == kernel_id else None,
            )

    async def on_claim_released(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """A kernel whose devices are its own pod's (the ``dra-kubernetes`` provisioner says
        so with ``devices_in_pod``) leaves its pod when its claim is released, idle or by its
        user: deleting a claim that a pod uses frees nothing until the pod ends. It comes
        back on the server without devices, and its next execution says why and how to get
        them again (:mod:`dra_jupyter.server.moves`)."""
        kernel_id = data.get("kernel_id")
        reason = str(data.get("reason") or "")
        if self.host.stopped or not kernel_id or reason in ("kernel-shutdown", MOVED):
            return
        km = self.host.server.kernel_manager
        if kernel_id not in km:
            return
        devices = pod_devices(getattr(km.get_kernel(kernel_id), "provisioner", None))
        if devices is None:
            return
        why = release_message(reason, self.host.idle_timeout, self.host.gpu_idle_timeout)
        again = devices.again()
        note = (
            f"dra: this kernel's pod with {devices.said()} was stopped and its claim "
            f"{data.get('claim')} released ({why}), so its variables are gone; "
            + (f"{again} starts it again on such devices" if again else "to start it again")
            + " (in JupyterLab: Restart kernel with its devices)"
        )
        self.host.log.info(
            "dra_jupyter: kernel %s leaves its pod: its claim %s was released (%s)",
            kernel_id,
            data.get("claim"),
            reason,
        )
        try:
            await self.moves.to_server(kernel_id, note, devices)
        except DraJupyterError as err:
            self.host.log.warning("dra_jupyter: kernel %s: %s", kernel_id, err)

    def joiners(self) -> dict[str, PodDevices]:
        """The live kernels in pods of a claim they joined (``dra.request(join=...)``), with
        what they joined, but those leaving their pod now."""
        km = self.host.server.kernel_manager
        found = {}
        for kernel_id in self.host.live_kernels():
            if kernel_id in self.leaving or kernel_id not in km:
                continue
            devices = pod_devices(getattr(km.get_kernel(kernel_id), "provisioner", None))
            if devices is not None and devices.join:
                found[kernel_id] = devices
        return found

    async def leave_joined(self, kernel_id: str, devices: PodDevices, reason: str) -> None:
        """A joiner is idle (``reason``): its own pod is stopped and the kernel comes back on
        the server without devices, its next cell saying so; the claim it joined is not its
        own, so it stays (its maker's rules release it)."""
        why = release_message(reason, self.host.idle_timeout, self.host.gpu_idle_timeout)
        note = (
            f"dra: this kernel's pod on {devices.said()} was stopped ({why}), so its variables "
            f"are gone; the claim stays, its maker's; {devices.again()} starts it again on it "
            "(in JupyterLab: Restart kernel with its devices)"
        )
        self.host.log.info(
            "dra_jupyter: kernel %s leaves its pod on %s (%s); the claim stays",
            kernel_id,
            devices.said(),
            reason,
        )
        self.leaving.add(kernel_id)
        try:
            await self.moves.to_server(kernel_id, note, devices)
        except DraJupyterError as err:
            self.host.log.warning("dra_jupyter: kernel %s: %s", kernel_id, err)
        finally:
            self.leaving.discard(kernel_id)

    async def restart_asked(self, kernel_id: str, asked: dict[str, Any]) -> None:
        """A kernel asked for a restart with devices (``dra.request(..., restart=True)``):
        into a pod with the claim it describes (Kubernetes), or with the claims it made
        (their environment). What goes wrong is in the server log and, for a move, at the
        kernel's next execution."""
        try:
            if isinstance(asked.get("join"), str) and asked["join"]:
                await self.moves.to_pod(kernel_id, PodDevices(join=asked["join"]))
            elif "claim" in asked:
                where = f"kernel {kernel_id}"
                request = asked.get("request")
                devices = PodDevices(
                    claim=checked_claim(asked["claim"], where),
                    request=request if isinstance(request, dict) else {},
                )
                await self.moves.to_pod(kernel_id, devices)
            else:
                await self.restart_with_claims(kernel_id)
        except DraJupyterError as err:
            self.host.log.warning("dra_jupyter: kernel %s asked for a restart: %s", kernel_id, err)

    async def restart_with_claims(self, kernel_id: str) -> tuple[list[ClaimRecord], dict[str, str]]:
        """Restart a kernel of this server keeping its claims, with their environment
        (``CUDA_VISIBLE_DEVICES`` and friends) in the new kernel's. Returns the claims and
        that environment."""
        if not self.service.backend.capabilities.devices_here:
            # Kubernetes: the devices go to pods, so the kernel moves into one with them
            return await self.moves.to_pod(kernel_id), {}
        records = await self.host.call(self.service.adopt_kernel_claims, kernel_id)
        env = await self.host.call(self.service.environment, records)
        km: Any = self.host.server.kernel_manager  # jupyter_server's methods are untyped
        # jupyter_client's update_env: the launch environment of the next (re)start
        km.get_kernel(kernel_id).update_env(env=env)
        keeping = self.host.keeping
        keeping[kernel_id] = keeping.get(kernel_id, 0) + 1
        try:
            ready = await km.restart_kernel(kernel_id)
        except Exception as err:
            keeping[kernel_id] -= 1  # no successful restart event will consume it
            raise KernelRestartError(
                f"kernel {kernel_id} could not be restarted ({err}); its claims are kept, "
                "held by the server until the kernel shuts down or is idle"
            ) from err
        try:
            await ready  # the restarted kernel answered kernel_info
        except (RuntimeError, TimeoutError) as err:
            raise KernelRestartError(
                f"kernel {kernel_id} was restarted but did not answer ({err}); check the server log"
            ) from err
        self.service.kernel_envs.restarted_with(kernel_id, records)
        return records, env

    async def move_claim(
        self, caller: Caller, name: str
    ) -> tuple[str, list[ClaimRecord], dict[str, str]]:
        """Move: the claim's kernel gets an equivalent device instead of one taken out of
        service, and restarts with it (on Kubernetes, in a new pod: its claim from the same
        request avoids the device). Returns the kernel, its claims and their environment."""
        record = await self.host.read(self.service.claim, caller, name)
        kernel_id = record.owner.kernel_id
        if not kernel_id or kernel_id not in set(self.host.live_kernels()):
            raise InvalidInputError(
                f"claim {name}: it belongs to no kernel of this server, so none can restart "
                "on another device; release it and request again"
            )
        if self.service.backend.capabilities.devices_here:
            await self.host.call(self.service.move, caller, name, DEVICE_MOVED)
        records, env = await self.restart_with_claims(kernel_id)
        return kernel_id, records, env

"""GPU kernels on Kubernetes: a kernel provisioner that runs each kernel in a pod of its own
with its devices' claim (``jupyter_client.kernel_provisioners`` entry point
``dra-kubernetes``).

A kernel spec names it and says what the kernel needs::

    {"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
     "display_name": "Python 3 · 1x H200", "language": "python",
     "interrupt_mode": "message",
     "metadata": {"kernel_provisioner": {"provisioner_name": "dra-kubernetes",
                  "config": {"request": {"gpu": 1, "model": "H200"}}}}}

Starting the kernel makes, in the user's namespace (:mod:`dra_jupyter.kube.kernels.pods`), a
ResourceClaimTemplate from ``request`` (``dra.request`` keywords), a Secret with the
connection (ports and key, chosen here as jupyter_client's own provisioner chooses them) and
the Pod: the server's own image by default, its service account, the notebook's working
directory, ``spec.resourceClaims`` from the template. kube-scheduler allocates the claim and
places the pod; once it runs, the server connects to the kernel at the pod's IP. While the
pod cannot be placed, the scheduler's reason is logged; at ``start_timeout`` the start fails
with that reason and our explain. Stopping the kernel deletes the pod, and with it the claim
(the resourceclaim controller), the Secret and the template: the devices are free at once.
A pod that fails logs its last lines (and a first start's error carries them); when
jupyter_client's restarter gives up on the kernel, its last pod and objects and its
connection file are deleted then (jupyter_server forgets a dead kernel).
The claim is labelled as the server extension labels its kernels' claims: when the
extension releases it (idle release, its user from the Devices panel) it stops the kernel
(:attr:`DRAKernelProvisioner.devices_in_pod`), since only that frees the devices.
With ``join`` (a claim that exists, instead of ``request``) the pod uses that claim by name,
beside the other pods on it: stopping the kernel deletes its pod only, never the claim.

The kernel's files: the volume of the notebook's folder in the server's pod is mounted in
the kernel's where the storage lets two pods share it (on the server's node for a
ReadWriteOnce claim); where it cannot, the start is refused in one line before anything is
made (:mod:`dra_jupyter.kube.kernels.volumes`; :attr:`DRAKernelProvisioner.files` ``"ignore"``
starts it without).

Signals cannot reach a process in another pod: kernel specs use ``interrupt_mode: message``;
SIGTERM and SIGKILL delete the pod (with and without a grace period).

Why not gateway-provisioners' KubernetesProvisioner: see docs/kubernetes.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
from typing import Any, cast

from jupyter_client.connect import KernelConnectionInfo, LocalPortCache
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from traitlets import Dict, Enum, Float, List, Unicode

from dra_jupyter.errors import ClusterError, InvalidInputError
from dra_jupyter.identity import current_user
from dra_jupyter.kernel.notes import NOTE_ENV
from dra_jupyter.kube import evictions, kueue
from dra_jupyter.kube.backend import default_namespace
from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.kernels.pods import Ending, KernelPods, KernelPodSpec, ending, kernel_claim
from dra_jupyter.kube.kernels.volumes import Files, Unshared
from dra_jupyter.model.takenout import HeldDevice, evicted_for_device_taint
from dra_jupyter.settings import Settings, default_server_id
from dra_jupyter.sharing.joins import claim_problem, name_problem
from dra_jupyter.types import Owner

NAME = "dra-kubernetes"  # the entry point's name, a kernel spec's provisioner_name
PORTS = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
OWN_ENV = "DRA_JUPYTER_"  # the prefix of the variables the server gives its kernels
POLL_EVERY_S = 1.0  # the pod is read at most this often by poll()
SHUTDOWN_WAIT_S = 2.0  # for the kernel to stop by itself before its pod is deleted


def saying(cmd: list[str]) -> list[str]:
    """``cmd`` run by :mod:`dra_jupyter.kernel.notes` (which prints its note once) where it is
    ipykernel's launcher; else as it is."""
    if "ipykernel_launcher" not in cmd:
        return cmd
    return ["dra_jupyter.kernel.notes" if part == "ipykernel_launcher" else part for part in cmd]


class DRAKernelProvisioner(KernelProvisionerBase):
    """Runs the kernel in a pod with its devices (see the module)."""

    request = Dict(
        config=True,
        help="the kernel's devices, as dra.request keywords ({}: a pod without devices)",
    )
    claim = Dict(
        config=True,
        help="the kernel's devices as a ResourceClaim's spec, instead of request (what a "
        "kernel that moves into a pod with the claim it made gets)",
    )
    join = Unicode(
        "",
        config=True,
        help="a claim of the namespace that exists, which the kernel's pod uses by name beside "
        "the other pods that use it, instead of request (dra.request(join=...)); the kernel "
        "never deletes it",
    )
    image = Unicode(
        "", config=True, help="the kernel pod's image ('': DRA_JUPYTER_IMAGE, else the server's)"
    )
    namespace = Unicode(
        "", config=True, help="the namespace ('': DRA_JUPYTER_NAMESPACE, else the server's)"
    )
    kubeconfig = Unicode(
        "", config=True, help="a kubeconfig ('': DRA_JUPYTER_KUBECONFIG, else in-cluster)"
    )
    service_account = Unicode(
        "", config=True, help="the pod's service account ('': the server pod's, else default)"
    )
    node_selector = Dict(config=True, help="the pod's nodeSelector")
    env_keep = List(
        Unicode(),
        config=True,
        help="variables of the server's environment the kernel gets too (besides the kernel "
        "spec's env)",
    )
    start_timeout = Float(300.0, config=True, help="seconds for the pod to be placed and to start")
    queue = Unicode(
        "",
        config=True,
        help="a Kueue LocalQueue: a kernel pod with devices waits there until the queue's "
        "quota admits it ('': DRA_JUPYTER_KUEUE_QUEUE, which a hub sets from dra_kueue_queue)",
    )
    server_pod = Unicode(
        "",
        config=True,
        help="the server's own pod, whose volume with the notebook's folder the kernel pod "
        "mounts ('': HOSTNAME in a cluster; none outside one)",
    )
    files = Enum(
        ("require", "ignore"),
        "require",
        config=True,
        help="when the kernel pod cannot mount the notebook's folder: 'require' refuses the "
        "start, in one line; 'ignore' starts it without (its files are not the notebook's)",
    )

    # the kernel's devices are its pod's: the server extension stops the kernel when its
    # claim is released (idle, by its user), which is what frees them
    devices_in_pod = True
    pod_name: str | None = None  # the running pod's (has_process)
    made: str | None = None  # the objects' name, until cleanup deletes them
    ended: Ending | None = None  # how the pod ended, once it has
    # the running pod's devices (read at its first poll: its claims go with the pod) and,
    # after a pod stopped because one was taken out, what its next start says once
    held: tuple[HeldDevice, ...] | None = None
    note: str = ""
    _pods: KernelPods | None = None
    _polled: tuple[float, int | None] = (0.0, None)
    _ports: dict[str, int] = {}  # noqa: RUF012  # replaced, never changed in place
    _restarting = False  # between a restart's cleanup and its launch
    _removal: asyncio.Task[None] | None = None  # _given_up's (a reference keeps it running)

    # --- start ----------------------------------------------------------------------------

    @property
    def has_process(self) -> bool:
        return self.pod_name is not None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """The connection (ports free here too: in the test environment the kernel runs on
        this machine) and the kernel's argv, with ``{connection_file}`` left for the pod."""
        km = self.parent
        assert km is not None, "a provisioner is made by its kernel manager"
        kwargs.pop("transport_encryption", None)
        extra = kwargs.pop("extra_arguments", [])
        if not self._ports:  # once: a restart (even with "new ports") keeps them
            cache = LocalPortCache.instance()
            self._ports = {port: cache.find_available_port("127.0.0.1") for port in PORTS}
        for port, number in self._ports.items():
            setattr(km, port, number)
        info: dict[str, Any] = {
            **self._ports,
            "ip": "",
            "key": km.session.key,
            "transport": "tcp",
            "signature_scheme": km.session.signature_scheme,
            "kernel_name": km.kernel_name,
        }
        self.connection_info = cast(KernelConnectionInfo, info)
        return await super().pre_launch(cmd=[*self.kernel_spec.argv, *extra], **kwargs)

    def _kernel_pods(self, settings: Settings) -> KernelPods:
        if self._pods is None:
            kubeconfig = self.kubeconfig or settings.kubeconfig or None
            namespace = self.namespace or settings.namespace or default_namespace(kubeconfig)
            self._pods = KernelPods(api_client(kubeconfig), namespace)
        return self._pods

    def _spec(self, cmd: list[str], **kwargs: Any) -> KernelPodSpec:
        settings = Settings.from_env()
        pods = self._kernel_pods(settings)
        own_name = self.server_pod or (
            os.environ.get("HOSTNAME", "") if os.environ.get("KUBERNETES_SERVICE_HOST") else ""
        )
        own = pods.own_pod(own_name) if own_name else None  # the server's pod
        own_spec = (own or {}).get("spec") or {}
        image = self.image or settings.image
        if not image and own_spec.get("containers"):
            image = str(own_spec["containers"][0].get("image") or "")
        if not image:
            raise InvalidInputError(
                f"kernel {self.kernel_id}: no image for its pod; set image in the kernel "
                "spec's provisioner config or DRA_JUPYTER_IMAGE (in a server pod, its own "
                "image is the default)"
            )
        env = kwargs.get("env") or {}
        kept = {k: str(env[k]) for k in [*self.kernel_spec.env, *self.env_keep] if k in env}
        # the server's settings for dra_jupyter in the kernel (its id, backend, namespace),
        # so that dra.request there is this kernel's (restart=True moves it again)
        kept.update(
            (k, str(v)) for k, v in env.items() if k.startswith(OWN_ENV) and k != NOTE_ENV and v
        )
        if self.note:  # the kernel says why it started again, at its first execution
            kept[NOTE_ENV] = self.note
            cmd = saying(cmd)
        if self.join:  # said now, in one line, rather than waited for until start_timeout
            problem = name_problem(self.join) or claim_problem(
                self.join, pods.namespace, pods.claim(self.join)
            )
            if problem is not None:
                raise InvalidInputError(f"kernel {self.kernel_id}: {problem}")
        spec = KernelPodSpec(
            name=f"kernel-{self.kernel_id[:8]}-{secrets.token_hex(3)}",
            namespace=pods.namespace,
            image=image,
            argv=cmd,
            user=current_user(),
            kernel_id=self.kernel_id,
            request={} if self.join else dict(self.request),
            claim=None if self.join else dict(self.claim) or None,
            join=self.join,
            env=kept,
            working_dir=str(kwargs["cwd"]) if kwargs.get("cwd") else None,
            service_account=self.service_account or own_spec.get("serviceAccountName"),
            node_selector=dict(self.node_selector) or None,
            classes=pods.device_classes() if self.request and not (self.claim or self.join) else (),
            server_id=settings.server_id or default_server_id(),
            owner=Owner.current(self.kernel_id),
            queue=self.queue or settings.kueue_queue,
        )
        if spec.queue and spec.has_template:  # what Kueue could never admit: said now
            refused = kueue.refusal(
                f"kernel {self.kernel_id}", spec.queue, dict(kernel_claim(spec)["spec"])
            )
            if refused and kueue.served(pods.api):  # without Kueue, the label does nothing
                raise InvalidInputError(refused)
        if not own_name or not spec.working_dir:  # a server in no pod: nothing to mount
            return spec
        files = (  # the server pod's volume of the notebook's folder, mounted alike
            pods.files(spec, own)
            if own is not None
            else Unshared(
                f"the server's pod {own_name} cannot be read, so neither can the volume of its "
                "folder; grant get on pods (deploy/hub-rbac.yaml) or name it in server_pod"
            )
        )
        if isinstance(files, Files):
            self.log.info("kernel %s: its folder is on %s", self.kernel_id, files.where)
            return dataclasses.replace(spec, files=files)
        if self.files == "require":
            raise InvalidInputError(f"kernel {self.kernel_id}: {files.reason}")
        self.log.warning(
            "kernel %s: %s; starting it without its folder (files='ignore')",
            self.kernel_id,
            files.reason,
        )
        return spec

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        spec = await asyncio.to_thread(self._spec, cmd, **kwargs)
        pods = self._pods
        assert pods is not None
        connection = {k: v for k, v in self.connection_info.items() if k != "ip"}
        key = connection["key"]
        connection["key"] = key.decode() if isinstance(key, bytes) else key
        self.log.info("kernel %s: starting pod %s/%s", self.kernel_id, spec.namespace, spec.name)
        await asyncio.to_thread(pods.create, spec, json.dumps(connection))
        self.made, self.ended = spec.name, None
        restarting, self._restarting = self._restarting, False
        self._watch_restarter()
        try:
            ip = await asyncio.to_thread(
                pods.wait_running,
                spec.name,
                self.start_timeout,
                spec.request or None,
                lambda why: self.log.info("kernel %s: pod %s: %s", self.kernel_id, spec.name, why),
            )
        except ClusterError as error:
            ended = await asyncio.to_thread(pods.pod, spec.name) if restarting else None
            if ended is None or ending(ended) is None:
                await asyncio.to_thread(pods.delete, spec.name)
                self.made = None
                raise
            # a restart whose pod ended before it ran: the kernel ends as if it had run, so
            # that the restarter counts it and gives up at its limit (an error raised to it
            # is only logged, and it would start the kernel again without end)
            self.log.warning("kernel %s: %s", self.kernel_id, error)
            self.pod_name = spec.name
            self._polled = (0.0, None)
            self.connection_info["ip"] = "127.0.0.1"  # nothing answers there: it ended
            return self.connection_info
        except BaseException:
            await asyncio.to_thread(pods.delete, spec.name)
            self.made = None
            raise
        self.pod_name = spec.name
        self._polled = (0.0, None)
        self.held, self.note = None, ""
        self.connection_info["ip"] = ip
        self.log.info("kernel %s: pod %s runs at %s", self.kernel_id, spec.name, ip)
        return self.connection_info

    def _watch_restarter(self) -> None:
        """Be told when jupyter_client's restarter gives up on the kernel (its "dead"
        callback; there is a restarter from the kernel's first restart on)."""
        km = self.parent
        if km is None:
            return
        km.remove_restart_callback(self._given_up, "dead")  # once, however many starts
        km.add_restart_callback(self._given_up, "dead")

    def _given_up(self) -> None:
        """The restarter gave up: the kernel stays dead until its user restarts it, so its
        last pod, template, Secret and connection file are deleted now (jupyter_server
        keeps the dead kernel, and would delete them only at its shutdown)."""
        self.log.warning(
            "kernel %s: its restarts failed, so its pod %s, claim template, Secret and "
            "connection file are deleted; the pod ended: %s",
            self.kernel_id,
            self.made,
            self.ended or "not known",
        )
        self._removal = asyncio.get_running_loop().create_task(self._remove_given_up())

    async def _remove_given_up(self) -> None:
        await self.cleanup(restart=False)
        km = self.parent
        if km is not None:
            km.cleanup_connection_file()

    # --- life -----------------------------------------------------------------------------

    async def poll(self) -> int | None:
        """None while the pod runs; else its exit code (1 when not known: deleted)."""
        if self.pod_name is None or self._pods is None:
            return 0
        loop = asyncio.get_running_loop()
        when, code = self._polled
        if loop.time() - when < POLL_EVERY_S:
            return code
        pods = self._pods
        pod = await asyncio.to_thread(pods.pod, self.pod_name)
        if self.held is None and pod is not None:
            self.held = await asyncio.to_thread(evictions.held_by, pods.api, pods.namespace, pod)
        before = self.ended
        if pod is None:
            self.ended = self.ended or Ending(None, "the pod was deleted")
        else:
            self.ended = ending(pod) or (
                Ending(None, "the pod is being deleted")
                if pod["metadata"].get("deletionTimestamp")
                else None
            )
            if (
                self.ended is not None
                and before is not None
                and before.exit_code == self.ended.exit_code
            ):  # the same ending, as said once (with its last lines, or why it was stopped)
                self.ended = before
            elif self.ended is not None and self.ended.failed:
                self.ended = await asyncio.to_thread(pods.with_last_lines, pod, self.ended)
        if (
            self.ended is not None
            and self.held
            and not self.note
            and (pod is None or evicted_for_device_taint(pod))
        ):
            # the device taint eviction controller stops a pod whose device was taken out
            # (gone already, the pod cannot say: what its devices carry now does)
            why = await asyncio.to_thread(evictions.taken_out_now, pods.api, self.held)
            if why is not None:
                self.ended = Ending(self.ended.exit_code, why)
                self.note = (
                    f"dra: this kernel's pod was stopped because {why}, so its variables are "
                    "gone; it runs again in a new pod with devices of the same request"
                )
        if self.ended is not None:
            code = 1 if self.ended.exit_code is None else self.ended.exit_code
            if self.ended != before:  # said once
                log = self.log.warning if self.ended.failed else self.log.info
                log("kernel %s: pod %s ended: %s", self.kernel_id, self.pod_name, self.ended)
        else:
            code = None
        self._polled = (loop.time(), code)
        return code

    async def wait(self) -> int | None:
        while (code := await self.poll()) is None:
            await asyncio.sleep(0.2)
        self.pod_name = None
        return code

    async def send_signal(self, signum: int) -> None:
        if signum == signal.SIGKILL:
            await self.kill()
        elif signum == signal.SIGTERM:
            await self.terminate()
        elif signum != 0:
            self.log.warning(
                "kernel %s: signal %d cannot reach a pod; use interrupt_mode 'message' in "
                "its kernel spec",
                self.kernel_id,
                signum,
            )

    async def _delete_pod(self, grace: int) -> None:
        if self.pod_name is not None and self._pods is not None:
            await asyncio.to_thread(self._pods.delete, self.pod_name, grace)
            self._polled = (0.0, None)

    async def kill(self, restart: bool = False) -> None:
        await self._delete_pod(0)

    async def terminate(self, restart: bool = False) -> None:
        await self._delete_pod(5)

    async def cleanup(self, restart: bool = False) -> None:
        """Delete the pod and its objects (the claim goes with the pod); on the kernel's
        end, give its ports back and close the client."""
        if self.made is not None and self._pods is not None:
            await asyncio.to_thread(self._pods.delete, self.made)
        self.made = self.pod_name = None
        self._restarting = restart
        if not restart:
            cache = LocalPortCache.instance()
            for number in self._ports.values():
                cache.return_port(number)
            self._ports = {}
            if self._pods is not None:
                self._pods.close()
                self._pods = None

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        """At most :data:`SHUTDOWN_WAIT_S`: the pod's claim goes when the pod goes, so a
        kernel that does not stop on its shutdown request is deleted soon (its container
        still gets the pod's grace period), and idle release stays bounded."""
        return min(recommended, SHUTDOWN_WAIT_S)

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        return self.start_timeout + recommended

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info["pod"] = self.made
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.made = self.pod_name = provisioner_info.get("pod")

"""``dra.run(...)``: work in a Pod that uses a claim of this session.

The pod is planned first (:func:`plan`: its command and image, refused before any claim is
made; :mod:`.facet` plans and starts every run), then the session makes the claim
(``dra.request`` rules, refused at once when it could never be met) and :func:`launch` a
Pod with ``spec.resourceClaims`` and the container's ``resources.claims``. We wait for
kube-scheduler to place it (its reason on stderr while it cannot; at the deadline its
reason and our own ``explain`` against the cluster's slices), report the devices the claim
got, then wait for the node to start the container and stream its logs until it ends. The
claim is released when the pod ends, when it cannot be placed, and on an interrupt (the
pod deleted).

Placed but not started within ``start_timeout`` (a node still pulling the image, or a
simulated node without a kubelet), :func:`launch` returns a :class:`Run` in the state
``waiting for the node to start the pod``: the claim stays held; ``run.logs(follow=True)``
follows it later, ``run.wait()`` waits for its end (and releases the claim then),
``run.cancel()`` deletes the pod and releases the claim. The run is a
:class:`dra_jupyter.types.runs.Run` as every backend's is (:mod:`.podrun`).
"""

from __future__ import annotations

import inspect
import os
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.claimspec import RUN
from dra_jupyter.errors import AllocationError, InvalidInputError
from dra_jupyter.kube.claims import KERNEL_LABEL, USER_LABEL
from dra_jupyter.kube.connect import to_wire
from dra_jupyter.kube.pods import PodLauncher, workload_pod
from dra_jupyter.kube.runs.jobs import COMPONENT_LABEL, POD_COMPONENT
from dra_jupyter.kube.runs.podrun import WAITING, PodRun, delete_pod
from dra_jupyter.types import Command, HeldClaim, label_value

if TYPE_CHECKING:
    from dra_jupyter.kube.access import ClusterAccess

Run = PodRun  # what dra.run returns for a bare pod


@dataclass(frozen=True)
class Workload:
    """What a ``dra.run`` pod runs before its claim exists: its command and image, what it
    is called (None: after its claim; a Job's: generated) and where it may go. Made by
    :func:`plan`, which refuses what could not start, so that no claim is made for it."""

    argv: list[str]
    image: str
    name: str | None = None
    node_selector: Mapping[str, str] | None = None


def pod_command(command: Command) -> list[str]:
    """A string runs under ``sh -c``, a list as it is, a function as ``python -c`` (its source,
    then a call: it must be self-contained, imports inside); None: the image's own command."""
    if command is None:
        return []
    if isinstance(command, str):
        return ["sh", "-c", command]
    if callable(command):
        try:
            source = textwrap.dedent(inspect.getsource(command))
        except (OSError, TypeError) as error:
            raise InvalidInputError(
                f"the source of {command!r} is not available ({error}); pass a "
                "function defined in a cell or a file, or a command string"
            ).said_by(RUN) from error
        name = getattr(command, "__name__", "")
        if not name.isidentifier():
            raise InvalidInputError(
                "pass a named function (def ...), not a lambda, or a command string"
            ).said_by(RUN)
        return ["python", "-c", f"{source}\n{name}()\n"]
    return [str(part) for part in command]


def own_image(backend: ClusterAccess) -> str:
    """The image of the notebook's pod (its first container), when running in one."""
    pod = os.environ.get("HOSTNAME", "")
    if not pod or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return ""
    try:
        read = client.CoreV1Api(backend.api).read_namespaced_pod(pod, backend.namespace)
    except (ApiException, urllib3.exceptions.HTTPError):
        return ""  # no right to read our own pod: the caller asks for an image
    containers = to_wire(backend.api, read).get("spec", {}).get("containers") or []
    return str(containers[0].get("image", "")) if containers else ""


def plan(
    backend: ClusterAccess,
    command: Command,
    *,
    image: str | None,
    name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> Workload:
    """The pod of ``command``, or InvalidInputError before any claim is made: a command that
    cannot be run, or no image (``image``, else the notebook pod's own)."""
    argv = pod_command(command)
    image = image or own_image(backend)
    if not image:
        raise InvalidInputError(
            "no image for the pod; pass image='...' or set DRA_JUPYTER_IMAGE "
            "(in a notebook pod, its own image is the default)"
        ).said_by(RUN)
    return Workload(argv, image, name, dict(node_selector) if node_selector else None)


def launch(
    backend: ClusterAccess,
    plan: Workload,
    claim: HeldClaim,
    *,
    timeout: float,
    start_timeout: float | None,
    out: IO[str] = sys.stdout,
) -> Run:
    """Start ``plan``'s pod with ``claim``, wait for it to be placed, then follow it (see the
    module doc); the claim is released when the pod cannot be placed and on an interrupt."""
    pod = plan.name or f"{claim.name}-run"
    labels = {USER_LABEL: label_value(backend.owner.user), COMPONENT_LABEL: POD_COMPONENT}
    if backend.owner.kernel_id:
        labels[KERNEL_LABEL] = label_value(backend.owner.kernel_id)
    launcher = PodLauncher(backend.api, backend.namespace)
    created = False
    try:
        launcher.create(
            workload_pod(
                pod,
                [claim.name],
                image=plan.image,
                command=plan.argv,
                namespace=backend.namespace,
                labels=labels,
                node_selector=plan.node_selector,
            )
        )
        created = True
        print(f"dra.run: pod {pod} created, waiting for the scheduler", file=sys.stderr)
        try:
            placement = launcher.wait_placed(
                pod,
                [claim.name],
                timeout,
                on_wait=lambda why: print(f"dra.run: pod {pod}: {why}", file=sys.stderr),
            )
        except AllocationError as error:
            explanation = claim.explain()
            raise AllocationError(
                f"dra.run: {error}\ndra-jupyter's allocator on the cluster's slices:\n"
                + explanation.summary(),
                explanation,
            ) from None
        allocation = placement.allocations.get(claim.name, {})
        results = allocation.get("devices", {}).get("results", [])
        devices = [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]
        got = ", ".join(devices) if devices else "devices released already (the pod ended)"
        print(f"dra.run: pod {pod} placed on {placement.node} with {got}", file=sys.stderr)
        run = Run(backend, pod, claim, node=placement.node, devices=devices, out=out)
    except BaseException:  # an interrupt too: nothing half-made is left behind
        try:
            if created:
                delete_pod(backend, pod)
        finally:
            claim.release()
        raise
    if run.follow_start(start_timeout) == WAITING:
        print(
            f"dra.run: pod {pod} is {WAITING} (claim {claim.name} stays held; "
            "run.logs(follow=True) follows it, run.cancel() deletes it)",
            file=sys.stderr,
        )
    return run

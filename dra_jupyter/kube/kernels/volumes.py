"""The kernel's files: what a kernel pod mounts so that it sees the notebook's folder, decided
from the server's own pod (pure: wire dicts in, a decision out).

The notebook's folder (the kernel's working directory) is on one of the server container's
volume mounts, typically the user's PersistentVolumeClaim at the home folder. That one mount,
and nothing else of the server's pod (no other volume, no service-account token), is given to
the kernel's pod at the same path, when the storage lets two pods use it:

* a claim that is **ReadWriteMany** (or **ReadOnlyMany** only: mounted read-only): the same
  claim, anywhere the scheduler puts the pod;
* a claim that is **ReadWriteOnce** (or whose modes cannot be read): the same claim, on the
  server's node, which is then the only node the kernel pod may go to (a required node
  affinity on the node's name, so that kube-scheduler still allocates the kernel's devices
  there; ``nodeName`` would skip the scheduler and with it the allocation). The caller checks
  that the node has such devices at all (:func:`node_has_devices`) before it makes anything;
* an ``nfs`` volume: the same, anywhere; a ``hostPath``: the same, on the server's node;
* **ReadWriteOncePod**, ``emptyDir`` and every other kind (inline CSI and ephemeral volumes
  are each pod's own; configMaps and secrets are no notebook folder), a ``subPathExpr``
  mount, or a folder on no mount at all (the container's own filesystem): no other pod can
  see it, and :func:`kernel_files` says so in one line (:class:`Unshared`), which the
  provisioner refuses the start with.

The kernel also runs as the server's user (the pod's ``securityContext`` and the
container's user and group), so that it may write where the server may.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dra_jupyter.allocator import Allocator
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.model.objects import Wire

RWX, ROX, RWO, RWOP = "ReadWriteMany", "ReadOnlyMany", "ReadWriteOnce", "ReadWriteOncePod"
ANYWHERE_KINDS = ("nfs",)  # volumes any node mounts alike
NODE_KINDS = ("hostPath",)  # volumes of the server's node
CONTAINER_USER = ("runAsUser", "runAsGroup", "runAsNonRoot")  # the server container's, kept


@dataclass(frozen=True)
class Files:
    """What the kernel pod gets so that it sees the notebook's folder."""

    volumes: tuple[Wire, ...]  # the pod's spec.volumes
    mounts: tuple[Wire, ...]  # its container's volumeMounts
    node: str | None  # the node the pod must go to (a ReadWriteOnce volume's), else None
    where: str  # "volume home (claim home-alice, ReadWriteOnce)", for messages and logs
    volume: str  # the volume's name ("home")
    pod_security: Wire | None = None  # the server pod's securityContext
    container_security: Wire | None = None  # its container's user and group


@dataclass(frozen=True)
class Unshared:
    """Why no other pod can see the notebook's folder: one line, where, what, what to do."""

    reason: str


def holding_mount(server_pod: Mapping[str, Any], cwd: str) -> tuple[Wire, Wire | None] | None:
    """The server container's volumeMount that holds ``cwd`` (the deepest one) and its
    volume (None: not in the pod's volumes); None when no mount holds it. The server's
    container is the pod's first, as the kernel pod's default image is its."""
    spec = server_pod.get("spec") or {}
    containers = spec.get("containers") or [{}]
    best: Wire | None = None
    for mount in containers[0].get("volumeMounts") or ():
        path = posixpath.normpath(str(mount.get("mountPath") or "/"))
        inside = cwd == path or cwd.startswith(path.rstrip("/") + "/")
        if inside and (best is None or len(path) > len(posixpath.normpath(best["mountPath"]))):
            best = mount
    if best is None:
        return None
    volume = next((v for v in spec.get("volumes") or () if v.get("name") == best["name"]), None)
    return best, volume


def claim_name(server_pod: Mapping[str, Any], cwd: str) -> str | None:
    """The PersistentVolumeClaim that holds ``cwd``, the one object :func:`kernel_files`
    needs read (None: the folder is on no claim)."""
    held = holding_mount(server_pod, posixpath.normpath(cwd))
    if held is None or held[1] is None:
        return None
    return (held[1].get("persistentVolumeClaim") or {}).get("claimName")


def access_modes(claim: Mapping[str, Any]) -> list[str]:
    """A claim's access modes: its bound volume's (status), else those it asked for."""
    status = claim.get("status") or {}
    return list(status.get("accessModes") or (claim.get("spec") or {}).get("accessModes") or ())


def kernel_files(
    server_pod: Mapping[str, Any], cwd: str, claim: Mapping[str, Any] | None = None
) -> Files | Unshared:
    """What the kernel pod mounts to see ``cwd`` as the server does (see the module), or why
    it cannot. ``claim``: the PersistentVolumeClaim named by :func:`claim_name`, as read
    (None: not readable, taken as ReadWriteOnce)."""
    cwd = posixpath.normpath(cwd)
    spec = server_pod.get("spec") or {}
    node = spec.get("nodeName")
    held = holding_mount(server_pod, cwd)
    if held is None:
        return Unshared(
            f"its folder {cwd} is in the server container's own filesystem, which no other pod "
            f"sees; mount a volume at {cwd} or above it in the server's pod"
        )
    mount, volume = held
    name = str(mount["name"])
    if volume is None:  # an admission plugin's volume, not in the spec we read
        return Unshared(
            f"its folder {cwd} is on volume {name}, which the server's pod does not list; "
            "mount a PersistentVolumeClaim there"
        )
    if mount.get("subPathExpr"):
        return Unshared(
            f"its folder {cwd} is on volume {name}, mounted with subPathExpr, which depends on "
            "the server container's environment; mount it with subPath"
        )
    kernel_mount: Wire = {"name": name, "mountPath": mount["mountPath"]}
    for key in ("subPath", "readOnly"):
        if mount.get(key):
            kernel_mount[key] = mount[key]
    security = {k: v for k, v in _container_security(spec).items() if k in CONTAINER_USER}
    shared = Files(
        volumes=(dict(volume),),
        mounts=(kernel_mount,),
        node=None,
        where=f"volume {name}",
        volume=name,
        pod_security=dict(spec["securityContext"]) if spec.get("securityContext") else None,
        container_security=security or None,
    )
    pvc = volume.get("persistentVolumeClaim")
    if pvc is not None:
        claimed = str(pvc.get("claimName"))
        modes = access_modes(claim) if claim is not None else []
        if RWX in modes:
            return replace(shared, where=f"volume {name} (claim {claimed}, {RWX})")
        if RWO in modes or claim is None:
            mode = RWO if claim is not None else "access modes not readable"
            return replace(shared, where=f"volume {name} (claim {claimed}, {mode})", node=node)
        if ROX in modes:
            return replace(
                shared,
                where=f"volume {name} (claim {claimed}, {ROX})",
                mounts=({**kernel_mount, "readOnly": True},),
            )
        shown = ", ".join(modes) or "no access modes"
        return Unshared(
            f"its folder {cwd} is on volume {name} (claim {claimed}, {shown}), which only one "
            f"pod may use; use a {RWX} or {RWO} volume for {name}"
        )
    kind = next((k for k in volume if k != "name"), "no source")
    if kind in ANYWHERE_KINDS:
        return replace(shared, where=f"volume {name} ({kind})")
    if kind in NODE_KINDS:
        return replace(shared, where=f"volume {name} ({kind})", node=node)
    which = "only the server's pod sees" if kind == "emptyDir" else "no other pod can share"
    return Unshared(
        f"its folder {cwd} is on volume {name} ({kind}), which {which}; use a {RWX} "
        f"PersistentVolumeClaim for {name}"
    )


def _container_security(spec: Mapping[str, Any]) -> Wire:
    containers = spec.get("containers") or [{}]
    return dict(containers[0].get("securityContext") or {})


def node_has_devices(
    node: str,
    claim: Mapping[str, Any],
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
) -> bool:
    """Whether ``claim`` (a ResourceClaim's wire dict) could be allocated on ``node`` with
    every device free: False means it can never run there (the node has no such devices,
    or none at all)."""
    idle = Allocator(list(slices), list(classes), [], "first-fit")
    try:
        return idle.allocate([claim], node=node) is not None
    except InvalidInputError:
        if node not in idle.node_names():  # no slice of the node: no devices there
            return False
        raise


def node_refusal(cwd: str, files: Files, request: str) -> Unshared:
    """The line for a ReadWriteOnce folder whose node has no devices for ``request``."""
    return Unshared(
        f"its folder {posixpath.normpath(cwd)} is on {files.where} of node {files.node}, "
        f"which has no devices for {request}; use a {RWX} volume for {files.volume} or a GPU node "
        "for the server"
    )


__all__ = [
    "Files",
    "Unshared",
    "access_modes",
    "claim_name",
    "holding_mount",
    "kernel_files",
    "node_has_devices",
    "node_refusal",
]

"""What a request tells its user besides the claim it makes: the request as typed, where
a waiting request stands (on stderr, outside a notebook), the warnings' stack level,
another user's process on the devices just given, a kernel's claim on Kubernetes that
waits for a pod, and whose claims keep a busy request waiting.

:meth:`dra_jupyter.api.Session.request` says these; they live here so the request itself
reads as its steps. Each is a line in the user's terms that ends in what to do.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_jupyter.durations import format_duration
from dra_jupyter.errors import DraJupyterError

if TYPE_CHECKING:
    from dra_jupyter.metrics.recorder import Recorder
    from dra_jupyter.types import Backend, ClaimRecord, Owner, Waiting


class QueueReporter:
    """Says on stderr where a waiting request stands, each time its place changes."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.last: int | None = None

    def __call__(self, waiting: Waiting) -> None:
        if waiting.position == self.last:
            return
        self.last = waiting.position
        limit = f" of {format_duration(waiting.timeout)}" if waiting.timeout else ""
        place = "next in line" if waiting.position == 1 else f"number {waiting.position} in line"
        print(
            f"dra: waiting for {self.what}: {place} "
            f"({format_duration(waiting.waited)}{limit} so far)",
            file=sys.stderr,
        )

    def allocated(self, claim: object) -> None:
        return None

    def failed(self, message: str) -> None:
        return None


def caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package."""
    package = str(Path(__file__).parent.parent)  # dra_jupyter/, not only the API
    frame = inspect.currentframe()
    level = 0
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return max(level, 1)


def describe(spec: Mapping[str, Any]) -> str:
    """A request as typed, for the lines that say where it stands."""
    return ", ".join(f"{k}={v!r}" for k, v in spec.items()) or "devices"


def waits_for_a_pod(name: str, spec: Mapping[str, Any]) -> str:
    """What a kernel on Kubernetes is told of the claim it made: no pod uses it yet."""
    words = describe(spec) if spec else "gpu=1"
    return (
        f"claim {name} waits for a pod: on Kubernetes a kernel's devices are its pod's; "
        f"dra.request({words}, restart=True) restarts this kernel in a pod with them (its "
        "variables are lost)"
    )


def others_on(metrics: Recorder, claim: str, keys: set[str]) -> list[str]:
    """What to say when the driver lists another user's process on a device (of ``keys``)
    that ``claim`` was just given: a ledger that does not see that user's claims (each user's own
    embedded ledger) handed out a GPU in use. One line per device; none where NVML
    cannot tell."""
    from dra_jupyter.metrics.processes import read_process  # noqa: PLC0415  # on use

    listed = metrics.source.processes(time.time()) or []
    mine = os.getuid()
    others: dict[str, list[str]] = {}
    for process in listed:
        if process.device not in keys:
            continue
        info = read_process(process.pid)
        if info is not None and info.uid != mine:
            others.setdefault(process.device, []).append(f"{info.user}'s pid {process.pid}")
    return [
        f"claim {claim}: {device.rsplit('/', 1)[-1]} is in use by another user's "
        f"process ({', '.join(who)}) whose claim this session cannot see: the machine "
        "is shared without the service; `dra-jupyter doctor` says more"
        for device, who in others.items()
    ]


def own_holders_note(owner: Owner, backend: Backend) -> str:
    """For a busy error: what of the claims held now ``owner`` (this process, or its
    kernel) holds itself, and how to release them (a cell run again and again, say);
    empty when it holds none."""

    shell = not owner.kernel_id and owner.pid == 0  # a shell command's: they live by lease

    def mine(record: ClaimRecord) -> bool:
        if owner.kernel_id:
            return record.owner.kernel_id == owner.kernel_id
        if shell:
            return (record.owner.host, record.owner.pid, record.owner.user) == (
                owner.host,
                0,
                owner.user,
            )
        return (record.owner.host, record.owner.pid) == (owner.host, owner.pid)

    try:
        held = backend.claims(all_users=True)
    except DraJupyterError:  # the busy error is what the user needs; this only helps
        return ""
    own = [r.name for r in held if mine(r)]
    if not own:
        return ""
    if shell:  # made by earlier commands, not this one: say the command that releases them
        names = " ".join(own)
        if len(own) == len(held):
            return (
                f"every claim held now is yours, made from a shell ({', '.join(own)}): "
                f"dra-jupyter release {names} releases {'them' if len(own) > 1 else 'it'}"
            )
        return (
            f"you hold {', '.join(own)}, made from a shell: dra-jupyter release NAME "
            "releases one you no longer need"
        )
    who = "this kernel" if owner.kernel_id else "this process"
    if len(own) == len(held):
        return (
            f"every claim held now is {who}'s own ({', '.join(own)}): "
            "dra.release_all() releases them (or claim.release() one of them)"
        )
    return f"{who} holds {', '.join(own)} itself: dra.release(name) releases one you no longer need"

"""The device environment: the variables that make allocated devices visible to their
runtime, and this process's, always the union of what it holds.

Per vendor (:func:`environment_for`):

* NVIDIA: ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` list GPU UUIDs
  (``GPU-...``) and MIG device UUIDs (``MIG-...``), which CUDA accepts in place of indices;
* AMD: ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` list card indices;
* Google TPU: ``TPU_VISIBLE_CHIPS`` lists chip indices.

A device without the identity its runtime needs (a MIG partition that the driver offers
but has not created yet) is reported in ``missing`` instead of being guessed; on a
simulated inventory, where no runtime will read it, such a partition gets a stand-in
``MIG-...`` UUID made from its parent's and its name (as simulated GPUs have stand-in
``GPU-...`` UUIDs), so that its claim's environment reads like a real one.

This process's variables (:class:`ProcessEnvironment`) name the devices of every claim it
holds with ``apply_env`` (in request order), recomputed on each request and release: a
second request adds its devices instead of replacing the first's, a release takes only its
own away, and when nothing is held any more each variable is what it was before the first
claim set it (or unset). A claim released elsewhere (the card's button, the server's idle
release, a lease) leaves the environment at the next :meth:`ProcessEnvironment.sync`, which
the API runs before each request and ``%dra env`` runs before it reports, and a kernel runs
before each cell. One per process (:meth:`ProcessEnvironment.of_process`): the environment
is the process's, whichever session made the claims.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid as uuids
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from dra_jupyter.model.objects import Wire


@dataclass
class DeviceEnvironment:
    env: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # devices with no usable identity


def _attr(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("string", "int", "version", "bool"):
        if kind in value:
            return value[kind]
    return None


def stand_in_mig_uuid(parent_uuid: str, device: str) -> str:
    """The same ``MIG-...`` UUID for the same partition of the same (simulated) GPU."""
    return f"MIG-{uuids.uuid5(uuids.NAMESPACE_URL, f'dra-jupyter:{parent_uuid}/{device}')}"


def environment_for(
    results: Iterable[Mapping[str, Any]], slices: Sequence[Wire], *, simulated: bool = False
) -> DeviceEnvironment:
    """Environment variables for the devices of ``status.allocation.devices.results``;
    ``simulated``: the slices are a simulated inventory's (see the module's docstring)."""
    index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = s.get("spec", {})
        for d in spec.get("devices") or ():
            index[(spec["driver"], spec["pool"]["name"], d["name"])] = d
    nvidia: list[str] = []
    amd: list[str] = []
    tpu: list[str] = []
    out = DeviceEnvironment()
    for result in results:
        key = (result["driver"], result["pool"], result["device"])
        device = index.get(key, {})
        ident = "/".join(key)
        if result["driver"] == "gpu.nvidia.com":
            uuid = _attr(device, "uuid")
            parent = _attr(device, "parentUUID")
            if not uuid and simulated and parent:
                uuid = stand_in_mig_uuid(str(parent), result["device"])
            (nvidia.append(str(uuid)) if uuid else out.missing.append(ident))
        elif result["driver"] == "gpu.amd.com":
            card = _attr(device, "cardIndex")
            (amd.append(str(card)) if card is not None else out.missing.append(ident))
        elif result["driver"] == "tpu.google.com":
            chip = _attr(device, "index")
            (tpu.append(str(chip)) if chip is not None else out.missing.append(ident))
    if nvidia:
        out.env["CUDA_VISIBLE_DEVICES"] = out.env["NVIDIA_VISIBLE_DEVICES"] = ",".join(nvidia)
    if amd:
        out.env["ROCR_VISIBLE_DEVICES"] = out.env["HIP_VISIBLE_DEVICES"] = ",".join(amd)
    if tpu:
        out.env["TPU_VISIBLE_CHIPS"] = ",".join(tpu)
    return out


def nvml_lists_process(pid: int) -> bool | None:
    """NVML's answer (see :func:`dra_jupyter.inventory.nvml.lists_process`), loaded lazily."""
    from dra_jupyter.inventory.nvml import lists_process  # noqa: PLC0415

    return lists_process(pid)


def accelerator_runtime_loaded(maps: Path = Path("/proc/self/maps")) -> str | None:
    """The accelerator runtime already initialised in this process, if any.

    Once CUDA is initialised, changing ``CUDA_VISIBLE_DEVICES`` has no effect. A mapped
    ``libcuda`` alone does not prove it (a bare ``import torch`` maps it), so: torch's own
    ``torch.cuda.is_initialized()`` when torch is loaded; else, with ``libcuda`` mapped,
    NVML's list of processes holding a context (framework-neutral); when NVML cannot
    tell, a mapped runtime library counts, to be safe.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialized = getattr(cuda, "is_initialized", None)
    if callable(initialized) and initialized():
        return "libcuda.so"
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for lib in ("libcuda.so", "libamdhip64.so", "libtpu.so"):
        if lib in text:
            if lib == "libcuda.so" and nvml_lists_process(os.getpid()) is False:
                return None  # loaded but no context yet: the new environment still works
            return lib
    return None


class Named(Protocol):
    @property
    def name(self) -> str: ...


class LiveClaims(Protocol):
    """Where claims live (a :class:`~dra_jupyter.types.Backend` is one)."""

    def claims(self, *, all_users: bool = False) -> Sequence[Named]:
        """The live claims (everyone's with ``all_users``)."""


class Claim(Protocol):
    """A claim whose devices the environment names (:class:`dra_jupyter.api.Claim` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def env(self) -> dict[str, str]:
        """The variables that make its devices visible."""

    @property
    def backend(self) -> LiveClaims:
        """Where it lives: one read there says which claims are still live."""

    def released_elsewhere(self) -> None:
        """It was released by someone else: it says so from now on."""


class ProcessEnvironment:
    """The claims whose devices this process's environment names (see the module doc)."""

    _process: ClassVar[ProcessEnvironment | None] = None

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.claims: list[Claim] = []  # in request order
        self.saved: dict[str, str | None] = {}  # a variable's value before we set it
        self.adopted = False  # a restarted kernel's claims were taken in (adopt)
        self.runtime_noted = False  # said that CUDA (or ROCm, TPU) was loaded already
        # request() may run on other threads than a kernel's cells (and their sync)
        self._lock = threading.RLock()

    @classmethod
    def of_process(cls) -> ProcessEnvironment:
        if cls._process is None:
            cls._process = cls()
        return cls._process

    def hold(self, claim: Claim) -> None:
        """Add the claim's devices to the environment."""
        with self._lock:
            if all(c is not claim for c in self.claims):
                self.claims.append(claim)
            self.apply()

    def adopt(self, claims: Iterable[Claim]) -> None:
        """Take in the claims a restarted kernel started with (restart-with-claims puts
        their variables in its environment): held, and their variables were not there
        before them, so they go when the claims do."""
        with self._lock:
            self.adopted = True
            new = [c for c in claims if all(c is not held for held in self.claims)]
            if not new:
                return
            self.claims.extend(new)
            for key, value in self.wanted().items():
                if key not in self.saved and self.environ.get(key) == value:
                    self.saved[key] = None
            self.apply()

    def drop(self, claim: Claim) -> None:
        """Take the claim's devices out of the environment, and those of every held claim
        released meanwhile (by name, through another :class:`Claim` object, elsewhere)."""
        with self._lock:
            self.claims = [c for c in self.claims if c is not claim]
            self.sync()

    def sync(self) -> None:
        """Drop the claims that were released elsewhere: one read of each backend's live
        claims (the ledger's, in one transaction), not one per claim."""
        with self._lock:
            live: dict[int, set[str]] = {}
            for claim in self.claims:
                backend = claim.backend
                if id(backend) not in live:
                    live[id(backend)] = {r.name for r in backend.claims(all_users=True)}
            kept = [c for c in self.claims if c.name in live[id(c.backend)]]
            for gone in self.claims:
                if gone not in kept:
                    gone.released_elsewhere()
            self.claims = kept
            self.apply()

    def wanted(self) -> dict[str, str]:
        """The variables that the held claims' devices make, joined in request order."""
        joined: dict[str, list[str]] = {}
        for claim in self.claims:
            for key, value in claim.env.items():
                items = joined.setdefault(key, [])
                items.extend(v for v in value.split(",") if v not in items)
        return {key: ",".join(values) for key, values in joined.items()}

    def apply(self) -> None:
        """Set :meth:`wanted` in the environment; put back what a variable no claim makes
        any more was before the first claim set it."""
        wanted = self.wanted()
        for key, value in wanted.items():
            if key not in self.saved:
                self.saved[key] = self.environ.get(key)
            self.environ[key] = value
        for key in [k for k in self.saved if k not in wanted]:
            before = self.saved.pop(key)
            if before is None:
                self.environ.pop(key, None)
            else:
                self.environ[key] = before

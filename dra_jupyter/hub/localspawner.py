"""JupyterHub on one shared GPU machine: spawners whose form offers the machine's devices
from the shared-machine service (``dra-jupyter service``), with live counts.

::

    c.JupyterHub.spawner_class = "dra_jupyter.hub.localspawner.DRALocalSpawner"
    c.DRALocalSpawner.dra_socket = "/run/dra-jupyter/socket"
    c.DRAProfiles.rules = [{"match": "h200-x8", "groups": ["ml-admins"]}]

The form (:meth:`DRASpawnerMixin.get_options_form`) shows the choices of
:mod:`dra_jupyter.hub.choices`, counted on the service's inventory and holders, restricted
by ``c.DRAProfiles`` for the user (their name, Unix groups and JupyterHub groups). The
chosen slug arrives as ``user_options["profile"]`` (from the form, a query, or the REST API's
``POST /hub/api/users/NAME/server``); :meth:`~DRASpawnerMixin.start` refuses one the user may
not choose, then starts the server with the choice's ``dra.request`` keywords in its
environment (``DRA_JUPYTER_STARTUP_REQUEST``, not an identity): the server, running as the
user, claims them from the service itself (:mod:`dra_jupyter.server.startup`), so the
service knows the caller by the kernel's credentials and its per-user limits apply. The hub
waits for the server to say what it got (a file in a folder of the user's): a refusal stops
the server and fails the spawn with the service's one-line reason. The devices come back
when the server stops (and when its process ends, whatever ends it).

:class:`DRASpawnerMixin` goes on any spawner that runs the server as the user on this
machine (``class MySpawner(DRASpawnerMixin, SystemdSpawner)``); :class:`DRALocalSpawner` is
JupyterHub's ``LocalProcessSpawner`` with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import os
import pwd
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Enum, Float, Unicode, default

from dra_jupyter.allocator import Strategy
from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import DraJupyterError, InvalidInputError, outcome_of
from dra_jupyter.hub.choices import NONE, UNLIMITED, Choice, choices, find, restrict
from dra_jupyter.hub.config import DRAProfiles
from dra_jupyter.hub.counting import ChoiceCache
from dra_jupyter.hub.failures import SpawnFailure
from dra_jupyter.hub.form import FIELD, chosen, read_at_start, render, service_world, slug_of
from dra_jupyter.inventory.base import Inventory
from dra_jupyter.service.client import ServiceBackend
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner

if TYPE_CHECKING:  # what the mixin extends: a JupyterHub Spawner (untyped: Any)
    from jupyterhub.spawner import Spawner as _Extended
else:  # a mixin, not a Spawner: JupyterHub refuses Spawner subclasses without start/stop/poll
    from traitlets import HasTraits as _Extended

# What the server's extension reads (dra_jupyter.server.startup; tests/hub check they agree)
REQUEST_ENV = "DRA_JUPYTER_STARTUP_REQUEST"
LEASE_ENV = "DRA_JUPYTER_STARTUP_LEASE"
REPORT_ENV = "DRA_JUPYTER_STARTUP_REPORT"
REPORT = "startup.json"


INVENTORY_MAX_AGE = 300.0  # seconds the service's inventory is used before it is read again


@dataclass
class _Source:
    """One service: its client, its inventory (read again after :data:`INVENTORY_MAX_AGE`;
    the same objects meanwhile, so the choices' layout is kept) and the choices' cache;
    shared by every spawner of the hub."""

    backend: ServiceBackend
    cache: ChoiceCache = field(default_factory=ChoiceCache)
    lock: threading.Lock = field(default_factory=threading.Lock)
    read: float = 0.0  # time.monotonic() of the inventory's last read

    def inventory(self) -> Inventory:
        now = time.monotonic()
        stale = now - self.read > INVENTORY_MAX_AGE
        found = self.backend.inventory(refresh=stale and self.read > 0)
        if stale:
            self.read = now
        return found


@dataclass(frozen=True)
class Offer:
    """What a user may choose now, and what the form says above it."""

    choices: list[Choice]
    inventory: str = ""
    problem: str = ""  # the service does not answer: only "no GPU" is offered


class DRASpawnerMixin(_Extended):  # type: ignore[misc]  # JupyterHub is untyped
    """A spawn form of the machine's devices, and servers that claim the chosen ones from the
    shared-machine service as their user (see the module's docstring). Mix it in before a
    spawner class that runs the server as the user on this machine (its ``start``, ``stop``,
    ``poll``, ``get_env`` and ``get_args`` are the ones this extends)."""

    dra_socket = Unicode(
        config=True,
        help="""The shared-machine service's socket (dra-jupyter service --socket). Default:
        $DRA_JUPYTER_SOCKET, else /run/dra-jupyter/socket.""",
    )
    dra_strategy = Enum(
        ["topology", "first-fit"],
        "topology",
        config=True,
        help="How the form counts what fits: the service's strategy (its policy's).",
    )
    dra_report_timeout = Float(
        60.0,
        config=True,
        help="""Seconds the hub waits for a starting server to say whether it got its
        devices (its extension claims them as it loads); then the spawn fails.""",
    )
    dra_report_dir = Unicode(
        config=True,
        help="""Where the hub makes, per spawn, a folder of the user's for the server to
        write what it got to; the server must see the same path. Default: the temporary
        folder.""",
    )

    _sources: ClassVar[dict[str, _Source]] = {}
    _sources_lock: ClassVar[threading.Lock] = threading.Lock()

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        return read_at_start  # the profile is read by start()

    @default("dra_socket")
    def _default_dra_socket(self) -> str:
        return str(Settings.from_env().socket)

    @default("dra_report_dir")
    def _default_dra_report_dir(self) -> str:
        return tempfile.gettempdir()

    # --- the form ----------------------------------------------------------------------------

    async def get_options_form(self) -> str:
        offer = await self.dra_offer()
        last = self.user_options.get(FIELD) if isinstance(self.user_options, dict) else None
        return render(
            offer.choices,
            inventory=offer.inventory,
            problem=offer.problem,
            choose=last if isinstance(last, str) else "",
        )

    def options_from_form(self, formdata: dict[str, Any]) -> dict[str, str]:
        return chosen(formdata)

    def options_from_query(self, query_data: dict[str, Any]) -> dict[str, str]:
        value = query_data.get(FIELD)
        if isinstance(value, list):
            return chosen({FIELD: value})
        return chosen({FIELD: [value] if isinstance(value, str) else []})

    async def dra_offer(self) -> Offer:
        """The choices this spawner's user may make now (counted in a thread: the service's
        client blocks)."""
        return await asyncio.to_thread(self._offer)

    def _offer(self) -> Offer:
        policy = DRAProfiles(parent=self).policy()
        groups = self._dra_groups()
        source = self._source()
        try:
            with source.lock:  # one count at a time: they share the cache
                inventory = source.inventory()
                world = service_world(inventory, source.backend.holders())
                strategy: Strategy = "first-fit" if self.dra_strategy == "first-fit" else "topology"
                offered = choices(world, cache=source.cache, strategy=strategy)
        except DraJupyterError as err:
            none = Choice(NONE, "No GPU", "no devices: CPU only", {}, UNLIMITED, None, None)
            return Offer(restrict([none], self.user.name, groups, policy), problem=str(err))
        shown = inventory.description + (" (simulated)" if inventory.simulated else "")
        return Offer(restrict(offered, self.user.name, groups, policy), inventory=shown)

    def _source(self) -> _Source:
        with self._sources_lock:
            found = self._sources.get(self.dra_socket)
            if found is None:
                owner = Owner.current()
                found = _Source(ServiceBackend(Path(self.dra_socket), owner))
                self._sources[self.dra_socket] = found
            return found

    def _dra_groups(self) -> set[str]:
        """The user's Unix groups (where the hub's user is a Unix user) and hub groups."""
        out = {g.name for g in getattr(self.user, "groups", ()) or ()}
        try:
            entry = pwd.getpwnam(self.user.name)
        except KeyError:
            return out
        for gid in os.getgrouplist(self.user.name, entry.pw_gid):
            with contextlib.suppress(KeyError):
                out.add(grp.getgrgid(gid).gr_name)
        return out

    # --- the spawn ---------------------------------------------------------------------------

    _dra_choice: Choice | None = None
    _dra_folder: Path | None = None

    async def start(self) -> Any:
        """Start the server with the chosen devices (a refusal fails the spawn, saying why)."""
        choice = await self._dra_chosen()
        self._dra_choice = choice
        self._dra_folder = self._report_folder() if choice.request else None
        try:
            url = await super().start()
            if self._dra_folder is not None:
                outcome = await self._wait_for_report(self._dra_folder / REPORT)
                self.log.info(
                    "%s has %s: %s",
                    self._log_name,
                    outcome.get("claim"),
                    ", ".join(outcome.get("devices") or ()),
                )
            return url
        finally:
            if self._dra_folder is not None:
                shutil.rmtree(self._dra_folder, ignore_errors=True)
                self._dra_folder = None

    async def _dra_chosen(self) -> Choice:
        """The choice of ``user_options["profile"]`` (the default without one), if this user
        may make it; else the spawn fails saying what they may choose."""
        options = self.user_options if isinstance(self.user_options, dict) else {}
        try:
            slug = slug_of(options[FIELD]) if FIELD in options else None
        except InvalidInputError as err:
            raise SpawnFailure(str(err), reason="profile", status_code=400) from err
        offer = await self.dra_offer()
        if slug is None:
            found = next((c for c in offer.choices if c.default), None)
        else:
            found = find(offer.choices, slug)
        if found is None:
            names = ", ".join(c.slug for c in offer.choices)
            message = (
                f"profile {slug!r} is not one {self.user.name} may choose here; choose one "
                f"of {names or 'none'}"
                if slug
                else f"no choice is offered to {self.user.name} here"
            )
            raise SpawnFailure(message, reason="profile", status_code=403)
        if found.request and offer.problem:
            raise SpawnFailure(offer.problem, reason="devices", status_code=503)
        return found

    def get_env(self) -> dict[str, str]:
        env: dict[str, str] = super().get_env()
        env.update(self.dra_env())
        return env

    def dra_env(self) -> dict[str, str]:
        """What the server's environment gets from this spawner: the service to use, and
        the chosen devices (as dra.request keywords), their lease, where to report."""
        env = {"DRA_JUPYTER_BACKEND": "service", "DRA_JUPYTER_SOCKET": self.dra_socket}
        choice = self._dra_choice
        if choice is not None and choice.request and self._dra_folder is not None:
            env[REQUEST_ENV] = json.dumps(dict(choice.request))
            if choice.lease:
                env[LEASE_ENV] = choice.lease
            env[REPORT_ENV] = str(self._dra_folder / REPORT)
        return env

    def get_args(self) -> list[str]:
        """The server's arguments; with the choice's idle timeout, the server stops itself
        after that long without activity (idle kernels culled first), which gives its
        devices back; claims its kernels make are released after it too."""
        args: list[str] = super().get_args()
        choice = self._dra_choice
        if choice is not None and choice.idle_timeout:
            seconds = parse_duration(choice.idle_timeout, what="idle_timeout") or 0
            if seconds > 0:
                every = max(1, min(300, round(seconds / 4)))
                args += [
                    f"--ServerApp.shutdown_no_activity_timeout={round(seconds)}",
                    f"--MappingKernelManager.cull_idle_timeout={round(seconds)}",
                    f"--MappingKernelManager.cull_interval={every}",
                    f"--DRAExtensionApp.idle_timeout={seconds:g}",
                ]
        return args

    def _report_folder(self) -> Path:
        """A new folder the server (as the user) may write its report to."""
        folder = Path(tempfile.mkdtemp(prefix="dra-jupyter-hub-", dir=self.dra_report_dir))
        if os.geteuid() == 0:
            entry = pwd.getpwnam(self.user.name)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        return folder

    async def _wait_for_report(self, path: Path) -> dict[str, Any]:
        """What the starting server got; a refusal, an exit or silence fails the spawn (and
        stops the server)."""
        end = time.monotonic() + self.dra_report_timeout
        while True:
            outcome = _read(path)
            if outcome is None and await self.poll() is not None:
                outcome = _read(path)  # written just before the server exited
                if outcome is None:
                    raise SpawnFailure(
                        f"{self._log_name}'s server exited before it said whether it got its "
                        "devices; the hub's log has its output",
                        reason="devices",
                        status_code=500,
                    )
            if outcome is not None:
                if outcome.get("ok") is True:
                    return outcome
                await self.stop(now=True)
                kind = str(outcome.get("type"))
                raise SpawnFailure(
                    str(outcome.get("message") or kind),
                    reason="devices",
                    status_code=outcome_of(kind).http_status,
                )
            if time.monotonic() > end:
                await self.stop(now=True)
                raise SpawnFailure(
                    f"{self._log_name}'s server did not say within {self.dra_report_timeout:g}s "
                    "whether it got its devices; is the dra_jupyter server extension enabled "
                    "where it runs (jupyter server extension list)?",
                    reason="devices",
                    status_code=500,
                )
            await asyncio.sleep(0.1)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class DRALocalSpawner(DRASpawnerMixin, LocalProcessSpawner):  # type: ignore[misc]
    """JupyterHub's LocalProcessSpawner with the machine's devices in its form."""

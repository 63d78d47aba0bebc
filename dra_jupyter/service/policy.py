"""The service's policy: one TOML file (``dra-jupyter service --config FILE``), read at start
and again on SIGHUP (a file that does not parse keeps the policy in force, and says why).

Every knob, its unit and its default (``deploy/service.toml`` is a commented example)::

    [service]
    ledger = "/var/lib/dra-jupyter/ledger.sqlite"  # its folder: made 0700 if missing,
                                   # refused if others may open it
    inventory = "auto"             # as DRA_JUPYTER_INVENTORY: auto, nvml, a name, a file
    strategy = "topology"          # topology or first-fit
    synchronous = "normal"         # normal: a commit survives the daemon's crash, not a
                                   # power loss (the last ones may roll back); full: each
                                   # commit waits for the disk (several times slower)
    admin_groups = []              # groups whose members see and release every claim
                                   # (root always may)
    visibility = "own"             # own: users see only their own claims (others' devices
                                   # show as held by "another user"); all: everyone's
    requests_per_second = 200      # per user: requests above it are refused (token bucket)
    burst = 400                    # requests a user may send at once before the rate applies
    queue_per_user = 8             # requests of one user waiting in line at once
    connections_per_user = 64      # open connections of one user
    claims_per_user = 256          # live claims of one user (shared devices allow many)
    metrics_max_age = 1            # seconds one read of the devices' metrics (NVML) answers
                                   # every client's metrics op before it is read again
    gpu_sample_interval = 1        # seconds between readings of the processes on the GPUs
                                   # (NVML): whose they are, each claim's GPU activity
    gpu_active_threshold = 5       # percent of utilisation at or over which a claim's GPU
                                   # is active (its processes', else its devices')
    gpu_window = 60                # seconds a reading counts: active = over the threshold
                                   # within the window; a claim whose GPU is active counts
                                   # as active for the idle limit
    gpu_idle_timeout = 3600        # seconds without GPU activity after which a claim's
                                   # GPU is idle (shown in the metrics op's processes)
    release_gpu_idle = false       # release claims of processes (not the CLI's) whose GPU
                                   # is idle for gpu_idle_timeout (reason gpu-idle)
    prometheus_port = 0            # a port on 127.0.0.1 that answers the usage counters in
                                   # Prometheus's text format (every user's); 0: none
    request_cpu = 5                # seconds of CPU the allocation of one request may cost
                                   # (a costly one is worked out off the daemon's loop, in a
                                   # process of its own; past this it is refused:
                                   # TooCostlyError; its wall time is bounded at 4
                                   # times this and 10 s: keep it so under the
                                   # client's 60 s wait for an answer)
    costly_at_once = 2             # costly requests worked out at once (one per user)
    reclaim = true                 # reclaim under pressure: while a request waits, idle
                                   # holders that could free what it needs are warned, then
                                   # released (dra_jupyter.sharing.reclaim); false: only
                                   # the idle limit releases, waiter or not
    reclaim_grace = 300            # seconds from the warning to the release (and the most
                                   # one Keep under pressure postpones it)
    keeps_under_pressure = 1       # Keeps a warned holder may use while someone waits
    reclaim_idle = 600             # seconds without activity (a Keep, the GPU active)
                                   # before a holder counts as idle for reclaim
    reclaim_active = false         # also reclaim holders in use, over their fair share,
                                   # after min_runtime (after every idle one)
    min_runtime = 3600             # seconds a claim in use is held before reclaim_active
                                   # may take it
    share_half_life = 86400        # seconds after which past use counts half in the fair
                                   # share (the line's order, who is over their share)
    health_grace = 300             # seconds a claim keeps a GPU the health watcher tainted
                                   # NoExecute (an XID 79, an uncontained ECC error) before
                                   # it is released, time to save work; a GPU lost: none
    health_poll_interval = 5       # seconds between readings of the GPUs' ECC counters,
                                   # remapped rows and lost state (XID events: at once)

    [limits]                       # everyone's, unless a group or the user says otherwise
    gpus = 0                       # whole devices held at once (GPUs, TPUs, ...); 0: no limit
    mig = 0                        # MIG slices held at once; 0: no limit
    gpu_share = "0%"               # shares of shared GPUs (consumable capacity) held at
                                   # once, in percent of one GPU's memory (or, without
                                   # memory, of its most used capacity), summed over every
                                   # share the user holds: "50%" (or 50); over 100 allows
                                   # more than one GPU's worth; whole GPUs count under gpus,
                                   # not here; "0%": no limit
    lease_max = "0"                # longest lease (a duration: 90s, 30m, 8h); "0": no limit
    lease_default = "0"            # a claim's lease when the request names none; "0":
                                   # lease_max, if set, else none
    wait_max = "0"                 # longest wait in line; "0": no limit
    idle = "0"                     # a process's claim without activity this long is released
                                   # (claims of the CLI live by their lease); "0": never

    [enforce]                      # a process on a device its user does not hold
    mode = "report"                # report: logged and listed to its user and admins;
                                   # terminate: then SIGTERM after grace, SIGKILL after
                                   # kill_after (never root's, an admin's, exempt_users')
    grace = 60                     # seconds from first seen to SIGTERM
    kill_after = 10                # seconds from SIGTERM to SIGKILL
    exempt_users = []              # users whose processes are only reported

    [groups.<name>]                # the same keys as [limits], for members of the group,
                                   # and share: the group's weight in the fair share
                                   # (default 1; a member's is their largest group's)
    [users.<name>]                 # the same keys, for one user (wins over the groups)

A user in several groups gets, for each limit, the most generous of those groups that set
it; a user's own entry wins over them all. Refusals name the limit and where it comes from:
``user bob: limit 2 GPUs (group students), holds 2``.
"""

from __future__ import annotations

import contextlib
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_jupyter.allocator import STRATEGIES
from dra_jupyter.durations import parse_duration
from dra_jupyter.errors import DraJupyterError, InvalidInputError, shown
from dra_jupyter.service.enforce import MODES, EnforcePolicy
from dra_jupyter.sharing.fairshare import DEFAULT_HALF_LIFE
from dra_jupyter.sharing.reclaim import (
    DEFAULT_GRACE,
    DEFAULT_IDLE_AFTER,
    DEFAULT_KEEPS,
    DEFAULT_MIN_RUNTIME,
    ReclaimSettings,
)

MAX_CONFIG = 1 << 20  # bytes of the policy file
DEFAULT_LEDGER = Path("/var/lib/dra-jupyter/ledger.sqlite")
VISIBILITY = ("own", "all")
LIMIT_KEYS = ("gpus", "mig", "gpu_share", "lease_max", "lease_default", "wait_max", "idle")
COUNT_KEYS = ("gpus", "mig")
SERVICE_KEYS = {
    "ledger",
    "inventory",
    "strategy",
    "synchronous",
    "admin_groups",
    "visibility",
    "requests_per_second",
    "burst",
    "queue_per_user",
    "connections_per_user",
    "claims_per_user",
    "metrics_max_age",
    "gpu_sample_interval",
    "gpu_active_threshold",
    "gpu_window",
    "gpu_idle_timeout",
    "release_gpu_idle",
    "prometheus_port",
    "request_cpu",
    "costly_at_once",
    "reclaim",
    "reclaim_grace",
    "keeps_under_pressure",
    "reclaim_idle",
    "reclaim_active",
    "min_runtime",
    "share_half_life",
    "health_grace",
    "health_poll_interval",
}


@dataclass(frozen=True)
class Limit:
    """One limit's value for a user (0: none) and where it comes from (``group students``)."""

    value: float
    source: str


@dataclass(frozen=True)
class Limits:
    gpus: Limit
    mig: Limit
    gpu_share: Limit  # percent of one GPU
    lease_max: Limit
    lease_default: Limit
    wait_max: Limit
    idle: Limit

    def to_dict(self) -> dict[str, Any]:
        return {
            k: {"value": getattr(self, k).value, "source": getattr(self, k).source}
            for k in LIMIT_KEYS
        }


_NO_LIMITS = dict.fromkeys(LIMIT_KEYS, 0.0)


@dataclass(frozen=True)
class Policy:
    ledger: Path = DEFAULT_LEDGER
    inventory: str = "auto"
    strategy: str = "topology"
    synchronous: str = "normal"
    admin_groups: frozenset[str] = frozenset()
    visibility: str = "own"
    requests_per_second: float = 200.0
    burst: float = 400.0
    queue_per_user: int = 8
    connections_per_user: int = 64
    claims_per_user: int = 256
    metrics_max_age: float = 1.0
    gpu_sample_interval: float = 1.0
    gpu_active_threshold: float = 5.0
    gpu_window: float = 60.0
    gpu_idle_timeout: float = 3600.0
    release_gpu_idle: bool = False
    enforce: EnforcePolicy = field(default_factory=EnforcePolicy)
    prometheus_port: int = 0  # 0: no Prometheus port
    request_cpu: float = 5.0
    costly_at_once: int = 2
    reclaim: bool = True
    reclaim_grace: float = DEFAULT_GRACE
    keeps_under_pressure: int = DEFAULT_KEEPS
    reclaim_idle: float = DEFAULT_IDLE_AFTER
    reclaim_active: bool = False
    min_runtime: float = DEFAULT_MIN_RUNTIME
    share_half_life: float = DEFAULT_HALF_LIFE
    user_shares: Mapping[str, float] = field(default_factory=dict)  # [users.<name>] share
    group_shares: Mapping[str, float] = field(default_factory=dict)  # [groups.<name>] share
    health_grace: float = 300.0
    health_poll_interval: float = 5.0
    defaults: Mapping[str, float] = field(default_factory=lambda: dict(_NO_LIMITS))
    groups: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    users: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @property
    def reclaim_settings(self) -> ReclaimSettings:
        """The knobs of reclaim under pressure, as :mod:`dra_jupyter.sharing.reclaim` reads them."""
        return ReclaimSettings(
            grace=self.reclaim_grace,
            keeps=self.keeps_under_pressure,
            min_runtime=self.min_runtime,
            reclaim_active=self.reclaim_active,
            idle_after=self.reclaim_idle,
        )

    def is_admin(self, uid: int, groups: tuple[str, ...]) -> bool:
        return uid == 0 or bool(self.admin_groups.intersection(groups))

    def limits(self, user: str, groups: tuple[str, ...]) -> Limits:
        """Each limit for ``user`` in ``groups``: the user's own, else the most generous of
        their groups that set it (0, no limit, is the most generous), else the default."""
        found: dict[str, Limit] = {}
        own = self.users.get(user, {})
        for key in LIMIT_KEYS:
            if key in own:
                found[key] = Limit(own[key], f"user {user}")
                continue
            candidates = [
                (g, self.groups[g][key])
                for g in sorted(groups)
                if g in self.groups and key in self.groups[g]
            ]
            if candidates:
                name, value = max(candidates, key=lambda c: math.inf if c[1] == 0 else c[1])
                found[key] = Limit(value, f"group {name}")
            else:
                found[key] = Limit(self.defaults.get(key, 0.0), "default")
        return Limits(**found)


def load_policy(path: Path | None) -> Policy:
    """The policy of ``path`` (None: every default); InvalidInputError naming the file, the
    key and the problem."""
    if path is None:
        return Policy()
    where = f"service config {path}"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG + 1)
    except OSError as err:
        raise InvalidInputError(f"{where}: cannot read it: {err.strerror}") from err
    if len(raw) > MAX_CONFIG:
        raise InvalidInputError(f"{where}: over {MAX_CONFIG} bytes; a policy is a few lines")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise InvalidInputError(f"{where}: not TOML ({err})") from err
    _known(data, {"service", "limits", "groups", "users", "enforce"}, where)
    service = _table(data, "service", where)
    _known(service, SERVICE_KEYS, f"{where}, [service]")
    strategy = _string(service, "strategy", "topology", where)
    if strategy not in STRATEGIES:
        raise InvalidInputError(
            f"{where}: strategy {shown(strategy)}; use {' or '.join(STRATEGIES)}"
        )
    synchronous = _string(service, "synchronous", "normal", where)
    if synchronous not in ("normal", "full"):
        raise InvalidInputError(f"{where}: synchronous {shown(synchronous)}; use normal or full")
    visibility = _string(service, "visibility", "own", where)
    if visibility not in VISIBILITY:
        raise InvalidInputError(f"{where}: visibility {shown(visibility)}; use own or all")
    admins = service.get("admin_groups", [])
    if not isinstance(admins, list) or not all(isinstance(a, str) for a in admins):
        raise InvalidInputError(f"{where}: admin_groups must be a list of group names")
    groups = _table(data, "groups", where)
    users = _table(data, "users", where)
    port = service.get("prometheus_port", 0)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidInputError(
            f"{where}: prometheus_port {shown(port)}; use a port number 1-65535, or 0 for none"
        )
    return Policy(
        ledger=Path(_string(service, "ledger", str(DEFAULT_LEDGER), where)),
        inventory=_string(service, "inventory", "auto", where),
        strategy=strategy,
        synchronous=synchronous,
        admin_groups=frozenset(admins),
        visibility=visibility,
        requests_per_second=_number(service, "requests_per_second", 200, where),
        burst=_number(service, "burst", 400, where),
        queue_per_user=int(_number(service, "queue_per_user", 8, where)),
        connections_per_user=int(_number(service, "connections_per_user", 64, where)),
        claims_per_user=int(_number(service, "claims_per_user", 256, where)),
        metrics_max_age=_number(service, "metrics_max_age", 1, where),
        gpu_sample_interval=_number(service, "gpu_sample_interval", 1, where),
        gpu_active_threshold=_percent_above_zero(service, "gpu_active_threshold", where),
        gpu_window=_number(service, "gpu_window", 60, where),
        gpu_idle_timeout=_number(service, "gpu_idle_timeout", 3600, where),
        release_gpu_idle=_bool(service, "release_gpu_idle", where),
        enforce=_enforce(_table(data, "enforce", where), f"{where}, [enforce]"),
        prometheus_port=int(port),
        request_cpu=_number(service, "request_cpu", 5, where),
        costly_at_once=int(_number(service, "costly_at_once", 2, where)),
        health_grace=_not_negative(service, "health_grace", 300, where),
        health_poll_interval=_number(service, "health_poll_interval", 5, where),
        reclaim=_bool(service, "reclaim", where, default=True),
        reclaim_grace=_number(service, "reclaim_grace", DEFAULT_GRACE, where),
        keeps_under_pressure=_count(service, "keeps_under_pressure", DEFAULT_KEEPS, where),
        reclaim_idle=_number(service, "reclaim_idle", DEFAULT_IDLE_AFTER, where),
        reclaim_active=_bool(service, "reclaim_active", where),
        min_runtime=_number(service, "min_runtime", DEFAULT_MIN_RUNTIME, where),
        share_half_life=_number(service, "share_half_life", DEFAULT_HALF_LIFE, where),
        user_shares=_shares(users, "users", where),
        group_shares=_shares(groups, "groups", where),
        defaults={
            **_NO_LIMITS,
            **_limits(_table(data, "limits", where), f"{where}, [limits]", shares=False),
        },
        groups={g: _limits(_sub(groups, g, where), f"{where}, [groups.{g}]") for g in groups},
        users={u: _limits(_sub(users, u, where), f"{where}, [users.{u}]") for u in users},
    )


def _known(table: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(table.keys() - keys)
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown key {shown(unknown[0])}; known: {', '.join(sorted(keys))}"
        )


def _table(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: [{key}] must be a table")
    return value


def _sub(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data[key]
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: {shown(key)} must be a table of limits")
    return value


def _string(table: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{where}: {key} must be a non-empty string, not {shown(value)}")
    return value


def _number(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise InvalidInputError(f"{where}: {key} must be a positive number, not {shown(value)}")
    return float(value)


def _not_negative(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise InvalidInputError(
            f"{where}: {key} must be a number of seconds, 0 or more, not {shown(value)}"
        )
    return float(value)


def _enforce(table: Mapping[str, Any], where: str) -> EnforcePolicy:
    _known(table, {"mode", "grace", "kill_after", "exempt_users"}, where)
    mode = _string(table, "mode", "report", where)
    if mode not in MODES:
        raise InvalidInputError(f"{where}: mode {shown(mode)}; use {' or '.join(MODES)}")
    exempt = table.get("exempt_users", [])
    if not isinstance(exempt, list) or not all(isinstance(u, str) for u in exempt):
        raise InvalidInputError(f"{where}: exempt_users must be a list of user names")
    return EnforcePolicy(
        mode=mode,
        grace=_number(table, "grace", 60, where),
        kill_after=_number(table, "kill_after", 10, where),
        exempt_users=frozenset(exempt),
    )


def _bool(table: Mapping[str, Any], key: str, where: str, *, default: bool = False) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInputError(f"{where}: {key} must be true or false, not {shown(value)}")
    return value


def _count(table: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise InvalidInputError(
            f"{where}: {key} must be a whole number (0 or more), not {shown(value)}"
        )
    return value


def _shares(tables: Mapping[str, Any], kind: str, where: str) -> dict[str, float]:
    """The ``share`` of each ``[<kind>.<name>]`` that sets one (a positive number)."""
    found: dict[str, float] = {}
    for name, table in tables.items():
        if isinstance(table, dict) and "share" in table:
            found[name] = _number(table, "share", 1, f"{where}, [{kind}.{name}]")
    return found


def _percent_above_zero(table: Mapping[str, Any], key: str, where: str) -> float:
    value = _number(table, key, 5, where)
    if value > 100:
        raise InvalidInputError(
            f"{where}: {key} must be a percentage, 0 to 100, not {shown(value)}"
        )
    return value


def _limits(table: Mapping[str, Any], where: str, *, shares: bool = True) -> dict[str, float]:
    """The limits of a table (``share`` is read by :func:`_shares`, where ``shares``)."""
    _known(table, set(LIMIT_KEYS) | ({"share"} if shares else set()), where)
    out: dict[str, float] = {}
    for key, value in table.items():
        if key == "share":
            continue
        if key in COUNT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
                raise InvalidInputError(
                    f"{where}: {key} must be a whole number of devices (0: no limit), not "
                    f"{shown(value)}"
                )
            out[key] = float(value)
            continue
        if key == "gpu_share":
            out[key] = _percent(value, key, where)
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidInputError(
                f"{where}: {key} must be a duration (30m, 8h), not {shown(value)}"
            )
        try:
            seconds = parse_duration(value if isinstance(value, str) else float(value), what=key)
        except DraJupyterError as err:
            raise InvalidInputError(f"{where}: {err}") from err
        out[key] = float(seconds or 0.0)
    return out


def _percent(value: Any, key: str, where: str) -> float:
    """``"50%"`` or ``50``: percent of one GPU (0: no limit)."""
    text = value.strip().removesuffix("%").strip() if isinstance(value, str) else value
    number: float | None = None
    if isinstance(text, str):
        with contextlib.suppress(ValueError):
            number = float(text)
    elif isinstance(text, int | float) and not isinstance(text, bool):
        number = float(text)
    if number is None or not math.isfinite(number) or not 0 <= number < 1e6:
        raise InvalidInputError(
            f'{where}: {key} must be a percentage of one GPU ("50%"; "0%": no limit), '
            f"not {shown(value)}"
        )
    return number

"""Settings of the Python API and the CLI: one dataclass, read from the environment.

================================  ===========================================================
variable                          meaning (default)
================================  ===========================================================
``DRA_JUPYTER_LEDGER``            the ledger file; a shared path makes one ledger for every
                                  user of the machine (``$XDG_STATE_HOME/dra-jupyter/
                                  ledger.sqlite``, per user)
``DRA_JUPYTER_INVENTORY``         ``auto`` (NVML when it finds GPUs, else the simulated
                                  ``h200-8x``), ``nvml``, a bundled simulated inventory
                                  name, or a YAML file of ResourceSlices
``DRA_JUPYTER_STRATEGY``          ``topology`` or ``first-fit`` (``topology``)
``DRA_JUPYTER_POLL_INTERVAL``     seconds between attempts while a request waits (0.5)
``DRA_JUPYTER_IDLE_TIMEOUT``      seconds without a cell after which the Jupyter server
                                  releases this kernel's claims (set by the server
                                  extension; 0: no idle release known)
================================  ===========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_jupyter.allocator import STRATEGIES, Strategy
from dra_jupyter.errors import InvalidInputError


def default_ledger(environ: Mapping[str, str]) -> Path:
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dra-jupyter" / "ledger.sqlite"


@dataclass(frozen=True)
class Settings:
    ledger: Path
    inventory: str = "auto"
    strategy: Strategy = "topology"
    poll_interval: float = 0.5  # seconds
    namespace: str = "default"
    idle_timeout: float = 0  # seconds; what the server extension told this kernel

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        strategy = env.get("DRA_JUPYTER_STRATEGY", "topology")
        if strategy not in STRATEGIES:
            raise InvalidInputError(
                f"DRA_JUPYTER_STRATEGY={strategy!r} is not known; use {' or '.join(STRATEGIES)}"
            )
        return cls(
            ledger=Path(env.get("DRA_JUPYTER_LEDGER") or default_ledger(env)),
            inventory=env.get("DRA_JUPYTER_INVENTORY", "auto"),
            strategy=strategy,
            poll_interval=_seconds(env, "DRA_JUPYTER_POLL_INTERVAL", 0.5),
            idle_timeout=_seconds(env, "DRA_JUPYTER_IDLE_TIMEOUT", 0),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError as err:
        raise InvalidInputError(f"{name} must be a number of seconds, not {env[name]!r}") from err

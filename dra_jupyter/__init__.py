"""dra-jupyter: GPUs, MIG slices and TPUs for Jupyter through Kubernetes DRA, without YAML.

>>> import dra_jupyter as dra
>>> dra.devices()                                        # doctest: +SKIP
>>> c = dra.request(gpu=2, memory="80Gi", same="pcieRoot", timeout="5m")  # doctest: +SKIP
>>> c.env, c.devices; c.release()                        # doctest: +SKIP

Importing the package does no I/O and loads neither NVML, pandas nor a Kubernetes
client: the first call makes the default session (settings from the environment, see
:mod:`dra_jupyter.settings`). The embedded allocator is :mod:`dra_jupyter.allocator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Unpack

from dra_jupyter.errors import (
    AllocationError,
    BusyError,
    ClaimNotFoundError,
    ClusterError,
    DiscoveryError,
    DraJupyterError,
    DraJupyterWarning,
    ForbiddenError,
    InvalidInputError,
    KeepRefusedError,
    KernelNotFoundError,
    KernelRestartError,
    LedgerError,
    LimitError,
    MagicError,
    NeverPossibleError,
    NotFoundError,
    ObjectError,
    SelectorError,
    TooCostlyError,
    UnavailableError,
    install_script_hook,
)

if TYPE_CHECKING:
    import pandas as pd

    from dra_jupyter.api import Claim, Session
    from dra_jupyter.claimspec import RequestKeywords, RunKeywords
    from dra_jupyter.tables import ClaimRow, DeviceRow, Table
    from dra_jupyter.types import Command, Waiter
    from dra_jupyter.types.runs import Run

    __version__: str

install_script_hook()  # a script's user error is one line, as in IPython and the CLI

# Names made on first use, so that ``import dra_jupyter`` stays cheap (PEP 562).
_LAZY = {
    "Claim": "dra_jupyter.api",
    "Run": "dra_jupyter.types.runs",
    "Session": "dra_jupyter.api",
    "Table": "dra_jupyter.tables",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from dra_jupyter.version import version  # noqa: PLC0415

        return version()
    if name in _LAZY:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dra_jupyter' has no attribute {name!r}")


def _session() -> Session:
    """The default session; in a kernel shown through the notebook's view (claim cards)."""
    from dra_jupyter.kernel.info import in_kernel  # noqa: PLC0415  # keeps import cheap

    if in_kernel():
        from dra_jupyter.widgets.notebook import notebook_session  # noqa: PLC0415

        return notebook_session()
    from dra_jupyter.api import default_session  # noqa: PLC0415

    return default_session()


def request(**kwargs: Unpack[RequestKeywords]) -> Claim:
    """Get devices: ``request(gpu=2, memory="80Gi", same="pcieRoot", timeout="5m")``.

    Keywords: ``gpu``, ``tpu``, ``mig``, ``count``, ``memory``, ``model``, ``selector``,
    ``share`` (a quantity, or ``"mps"``/``"time-slicing"`` on a cluster, with ``threads``,
    ``pinned_memory``, ``interval``: :mod:`dra_jupyter.sharing.gpushare`), ``same``,
    ``distinct``, ``alternatives``, ``device_class`` (see :mod:`dra_jupyter.claimspec`), and
    ``timeout`` (0: fail at once when busy; '5m': wait in line), ``lease`` (release after
    this long), ``name``, ``apply_env`` (set CUDA_VISIBLE_DEVICES and friends in this
    process, default True).
    """
    return _session().request(**kwargs)


def run(command: Command = None, **kwargs: Unpack[RunKeywords]) -> Run:
    """Run ``command`` (an argv list, a shell string, or a self-contained function) with
    devices: ``dra.run(["python", "train.py"], gpu=1)``. On Kubernetes in a pod (keywords
    ``image``, ``start_timeout``, ``node_selector``; :mod:`dra_jupyter.kube.runs.run`), or with
    ``nodes=N`` (or ``queue``) a Job of N pods (``retries``; ``gang_timeout``, default '1h':
    how long N pods placed as a gang may wait to start together, then the run fails with the
    scheduler's reason; ``group``, a request's keywords: devices asked for once for the whole
    run where the cluster keeps claims for pod groups; :mod:`dra_jupyter.kube.runs.jobs`);
    on one machine in the background, as your own process holding its own claim
    (:mod:`dra_jupyter.runner`). Returned at once (``run.status``,
    ``run.logs(follow=True)``, ``run.cancel()``, ``run.wait()``), or followed to its end
    with ``wait=True``. Keywords: those of :func:`request` (none: 1 GPU), and ``name``,
    ``timeout`` (to get the devices: '5m', waiting in line, unlike :func:`request`'s 0),
    ``lease`` (how long the claim may last; default none), ``nodes``."""
    return _session().run(command, **kwargs)


def runs() -> list[Run]:
    """Your runs, oldest first (also those started from another kernel): their
    ``.status``, ``.logs()``, ``.cancel()``, ``.wait()``."""
    return _session().runs()


def devices() -> Table[DeviceRow]:
    """Every device of the inventory, with its state and holder; ``.to_pandas()``."""
    return _session().devices()


def claims(*, all_users: bool = False) -> Table[ClaimRow]:
    """Your live claims (everyone's with ``all_users=True``); ``.to_pandas()``."""
    return _session().claims(all_users=all_users)


def claim(name: str) -> Claim:
    """A live claim by name."""
    return _session().claim(name)


def release(name: str) -> bool:
    """Release one of your claims by name; :class:`ClaimNotFoundError` (``no claim
    NAME``) if there is none of that name (released already)."""
    return _session().release(name)


def release_all() -> list[str]:
    """Release all your claims but those of your runs (``dra.run`` on one machine: cancel
    the run, or release its claim by name, which stops it; a warning names them); returns
    the names released."""
    return _session().release_all()


def history(device: str | list[str], *, last: str | float = "10m") -> pd.DataFrame:
    """Utilisation, memory and temperature of a device (``"gpu-0"`` or its full
    ``driver/pool/device``) over the ``last`` minutes, as a DataFrame; a claim's own:
    ``claim.history()``. Simulated inventories give made-up values (column ``simulated``)."""
    return _session().history(device, last=last)


def usage(since: str | float = "7d", *, by: str = "user") -> pd.DataFrame:
    """GPU usage over the last ``since`` ("7d", "12h", seconds) by ``user``, ``group``,
    ``claim`` or ``device``, as a DataFrame: GPU-hours and GPU-seconds held (a whole GPU
    counts 1, a MIG instance or a share its part of the GPU's memory), of them active, idle
    and unknown, energy, and the idle share. The service shows an admin every user, a user
    their own; the local ledger every row. See docs/api.md."""
    return _session().usage(since, by=by)


def waiting() -> list[Waiter]:
    """The requests waiting in line, in the order they are served: each one's ``owner``,
    ``what``, ``since``, ``position`` and ``why`` ("behind carol, who has used less of their
    share ..."; the service orders the line by fair share, then first come first)."""
    return _session().waiting()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext dra_jupyter``: the ``%dra`` and ``%%dra`` magics (see ``%dra?``)."""
    from dra_jupyter.magics import load_ipython_extension as load  # noqa: PLC0415

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from dra_jupyter.magics import unload_ipython_extension as unload  # noqa: PLC0415

    unload(ipython)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """The Jupyter server extension (``jpserver_extensions: {"dra_jupyter": true}``)."""
    from dra_jupyter.server import _jupyter_server_extension_points as points  # noqa: PLC0415

    return points()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension (``labextension/``, built into
    ``dra_jupyter/labextension``), for ``jupyter labextension develop``; a wheel installs it
    in ``share/jupyter/labextensions``."""
    return [{"src": "labextension", "dest": "dra-jupyter-labextension"}]


def configure(**kwargs: Any) -> Session:
    """Use another inventory, ledger or strategy from now on (see :func:`api.configure`)."""
    from dra_jupyter.api import configure as _configure  # noqa: PLC0415

    return _configure(**kwargs)


__all__ = [
    "AllocationError",
    "BusyError",
    "Claim",
    "ClaimNotFoundError",
    "ClusterError",
    "DiscoveryError",
    "DraJupyterError",
    "DraJupyterWarning",
    "ForbiddenError",
    "InvalidInputError",
    "KeepRefusedError",
    "KernelNotFoundError",
    "KernelRestartError",
    "LedgerError",
    "LimitError",
    "MagicError",
    "NeverPossibleError",
    "NotFoundError",
    "ObjectError",
    "Run",
    "SelectorError",
    "Session",
    "Table",
    "TooCostlyError",
    "UnavailableError",
    "__version__",
    "claim",
    "claims",
    "configure",
    "devices",
    "history",
    "release",
    "release_all",
    "request",
    "run",
    "runs",
    "usage",
    "waiting",
]

"""Whether this process is a Jupyter kernel, and which cell it runs: asked without
importing IPython unless ipykernel is loaded already."""

from __future__ import annotations

import sys
import threading


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel's IPython): not a plain Python
    process, not IPython in a terminal. Imports nothing unless ipykernel is loaded."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython  # noqa: PLC0415  # loaded already when ipykernel is

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def execution_count() -> int | None:
    """The number of the cell the kernel runs now (IPython's ``execution_count``)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython  # noqa: PLC0415  # in a kernel only

    shell = get_ipython()
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def current_cell() -> tuple[str, str] | None:
    """``(cell id, request id)`` of the notebook cell this kernel runs now: JupyterLab and
    Notebook 7 put the cell's id (``cellId``) in the metadata of each execute request, and
    each run of the cell is a new request. None outside a kernel, off its main thread, and
    where the front end sends no cell id (a console, nbclient without one)."""
    if "ipykernel" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return None
    from IPython import get_ipython  # noqa: PLC0415  # loaded already when ipykernel is

    kernel = getattr(get_ipython(), "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)
    if get_parent is None:
        return None
    parent = get_parent("shell") or {}
    header = parent.get("header") or {}
    cell = (parent.get("metadata") or {}).get("cellId")
    if header.get("msg_type") != "execute_request" or not isinstance(cell, str) or not cell:
        return None
    return cell, str(header.get("msg_id", ""))

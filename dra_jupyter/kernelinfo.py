"""Whether this process is a Jupyter kernel, and which cell it runs: asked without
importing IPython unless ipykernel is loaded already."""

from __future__ import annotations

import sys


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

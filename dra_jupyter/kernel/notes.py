"""An IPython kernel that has something to tell its user: ``python -m dra_jupyter.kernel.notes
-f CONNECTION_FILE`` runs ipykernel as ``ipykernel_launcher`` does and prints
``$DRA_JUPYTER_KERNEL_NOTE`` once, at the first execution, before the cell's own output.

The Jupyter server extension starts a kernel so when it moves it back from a pod whose
devices were released (idle release, say): the notebook stays open, and the next cell says
in one line why its variables are gone and how to get the devices again
(:mod:`dra_jupyter.server.moves`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

NOTE_ENV = "DRA_JUPYTER_KERNEL_NOTE"


def say_once(shell: Any, note: str) -> None:
    """Print ``note`` before the next cell runs, then never again."""

    def before(*_info: Any) -> None:
        shell.events.unregister("pre_run_cell", before)
        print(note, file=sys.stdout, flush=True)

    shell.events.register("pre_run_cell", before)


def main() -> None:
    from ipykernel.kernelapp import IPKernelApp  # noqa: PLC0415  # the kernel's process only

    note = os.environ.pop(NOTE_ENV, "")
    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])  # type: ignore[no-untyped-call]
    if note and app.shell is not None:
        say_once(app.shell, note)
    app.start()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()

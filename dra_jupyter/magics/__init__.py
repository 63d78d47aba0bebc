"""``%load_ext dra_jupyter``: the ``%dra`` line magic and the ``%%dra`` cell magic.

Modules: :mod:`.parsing` (the line to a command), :mod:`.dramagics` (the magics),
:mod:`.cell` (a claim held for one cell), :mod:`.reports` (what status, explain, env and
yaml show), :mod:`.completion` (tab completion), :mod:`.helptext` (``%dra?``),
:mod:`.boundary` (user errors as one line).
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%dra``/``%%dra`` and their tab completion with an IPython shell."""
    from dra_jupyter.magics.completion import install  # noqa: PLC0415
    from dra_jupyter.magics.dramagics import DraMagics  # noqa: PLC0415

    ipython.register_magics(DraMagics)
    install(ipython.Completer)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext dra_jupyter``: remove the completion (IPython keeps registered magics)."""
    from dra_jupyter.magics.completion import uninstall  # noqa: PLC0415

    uninstall(ipython.Completer)

"""``%load_ext dra_jupyter``: the ``%dra`` line magic and the ``%%dra`` cell magic.

Modules: :mod:`.parsing` (the line to a command), :mod:`.dramagics` (the magics),
:mod:`.cell` (a claim held for one cell), :mod:`.reports` (what status, explain, env and
yaml show), :mod:`.completion` (tab completion), :mod:`.helptext` (``%dra?``),
:mod:`.inspection` (``dra`` in the namespace, Shift-Tab on ``%dra``),
:mod:`.boundary` (user errors as one line).
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%dra``/``%%dra`` and their tab completion with an IPython shell, and put
    the package in the namespace as ``dra`` unless the name is taken (Shift-Tab on
    ``%dra`` still shows the magic's help: :mod:`.inspection`)."""
    import dra_jupyter.api  # noqa: F401, PLC0415  # now, not at the first Tab (no session yet)
    from dra_jupyter.magics import inspection  # noqa: PLC0415
    from dra_jupyter.magics.completion import install  # noqa: PLC0415
    from dra_jupyter.magics.dramagics import DraMagics  # noqa: PLC0415

    ipython.register_magics(DraMagics)
    install(ipython.Completer)
    inspection.define_dra(ipython)
    inspection.install(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext dra_jupyter``: remove the completion and the inspection of ``%dra``
    (IPython keeps registered magics; ``dra`` stays defined)."""
    from dra_jupyter.magics import inspection  # noqa: PLC0415
    from dra_jupyter.magics.completion import uninstall  # noqa: PLC0415

    uninstall(ipython.Completer)
    inspection.uninstall(ipython)

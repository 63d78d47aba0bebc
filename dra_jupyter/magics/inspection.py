"""``dra`` in the user's namespace, and Shift-Tab on ``%dra`` still showing the magic's help.

``%load_ext dra_jupyter`` puts the package in the namespace as ``dra`` (unless the name is
taken), so ``c = dra.request(gpu=1)`` works right after it. A kernel's inspection
(Shift-Tab, ``inspect_request``) looks up the *name* at the cursor (ipykernel's
``token_at_cursor`` drops the ``%``), so on ``%dra`` it would find the module and show
its docstring. :func:`install` wraps the kernel instance's ``do_inspect``: where the name
at the cursor is ``dra`` written as ``%dra`` or ``%%dra``, the magic is inspected; anything
else goes to ipykernel as before. :func:`uninstall` puts it back.
"""

from __future__ import annotations

import sys
from typing import Any

NAME = "dra"


def magic_at_cursor(code: str, cursor_pos: int) -> bool:
    """Whether the word at the cursor is ``dra`` written as ``%dra`` or ``%%dra``."""
    cursor = max(0, min(cursor_pos, len(code)))
    start = cursor
    while start > 0 and (code[start - 1].isalnum() or code[start - 1] == "_"):
        start -= 1
    end = cursor
    while end < len(code) and (code[end].isalnum() or code[end] == "_"):
        end += 1
    return code[start:end] == NAME and start > 0 and code[start - 1] == "%"


def define_dra(ipython: Any) -> None:
    """Put the package in the user's namespace as ``dra``, unless the name is taken. The
    package is loaded already (Python imports a package before its modules), so it is
    taken from ``sys.modules``, not imported: this module imports nothing above it."""
    if NAME not in ipython.user_ns:
        ipython.push({NAME: sys.modules["dra_jupyter"]})


def install(ipython: Any) -> None:
    kernel = getattr(ipython, "kernel", None)
    if kernel is None or getattr(kernel.do_inspect, "dra_original", None) is not None:
        return  # a terminal (no inspect_request), or installed already
    original = kernel.do_inspect

    def do_inspect(
        code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> Any:
        if not magic_at_cursor(code, cursor_pos):
            return original(code, cursor_pos, detail_level, omit_sections)
        try:
            bundle = dict(
                ipython.object_inspect_mime(
                    "%" + NAME, detail_level=detail_level, omit_sections=omit_sections
                )
            )
        except KeyError:
            return original(code, cursor_pos, detail_level, omit_sections)
        if not ipython.enable_html_pager:
            bundle.pop("text/html", None)
        return {"status": "ok", "data": bundle, "metadata": {}, "found": True}

    do_inspect.dra_original = original  # type: ignore[attr-defined]
    kernel.do_inspect = do_inspect


def uninstall(ipython: Any) -> None:
    kernel: Any = getattr(ipython, "kernel", None)
    original = getattr(getattr(kernel, "do_inspect", None), "dra_original", None)
    if original is not None:
        kernel.do_inspect = original

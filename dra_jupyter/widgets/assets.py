"""The widgets' ES modules and style sheet, shipped as package data."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def asset(name: str) -> str:
    return files("dra_jupyter.widgets").joinpath(name).read_text(encoding="utf-8")


def esm(name: str) -> str:
    """A widget's module: the shared helpers (``common.js``) then the widget's own code."""
    return asset("common.js") + "\n" + asset(name)

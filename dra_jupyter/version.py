"""The installed distribution's version: ``dra_jupyter.__version__``."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version

DISTRIBUTION = "dra-jupyter"


@functools.cache
def version() -> str:
    """The version pip installed (``pyproject.toml``'s), read once; ``0+unknown`` for a
    source tree that was never installed."""
    try:
        return distribution_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"

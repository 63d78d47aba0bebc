"""The CEL library (``common-expression-language``, imported as ``cel``), without its
command line.

The package's ``__init__`` imports its own interactive command line (``cel.cli``: rich and
prompt_toolkit), which this package never uses, and which costs about 190 ms of every
import of ``dra_jupyter``'s selectors, so of every ``dra-jupyter`` command and kernel that
allocates: a placeholder module stands in for ``cel.cli`` before ``cel`` is imported here,
the one place this package imports it. A process that imported ``cel`` before keeps the
real one (nothing is replaced).
"""

from __future__ import annotations

import sys
import types

if "cel" not in sys.modules:
    sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli", "not loaded by dra_jupyter"))

import cel  # after the placeholder above
from cel import stdlib

__all__ = ["cel", "stdlib"]

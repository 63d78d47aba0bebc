"""What a command is to :mod:`.main`: a runner of its parsed arguments that writes to
``out`` and ``err`` and returns the exit code. Errors are raised, not printed:
:func:`dra_jupyter.cli.main.main` turns their class into the code and one line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

Runner = Callable[[argparse.Namespace, TextIO, TextIO], int]
Subparsers = Any  # argparse's _SubParsersAction, which it does not export

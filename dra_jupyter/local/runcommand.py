"""What a run on one machine runs: the argv of ``dra.run``'s command, checked before
anything is made.

A list is an argv as it is (each item a string: nothing is joined into a shell line); a
string is the user's own shell command, run under ``sh -c`` (as in a pod); a function runs
by its source in this Python (``sys.executable -c``: its source, then a call; it must be
self-contained, imports inside); ``python`` as a list's first item is this Python too, so
that a kernel's packages are there.
"""

from __future__ import annotations

import inspect
import shutil
import sys
import textwrap

from dra_jupyter.errors import InvalidInputError, shown
from dra_jupyter.types import Command

# What a command may be, said when it is none of these.
WHAT_A_COMMAND_IS = (
    "a command is an argv list of strings (['python', 'train.py']), a shell string "
    "('python train.py'), or a function without arguments"
)


def local_argv(command: Command) -> list[str]:
    """The argv of ``command`` on this machine; InvalidInputError, in one line, for what
    cannot be run (nothing, a lambda, a function without source or with arguments it must
    be given, a list with an item that is not a string, anything else: a number, bytes, a
    mapping). Said without the caller: ``dra.run`` says them as its own."""
    if command is None:
        raise InvalidInputError(
            "give the command to run: an argv list (['python', 'train.py']), a "
            "shell string, or a function; on this machine there is no image to run"
        )
    if isinstance(command, str):
        if not command.strip():
            raise InvalidInputError("the command is an empty string; give one to run")
        return ["sh", "-c", command]
    if callable(command):
        name = getattr(command, "__name__", "")
        if not name.isidentifier():
            raise InvalidInputError(
                "pass a named function (def ...), not a lambda, or a command list"
            )
        _called_bare(command)
        try:
            source = textwrap.dedent(inspect.getsource(command))
        except (OSError, TypeError) as error:
            raise InvalidInputError(
                f"the source of {name} is not available ({error}); pass a function "
                "defined in a cell or a file, or a command list"
            ) from error
        return [sys.executable, "-c", f"{source}\n{name}()\n"]
    if not isinstance(command, list | tuple):  # bytes, a mapping, a number, a set, ...
        raise InvalidInputError(
            f"the command is {type(command).__name__} {shown(command)}; {WHAT_A_COMMAND_IS}"
        )
    argv = list(command)
    if not argv:
        raise InvalidInputError("the command list is empty; give a program and its arguments")
    for i, part in enumerate(argv):
        if not isinstance(part, str):
            raise InvalidInputError(
                f"item {i} of the command list is {type(part).__name__} "
                f"{shown(part)}, not a string; write every argument as a string, e.g. "
                f"str({shown(part)})"
            )
    if argv[0] == "python":
        argv[0] = sys.executable
    elif shutil.which(argv[0]) is None:
        raise InvalidInputError(
            f"the program {shown(argv[0])} is not found (on PATH, or as a path to an "
            "executable file); give its path, or 'python' for this Python"
        )
    return argv


def _called_bare(function: object) -> None:
    """Refuse a function that a call without arguments would fail on (the run calls
    ``name()``): said now, in one line, rather than in the run's log."""
    name = getattr(function, "__name__", "the function")
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]  # a callable
    except (TypeError, ValueError):  # a builtin without one: its source check says more
        return
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise InvalidInputError(
            f"{name}() is called without arguments, but it needs "
            f"{', '.join(required)}; give them defaults, or pass a function without arguments "
            f"(def main(): {name}(...))"
        )

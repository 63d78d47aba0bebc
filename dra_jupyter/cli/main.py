"""The ``dra-jupyter`` entry point: the parser made of every group's commands, the runner
found by the command's name in their tables, and an error turned into its class's exit code
and one line (see :mod:`dra_jupyter.cli`)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from dra_jupyter.cli import demo, doctor, health, kube, local, objects, service, taints
from dra_jupyter.cli.command import Runner
from dra_jupyter.errors import (
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_UNSATISFIABLE,
    DraJupyterError,
    DraJupyterWarning,
)

MAX_LINE = 1000  # characters of an error line; messages cut what they echo well before
GROUPS = (
    objects,
    demo,
    service,
    local,
    taints,
    health,
    doctor,
    kube,
)  # in the order ``--help`` lists them
COMMANDS: dict[str, Runner] = {name: run for g in GROUPS for name, run in g.COMMANDS.items()}


def _line(text: object) -> str:
    """One line of at most MAX_LINE characters: what exit codes 2 and 3 print."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def _show_warning(err: TextIO) -> Callable[..., None]:
    def show(message: Warning | str, *_: Any, **__: Any) -> None:
        err.write(_line(f"warning: {message}") + "\n")

    return show


class UsageError(Exception):
    """What argparse refused on the command line, and the command it was given to."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse, whose refusals are raised (as :class:`UsageError`) instead of printed with
    the usage on several lines; the subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


_CHOICE = re.compile(
    r"argument (?P<arg>\S+): invalid choice: '(?P<value>.*)' \(choose from (?P<choices>.*)\)"
)


def usage_line(error: UsageError) -> str:
    """One line: what was refused, in words, and where the help is (``dra-jupyter reqest``
    → ``no command 'reqest'; did you mean 'request'?``)."""
    message, hint = error.message, f"see '{error.prog} --help'"
    choice = _CHOICE.fullmatch(message)
    if choice is not None:
        value = choice["value"]
        choices = [c.strip().strip("'") for c in choice["choices"].split(",")]
        close = difflib.get_close_matches(value, choices, n=1)
        if choice["arg"] == "command":
            message = f"no command '{value}'"
        else:
            message = f"{choice['arg']} '{value}' is not one of {', '.join(choices)}"
        if close:
            hint = f"did you mean '{close[0]}'? ({hint})"
    elif message.startswith("the following arguments are required: "):
        message = "missing " + message.removeprefix("the following arguments are required: ")
    return _line(f"error: {error.prog}: {message}; {hint}")


def _of_command(
    error: UsageError, parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> UsageError:
    """An unknown option is refused by the top parser, after the command's own: said as the
    command's, with its closest option (``claims --al`` → ``did you mean --all?``)."""
    unknown = "unrecognized arguments: "
    if error.prog != parser.prog or not error.message.startswith(unknown):
        return error
    tokens = list(sys.argv[1:] if argv is None else argv)
    command = next((t for t in tokens if t in COMMANDS), None)
    if command is None:
        return error
    sub = next(
        a.choices[command]
        for a in parser._actions  # argparse has no public walk of its parsers
        if isinstance(a, argparse._SubParsersAction)
    )
    options = [o for a in sub._actions for o in a.option_strings]
    first = error.message.removeprefix(unknown).split()[0]
    message = f"no option {first}" if first.startswith("-") else error.message
    close = difflib.get_close_matches(first, options, n=1)
    return UsageError(sub.prog, message + (f" (did you mean {close[0]}?)" if close else ""))


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dra-jupyter",
        description="Allocate DRA devices (resource.k8s.io/v1) offline, as Kubernetes would.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def _valued_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option, of any command, that takes one value (``--lease 1h``)."""
    found: set[str] = set()
    for action in parser._actions:  # argparse has no public walk of its tree of parsers
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _valued_options(sub)
        elif action.option_strings and action.nargs is None:
            found.update(o for o in action.option_strings if o.startswith("--"))
    return found


def _dash_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--lease -5m`` as ``--lease=-5m``: argparse reads a value that starts with a dash
    as an option and answers with its usage; joined, the value is refused in words."""
    valued = _valued_options(parser)
    out: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token in valued:
            value = next(tokens, None)
            if value is not None and value.startswith("-") and value not in valued:
                out.append(f"{token}={value}")
                continue
            out.extend([token] if value is None else [token, value])
            continue
        out.append(token)
    return out


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(_dash_values(sys.argv[1:] if argv is None else argv, parser))
    except SystemExit as exit_:  # --help, printed
        return int(exit_.code or 0)
    except UsageError as error:
        err.write(usage_line(_of_command(error, parser, argv)) + "\n")
        return EXIT_INVALID
    with warnings.catch_warnings():
        warnings.simplefilter("default", DraJupyterWarning)  # each one once, as one line
        warnings.showwarning = _show_warning(err)
        return _run(args, out, err)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        return COMMANDS[args.command](args, out, err)
    except DraJupyterError as error:
        if error.exit_code == EXIT_UNSATISFIABLE:  # its explanation follows, on its lines
            err.write(f"{error}\n")
        else:
            err.write(_line(f"error: {error}") + "\n")
        return error.exit_code
    except Exception as error:  # a bug: say so, with what is needed to report it
        err.write("".join(traceback.format_exception(error)))
        err.write(
            f"internal error (a bug in dra-jupyter, not in your input): {type(error).__name__}: "
            f"{_line(error)[:200]}; please report it with the traceback above\n"
        )
        return EXIT_INTERNAL

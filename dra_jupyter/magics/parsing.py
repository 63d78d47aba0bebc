"""From the text after ``%dra`` (or ``%%dra``) to a command, its request keywords and flags.

The line is split as a shell would (``shlex``), so a selector with spaces can be quoted:
``%dra request selector='device.attributes["gpu.nvidia.com"].architecture == "Hopper"'``.
Each ``key=value`` token becomes a keyword of :func:`dra_jupyter.request`: whole numbers
for ``gpu``, ``tpu`` and ``count`` (or ``all``), a Python list of dicts for
``alternatives``, ``true``/``false`` for ``apply_env``, ``restart`` and ``wait``, whole
numbers for ``nodes`` and ``retries``, text for everything
else (the API parses durations and quantities, and says what is wrong with them).
"""

from __future__ import annotations

import ast
import difflib
import shlex
from dataclasses import dataclass, field
from typing import Any

from dra_jupyter.claimspec import CLAIM_KEYS, INTEGER_KEYS, unknown_keyword
from dra_jupyter.errors import InvalidInputError, shown

# the subcommands of %dra, and the flags each one takes
COMMANDS: dict[str, tuple[str, ...]] = {
    "devices": ("--table",),
    "request": (),
    "status": ("--all",),
    "release": ("--all",),
    "explain": ("--verbose",),
    "env": (),
    "yaml": (),
    "usage": ("--since", "--by"),  # each with a value: --since 7d --by group
    "runs": (),
    "logs": ("--follow",),
    "cancel": (),
    "help": (),
}
SHORT_FLAGS = {"-a": "--all", "-v": "--verbose", "-t": "--table", "-f": "--follow"}
# keywords of dra.request() besides the claim's own (claimspec.CLAIM_KEYS)
REQUEST_KEYS = ("timeout", "lease", "name", "apply_env", "restart", "join")
# which keywords each form accepts
KEYWORDS: dict[str, tuple[str, ...]] = {
    "request": (*CLAIM_KEYS, *REQUEST_KEYS),
    "explain": CLAIM_KEYS,
    "yaml": (*CLAIM_KEYS, "name"),
    "cell": (*CLAIM_KEYS, "timeout", "lease", "name"),  # %%dra: the environment is always set
    # %%dra run: in a pod (Kubernetes), in the background (one machine)
    "run": (
        *CLAIM_KEYS,
        "image",
        "name",
        "timeout",
        "start_timeout",
        "nodes",
        "queue",
        "retries",
        "wait",
        "lease",
        "gang_timeout",
    ),
}
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


@dataclass
class Command:
    """One parsed ``%dra`` line: ``name`` is the subcommand (``cell`` for ``%%dra``)."""

    name: str
    spec: dict[str, Any] = field(default_factory=dict)  # request keywords, typed
    flags: set[str] = field(default_factory=set)  # --all, --verbose, --table
    args: list[str] = field(default_factory=list)  # plain words (claim names for release)

    @property
    def where(self) -> str:
        """How the user wrote it, the caller its refusals name (``said_by``): ``dra request``
        or ``%%dra``."""
        if self.name in ("cell", "run"):
            return "%%dra" if self.name == "cell" else "%%dra run"
        return f"dra {self.name}"

    @property
    def doing(self) -> str:
        """The form with what it asks for, for errors met while doing it:
        ``dra request gpu=9``."""
        asked = " ".join(f"{k}={v}" for k, v in self.spec.items())
        return f"{self.where} {asked}" if asked else self.where


def split(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:  # an unclosed quote
        raise InvalidInputError(f"{err} in {line.strip()!r}; close the quote").said_by(
            where
        ) from None


def _value(key: str, text: str, where: str) -> Any:
    if key in INTEGER_KEYS or key in ("nodes", "retries"):
        if text == "all":
            return text
        try:
            return int(text)
        except ValueError:
            raise InvalidInputError(
                f"{key}={text!r} is not a whole number; write e.g. {key}=2"
            ).said_by(where) from None
    if key == "alternatives":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise InvalidInputError(
                "alternatives must be a list of dicts, e.g. "
                "alternatives=\"[{'gpu': 1, 'model': 'H200'}, {'gpu': 2}]\""
            ).said_by(where) from None
        return value
    if key in ("apply_env", "restart", "wait"):
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise InvalidInputError(f"{key}={text!r} must be true or false").said_by(where)
    return text


def keywords(tokens: list[str], command: Command) -> None:
    """Fill ``command.spec`` from ``key=value`` tokens, checking each key for the form."""
    allowed = KEYWORDS[command.name]
    for token in tokens:
        key, sep, text = token.partition("=")
        if not sep or not key:
            raise InvalidInputError(
                f"{token!r} is not key=value; write e.g. gpu=2 or mig=3g.71gb"
            ).said_by(command.where)
        if key not in allowed:
            raise unknown_keyword(key, allowed).said_by(command.where)
        if key in command.spec:
            raise InvalidInputError(f"{key} is given twice").said_by(command.where)
        command.spec[key] = _value(key, text, command.where)


def parse_line(line: str) -> Command:
    """``%dra <command> ...``; an empty line is ``help``."""
    tokens = split(line, "dra")
    if not tokens:
        return Command("help")
    name, rest = tokens[0], tokens[1:]
    if name not in COMMANDS:
        if name == "run":
            raise InvalidInputError(
                "run is a cell magic: write %%dra run gpu=1 on a cell's first line and "
                "the cell's Python code below it (it runs in a pod)"
            ).said_by("dra")
        if "=" in name:
            raise InvalidInputError(
                f"{name!r} is not a command; to hold devices write %dra request {line.strip()}"
            ).said_by("dra")
        near = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.8)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise InvalidInputError(
            f"unknown command {shown(name)}{hint}; use {', '.join(COMMANDS)} (%dra help shows "
            "examples)"
        ).said_by("dra")
    command = Command(name)
    if name == "usage":
        return _usage(rest, command)
    if name == "request":  # --join NAME, --join=NAME: join=NAME
        rest = _join_flag(rest)
    words = []
    for token in rest:
        flag = SHORT_FLAGS.get(token, token)
        if token.startswith("-") and "=" not in token:
            if flag not in COMMANDS[name]:
                takes = ", ".join(COMMANDS[name]) or "no flags"
                raise InvalidInputError(f"unknown flag {token!r}; it takes {takes}").said_by(
                    command.where
                )
            command.flags.add(flag)
        else:
            words.append(token)
    if name in KEYWORDS:
        keywords(words, command)
    elif name == "release":
        command.args = words
    elif name in ("logs", "cancel"):
        if len(words) != 1:
            raise InvalidInputError(
                f"name one run, e.g. %{command.where} alice-run-1 (%dra runs lists yours)"
            ).said_by(command.where)
        command.args = words
    elif words:
        raise InvalidInputError(f"takes no arguments, got {' '.join(words)!r}").said_by(
            command.where
        )
    return command


def _join_flag(tokens: list[str]) -> list[str]:
    """``--join team-gpu`` (or ``--join=team-gpu``) as ``join=team-gpu``."""
    out: list[str] = []
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        if token == "--join":
            if not rest:
                raise InvalidInputError(
                    "--join needs a claim's name, e.g. --join team-gpu"
                ).said_by("dra request")
            token = f"join={rest.pop(0)}"
        elif token.startswith("--join="):
            token = token.removeprefix("--")
        out.append(token)
    return out


def _usage(tokens: list[str], command: Command) -> Command:
    """``%dra usage [--since 7d] [--by user]`` (or ``since=7d by=user``)."""
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        key, sep, value = token.lstrip("-").partition("=")
        if key not in ("since", "by"):
            raise InvalidInputError(
                f"{token!r} is not known; write e.g. %dra usage --since 7d --by group"
            ).said_by(command.where)
        if not sep:
            if not rest:
                raise InvalidInputError(f"--{key} needs a value, e.g. --since 7d").said_by(
                    command.where
                )
            value = rest.pop(0)
        if key in command.spec:
            raise InvalidInputError(f"{key} is given twice").said_by(command.where)
        command.spec[key] = value
    return command


def parse_cell_line(line: str) -> Command:
    """The first line of ``%%dra gpu=1 ...`` (request keywords only) or of ``%%dra run gpu=1
    ...`` (the cell runs in a pod: request keywords, ``image``, ``timeout``, ``start_timeout``)."""
    tokens = split(line, "%%dra")
    command = Command("run" if tokens[:1] == ["run"] else "cell")
    keywords(tokens[1:] if command.name == "run" else tokens, command)
    return command

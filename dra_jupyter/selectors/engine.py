"""Compile DRA selectors once; evaluate them on devices converted once.

The engine is ``common-expression-language`` (the Rust ``cel`` crate). Around it:

* :func:`compile_selector` checks length (in bytes, as upstream), syntax, names and the
  estimated cost (:mod:`.cost`) first, then rewrites what the engine lacks or does slowly:
  ``cel.bind(x, init, body)`` becomes ``[init].map(x, body)[0]``, ``matches(s, re)`` becomes
  ``s.matches(re)``, ``.device`` becomes ``device``, and ``quantity("40Gi")`` /
  ``semver("1.2.3")`` with literal arguments become their tagged-bytes constants
  (:mod:`.library`), so that the common comparisons cost one Python callback;
* :func:`device_view` keeps a device as published; the ``device`` variable and its
  ``cel.Context`` (about 30 µs) are built the first time a selector needs the engine:
  the common selectors never do, :mod:`.fastpath` evaluates them in plain Python with the
  same results. ``allowMultipleAllocations`` is always present (DRAConsumableCapacity on);
* ``device.attributes["other.domain"]`` is an empty map upstream. The engine has no default
  for missing map keys, so when an evaluation fails, it is retried with the domains that the
  device lacks added as empty maps to ``attributes`` and ``capacity``: the driver's, every
  string literal the selector indexes with (``m["..."]``), and any string literal of the
  selector that a retry still misses. All of them at once: a missing domain that fails
  ``has(...)`` or ``"x" in ...`` may be hidden behind another error that ``&&`` or ``||``
  would have absorbed. A result without an error needs no retry (absorbed errors do not
  change results). A retry sees the extra (empty) domains when it iterates over
  ``device.attributes`` itself, which upstream would not.

Not supported (the Kubernetes environment has them; compile_selector says so): optional
syntax ``x.?f``, ``m[?k]``, ``[?e]`` and ``{?k: v}`` (the ``optional.*`` functions do work),
two-variable comprehensions (``all(i, v, ...)``, ``transformList``, ...), the URL, IP, CIDR,
format and image libraries, ext.Lists (``sort``, ``distinct``, ...), and time-zone arguments of
the timestamp getters. Expressions nested deeper than 100 levels are rejected.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_jupyter.errors import SelectorError
from dra_jupyter.model import features
from dra_jupyter.model.attributes import AttributeValue, Version
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors import fastpath, library
from dra_jupyter.selectors.celruntime import cel
from dra_jupyter.selectors.cost import CheckError, analyze
from dra_jupyter.selectors.fastpath import FastSelector, Reads, compile_fast_reads
from dra_jupyter.selectors.parser import CelSyntaxError, Node, parse

MAX_EXPRESSION_LENGTH = 10 * 1024
MAX_COST = 1_000_000  # CELSelectorExpressionMaxCost
_ENGINE_ERRORS = (
    TypeError, ValueError, RuntimeError, IndexError, ZeroDivisionError, OverflowError,
)  # fmt: skip
_PLAIN = frozenset((str, int, bool))  # attribute types that need no check
_CALLBACK = re.compile(
    r"Function '([\w.]+)' error: (?:Python function call failed: (\w+): )?(.*?)\.? "
    r"Check function arguments and their types\.$"
)


class CelEvaluationError(Exception):
    """A selector failed on a device; ``problem`` is a one-line description."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class _QuietCallbacks(logging.Filter):
    """The engine logs a warning for each failing Python callback; we raise them instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        match = re.match(r"Python function '([\w.]+)' failed", record.getMessage())
        return match is None or match.group(1) not in library.FUNCTIONS


logging.getLogger("cel").addFilter(_QuietCallbacks())


class DeviceView:
    """One device for selectors; see :func:`device_view`.

    It keeps the device as published, for :mod:`.fastpath`; the CEL variable ``device`` (by
    domain, versions and quantities encoded) and its context are built on first use.
    """

    __slots__ = (
        "_allow", "_attributes", "_by_domain", "_capacity", "_context", "_driver", "_widened",
    )  # fmt: skip

    def __init__(
        self,
        driver: str,
        attributes: dict[str, AttributeValue],
        capacity: dict[str, Quantity],
        allow_multiple_allocations: bool,
    ) -> None:
        self._driver = driver
        self._attributes = attributes
        self._capacity = capacity
        self._allow = allow_multiple_allocations
        self._by_domain: tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]] | None
        self._by_domain = None
        self._context: Any = None
        self._widened: dict[frozenset[str], Any] = {}

    @property
    def driver(self) -> str:
        return self._driver

    def _domains(self) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
        """Attributes and capacity as the engine sees them: by domain, converted."""
        if self._by_domain is None:
            attrs = {name: _cel_value(value) for name, value in self._attributes.items()}
            caps = {name: library.encode_quantity(q.value) for name, q in self._capacity.items()}
            self._by_domain = _by_domain(self._driver, attrs), _by_domain(self._driver, caps)
        return self._by_domain

    def _engine(self) -> Any:
        """The engine's context, built once."""
        if self._context is None:
            self._context = self._build(*self._domains())
        return self._context

    def _build(self, attributes: object, capacity: object) -> Any:
        device = {"driver": self._driver, "attributes": attributes, "capacity": capacity}
        device["allowMultipleAllocations"] = self._allow
        return cel.Context(variables={"device": device}, functions=library.FUNCTIONS)

    def _with_domains(self, domains: frozenset[str]) -> Any:
        """The context with ``domains`` present (empty) in attributes and capacity."""
        if domains not in self._widened:
            empty: dict[str, dict[str, object]] = {d: {} for d in domains}
            attributes, capacity = self._domains()
            self._widened[domains] = self._build(empty | attributes, empty | capacity)
        return self._widened[domains]


def _cel_value(value: AttributeValue) -> object:
    if isinstance(value, tuple):
        return [_cel_value(item) for item in value]
    if isinstance(value, Version):
        return library.parse_semver(value.text)
    return value


def _by_domain(driver: str, values: Mapping[str, object]) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = {}
    for name, value in values.items():
        domain, slash, ident = name.partition("/")
        if not slash:
            domain, ident = driver, name
        result.setdefault(domain, {})[ident] = value
    return result


def device_view(
    driver: str,
    attributes: Mapping[str, AttributeValue],
    capacity: Mapping[str, Quantity],
    allow_multiple_allocations: bool,
) -> DeviceView:
    """A device for all selectors; cheap: the engine's view of it is built when first needed.

    Names are as a ResourceSlice publishes them: ``"domain/name"``, or a bare name that
    belongs to the driver's domain. For the engine, versions become semvers, capacities
    quantities, tuples lists. Raises ``ValueError`` for a version that is not strict semver 2.0.0.
    """
    for value in attributes.values():
        if type(value) in _PLAIN:
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Version):
                library.parse_semver(item.text)
    return DeviceView(driver, dict(attributes), dict(capacity), allow_multiple_allocations)


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A selector ready to run; ``cost`` is its estimated worst-case cost."""

    expression: str
    cost: int
    _program: Any = field(repr=False)
    _literals: frozenset[str] = field(repr=False)
    _indexes: frozenset[str] = field(default=frozenset(), repr=False)
    _fast: FastSelector | None = field(default=None, repr=False)
    _reads: Reads | None = field(default=None, repr=False)

    @property
    def has_fast_path(self) -> bool:
        """Whether :mod:`.fastpath` evaluates this selector without the engine."""
        return self._fast is not None

    @property
    def reads(self) -> Reads | None:
        """What the fast path reads of a device (devices that agree on it get the same
        result); ``None`` when this selector runs on the engine."""
        return self._reads if self._fast is not None and fastpath.ENABLED else None

    def matches(self, device: DeviceView) -> bool:
        """Whether the device is selected; raise :class:`CelEvaluationError` if it fails.

        Uses the fast path when there is one (and :data:`.fastpath.ENABLED`), else the engine.
        """
        if self._fast is not None and fastpath.ENABLED:
            result = self._fast(device._driver, device._attributes, device._capacity, device._allow)
            if result is True or result is False:
                return result
            if result is not None:
                raise CelEvaluationError(result)
        return self.matches_engine(device)

    def matches_fast(
        self,
        driver: str,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, Quantity],
        allow_multiple_allocations: bool,
    ) -> bool | None:
        """:meth:`matches` on a device as published, without a view; ``None`` if that needs the
        engine (no fast path for this selector, or not for this device)."""
        if self._fast is None:
            return None
        result = self._fast(driver, attributes, capacity, allow_multiple_allocations)
        if isinstance(result, str):
            raise CelEvaluationError(result)
        return result

    def matches_engine(self, device: DeviceView) -> bool:
        """:meth:`matches` on the CEL engine, never the fast path."""
        try:
            result = self._program.execute(device._engine())
        except (KeyError, *_ENGINE_ERRORS) as error:
            result = self._retry(device, error)
        if result is True or result is False:
            return result
        kind = library.a_kind(library.kind_of(result))
        raise CelEvaluationError(f"expression returned {kind}, not a bool")

    def _retry(self, device: DeviceView, error: Exception) -> object:
        """Evaluate again with missing domains as empty maps; raise if it still fails."""
        attributes, capacity = device._domains()
        wanted = self._indexes | {device.driver}
        domains = frozenset(d for d in wanted if d not in attributes or d not in capacity)
        tried: frozenset[str] = frozenset()
        while True:
            key = str(error.args[0]) if error.args else ""
            if isinstance(error, KeyError) and (key in self._literals or key == device.driver):
                domains |= {key}
            if domains == tried:
                problem = f"no such key: {key}" if isinstance(error, KeyError) else None
                raise CelEvaluationError(problem or _describe(error)) from error
            tried = domains
            try:
                return self._program.execute(device._with_domains(domains))
            except (KeyError, *_ENGINE_ERRORS) as again:
                error = again


@dataclass(frozen=True, slots=True)
class _Rejected:
    problem: str
    remedy: str = ""


def compile_selector(expression: str, *, where: str) -> CompiledSelector:
    """Compile (once per expression text and DRAListTypeAttributes gate) or raise
    :class:`~dra_jupyter.errors.SelectorError`."""
    result = _compile(expression, features.current().dra_list_type_attributes)
    if isinstance(result, _Rejected):  # the problem may quote the expression: cut it
        raise SelectorError(where, _one_line(result.problem), result.remedy)
    return result


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


@functools.lru_cache(maxsize=1024)
def _compile(expression: str, lists: bool) -> CompiledSelector | _Rejected:
    """``lists``: the gate the checks read (:mod:`.cost`), here so that it keys the cache."""
    if not expression.strip():
        return _Rejected("the CEL expression is empty", 'write one, e.g. device.driver == "x"')
    length = len(expression.encode())
    if length > MAX_EXPRESSION_LENGTH:
        return _Rejected(
            f"the CEL expression has {length} bytes, more than {MAX_EXPRESSION_LENGTH}"
        )
    try:
        node = parse(expression)
        cost = analyze(node).cost
    except CelSyntaxError as error:
        return _Rejected(str(error) if error.unsupported else f"syntax error: {error}")
    except CheckError as error:
        return _Rejected(error.problem, error.remedy)
    if cost > MAX_COST:
        return _Rejected(
            f"estimated cost {cost} exceeds the limit of {MAX_COST}",
            "loops (all, exists, map, filter) multiply the sizes they iterate over; flatten them",
        )
    try:
        program = cel.compile(_rewrite(expression, node))
    except ValueError as error:
        return _engine_syntax_error(str(error))
    literals, indexes = frozenset(_strings(node)), frozenset(_indexes(node))
    fast_reads = compile_fast_reads(expression, node)
    fast, reads = (None, None) if fast_reads is None else fast_reads
    return CompiledSelector(expression, cost, program, literals, indexes, fast, reads)


def _engine_syntax_error(error: str) -> _Rejected:
    """The CEL engine's parse error in words: its message and position, without the Rust
    debug form it may come in (``OtherError(ParseError { ..., msg: "...", ... })``)."""
    deep = re.search(r"Recursion limit of (\d+) exceeded", error)
    if deep is not None:
        return _Rejected(
            f"the expression nests more than {deep[1]} levels deep (each parenthesis, call "
            "and list counts)",
            "flatten it, e.g. a && b && c rather than (a && (b && c))",
        )
    found = re.search(r"ERROR: <input>:(\d+):(\d+): (?:Syntax error: )?([^\n]*)", error)
    detail = error.split("\n", 1)[0] if found is None else found[3]
    debug = re.search(r'\bmsg: "((?:[^"\\]|\\.)*)"', detail)
    if debug is not None:
        detail = debug[1]
    detail = re.sub(r" expecting \{.*\}", "", detail)
    if found is not None:
        detail += found.expand(r" (\1:\2)")
    return _Rejected("syntax error: " + detail)


def _strings(node: Node) -> list[str]:
    found = [node.value] if node.kind == "literal" and isinstance(node.value, str) else []
    for child in node.children():
        found.extend(_strings(child))
    return found


def _indexes(node: Node) -> list[str]:
    """The string literals that the expression indexes with: ``m["..."]``."""
    found = []
    if node.kind == "index" and node.args[0].kind == "literal":
        found = [node.args[0].value] if isinstance(node.args[0].value, str) else []
    for child in node.children():
        found.extend(_indexes(child))
    return found


def _constant(node: Node) -> str | None:
    """The tagged-bytes literal for quantity("...") or semver("..."[, bool]), if valid."""
    args = node.args
    if node.kind != "call" or node.target is not None or not args:
        return None
    if any(a.kind != "literal" for a in args) or not isinstance(args[0].value, str):
        return None
    try:
        if node.name == "quantity" and len(args) == 1:
            raw = library.parse_quantity(args[0].value)
        elif node.name == "semver" and (len(args) == 1 or isinstance(args[-1].value, bool)):
            raw = library.parse_semver(args[0].value, len(args) == 2 and args[1].value is True)
        else:
            return None
    except ValueError:
        return None  # fails at run time, as upstream
    return 'b"' + raw.replace(b"\x01", b"\\x01").decode() + '"'


def _is_bind(node: Node) -> bool:
    target = node.target
    calls = node.kind == "call" and node.name == "bind" and len(node.args) == 3
    return calls and target is not None and target.kind == "ident" and target.name == "cel"


def _rewrite(text: str, node: Node) -> str:
    """The source of ``node`` with constants folded and ``cel.bind`` expanded."""
    constant = _constant(node)
    if constant is not None:
        return constant
    args = node.args
    if _is_bind(node):
        return f"[{_rewrite(text, args[1])}].map({args[0].name}, {_rewrite(text, args[2])})[0]"
    if node.kind == "call" and node.target is None and node.name == "matches" and len(args) == 2:
        return f"({_rewrite(text, args[0])}).matches({_rewrite(text, args[1])})"
    if node.kind == "ident":  # also drops the leading dot of ".device", unknown to the engine
        return node.name
    parts, pos = [], node.start + (node.kind == "call" and text.startswith(".", node.start))
    for child in node.children():
        parts += [text[pos : child.start], _rewrite(text, child)]
        pos = child.end
    return "".join(parts) + text[pos : node.end]


def _describe(error: Exception) -> str:
    """One line for an engine error."""
    text = " ".join(str(error).split())
    match = _CALLBACK.match(text)
    if match:
        name, _, message = match.groups()
        return message if message.startswith("no such overload") else f"{name}(): {message}"
    if text.startswith("No such overload"):
        return "no such overload"
    undefined = re.match(r"Undefined variable or function: ('[^']*')", text)
    if undefined:
        return f"undeclared reference to {undefined.group(1)}"
    first = text.split(". ")[0].rstrip(".")
    return first[:1].lower() + first[1:]

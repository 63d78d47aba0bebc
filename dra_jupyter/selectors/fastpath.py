"""A fast path for common selectors: plain Python on the device as published, no CEL view.

Building a device's ``cel.Context`` costs about 30 µs, more than the selectors that run on it.
:func:`compile_fast` walks the tree from :mod:`.parser` once per expression. If every node is
in the subset below, it returns a :data:`FastSelector`: a function of the arguments of
:func:`~.engine.device_view`, unconverted, that answers what the engine path answers:
``True`` or ``False``, the ``problem`` of the :class:`~.engine.CelEvaluationError` it
would raise (a ``str``), or ``None`` when this device needs the engine after all. Otherwise
it returns ``None`` and the selector always runs on the engine.

The subset: string, int and bool literals; ``quantity("...")`` and ``semver("..."[, bool])``
of literals that parse; ``device.driver``; ``device.allowMultipleAllocations``;
``device.attributes[D].x``, ``device.attributes[D]["x"]`` and the same on
``device.capacity``, with ``D`` a string literal; ``"x" in device.attributes[D]`` (and
capacity); ``has(device.attributes[D].x)`` (and capacity); ``a in b`` on a list attribute;
``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``&&``, ``||``, ``!``, ``c ? a : b`` and
parentheses; the methods ``startsWith``, ``endsWith``, ``contains``, ``lowerAscii``,
``major``, ``minor``, ``patch``, ``compareTo``, ``isGreaterThan`` and ``isLessThan``.
Not in it (the engine runs them): ``matches`` (the engine's regex dialect is not ``re``),
arithmetic, macros, ``cel.bind``, ``size``, list and map literals, doubles, uints, bytes.

What it mirrors, as the engine path behaves (``tests/selectors/test_fastpath.py`` compares
both on random expressions and devices):

* a name ``"domain/x"`` is ``x`` of ``domain``, a bare name ``x`` of the driver's domain; a
  domain that the device lacks is an empty map, so ``.x`` on it fails with
  "no such key: x". A device that publishes ``x`` both bare and qualified in its driver's
  domain goes to the engine (there, the later one wins);
* ``&&`` and ``||`` absorb errors on either side (``error && false`` is false); when neither
  side decides, the right side's error wins over the left's, and a non-bool operand is
  "no such overload", weaker than an error beside it. Chains are grouped as cel-go groups
  them (a balanced tree), which decides which error a long chain reports;
* ``!!x`` is ``x`` (cel-go's grammar drops pairs of ``!``), even when ``x`` is not a bool;
  ``!(!x)`` is not;
* ``==`` and ``!=`` compare values of different types as unequal (bools are not ints);
  lists compare element-wise; versions compare without build metadata, as the engine's
  canonical encodings do;
* ``<`` and friends take two ints, two strings or two bools, and fail with "no such overload"
  otherwise; two versions go to the engine, which compares their encodings byte-wise;
* operands run left to right; a method runs its argument before its target (the engine's
  order, which decides the error when both fail);
* ``startsWith``, ``endsWith`` and ``contains`` on anything but two strings fail with the
  engine's "undeclared reference to 'startsWith'"; the library functions fail with
  "no such overload: major(string)" and the like, as :mod:`.library` words them.

String and int literals are checked against the engine's reading of them at compile time.
Values the engine may see differently go to the engine: ints beyond int64, attribute or
capacity values of other Python types. Version attributes are converted with
:func:`.library.parse_semver`, so an invalid one raises ``ValueError`` as
:func:`~.engine.device_view` does, when a selector reads it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from dra_jupyter.model.attributes import Version
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors import library
from dra_jupyter.selectors.celruntime import cel, stdlib
from dra_jupyter.selectors.parser import Node

ENABLED = True
"""Whether :meth:`~.engine.CompiledSelector.matches` tries the fast path (tests set it)."""

Eval = Callable[[str, Mapping[str, Any], Mapping[str, Any], bool], object]
"""One node: ``(driver, attributes, capacity, allow_multiple_allocations) -> value``."""
FastSelector = Callable[
    [str, Mapping[str, Any], Mapping[str, Any], bool], "bool | str | None"
]  # fmt: skip
"""A whole selector: its result, the problem of its runtime error, or ``None`` (engine)."""

_MISSING: Any = object()
_INT64 = 2**63
_NO_OVERLOAD = "no such overload"
_SEMVER_PARTS = {"major": 0, "minor": 1, "patch": 2}
_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "startsWith": str.startswith,
    "endsWith": str.endswith,
    "contains": operator.contains,
}
_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
_COMPARISONS: dict[str, Callable[[int], object]] = {
    "compareTo": lambda c: c,
    "isGreaterThan": lambda c: c > 0,
    "isLessThan": lambda c: c < 0,
}


class _Error(Exception):
    """A CEL runtime error; ``problem`` is the text of the engine path's error."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class _FallbackError(Exception):
    """This device needs the engine."""


class _UnsupportedError(Exception):
    """The expression is outside the subset."""


class Reads(NamedTuple):
    """What a fast selector reads of a device, besides its driver: the names it looks up in
    the attributes and in the capacity (as published: qualified, or bare in the driver's
    domain), and whether it reads ``allowMultipleAllocations``. Two devices of one driver
    that agree on these get the same fast-path result."""

    attributes: tuple[str, ...]
    capacity: tuple[str, ...]
    allow: bool


def compile_fast(text: str, node: Node) -> FastSelector | None:
    """The fast path for expression ``text`` (parsed as ``node``), or ``None``."""
    found = compile_fast_reads(text, node)
    return None if found is None else found[0]


def compile_fast_reads(text: str, node: Node) -> tuple[FastSelector, Reads] | None:
    """The fast path and what it reads of a device, or ``None``."""
    builder = _Builder(text)
    try:
        root = builder.build(node)
    except _UnsupportedError:
        return None
    reads = Reads(
        tuple(sorted(builder.reads["attributes"])),
        tuple(sorted(builder.reads["capacity"])),
        builder.reads_allow,
    )
    return _selector(root), reads


def _selector(root: Eval) -> FastSelector:
    def run(
        driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any], allow: bool
    ) -> bool | str | None:
        try:
            result = root(driver, attributes, capacity, allow)
        except _Error as error:
            return error.problem
        except _FallbackError:
            return None
        if result is True or result is False:
            return result
        return f"expression returned {library.a_kind(_kind(result))}, not a bool"

    return run


# --- values ------------------------------------------------------------------------------------


def _value(raw: object) -> object:
    """An attribute as the engine sees it: versions as their tagged bytes, lists as tuples."""
    if type(raw) is str or type(raw) is bool:
        return raw
    if type(raw) is int:
        if -_INT64 <= raw < _INT64:
            return raw
        raise _FallbackError
    if type(raw) is Version:
        return library.parse_semver(raw.text)
    if type(raw) is tuple:
        return tuple(_value(item) for item in raw)
    raise _FallbackError


def _kind(value: object) -> str:
    if type(value) is Fraction:
        return "quantity"
    if type(value) is tuple:
        return "list"
    return library.kind_of(value)


def _equal(a: object, b: object) -> bool:
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is tuple:
        assert isinstance(a, tuple) and isinstance(b, tuple)
        return len(a) == len(b) and all(map(_equal, a, b))
    return a == b


def _ordered(a: object, b: object) -> None:
    """Raise unless ``a < b`` is defined as in the engine."""
    kind = type(a)
    if kind is type(b) and (kind is int or kind is str or kind is bool):
        return
    if (kind is bytes and type(b) is bytes) or Fraction in (kind, type(b)):
        raise _FallbackError
    raise _Error(_NO_OVERLOAD)


def _is_semver(value: object) -> bool:
    return type(value) is bytes and value[:3] == library.SEMVER_TAG


def _find(
    values: Mapping[str, Any], driver: str, domain: str, keys: tuple[str | None, str | None]
) -> Any:
    """The value of an entry of ``domain``, given its qualified and bare names, or _MISSING."""
    qualified, bare = keys
    found = _MISSING if qualified is None else values.get(qualified, _MISSING)
    if bare is not None and driver == domain:
        other = values.get(bare, _MISSING)
        if other is not _MISSING:
            if found is not _MISSING:
                raise _FallbackError
            return other
    return found


def _keys(domain: str, name: str) -> tuple[str | None, str | None]:
    """How entry ``name`` of ``domain`` can be published: ``"domain/name"``, and bare ``name``
    when the domain is the driver's. A name splits at its first slash, so neither form exists
    when the slash would fall elsewhere."""
    return (f"{domain}/{name}" if "/" not in domain else None), (name if "/" not in name else None)


# --- operators -----------------------------------------------------------------------------------


def _logic_error(a: object, b: object) -> _Error:
    if isinstance(b, _Error):
        return b
    if isinstance(a, _Error):
        return a
    return _Error(_NO_OVERLOAD)


def _logic(left: Eval, right: Eval, absorbing: bool) -> Eval:
    """``&&`` (``absorbing=False``) or ``||`` (``True``): an operand equal to ``absorbing``
    decides, whatever (or whichever error) the other side gives, in either order."""

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        try:
            a = left(dr, at, ca, al)
        except _Error as error:
            a = error
        if a is absorbing:
            return absorbing
        try:
            b = right(dr, at, ca, al)
        except _Error as error:
            b = error
        if b is absorbing:
            return absorbing
        if a is (not absorbing) and b is (not absorbing):
            return not absorbing
        raise _logic_error(a, b)

    return run


def _and(left: Eval, right: Eval) -> Eval:
    return _logic(left, right, absorbing=False)


def _or(left: Eval, right: Eval) -> Eval:
    return _logic(left, right, absorbing=True)


def _not(operand: Eval) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = operand(dr, at, ca, al)
        if value is True or value is False:
            return not value
        raise _Error(_NO_OVERLOAD)

    return run


def _conditional(condition: Eval, if_true: Eval, if_false: Eval) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = condition(dr, at, ca, al)
        if value is True:
            return if_true(dr, at, ca, al)
        if value is False:
            return if_false(dr, at, ca, al)
        raise _Error(_NO_OVERLOAD)

    return run


def _equals(left: Eval, right: Eval, negate: bool) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        a = left(dr, at, ca, al)
        return _equal(a, right(dr, at, ca, al)) is not negate

    return run


def _equals_literal(operand: Eval, literal: object, negate: bool) -> Eval:
    kind = type(literal)

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = operand(dr, at, ca, al)
        return (type(value) is kind and value == literal) is not negate

    return run


def _ordering(left: Eval, right: Eval, test: Callable[[Any, Any], bool]) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        a = left(dr, at, ca, al)
        b = right(dr, at, ca, al)
        _ordered(a, b)
        return test(a, b)

    return run


def _ordering_literal(operand: Eval, literal: object, test: Callable[[Any, Any], bool]) -> Eval:
    """``operand < literal`` and the like, for an int, string or bool literal on the right."""
    kind = type(literal)

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = operand(dr, at, ca, al)
        if type(value) is not kind:
            _ordered(value, literal)
        return test(value, literal)

    return run


def _in_list(item: Eval, container: Eval) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = item(dr, at, ca, al)
        values = container(dr, at, ca, al)
        if type(values) is tuple:
            return any(_equal(value, v) for v in values)
        if type(values) is Fraction:
            raise _FallbackError
        raise _Error(_NO_OVERLOAD)

    return run


# --- device --------------------------------------------------------------------------------------


def _driver(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
    return dr


def _allow(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
    return al


def _constant(value: object) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        return value

    return run


def _attribute(domain: str, name: str) -> Eval:
    keys, missing = _keys(domain, name), f"no such key: {name}"

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        raw = _find(at, dr, domain, keys)
        if raw is _MISSING:
            raise _Error(missing)
        return _value(raw)

    return run


def _capacity(domain: str, name: str) -> Eval:
    keys, missing = _keys(domain, name), f"no such key: {name}"

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        raw = _find(ca, dr, domain, keys)
        if raw is _MISSING:
            raise _Error(missing)
        if type(raw) is not Quantity:
            raise _FallbackError
        return raw.value

    return run


def _present(collection: str, domain: str, name: str) -> Eval:
    qualified, bare = _keys(domain, name)
    capacity = collection == "capacity"

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        values = ca if capacity else at
        return (qualified is not None and qualified in values) or (
            bare is not None and dr == domain and bare in values
        )

    return run


# --- methods -------------------------------------------------------------------------------------


def _string_test(name: str, target: Eval, argument: Eval) -> Eval:
    test, undeclared = _STRING_TESTS[name], f"undeclared reference to '{name}'"

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        b = argument(dr, at, ca, al)
        a = target(dr, at, ca, al)
        if type(a) is str and type(b) is str:
            return test(a, b)
        if Fraction in (type(a), type(b)):
            raise _FallbackError
        raise _Error(undeclared)

    return run


def _lower_ascii(target: Eval) -> Eval:
    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = target(dr, at, ca, al)
        if type(value) is str:
            return stdlib.lower_ascii(value)
        raise _Error(f"no such overload: lowerAscii({_kind(value)})")

    return run


def _semver_part(name: str, target: Eval) -> Eval:
    index = _SEMVER_PARTS[name]

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        value = target(dr, at, ca, al)
        if _is_semver(value):
            assert isinstance(value, bytes)
            return library.semver_key(value)[index]
        raise _Error(f"no such overload: {name}({_kind(value)})")

    return run


def _comparison(name: str, target: Eval, argument: Eval) -> Eval:
    result = _COMPARISONS[name]

    def run(dr: str, at: Mapping[str, Any], ca: Mapping[str, Any], al: bool) -> object:
        b = argument(dr, at, ca, al)
        a = target(dr, at, ca, al)
        if type(a) is Fraction and type(b) is Fraction:  # cross-multiplied: faster than a < b
            left, right = a.numerator * b.denominator, b.numerator * a.denominator
            return result((left > right) - (left < right))
        if _is_semver(a) and _is_semver(b):
            assert isinstance(a, bytes) and isinstance(b, bytes)
            x, y = library.semver_key(a), library.semver_key(b)
            return result((x > y) - (x < y))
        raise _Error(f"no such overload: {name}({_kind(a)}, {_kind(b)})")

    return run


# --- the walk ------------------------------------------------------------------------------------


def _grouped(node: Node) -> bool:
    """Whether an operator node was written in parentheses (its span is wider than its terms)."""
    return node.start != node.args[0].start or node.end != node.args[-1].end


def _terms(node: Node) -> list[Node]:
    """The operands of a chain ``a && b && c`` as written, whatever tree the parser built."""
    terms: list[Node] = []
    for child in node.args:
        if child.kind == "op" and child.name == node.name and not _grouped(child):
            terms.extend(_terms(child))
        else:
            terms.append(child)
    return terms


class _Builder:
    def __init__(self, text: str) -> None:
        self.text = text
        self.reads: dict[str, set[str]] = {"attributes": set(), "capacity": set()}
        self.reads_allow = False

    def read(self, collection: str, domain: str, name: str) -> None:
        self.reads[collection].update(k for k in _keys(domain, name) if k is not None)

    def build(self, node: Node) -> Eval:
        kind = node.kind
        if kind == "literal":
            return _constant(self.literal(node))
        if kind == "select" and _is_device(node.target):
            if node.name == "driver":
                return _driver
            if node.name == "allowMultipleAllocations":
                self.reads_allow = True
                return _allow
        if kind in ("select", "index"):
            collection, domain, name = self.entry(node)
            self.read(collection, domain, name)
            return (
                _attribute(domain, name) if collection == "attributes" else _capacity(domain, name)
            )
        if kind == "op":
            return self.operator(node)
        if kind == "cond":
            condition, if_true, if_false = (self.build(arg) for arg in node.args)
            return _conditional(condition, if_true, if_false)
        if kind == "call":
            return self.call(node)
        raise _UnsupportedError

    def literal(self, node: Node) -> object:
        """The value of a string, int or bool literal, checked against the engine's reading."""
        value = node.value
        if node.kind != "literal" or node.name not in ("string", "int", "bool"):
            raise _UnsupportedError
        if node.name != "bool":
            try:
                engine = cel.evaluate(self.text[node.start : node.end])
            except Exception as error:  # anything unexpected: leave it to the engine
                raise _UnsupportedError from error
            if type(engine) is not type(value) or engine != value:
                raise _UnsupportedError
        return value

    def string(self, node: Node) -> str:
        value = self.literal(node)
        if not isinstance(value, str):
            raise _UnsupportedError
        return value

    def domain(self, node: Node | None) -> tuple[str, str]:
        """``("attributes" or "capacity", D)`` for ``device.attributes[D]`` or capacity."""
        if node is None or node.kind != "index" or node.target is None:
            raise _UnsupportedError
        collection = node.target
        if collection.kind != "select" or not _is_device(collection.target):
            raise _UnsupportedError
        if collection.name not in ("attributes", "capacity"):
            raise _UnsupportedError
        return collection.name, self.string(node.args[0])

    def entry(self, node: Node) -> tuple[str, str, str]:
        """``(collection, D, x)`` for ``device.attributes[D].x`` or ``...[D]["x"]``."""
        collection, domain = self.domain(node.target)
        name = node.name if node.kind == "select" else self.string(node.args[0])
        return collection, domain, name

    def operator(self, node: Node) -> Eval:
        op, args = node.name, node.args
        if op in ("&&", "||"):
            return self.chain(op, [self.build(term) for term in _terms(node)])
        if op == "!" and len(args) == 1:
            # As in cel-go's grammar, `!!x` is one rule that drops pairs of `!`: it is `x`,
            # even when x is not a bool; `!(!x)` negates twice.
            negations, operand = 1, args[0]
            while operand.kind == "op" and operand.name == "!" and len(operand.args) == 1:
                if not self.text.startswith("!", operand.start):
                    break
                negations, operand = negations + 1, operand.args[0]
            inner = self.build(operand)
            return _not(inner) if negations % 2 else inner
        if len(args) != 2:
            raise _UnsupportedError
        if op in ("==", "!="):
            for operand, other in (args, args[::-1]):
                if other.kind == "literal":
                    return _equals_literal(self.build(operand), self.literal(other), op == "!=")
            return _equals(self.build(args[0]), self.build(args[1]), op == "!=")
        if op in _ORDERINGS:
            if args[1].kind == "literal":
                return _ordering_literal(self.build(args[0]), self.literal(args[1]), _ORDERINGS[op])
            return _ordering(self.build(args[0]), self.build(args[1]), _ORDERINGS[op])
        if op == "in":
            try:
                collection, domain = self.domain(args[1])
            except _UnsupportedError:
                return _in_list(self.build(args[0]), self.build(args[1]))
            if args[0].kind != "literal":
                raise _UnsupportedError
            self.read(collection, domain, self.string(args[0]))
            return _present(collection, domain, self.string(args[0]))
        raise _UnsupportedError

    def chain(self, op: str, terms: list[Eval]) -> Eval:
        """The terms grouped as cel-go's ``balancedTree`` groups them."""
        join = _and if op == "&&" else _or

        def tree(lo: int, hi: int) -> Eval:  # lo and hi index the operators between terms
            mid = (lo + hi + 1) // 2
            left = terms[mid] if mid == lo else tree(lo, mid - 1)
            right = terms[mid + 1] if mid == hi else tree(mid + 1, hi)
            return join(left, right)

        return tree(0, len(terms) - 2)

    def call(self, node: Node) -> Eval:
        name, args, target = node.name, node.args, node.target
        if target is None:
            if name == "has" and len(args) == 1 and args[0].kind == "select":
                collection, domain = self.domain(args[0].target)
                self.read(collection, domain, args[0].name)
                return _present(collection, domain, args[0].name)
            return _constant(self.constant(node))
        if name in _STRING_TESTS and len(args) == 1:
            return _string_test(name, self.build(target), self.build(args[0]))
        if name == "lowerAscii" and not args:
            return _lower_ascii(self.build(target))
        if name in _SEMVER_PARTS and not args:
            return _semver_part(name, self.build(target))
        if name in _COMPARISONS and len(args) == 1:
            return _comparison(name, self.build(target), self.build(args[0]))
        raise _UnsupportedError

    def constant(self, node: Node) -> object:
        """``quantity("...")`` as its value, ``semver("..."[, normalize])`` as its tagged bytes."""
        name, args = node.name, node.args
        try:
            if name == "quantity" and len(args) == 1:
                return library.quantity_value(library.parse_quantity(self.string(args[0])))
            if name == "semver" and len(args) in (1, 2):
                if len(args) == 2 and (args[1].kind != "literal" or args[1].name != "bool"):
                    raise _UnsupportedError
                normalize = len(args) == 2 and args[1].value is True
                return library.parse_semver(self.string(args[0]), normalize)
        except ValueError as error:  # fails at run time: the engine words it
            raise _UnsupportedError from error
        raise _UnsupportedError


def _is_device(node: Node | None) -> bool:
    return node is not None and node.kind == "ident" and node.name == "device"

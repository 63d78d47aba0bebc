"""Static checks and the worst-case cost estimate of a DRA selector.

Kubernetes rejects a selector whose *estimated* cost exceeds ``CELSelectorExpressionMaxCost``
(1,000,000) when a claim or class is created; cel-go computes that estimate from the checked
AST and the declared maximum sizes of the ``device`` variable. The Rust engine has no cost
tracking, so :func:`analyze` walks the tree from :mod:`.parser` and reproduces that estimator:

* every node gets a *shape*: a kind (``string``, ``quantity``, ``dyn``, ...) and a maximum size
  (characters of a string, elements of a list or map). ``device.driver`` has 63 characters, the
  ``attributes`` and ``capacity`` maps at most 32 domains of 32 entries, an attribute value at
  most 64 characters or list elements (upstream's estimate with DRAListTypeAttributes on);
  a size that cannot be known is 2^64-1, as upstream, which makes loops over it too costly;
* costs as cel-go charges them: 1 per variable, field selection, index, operator and O(1)
  function; 0 for literals and ``has()``; 10 to build a list, 30 a map; ``==`` and string
  comparisons ``ceil(0.1 * the shorter maximum length)``; ``x in list`` the list size; string
  functions 0.1 (0.2 for ``split``, ``replace`` and ``join``) per character; ``matches`` and
  ``find`` ``ceil(0.1 * (length + 1)) * ceil(0.25 * pattern length)``; ``quantity()`` 0.1
  per character; ``includes()`` 48;
* a comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) costs its range,
  its accumulator and result, plus *the maximum size of the range* times the cost of one step
  (its loop condition and its body), so nested loops multiply; ``cel.bind`` costs 10 plus its
  parts, as its upstream expansion does.

For the selectors in upstream's ``compile_test.go`` this gives the same numbers (for example 52
for its "all" case and 85,555,551 for its "expensive" one). It differs where we cannot see
what cel-go's type checker sees: string functions on values of unknown type are charged as if
they were strings (never less), ``string(x)`` of a number is taken as at most 32 characters, and
overloads are chosen from the shapes inferred here; the estimate then errs on the high side.

The same walk rejects what upstream's type checker rejects at validation time and that matters
for selectors: unknown variables, fields of ``device`` and functions; wrong numbers of
arguments; ``<``/``+``/... on quantities and versions; comparing values of two different known
types (``memory == "40Gi"``); mixed-type list and map literals; a result that cannot be a bool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dra_jupyter.model import features
from dra_jupyter.selectors.parser import Node
from dra_jupyter.selectors.signatures import (
    CONVERSIONS,
    MACROS,
    NOT_SUPPORTED,
    SIGNATURES,
    TWO_VARIABLE,
    TYPE_NAMES,
    Signature,
)

UNBOUNDED = 2**64 - 1
NUMERIC = frozenset(("int", "uint", "double"))


@dataclass(frozen=True, slots=True)
class Shape:
    """What the estimate knows about a value: its kind and its maximum size."""

    kind: str
    size: int = 1
    elem: Shape | None = None  # list elements, map values, the content of an optional
    key: Shape | None = None  # map keys
    fields: tuple[tuple[str, Shape], ...] = ()


DYN = Shape("dyn", UNBOUNDED)
_BOOL = Shape("bool")
_QUANTITY = Shape("quantity")
_ATTRIBUTE = Shape("dyn", 64, elem=Shape("dyn", 64))
_DOMAIN, _ID = Shape("string", 63), Shape("string", 32)


DEVICE = Shape(
    "device",
    fields=(
        ("driver", Shape("string", 63)),
        ("attributes", Shape("map", 32, Shape("map", 32, _ATTRIBUTE, _ID), _DOMAIN)),
        ("capacity", Shape("map", 32, Shape("map", 32, _QUANTITY, _ID), _DOMAIN)),
        ("allowMultipleAllocations", _BOOL),
    ),
)


class CheckError(Exception):
    """The expression is rejected before it runs; ``problem`` and ``remedy`` say why."""

    def __init__(self, problem: str, remedy: str = "") -> None:
        self.problem = problem
        self.remedy = remedy
        super().__init__(problem)


@dataclass(frozen=True, slots=True)
class Analysis:
    cost: int
    kind: str


def analyze(node: Node) -> Analysis:
    """Check ``node`` and estimate its worst-case cost; raise :class:`CheckError`."""
    cost, shape = _visit(node, {"device": DEVICE})
    if shape.kind not in ("bool", "dyn"):
        raise CheckError(f"the expression must evaluate to a bool, not {_a(shape.kind)}")
    return Analysis(min(cost, UNBOUNDED), shape.kind)


def _a(kind: str) -> str:
    return {"int": "an int", "uint": "a uint", "optional": "an optional", "null": "null"}.get(
        kind, kind if kind == "bytes" else f"a {kind}"
    )


def _ceil(size: int, factor: float) -> int:
    return math.ceil(min(size, UNBOUNDED) * factor)


def _union(shapes: list[Shape], what: str) -> Shape:
    known = {s.kind for s in shapes} - {"dyn", "null"}
    if len(known) > 1:
        raise CheckError(f"{what} must all have the same type, found {' and '.join(sorted(known))}")
    if not shapes:
        return DYN
    kind = known.pop() if known and all(s.kind != "dyn" for s in shapes) else "dyn"
    return Shape(kind, max(s.size for s in shapes), shapes[0].elem, shapes[0].key)


def _visit(node: Node, scope: dict[str, Shape]) -> tuple[int, Shape]:
    kind = node.kind
    if kind == "literal":
        value = node.value
        return 0, Shape(node.name, len(value) if isinstance(value, str | bytes) else 1)
    if kind == "ident":
        if node.name in scope:
            return 1, scope[node.name]
        if node.name in TYPE_NAMES:
            return 1, Shape("type")
        raise CheckError(
            f"undeclared reference to '{node.name}'", "a DRA selector has one variable, 'device'"
        )
    if kind in ("select", "index"):
        assert node.target is not None
        cost, target = _visit(node.target, scope)
        if kind == "select":
            return cost + 1, _select(target, node.name)
        index_cost, _ = _visit(node.args[0], scope)
        if target.kind not in ("map", "list", "dyn", "device"):
            raise CheckError(f"{_a(target.kind)} cannot be indexed")
        return cost + index_cost + 1, target.elem or DYN
    if kind in ("list", "map"):
        visited = [_visit(arg, scope) for arg in node.args]
        cost = sum(c for c, _ in visited)
        items = [s for _, s in visited]
        if kind == "list":
            return 10 + cost, Shape("list", len(items), _union(items, "list elements"))
        keys, values = _union(items[::2], "map keys"), _union(items[1::2], "map values")
        return 30 + cost, Shape("map", len(items) // 2, values, keys)
    if kind == "cond":
        (c_cost, cond), (t_cost, if_true), (f_cost, if_false) = (
            _visit(a, scope) for a in node.args
        )
        _require(cond, {"bool"}, "the condition of ?:")
        shape = if_true if if_true == if_false else Shape("dyn", max(if_true.size, if_false.size))
        return c_cost + max(t_cost, f_cost), shape
    if kind == "op":
        return _operator(node, scope)
    return _call(node, scope)


def _require(shape: Shape, kinds: set[str], what: str) -> None:
    if shape.kind not in kinds and shape.kind != "dyn":
        raise CheckError(
            f"{what} must be {' or '.join(map(_a, sorted(kinds)))}, not {_a(shape.kind)}"
        )


def _select(target: Shape, name: str) -> Shape:
    if target.kind == "device":
        fields = dict(target.fields)
        if name not in fields:
            raise CheckError(
                f"undefined field '{name}' of device",
                "a device has driver, attributes, capacity and allowMultipleAllocations",
            )
        return fields[name]
    if target.kind not in ("map", "dyn"):
        raise CheckError(f"{_a(target.kind)} has no fields; cannot select '{name}'")
    return target.elem or DYN


def _operator(node: Node, scope: dict[str, Shape]) -> tuple[int, Shape]:
    op = node.name
    visited = [_visit(arg, scope) for arg in node.args]
    cost = sum(c for c, _ in visited)
    shapes = [s for _, s in visited]
    kinds = {s.kind for s in shapes}
    if op in ("&&", "||", "!"):
        for shape in shapes:
            _require(shape, {"bool"}, f"an operand of '{op}'")
        return cost + (op == "!"), _BOOL
    if op == "in":
        _require(shapes[1], {"list", "map"}, "the right side of 'in'")
        return cost + (1 if shapes[1].kind == "map" else min(shapes[1].size, UNBOUNDED)), _BOOL
    special = kinds & {"quantity", "semver"}
    if special and op not in ("==", "!="):
        remedy = "use compareTo(), isGreaterThan() or isLessThan()"
        if op in ("+", "-"):
            remedy = "use add() or sub()" if "quantity" in special else remedy
        raise CheckError(f"no matching overload for '{op}' applied to {_a(special.pop())}", remedy)
    known = kinds - {"dyn", "null"}
    mixable = NUMERIC if op in ("==", "!=", "<", "<=", ">", ">=") else frozenset()
    if len(known) > 1 and not known <= mixable and not known <= {"timestamp", "duration"}:
        raise CheckError(
            f"no matching overload for '{op}' applied to ({', '.join(s.kind for s in shapes)})",
            'compare a quantity with quantity("..."), a version with semver("...")'
            if special
            else "",
        )
    shorter = min(s.size for s in shapes)
    if op in ("==", "!="):
        return cost + _ceil(shorter, 0.1), _BOOL
    if op in ("<", "<=", ">", ">="):
        text = bool(kinds & {"string", "bytes", "dyn"})
        return cost + (max(1, _ceil(shorter, 0.1)) if text else 1), _BOOL
    if op == "+" and kinds & {"string", "bytes", "list", "dyn"}:
        size = min(sum(s.size for s in shapes), UNBOUNDED)
        text = bool(kinds & {"string", "bytes", "dyn"})
        kind = known.pop() if len(known) == 1 and "dyn" not in kinds else "dyn"
        elem = shapes[0].elem or shapes[1].elem
        return cost + (max(1, _ceil(size, 0.1)) if text else 1), Shape(kind, size, elem)
    kind = known.pop() if len(known) == 1 and "dyn" not in kinds else "dyn"
    if op == "-" and kinds == {"timestamp"} and len(shapes) == 2:
        kind = "duration"
    return cost + 1, Shape(kind)


def _call(node: Node, scope: dict[str, Shape]) -> tuple[int, Shape]:
    name, target, args = node.name, node.target, node.args
    if target is None and name == "has":
        if len(args) != 1 or args[0].kind != "select" or args[0].target is None:
            raise CheckError("has() takes one field selection, as in has(x.field)")
        cost, shape = _visit(args[0].target, scope)
        _select(shape, args[0].name)
        return cost, _BOOL
    shown = name
    if target is not None and target.kind == "ident" and target.name not in scope:
        shown = qualified = f"{target.name}.{name}"
        if qualified == "cel.bind":
            return _bind(args, scope)
        if qualified in SIGNATURES or qualified in NOT_SUPPORTED:
            name, target = qualified, None
    if target is not None and (name in MACROS or name in TWO_VARIABLE):
        return _comprehension(name, target, args, scope)
    signature = SIGNATURES.get(name)
    if signature is None:
        if name in NOT_SUPPORTED or name in TWO_VARIABLE:
            raise CheckError(
                f"{name}() is part of the Kubernetes CEL environment but not supported by "
                "dra-jupyter's CEL engine"
            )
        raise CheckError(f"undeclared reference to function '{shown}'")
    if target is not None and not signature.member:
        raise CheckError(f"{name}() is not a method; call it as {name}(x)")
    if target is None and not signature.glob:
        raise CheckError(f"{name}() is a method; call it as x.{name}(...)")
    operands = [_visit(n, scope) for n in ((target, *args) if target is not None else args)]
    if len(operands) not in signature.arities:
        raise CheckError(f"wrong number of arguments to {name}()")
    cost = sum(c for c, _ in operands)
    shapes = [s for _, s in operands]
    if signature.operand is not None and shapes:
        _require(shapes[0], set(signature.operand), f"the operand of {name}()")
    _check_arguments(name, shapes)
    own, result = _function_cost(name, signature, shapes)
    return cost + own, result


def _check_arguments(name: str, shapes: list[Shape]) -> None:
    if name in CONVERSIONS and shapes and shapes[0].kind in ("quantity", "semver"):
        raise CheckError(f"no matching overload for {name}() applied to {_a(shapes[0].kind)}")
    if name in ("isGreaterThan", "isLessThan", "compareTo") and shapes[0].kind != "dyn":
        _require(shapes[1], {shapes[0].kind}, f"the argument of {name}()")
    elif name in ("add", "sub"):
        _require(shapes[1], {"quantity", "int"}, f"the argument of {name}()")
    elif name in ("semver", "isSemver") and len(shapes) == 2:
        _require(shapes[1], {"bool"}, f"the second argument of {name}()")


def _function_cost(name: str, signature: Signature, shapes: list[Shape]) -> tuple[int, Shape]:
    first = shapes[0] if shapes else DYN
    size = first.size
    result = Shape(signature.result)
    if signature.result == "elem":
        result = first.elem or DYN
    elif signature.result == "same":
        result = Shape("dyn", first.size, first.elem, first.key)
    elif signature.result == "optional":
        result = Shape("optional", elem=first)
    if name in ("contains", "indexOf", "lastIndexOf") and first.kind != "list":
        return _ceil(size, 0.1) * _ceil(shapes[1].size, 0.1), result
    if name in ("startsWith", "endsWith"):
        return _ceil(shapes[1].size, 0.1), result
    if name in ("matches", "find", "findAll"):
        cost = _ceil(size + 1, 0.1) * _ceil(shapes[1].size, 0.25)
        string = Shape("string", size)
        return cost, Shape("list", size, string) if name == "findAll" else result
    if name in ("lowerAscii", "upperAscii", "trim", "substring", "charAt", "strings.quote"):
        out = size * 2 + 2 if name == "strings.quote" else size
        return (1 if name == "charAt" else _ceil(size, 0.1)), Shape("string", out)
    if name in ("replace", "split"):
        if name == "split":
            return _ceil(size, 0.2), Shape("list", size, Shape("string", size))
        grows = size * max(shapes[2].size, 1) + shapes[2].size + size
        return _ceil(size, 0.2), Shape("string", min(grows, UNBOUNDED))
    if name == "join":
        element = first.elem.size if first.elem else UNBOUNDED
        separator = shapes[1].size if len(shapes) > 1 else 0
        out = min(size * (element + separator), UNBOUNDED)
        return _ceil(out, 0.2), Shape("string", out)
    if name in ("indexOf", "lastIndexOf", "isSorted", "sum", "min", "max"):
        text = first.elem is not None and first.elem.kind in ("string", "bytes", "dyn")
        per_element = 1 + (_ceil(first.elem.size, 0.1) if text and first.elem else 0)
        return min(size, UNBOUNDED) * per_element, result
    if name in ("quantity", "isQuantity"):
        return _ceil(size, 0.1), result
    if name.startswith("sets."):
        return min(size, UNBOUNDED) * min(shapes[1].size, UNBOUNDED), result
    if name == "includes":
        return 48, result
    if name in ("string", "bytes"):
        out = size if first.kind in ("string", "bytes", "dyn") else 32
        return 1, Shape(name, out)
    return 1, result


def _bind(args: tuple[Node, ...], scope: dict[str, Shape]) -> tuple[int, Shape]:
    if len(args) != 3 or args[0].kind != "ident":
        raise CheckError("cel.bind() takes a name, a value and an expression")
    init_cost, init = _visit(args[1], scope)
    body_cost, body = _visit(args[2], {**scope, args[0].name: init})
    return 10 + init_cost + body_cost, body


def _comprehension(
    name: str, target: Node, args: tuple[Node, ...], scope: dict[str, Shape]
) -> tuple[int, Shape]:
    if len(args) not in (2, 3, 4):
        raise CheckError(f"wrong number of arguments to {name}()")
    if name in TWO_VARIABLE or (len(args) >= 3 and name != "map") or len(args) == 4:
        raise CheckError(
            f"{name}() with two variables is part of the Kubernetes CEL environment but not "
            "supported by dra-jupyter's CEL engine"
        )
    if args[0].kind != "ident":
        raise CheckError(f"the first argument of {name}() must be a simple name")
    range_cost, iterated = _visit(target, scope)
    if iterated is _ATTRIBUTE and not features.current().dra_list_type_attributes:
        # with DRAListTypeAttributes off (1.37) an attribute is of type any, not dyn
        raise CheckError(
            "an attribute value (of type any) cannot be the range of a comprehension "
            "(must be list, map, or dynamic): DRAListTypeAttributes is off in Kubernetes 1.37",
            "compare the attribute itself, or use 'in' on it",
        )
    if iterated.kind not in ("list", "map", "dyn"):
        raise CheckError(f"{_a(iterated.kind)} cannot be the range of {name}()")
    variable = (iterated.key if iterated.kind == "map" else iterated.elem) or DYN
    inner = {**scope, args[0].name: variable}
    steps = [_visit(arg, inner) for arg in args[1:]]
    if name != "map" or len(args) == 3:
        _require(steps[0][1], {"bool"}, f"the predicate of {name}()")
    count = min(iterated.size, UNBOUNDED)
    body = steps[0][0]
    if name == "all":
        return range_cost + 1 + count * (3 + body), _BOOL
    if name == "exists":
        return range_cost + 1 + count * (4 + body), _BOOL
    if name == "exists_one":
        return range_cost + 2 + count * (2 + body), _BOOL
    if name == "filter":
        return range_cost + 11 + count * (13 + body), Shape("list", count, variable)
    value_cost, value = steps[-1]
    step = 12 + value_cost if len(args) == 2 else body + max(12 + value_cost, 1)
    return range_cost + 11 + count * step, Shape("list", count, value)

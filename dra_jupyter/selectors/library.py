"""The functions of the Kubernetes CEL environment that the Rust engine lacks, in Python.

Quantities (``apiserver/pkg/cel/library/quantity.go``) and semantic versions (``semverlib.go``)
cannot cross into the engine as Python objects, so they travel as *tagged bytes*: ``b"\\x01q:"``
followed by the exact value as ``numerator/denominator``, or ``b"\\x01v:"`` followed by the
version without build metadata. Both encodings are canonical, so the engine's own ``==`` and
``in`` compare them by value (``quantity("1k") == quantity("1000")``; versions that differ only
in build metadata are equal, as upstream). Being bytes, they can never be mistaken for a
published string, and the string functions and ``<`` against strings fail on them with "no
such overload", as upstream. Decoding is cached.

Also here: the strings extension (``lowerAscii``, ``split``, ...), the Kubernetes list and
regex libraries (``isSorted``, ``sum``, ``min``, ``max``, list ``indexOf``, ``find``,
``findAll``), ``sets.*``, ``bool()`` and DRA's ``includes()``. Deviations: ``find``/``findAll``
use Python's ``re`` instead of RE2 (same syntax for common patterns); ``asApproximateFloat`` is
the correctly rounded double, where upstream may differ in the last bit; ``isInteger`` and
``asInteger`` look at the value only, while upstream also fails them for quantities it happens to
store with a fractional scale (``quantity("1000m").isInteger()`` is false upstream).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from fractions import Fraction
from functools import lru_cache
from typing import Any

from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors.celruntime import stdlib

QUANTITY_TAG = b"\x01q:"
SEMVER_TAG = b"\x01v:"
MAX_INCLUDES = 48  # ResourceSliceMaxAttributeValuesPerDevice
_INT64 = 2**63
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    rf"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-({_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
)
SemverKey = tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]


def kind_of(value: object) -> str:
    """The CEL type name of a value coming out of the engine."""
    if isinstance(value, bytes):
        tag = value[:3]
        return "quantity" if tag == QUANTITY_TAG else "semver" if tag == SEMVER_TAG else "bytes"
    names = {bool: "bool", int: "int", float: "double", str: "string", list: "list", dict: "map"}
    if type(value) in names:
        return names[type(value)]
    if value is None:
        return "null"
    if isinstance(value, timedelta | datetime):
        return "duration" if isinstance(value, timedelta) else "timestamp"
    return "optional" if type(value).__name__ == "OptionalValue" else type(value).__name__


_KIND_PHRASES = {"int": "an int", "uint": "a uint", "optional": "an optional", "null": "null"}
_KIND_PHRASES |= {"bytes": "bytes", "semver": "a semantic version"}


def a_kind(kind: str) -> str:
    """A CEL type name as a noun phrase: ``"an int"``, ``"a string"``, ``"a semantic version"``."""
    return _KIND_PHRASES.get(kind, f"a {kind}")


def _overload(name: str, *args: object) -> TypeError:
    return TypeError(f"no such overload: {name}({', '.join(map(kind_of, args))})")


def encode_quantity(value: Fraction) -> bytes:
    return QUANTITY_TAG + f"{value.numerator}/{value.denominator}".encode()


@lru_cache(maxsize=4096)
def _quantity_of(raw: bytes) -> Fraction:
    return Fraction(raw[3:].decode())


def quantity_value(raw: bytes) -> Fraction:
    """The exact value of an encoded quantity."""
    return _quantity_of(raw)


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> bytes:
    """``quantity(text)``; raises ``ValueError`` with the reason."""
    return encode_quantity(Quantity.parse(text).value)


@lru_cache(maxsize=4096)
def parse_semver(text: str, normalize: bool = False) -> bytes:
    """``semver(text[, normalize])``: strict semver 2.0.0, or upstream's normalization first."""
    original = text
    if normalize:
        parts = text.removeprefix("v").split(".", 2)
        for i, part in enumerate(parts):
            if len(part) > 1:
                bare = part.lstrip("0")
                parts[i] = bare if bare[:1].isdigit() and bare[:1].isascii() else "0" + bare
        if len(parts) < 3 and any(c in parts[-1] for c in "+-"):
            raise ValueError(f'"{original}" is not a semantic version: short version with "-"/"+"')
        text = ".".join(parts + ["0"] * (3 - len(parts)))
    match = _SEMVER.fullmatch(text)
    if match is None or any(int(n) >= _INT64 for n in match.group(1, 2, 3)):
        raise ValueError(f'"{original}" is not a semantic version (expected MAJOR.MINOR.PATCH)')
    pre = f"-{match.group(4)}" if match.group(4) else ""
    return SEMVER_TAG + f"{match.group(1)}.{match.group(2)}.{match.group(3)}{pre}".encode()


@lru_cache(maxsize=4096)
def _semver_key(raw: bytes) -> SemverKey:
    text = raw[3:].decode()
    core, _, pre = text.partition("-")
    major, minor, patch = (int(n) for n in core.split("."))
    ids = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ()
    return major, minor, patch, 0 if pre else 1, ids


def semver_key(raw: bytes) -> SemverKey:
    """A sort key of an encoded version, in semver 2.0.0 precedence."""
    return _semver_key(raw)


def _quantity(name: str, value: object, *others: object) -> Fraction:
    if isinstance(value, bytes) and value[:3] == QUANTITY_TAG:
        return _quantity_of(value)
    raise _overload(name, value, *others)


def _semver(name: str, value: object) -> SemverKey:
    if isinstance(value, bytes) and value[:3] == SEMVER_TAG:
        return _semver_key(value)
    raise _overload(name, value)


def _compare(name: str, left: object, right: object) -> int:
    if isinstance(left, bytes) and isinstance(right, bytes) and left[:3] == right[:3]:
        if left[:3] == QUANTITY_TAG:
            a, b = _quantity_of(left), _quantity_of(right)
            return (a > b) - (a < b)
        if left[:3] == SEMVER_TAG:
            x, y = _semver_key(left), _semver_key(right)
            return (x > y) - (x < y)
    raise _overload(name, left, right)


def _operand(name: str, value: object, other: object) -> Fraction:
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return _quantity(name, value, other)


def _string(name: str, value: object, *others: object) -> str:
    if isinstance(value, str):
        return value
    raise _overload(name, value, *others)


def _is_quantity(text: object) -> bool:
    try:
        parse_quantity(_string("isQuantity", text))
    except ValueError:
        return False
    return True


def _is_semver(text: object, normalize: object = False) -> bool:
    try:
        parse_semver(_string("isSemver", text), normalize is True)
    except ValueError:
        return False
    return True


def _as_integer(value: object) -> int:
    number = _quantity("asInteger", value)
    if number.denominator != 1 or not -_INT64 <= number < _INT64:
        raise ValueError("cannot convert value to integer")
    return number.numerator


def _as_float(value: object) -> float:
    number = _quantity("asApproximateFloat", value)
    try:
        return float(number)
    except OverflowError:
        return math.copysign(math.inf, number)


def equal(left: object, right: object) -> bool:
    """CEL equality: no bool/int mixing, numbers across types, lists and maps deeply."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(equal(left[k], right[k]) for k in left)
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right


def _includes(target: object, value: object) -> bool:
    if isinstance(target, list):
        if len(target) > MAX_INCLUDES:
            raise ValueError(
                f"'includes' function cannot be applied to lists longer than {MAX_INCLUDES} values"
            )
        return any(equal(item, value) for item in target)
    return equal(target, value)


def _list(name: str, value: object) -> list[object]:
    if isinstance(value, list):
        return value
    raise _overload(name, value)


def _index_of(name: str, last: bool) -> Callable[..., int]:
    def index_of(target: object, value: object, *offset: int) -> int:
        if isinstance(target, list) and not offset:
            found = [i for i, item in enumerate(target) if equal(item, value)]
            return (found[-1] if last else found[0]) if found else -1
        text, sub = _string(name, target, value), _string(name, value, target)
        if last:
            return stdlib.last_index_of(text, sub, *offset)
        return stdlib.index_of(text, sub, *offset)

    return index_of


def _extreme(name: str, pick: Callable[[list[Any]], object]) -> Callable[[object], object]:
    def extreme(target: object) -> object:
        items = _list(name, target)
        if not items:
            raise ValueError(f"{name} called on empty list")
        return pick(items)

    return extreme


def _find_all(text: object, pattern: object, limit: int = -1) -> list[str]:
    found = [m.group() for m in re.finditer(str(pattern), _string("findAll", text, pattern))]
    return found if limit < 0 else found[:limit]


def _find(text: object, pattern: object) -> str:
    match = re.search(str(pattern), _string("find", text, pattern))
    return match.group() if match else ""


def _contains_all(name: str, left: object, right: object) -> bool:
    items = _list(name, left)
    return all(any(equal(a, b) for a in items) for b in _list(name, right))


def _strings(name: str, function: Callable[..., object]) -> Callable[..., object]:
    """``function`` with a "no such overload" error when its target is not a string."""

    def checked(target: object, *args: object) -> object:
        return function(_string(name, target, *args), *args)

    return checked


FUNCTIONS: dict[str, Callable[..., object]] = {
    "quantity": lambda text: parse_quantity(_string("quantity", text)),
    "isQuantity": _is_quantity,
    "isInteger": lambda q: (
        _quantity("isInteger", q).denominator == 1 and -_INT64 <= _quantity("isInteger", q) < _INT64
    ),
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "sign": lambda q: (_quantity("sign", q) > 0) - (_quantity("sign", q) < 0),
    "add": lambda q, o: encode_quantity(_quantity("add", q, o) + _operand("add", o, q)),
    "sub": lambda q, o: encode_quantity(_quantity("sub", q, o) - _operand("sub", o, q)),
    "isGreaterThan": lambda a, b: _compare("isGreaterThan", a, b) > 0,
    "isLessThan": lambda a, b: _compare("isLessThan", a, b) < 0,
    "compareTo": lambda a, b: _compare("compareTo", a, b),
    "semver": lambda text, normalize=False: parse_semver(
        _string("semver", text), normalize is True
    ),
    "isSemver": _is_semver,
    "major": lambda v: _semver("major", v)[0],
    "minor": lambda v: _semver("minor", v)[1],
    "patch": lambda v: _semver("patch", v)[2],
    "includes": _includes,
    "bool": stdlib.bool_,
    "charAt": _strings("charAt", stdlib.char_at),
    "indexOf": _index_of("indexOf", last=False),
    "lastIndexOf": _index_of("lastIndexOf", last=True),
    "lowerAscii": _strings("lowerAscii", stdlib.lower_ascii),
    "upperAscii": _strings("upperAscii", stdlib.upper_ascii),
    "replace": _strings("replace", stdlib.replace),
    "split": _strings("split", stdlib.split),
    "substring": _strings("substring", stdlib.substring),
    "trim": _strings("trim", stdlib.trim),
    "join": lambda items, sep="": stdlib.join(_list("join", items), sep),
    "strings.quote": _strings("strings.quote", stdlib.quote),
    "find": _find,
    "findAll": _find_all,
    "isSorted": lambda items: all(
        a <= b for a, b in zip(_list("isSorted", items), items[1:], strict=False)
    ),
    "sum": lambda items: stdlib.sum_(_list("sum", items)),
    "min": _extreme("min", min),
    "max": _extreme("max", max),
    "sets.contains": lambda a, b: _contains_all("sets.contains", a, b),
    "sets.equivalent": lambda a, b: (
        _contains_all("sets.equivalent", a, b) and _contains_all("sets.equivalent", b, a)
    ),
    "sets.intersects": lambda a, b: any(
        equal(x, y) for x in _list("sets.intersects", a) for y in _list("sets.intersects", b)
    ),
}
"""Name -> implementation, registered into every device's ``cel.Context``."""

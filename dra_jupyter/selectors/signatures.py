"""The declarations of the selector environment: its functions, and the names it refuses.

:data:`SIGNATURES` lists every function a selector may call, with the call style upstream
declares (``x.f()`` or ``f(x)``), the number of operands (the target counts), the kinds the first
operand may have, and the result kind. :mod:`.library` implements those the Rust engine lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

# fmt: off
MACROS = frozenset(("all", "exists", "exists_one", "map", "filter"))
TWO_VARIABLE = frozenset(("existsOne", "transformList", "transformMap", "transformMapEntry"))
NOT_SUPPORTED = frozenset((
    "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
    "getQuery", "ip", "isIP", "cidr", "isCIDR", "containsIP", "containsCIDR", "isCanonical",
    "family", "isUnspecified", "isLoopback", "isGlobalUnicast", "isLinkLocalMulticast",
    "isLinkLocalUnicast", "format", "strings.format", "sortBy", "distinct", "flatten", "slice",
    "sort", "first", "last", "lists.range", "reverse", "authorizer",
))
"""Functions of the Kubernetes environment that dra-jupyter does not provide."""
TYPE_NAMES = frozenset((
    "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "dyn",
))
CONVERSIONS = frozenset((
    "int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp",
))
# fmt: on


@dataclass(frozen=True, slots=True)
class Signature:
    """A function: call styles, operand counts (target included), first-operand kinds, result."""

    member: bool
    glob: bool
    arities: tuple[int, ...]
    operand: frozenset[str] | None
    result: str  # a kind, or "elem" (element of the first operand) or "same" (the operand)


def _sig(style: str, arities: str, operand: str, result: str) -> Signature:
    kinds = frozenset(operand.split()) if operand else None
    arity = tuple(int(a) for a in arities)
    return Signature(style != "global", style != "member", arity, kinds, result)


_STRING, _LIST = "string", "list"
SIGNATURES: dict[str, Signature] = {
    "size": _sig("both", "1", "string bytes list map", "int"),
    **{f: _sig("global", "1", "", f) for f in ("int", "uint", "double", "string", "bytes")},
    **{f: _sig("global", "1", "", f) for f in ("bool", "duration", "timestamp", "type")},
    "dyn": _sig("global", "1", "", "same"),
    **{f: _sig("member", "2", _STRING, "bool") for f in ("contains", "startsWith", "endsWith")},
    "matches": _sig("both", "2", _STRING, "bool"),
    **{f: _sig("member", "1", _STRING, "string") for f in ("lowerAscii", "upperAscii", "trim")},
    "charAt": _sig("member", "2", _STRING, "string"),
    "indexOf": _sig("member", "23", "string list", "int"),
    "lastIndexOf": _sig("member", "23", "string list", "int"),
    "replace": _sig("member", "34", _STRING, "string"),
    "split": _sig("member", "23", _STRING, "list"),
    "substring": _sig("member", "23", _STRING, "string"),
    "join": _sig("member", "12", _LIST, "string"),
    "strings.quote": _sig("global", "1", _STRING, "string"),
    "find": _sig("member", "2", _STRING, "string"),
    "findAll": _sig("member", "23", _STRING, "list"),
    "isSorted": _sig("member", "1", _LIST, "bool"),
    **{f: _sig("member", "1", _LIST, "elem") for f in ("sum", "min", "max")},
    **{f: _sig("global", "2", _LIST, "bool") for f in ("sets.contains", "sets.intersects")},
    "sets.equivalent": _sig("global", "2", _LIST, "bool"),
    "quantity": _sig("global", "1", _STRING, "quantity"),
    "isQuantity": _sig("global", "1", _STRING, "bool"),
    "isInteger": _sig("member", "1", "quantity", "bool"),
    "asInteger": _sig("member", "1", "quantity", "int"),
    "asApproximateFloat": _sig("member", "1", "quantity", "double"),
    "sign": _sig("both", "1", "quantity", "int"),
    **{f: _sig("member", "2", "quantity", "quantity") for f in ("add", "sub")},
    **{f: _sig("member", "2", "quantity semver", "bool") for f in ("isGreaterThan", "isLessThan")},
    "compareTo": _sig("member", "2", "quantity semver", "int"),
    "semver": _sig("global", "12", _STRING, "semver"),
    "isSemver": _sig("global", "12", _STRING, "bool"),
    **{f: _sig("member", "1", "semver", "int") for f in ("major", "minor", "patch")},
    "includes": _sig("member", "2", "", "bool"),
    **{f"optional.{f}": _sig("global", "1", "", "optional") for f in ("of", "ofNonZeroValue")},
    "optional.none": _sig("global", "0", "", "optional"),
    "hasValue": _sig("member", "1", "optional", "bool"),
    "value": _sig("member", "1", "optional", "elem"),
    "orValue": _sig("member", "2", "optional", "elem"),
    "or": _sig("member", "2", "optional", "optional"),
    **{
        f"get{part}": _sig("member", "1", "timestamp duration", "int")
        for part in [
            "FullYear",
            "Month",
            "DayOfYear",
            "DayOfMonth",
            "Date",
            "DayOfWeek",
            "Hours",
            "Minutes",
            "Seconds",
            "Milliseconds",
        ]
    },
}
"""Every function a selector may call; library.FUNCTIONS implements the ones Rust lacks."""

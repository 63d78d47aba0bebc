"""Kubernetes ``resource.Quantity``: an exact value, its suffix format and its canonical string.

Parsing follows ``k8s.io/apimachinery/pkg/api/resource`` (``ParseQuantity``): an optional sign,
digits with an optional fraction (``"1.5"``, ``".5"``, ``"5."``), then a suffix: binary SI
(``Ki`` … ``Ei``), decimal SI (``n u m k M G T P E``, or none) or an exponent (``e3``, ``E-2``).
Values finer than 1n are rounded up (away from zero) to 1n, and binary-SI values are capped at
2^63-1, as upstream does.

``str()`` gives the canonical form of ``Quantity.String()`` (``CanonicalizeBytes``). Known
differences from upstream, all outside what ResourceSlices and claims contain:

* upstream ``String()`` of a freshly parsed quantity returns the input unchanged when it already
  looks canonical (``"+1Ki"``, ``"05"``, ``"1.500k"`` print as written); we always canonicalize
  (``"1Ki"``, ``"5"``, ``"1500"``), which is what upstream prints after any arithmetic;
* where upstream has no suffix for a decimal exponent (values >= 1e21 in DecimalSI, or binary
  values >= 2^70 from arithmetic) it prints a wrong number; we print an exponent (``"1e21"``),
  as upstream's reference model (``resource/internal/exact``) does;
* like that model, a number needs at least one digit: upstream's parser takes ``"."`` and
  ``"Mi"`` as zero (but rejects ``"Pi"``); we reject them all;
* exponents beyond +-1000 (``"1e5000"``) are rejected; upstream wraps them to int32.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from dra_jupyter.errors import shown

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

_DECIMAL_SUFFIXES = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {exponent // 10: suffix for suffix, exponent in _BINARY_SUFFIXES.items()}
_BINARY_BY_POWER[0] = ""
_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_MAX_BINARY = 2**63 - 1
_NANO = 10**9
_MAX_EXPONENT = 1000
_MAX_DIGITS = 2000  # with the exponent's limit, every value prints (Python: 4300 digits)
_ECHO = 60  # characters of the text a message shows
_REGEX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


class Quantity:
    """An immutable quantity; equality, hashing and ordering use the exact value only.

    ``format`` only decides how :func:`str` prints the value, as upstream.
    """

    __slots__ = ("_format", "_value", "_whole")

    def __init__(self, value: Fraction, format: Format = "DecimalSI") -> None:
        if not _is_finite_decimal(value):
            raise ValueError(f'"{value}" is not a quantity: it has no finite decimal expansion')
        self._value = value
        self._format: Format = format
        self._whole: Fraction | int = value.numerator if value.denominator == 1 else value

    @property
    def value(self) -> Fraction:
        """The exact numeric value."""
        return self._value

    @property
    def whole(self) -> Fraction | int:
        """:attr:`value`, as an ``int`` when it is one: equal to it, and compared and added
        many times faster (a ``Fraction`` compares through the ``numbers`` ABCs)."""
        return self._whole

    @property
    def format(self) -> Format:
        """How the value prints: ``BinarySI`` (``Ki``), ``DecimalSI`` (``k``) or an exponent."""
        return self._format

    @classmethod
    def parse(cls, text: str | int) -> Quantity:
        """Parse a quantity as the apiserver does; raise ``ValueError`` if it is not one."""
        if isinstance(text, bool) or not isinstance(text, str | int):
            raise ValueError(f"{shown(text)} is not a quantity: expected a string or an integer")
        source = str(text)
        positive, num, denom, suffix = _scan(source)
        if len(num) + len(denom) > _MAX_DIGITS:
            raise ValueError(
                f'"{_echo(source)}" is not a quantity: it has more than {_MAX_DIGITS} digits'
            )
        base, exponent, fmt = _interpret(source, suffix)
        if int(num + denom) == 0:
            return cls(Fraction(0), fmt)
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(
                f'"{_echo(source)}" is not a quantity: exponent {exponent} is out of range'
            )
        magnitude = Fraction(int(num + denom), 10 ** len(denom)) * Fraction(base) ** exponent
        scaled = magnitude * _NANO
        if scaled.denominator != 1:  # upstream rounds up to the smallest representable value, 1n
            magnitude = Fraction(-(-scaled.numerator // scaled.denominator), _NANO)
        if fmt == "BinarySI":
            magnitude = min(magnitude, Fraction(_MAX_BINARY))
            if 0 < magnitude < 1:
                fmt = "DecimalSI"
        return cls(magnitude if positive else -magnitude, fmt)

    @classmethod
    def from_value(cls, value: Fraction | int, format: Format = "DecimalSI") -> Quantity:
        """A quantity with exactly ``value``, which must have a finite decimal expansion."""
        return cls(Fraction(value), format)

    def __str__(self) -> str:
        value = self._value
        if value == 0:
            return "0"
        if self._format == "BinarySI" and -1024 < value < 1024:
            return _decimal(value, "DecimalSI")
        if self._format == "BinarySI" and value.denominator == 1:
            number, power = value.numerator, 0
            while number % 1024 == 0:
                number, power = number // 1024, power + 1
            if power in _BINARY_BY_POWER:
                return f"{number}{_BINARY_BY_POWER[power]}"
            return _decimal(value, "DecimalExponent")  # beyond Ei, as upstream's exact model
        return _decimal(value, self._format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __hash__(self) -> int:
        return hash(self._whole)  # the Fraction's hash, for a whole value too

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._whole == other._whole

    def __lt__(self, other: Quantity) -> bool:
        return self._whole < other._whole

    def __le__(self, other: Quantity) -> bool:
        return self._whole <= other._whole

    def __gt__(self, other: Quantity) -> bool:
        return self._whole > other._whole

    def __ge__(self, other: Quantity) -> bool:
        return self._whole >= other._whole

    def __add__(self, other: Quantity) -> Quantity:
        """The sum; it keeps this format unless this is zero (then the other's, as upstream)."""
        return Quantity(self._value + other._value, self._result_format(other))

    def __sub__(self, other: Quantity) -> Quantity:
        """The difference; formats as for ``+``."""
        return Quantity(self._value - other._value, self._result_format(other))

    def __int__(self) -> int:
        """The value rounded away from zero (``Quantity.Value()``: 1.2 -> 2, -1.2 -> -2)."""
        value = self._value
        if value >= 0:
            return -(-value.numerator // value.denominator)
        return value.numerator // value.denominator

    def _result_format(self, other: Quantity) -> Format:
        return other._format if self._value == 0 else self._format


def _is_finite_decimal(value: Fraction) -> bool:
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def _scan(text: str) -> tuple[bool, str, str, str]:
    """Split into (positive, numerator digits, fraction digits, suffix): ``parseQuantityString``."""
    if not text:
        raise ValueError('"" is not a quantity: it is empty')
    end = len(text)
    positive = text[0] != "-"
    pos = sign_end = 1 if text[0] in "+-" else 0
    while pos < end and text[pos] == "0":
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        start = pos = pos + 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_LETTERS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise ValueError(
            f'"{_echo(text)}" is not a quantity: it must match the regular expression {_REGEX}'
        )
    if _DIGITS.isdisjoint(text[sign_end:suffix_start]):
        raise ValueError(f'"{_echo(text)}" is not a quantity: the number has no digits')
    return positive, num, denom, text[suffix_start:]


def _interpret(text: str, suffix: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix: ``suffixHandler.interpret``."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    if 1 < len(suffix) <= 12 and suffix[0] in "eE":  # longer exponents are out of range
        try:
            return 10, int(suffix[1:]), "DecimalExponent"
        except ValueError:
            pass
    elif len(suffix) > 12 and suffix[0] in "eE" and suffix[1:].lstrip("+-").isdigit():
        raise ValueError(f'"{_echo(text)}" is not a quantity: its exponent is out of range')
    raise ValueError(f'"{_echo(text)}" is not a quantity: unknown suffix "{_echo(suffix)}"')


def _echo(text: str) -> str:
    """The text as a message shows it: at most _ECHO characters, then ``…``."""
    return text if len(text) <= _ECHO else text[:_ECHO] + "…"


def _decimal(value: Fraction, fmt: Format) -> str:
    """Mantissa and a power-of-1000 suffix (``AsCanonicalBytes`` + the suffixer)."""
    exponent = 0
    while value.denominator != 1:
        value *= 10
        exponent -= 1
    mantissa = value.numerator
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    rounded = exponent // 3 * 3
    mantissa *= 10 ** (exponent - rounded)
    if fmt != "DecimalExponent" and rounded in _DECIMAL_BY_EXPONENT:
        return f"{mantissa}{_DECIMAL_BY_EXPONENT[rounded]}"
    return f"{mantissa}e{rounded}" if rounded else str(mantissa)

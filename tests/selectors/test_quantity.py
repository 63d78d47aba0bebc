"""Quantity parsing, canonical strings and arithmetic, against upstream's recorded behaviour.

Expected values marked "corpus" come from apimachinery's
``pkg/api/resource/testdata/quantity_decode_corpus.json`` (ParseQuantity, Kubernetes 1.37).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_jupyter.errors import ObjectError
from dra_jupyter.model.parse import parse_resource_slice
from dra_jupyter.model.quantity import Format, Quantity

GI = 2**30
Wire = dict[str, Any]


@pytest.mark.parametrize(
    ("text", "value", "fmt"),
    [
        ("40Gi", 40 * GI, "BinarySI"),
        ("1536Mi", 1536 * 2**20, "BinarySI"),
        ("100", 100, "DecimalSI"),
        ("500m", Fraction(1, 2), "DecimalSI"),
        ("1.5", Fraction(3, 2), "DecimalSI"),
        ("1e3", 1000, "DecimalExponent"),
        ("1E3", 1000, "DecimalExponent"),  # corpus
        ("+01e+21", 10**21, "DecimalExponent"),  # corpus
        ("1E", 10**18, "DecimalSI"),
        ("0.5Gi", GI // 2, "BinarySI"),
        ("1.5Gi", 3 * GI // 2, "BinarySI"),
        ("01", 1, "DecimalSI"),  # corpus
        ("01Ki", 1024, "BinarySI"),  # corpus
        ("5Ki", 5120, "BinarySI"),  # corpus
        ("7Ei", 8070450532247928832, "BinarySI"),  # corpus: below the cap, exact
        ("+8Ei", 2**63 - 1, "BinarySI"),  # corpus: binarySI is capped at 2^63-1
        ("18446744073709551616Ki", 2**63 - 1, "BinarySI"),  # corpus
        ("18446744073709551616", 2**64, "DecimalSI"),  # corpus: decimal is not capped
        ("+12e-10", Fraction(2, 10**9), "DecimalExponent"),  # corpus: rounded up to 1n steps
        ("+123e-10", Fraction(13, 10**9), "DecimalExponent"),  # corpus
        ("5e-1000", Fraction(1, 10**9), "DecimalExponent"),  # corpus
        ("9223372036854775807e-19", Fraction(922337204, 10**9), "DecimalExponent"),  # corpus
        ("-0.1n", Fraction(-1, 10**9), "DecimalSI"),  # rounded away from zero
        ("0.0001Ki", Fraction("0.1024"), "DecimalSI"),  # binary below one becomes decimal
        ("0e-2147483648", 0, "DecimalExponent"),  # corpus: zero whatever the exponent
        ("0.0Ei", 0, "BinarySI"),  # corpus
        ("-.5m", Fraction(-1, 2000), "DecimalSI"),
        ("5.", 5, "DecimalSI"),
        (100, 100, "DecimalSI"),
    ],
)
def test_parse(text: str | int, value: Fraction | int, fmt: Format) -> None:
    quantity = Quantity.parse(text)
    assert (quantity.value, quantity.format) == (value, fmt)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("abc", "regular expression"),
        ("1K", 'unknown suffix "K"'),
        ("200K", 'unknown suffix "K"'),
        ("1ki", 'unknown suffix "ki"'),
        ("1e", 'unknown suffix "e"'),
        ("1Ki5", 'unknown suffix "Ki5"'),
        ("1,3G", "regular expression"),
        (" 1", "regular expression"),
        ("1 ", "regular expression"),
        ("1e3.5", "regular expression"),
        ("1.2.3", "regular expression"),
        ("Mi", "no digits"),
        (".", "no digits"),
        (".e3", "no digits"),
        ("+", "no digits"),
        ("1e1001", "out of range"),
    ],
)
def test_parse_rejects(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"is not a quantity: .*{reason}"):
        Quantity.parse(text)


def test_parse_rejects_non_text() -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        Quantity.parse(True)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("40Gi", "40Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("2048Ki", "2Mi"),
        ("1024", "1024"),  # DecimalSI stays decimal
        ("1Ki", "1Ki"),
        ("100", "100"),
        ("0.5", "500m"),
        ("1.5", "1500m"),
        ("1000", "1k"),
        ("1000m", "1"),
        ("1500", "1500"),
        ("1k", "1k"),
        ("1e3", "1e3"),
        ("1.5e3", "1500"),
        ("12e6", "12e6"),
        ("1e-3", "1e-3"),
        ("0.5e0", "500e-3"),
        ("1n", "1n"),
        ("0.1n", "1n"),
        ("1E", "1E"),
        ("0", "0"),
        ("0Ki", "0"),
        ("-0", "0"),
        ("+1Ki", "1Ki"),  # upstream's String() would echo "+1Ki"; see the module docstring
        ("05", "5"),
        ("-2048", "-2048"),
        ("-1.5", "-1500m"),
        ("0.0001Ki", "102400u"),
        ("10Ei", "9223372036854775807"),
        ("1e21", "1e21"),
        ("80Gi", "80Gi"),
        ("4864Mi", "4864Mi"),
    ],
)
def test_canonical_string(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical


@pytest.mark.parametrize(
    ("value", "fmt", "canonical"),
    [
        (1023, "BinarySI", "1023"),  # below 1024 binary prints decimal
        (1025, "BinarySI", "1025"),  # not a multiple of 1Ki: plain integer
        (Fraction(3, 2), "BinarySI", "1500m"),  # fractional binary prints decimal
        (-2048, "BinarySI", "-2Ki"),
        (2**70, "BinarySI", "1180591620717411303424"),  # beyond Ei: exponent form
        (2**70 * 1000, "BinarySI", "1180591620717411303424e3"),
        (10**21, "DecimalSI", "1e21"),  # no SI suffix for 10^21
        (1500, "DecimalExponent", "1500"),
        (Fraction(1, 2), "DecimalExponent", "500e-3"),
        (Fraction(1, 10**12), "DecimalSI", "1e-12"),
        (42 * GI, "BinarySI", "42Gi"),
    ],
)
def test_canonical_string_from_value(value: Fraction | int, fmt: Format, canonical: str) -> None:
    assert str(Quantity.from_value(value, fmt)) == canonical


def test_from_value_rejects_infinite_decimals() -> None:
    with pytest.raises(ValueError, match="finite decimal"):
        Quantity.from_value(Fraction(1, 3))


def test_equality_and_order_use_the_value_only() -> None:
    assert Quantity.parse("1k") == Quantity.parse("1000") == Quantity.parse("1e3")
    assert hash(Quantity.parse("1Ki")) == hash(Quantity.parse("1024"))
    assert Quantity.parse("50M") < Quantity.parse("50Mi")
    assert Quantity.parse("200M") >= Quantity.parse("0.2G")
    assert sorted(map(Quantity.parse, ["1Gi", "1G", "1Mi"])) == list(
        map(Quantity.parse, ["1Mi", "1G", "1Gi"])
    )
    assert Quantity.parse("1") != 1
    assert repr(Quantity.parse("1536Mi")) == "Quantity('1536Mi')"


@pytest.mark.parametrize(
    ("left", "right", "total", "difference", "fmt"),
    [
        ("1Gi", "512Mi", "1536Mi", "512Mi", "BinarySI"),
        ("1k", "1Ki", "2024", "-24", "DecimalSI"),
        ("0", "1Ki", "1Ki", "-1Ki", "BinarySI"),  # zero takes the other's format, as upstream
        ("1e3", "1", "1001", "999", "DecimalExponent"),
    ],
)
def test_add_and_sub(left: str, right: str, total: str, difference: str, fmt: Format) -> None:
    a, b = Quantity.parse(left), Quantity.parse(right)
    assert (str(a + b), str(a - b)) == (total, difference)
    assert (a + b).format == (a - b).format == fmt


@pytest.mark.parametrize(
    ("text", "rounded"),
    [("1.2", 2), ("1", 1), ("-1.2", -2), ("1n", 1), ("40Gi", 40 * GI), ("0", 0)],
)
def test_int_rounds_away_from_zero(text: str, rounded: int) -> None:
    assert int(Quantity.parse(text)) == rounded


FORMATS: list[Format] = ["BinarySI", "DecimalSI", "DecimalExponent"]
# Values as a ResourceSlice or claim can hold them: at most 2^63 in magnitude, 1n steps.
values = st.builds(
    lambda units, scale: Fraction(units, 10**scale),
    st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1),
    st.integers(min_value=0, max_value=9),
)
quantities = st.builds(Quantity.from_value, values, st.sampled_from(FORMATS))


def _oracle_decimal(value: Fraction) -> tuple[int, int]:
    """Mantissa and the largest exponent (a multiple of 3) that loses nothing, by search."""
    for exponent in range(30, -31, -3):
        mantissa = value / Fraction(10) ** exponent
        if mantissa.denominator == 1:
            return mantissa.numerator, exponent
    raise AssertionError(value)


@given(quantities)
def test_canonical_round_trip(quantity: Quantity) -> None:
    text = str(quantity)
    parsed = Quantity.parse(text)
    assert parsed == quantity
    # the canonical form of what was parsed is a fixed point; the first text need not be:
    # a BinarySI value that no binary suffix writes prints as a plain number, which parses
    # as DecimalSI (upstream too: 47000 in BinarySI prints "47000", read back "47k")
    assert str(Quantity.parse(str(parsed))) == str(parsed)
    if quantity.format != "BinarySI":
        assert str(parsed) == text


def test_a_binary_si_value_without_a_binary_suffix_reads_back_as_decimal() -> None:
    binary = Quantity.from_value(47000, "BinarySI")
    assert str(binary) == "47000"
    assert (Quantity.parse("47000").format, str(Quantity.parse("47000"))) == ("DecimalSI", "47k")
    assert str(Quantity.from_value(47 * 1024, "BinarySI")) == "47Ki"


@given(values)
def test_decimal_si_uses_the_largest_lossless_suffix(value: Fraction) -> None:
    suffixes = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
    expected = "0"
    if value != 0:
        mantissa, exponent = _oracle_decimal(value)
        expected = f"{mantissa}{(suffixes | {18: 'E'})[exponent]}"
    assert str(Quantity.from_value(value, "DecimalSI")) == expected


@given(st.integers(min_value=1024, max_value=2**63 - 1))
def test_binary_si_integers(value: int) -> None:
    power = 0
    while power < 6 and value % 1024 ** (power + 1) == 0:
        power += 1
    suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power]
    assert str(Quantity.from_value(value, "BinarySI")) == f"{value // 1024**power}{suffix}"


@given(quantities, quantities)
def test_compare_add_sub_match_fractions(a: Quantity, b: Quantity) -> None:
    assert (a < b, a == b, a > b) == (a.value < b.value, a.value == b.value, a.value > b.value)
    assert (a + b).value == a.value + b.value
    assert (a - b).value == a.value - b.value
    assert (a + b).format == (b.format if a.value == 0 else a.format)


# --- parsed objects are shared ------------------------------------------------------------------


def _slice(memory: str, cores: str | int, version: str = "1.2.3") -> Wire:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"s-{memory.lower()}"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"dev-{i}",
                    "attributes": {"driverVersion": {"version": version}},
                    "capacity": {"memory": {"value": memory}, "cores": {"value": cores}},
                }
                for i in range(3)
            ],
        },
    }


def test_parsing_shares_equal_texts_and_keeps_each_texts_own_format() -> None:
    """A quantity, version or capacity written the same way is one object across devices
    and slices (a large inventory holds few distinct values, and the garbage collector
    visits every object); quantities equal in value but written differently keep their own
    text, and the integer 1 is not the string "1", nor True."""
    binary, decimal = (
        parse_resource_slice(_slice("1Gi", 4)),
        parse_resource_slice(_slice("1073741824", "4")),
    )
    again = parse_resource_slice(_slice("1Gi", 4))
    first, second = binary.devices[0].capacity["memory"], binary.devices[2].capacity["memory"]
    assert first is second and first is again.devices[0].capacity["memory"]
    assert (
        binary.devices[0].attributes["driverVersion"]
        is again.devices[1].attributes["driverVersion"]
    )
    other = decimal.devices[0].capacity["memory"]
    assert other.value == first.value and other is not first
    assert (str(first.value), str(other.value)) == ("1Gi", "1073741824")
    assert str(binary.devices[0].capacity["cores"].value) == "4"
    assert str(decimal.devices[0].capacity["cores"].value) == "4"
    with pytest.raises(ObjectError, match="must be a quantity"):
        parse_resource_slice(_slice("1Gi", True))


# --- request policies: what kube-apiserver 1.37 refuses (measured with a dry-run create) ------


def _policy_slice(policy: Wire) -> Wire:
    spec = _slice("80Gi", 4)
    memory = {"value": "80Gi", "requestPolicy": policy}
    device = {**spec["spec"]["devices"][0], "allowMultipleAllocations": True}
    spec["spec"]["devices"] = [{**device, "capacity": {"memory": memory}}]
    return spec


RANGE = {"min": "1Gi", "step": "1Gi"}


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"validRange": RANGE}, "is required when validRange is set"),
        ({"validValues": ["1Gi", "2Gi"]}, "is required when validValues is set"),
        ({"default": "512Mi", "validRange": RANGE}, "512Mi is less than validRange.min 1Gi"),
        (
            {"default": "4Gi", "validRange": {"min": "1Gi", "max": "2Gi"}},
            "4Gi is more than validRange.max 2Gi",
        ),
        (
            {"default": "1536Mi", "validRange": RANGE},
            "1536Mi is not validRange.min 1Gi plus a whole number of steps of 1Gi",
        ),
        ({"default": "3Gi", "validValues": ["1Gi", "2Gi"]}, "3Gi is not one of validValues"),
    ],
)
def test_a_request_policy_the_api_server_refuses_is_refused(policy: Wire, problem: str) -> None:
    with pytest.raises(ObjectError) as caught:
        parse_resource_slice(_policy_slice(policy))
    text = str(caught.value)
    assert f"capacity[memory].requestPolicy.default: {problem}" in text, text


@pytest.mark.parametrize(
    "policy",
    [
        {"default": "1Gi"},
        {"default": "90Gi"},  # above the value: the API server takes it
        {"default": "2Gi", "validRange": {"min": "1Gi", "step": "1Gi", "max": "4Gi"}},
        {"default": "1Gi", "validRange": {"min": "1Gi", "step": "3Gi"}},
        {"default": "0", "validRange": {"min": "0"}},
        {"default": "1Gi", "validValues": ["1Gi", "2Gi"]},
    ],
)
def test_a_request_policy_the_api_server_takes_is_taken(policy: Wire) -> None:
    found = parse_resource_slice(_policy_slice(policy)).devices[0].capacity["memory"]
    assert found.request_policy is not None
    assert str(found.request_policy.default) == policy["default"]

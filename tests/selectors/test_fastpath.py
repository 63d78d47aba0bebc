"""The selector fast path (:mod:`dra_jupyter.selectors.fastpath`) against the CEL engine.

Three parts: which real selectors take the fast path; a differential test of random
expressions of the subset on random devices, fast path against engine; and the allocator
on upstream's cases with the fast path on and off.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import build_claim
from dra_jupyter.cli.demo import demo_claims
from dra_jupyter.errors import InvalidInputError, SelectorError
from dra_jupyter.inventory import simulated
from dra_jupyter.model.attributes import AttributeValue, Version
from dra_jupyter.model.features import use_features
from dra_jupyter.model.parse import parse_resource_slice
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.selectors import (
    CelEvaluationError,
    CompiledSelector,
    compile_selector,
    device_view,
    fastpath,
)
from tests.allocator.test_upstream_semantics import CASES, Case

Outcome = tuple[str, object]
Device = tuple[str, dict[str, AttributeValue], dict[str, Quantity], bool]


def _expressions(obj: object) -> list[str]:
    """Every ``cel.expression`` in wire objects."""
    if isinstance(obj, Mapping):
        found = [obj["expression"]] if isinstance(obj.get("expression"), str) else []
        return found + [e for value in obj.values() for e in _expressions(value)]
    if isinstance(obj, list | tuple):
        return [e for item in obj for e in _expressions(item)]
    return []


def _outcome(run: Callable[[], bool | None]) -> Outcome:
    try:
        result = run()
    except CelEvaluationError as error:
        return ("error", error.problem)
    return ("engine", None) if result is None else ("value", result)


def _engine(selector: CompiledSelector, device: Device) -> Outcome:
    return _outcome(lambda: selector.matches_engine(device_view(*device)))


def _fast(selector: CompiledSelector, device: Device) -> Outcome:
    return _outcome(lambda: selector.matches_fast(*device))


# --- 1. which selectors take the fast path --------------------------------------------------

DRIVERS = ("gpu.nvidia.com", "tpu.google.com", "gpu.amd.com", "gpu.example.com", "gpu.intel.com")
CLAIM_SPECS: list[dict[str, Any]] = [
    {"gpu": 1, "memory": "40Gi"},
    {"gpu": 2, "model": "H100"},
    {"gpu": 1, "model": "IT'S \u00fcnicode\\n", "memory": "80Gi"},
    {"mig": "3g.71gb"},
    {"mig": "1g'.5gb", "count": 2},
    {"tpu": 4, "model": "v6e"},
    {"device_class": "gpu.amd.com", "memory": "192Gi", "model": "MI300X"},
    {"alternatives": [{"gpu": 1, "memory": "80Gi"}, {"mig": "3g.71gb"}]},
]
# /work/shared/reference/dra-drivers.md: class selectors (§1.5), CEL forms of the DEVICE
# tests and docs (§1.7), the example driver's conformance set (§2), Intel (§3), guards (§5).
REFERENCE = [
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id == 0",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
    "device.attributes['gpu.nvidia.com'].profile == '1g.12gb'",
    "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
    "device.attributes['gpu.nvidia.com'].index == 0",
    'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("560.0.0")) >= 0',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "device.attributes['gpu.nvidia.com'].architecture == 'Hopper' && "
    "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity(\"80Gi\"))",
    "device.capacity['gpu.nvidia.com'].multiprocessors.isLessThan(quantity(\"30\"))",
    'device.attributes["gpu.nvidia.com"].productName == "NONEXISTENT-GPU-XYZ"',
    "device.driver == 'gpu.example.com'",
    "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'",
    "device.capacity['gpu.example.com'].memory.compareTo(quantity('4Gi')) >= 0",
    "device.attributes['gpu.example.com'].model == 'BLEEDING-EDGE-GPU'",
    "device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0",
    'device.attributes["gpu.intel.com"].family.startsWith("Arc")',
    'device.capacity["gpu.intel.com"].memory.compareTo(quantity("1Gi")) >= 0',
    "has(device.attributes['gpu.nvidia.com'].profile) && "
    "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
    "'uuid' in device.attributes['gpu.nvidia.com']",
    'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:64"',
    "device.allowMultipleAllocations",
]


def _real_selectors() -> list[str]:
    found = _expressions(simulated.device_classes_for(DRIVERS))
    for name in simulated.names():
        found += _expressions(simulated.load(name).device_classes)
    found += _expressions([claim for _, claim in demo_claims()])
    classes = [*DRIVERS, "mig.nvidia.com"]
    found += _expressions([build_claim("c", spec, classes=classes) for spec in CLAIM_SPECS])
    return list(dict.fromkeys(found + REFERENCE))


REAL_SELECTORS = _real_selectors()


@pytest.mark.parametrize("expression", REAL_SELECTORS)
def test_real_selectors_take_the_fast_path(expression: str) -> None:
    assert compile_selector(expression, where="test").has_fast_path


def _inventory_devices() -> list[Device]:
    devices: list[Device] = []
    for name in simulated.names():
        for raw in simulated.load(name).slices:
            parsed = parse_resource_slice(raw)
            for device in parsed.devices:
                capacity = {k: c.value for k, c in device.capacity.items()}
                allow = device.allow_multiple_allocations
                devices.append((parsed.driver, dict(device.attributes), capacity, allow))
    return devices


def test_real_selectors_agree_with_the_engine_on_the_bundled_inventories() -> None:
    devices = _inventory_devices()
    selected = 0
    for expression in REAL_SELECTORS:
        selector = compile_selector(expression, where="test")
        for device in devices:
            fast = _fast(selector, device)
            assert fast == _engine(selector, device), (expression, device)
            selected += fast == ("value", True)
    assert selected > 100


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.nvidia.com"].productName.matches("A100|H100")',
        'cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.type == "gpu")',
        'device.attributes[device.driver].type == "gpu"',
        'device.attributes["gpu.nvidia.com"].size() > 0',
        '"gpu.nvidia.com" in device.attributes',
        'device.capacity["gpu.nvidia.com"].memory.add(quantity("1")) == quantity("2")',
        'device.attributes["dra.example.com"].names.exists(n, n.startsWith("b"))',
        'device.attributes["d.example.com"].i + 1 == 2',
        'device.attributes["d.example.com"].d == 1.5',
        'device.attributes["d.example.com"].u == 1u',
        'device.attributes["d.example.com"].s == b"x"',
        'device.attributes["d.example.com"].s == null',
        'device.attributes["d.example.com"].l == ["a"]',
        'semver("1.0").major() == 1',  # not a constant: fails at run time
        'quantity("abc").isInteger()',
        'device.attributes["d.example.com"].s.matches("^a")',
    ],
)
def test_the_rest_is_left_to_the_engine(expression: str) -> None:
    with use_features(dra_list_type_attributes=True):  # a macro over an attribute needs it
        selector = compile_selector(expression, where="test")
    assert not selector.has_fast_path
    assert selector.matches_fast("gpu.nvidia.com", {}, {}, False) is None


# --- 2. fast path == engine -------------------------------------------------------------------

D = 'device.attributes["d.example.com"]'
DEVICE: Device = (
    "d.example.com",
    {
        "s": "abc",
        "i": 3,
        "t": True,
        "f": False,
        "v": Version("1.2.3"),
        "w": Version("1.10.0"),
        "l": ("a", "b"),
        "lv": (Version("1.0.0+x"),),
        "lv2": (Version("1.0.0+y"),),
        "other.example.com/x": "y",
        "e.example.com/s": "ABC",
    },
    {"m": Quantity.parse("1Gi"), "e.example.com/m": Quantity.parse("500m")},
    False,
)
OPERANDS = {
    "true": "true",
    "false": "false",
    "error x": f"{D}.x == 1",
    "error y": f"{D}.y == 1",
    "string": f"{D}.s",
    "overload": f"{D}.s < 1",
}


@pytest.mark.parametrize("op", ["&&", "||"])
@pytest.mark.parametrize(("left", "right"), list(itertools.product(OPERANDS, OPERANDS)))
def test_logic_truth_table(op: str, left: str, right: str) -> None:
    selector = compile_selector(f"({OPERANDS[left]}) {op} ({OPERANDS[right]})", where="test")
    assert _fast(selector, DEVICE) == _engine(selector, DEVICE)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # error absorption works both ways; otherwise the right side's error wins
        (f"{D}.x == 1 && false", ("value", False)),
        (f"{D}.x == 1 || true", ("value", True)),
        (f"{D}.x == 1 || {D}.y == 1", ("error", "no such key: y")),
        # a non-bool operand is "no such overload", weaker than an error beside it ...
        (f"{D}.x == 1 && {D}.s", ("error", "no such key: x")),
        (f"{D}.s || true", ("value", True)),
        # ... so the grouping of a chain matters: cel-go's balanced tree
        (f"{D}.x == 1 && {D}.s && true", ("error", "no such key: x")),
        (f"{D}.x == 1 && ({D}.s && true)", ("error", "no such overload")),
        (f"{D}.x == 1 && true && {D}.s && true", ("error", "no such overload")),
        (f"true && {D}.x == 1 && true && {D}.s && true", ("error", "no such overload")),
        # heterogeneous == and !=; < needs two values of one type
        (f"{D}.s == 1", ("value", False)),
        (f"{D}.s != 1", ("value", True)),
        (f"{D}.t == 1", ("value", False)),
        (f"{D}.v == '1.2.3'", ("value", False)),
        (f"{D}.v == semver('1.2.3+build')", ("value", True)),
        (f"{D}.lv == {D}.lv2", ("value", True)),
        (f"{D}.s < 1", ("error", "no such overload")),
        (f"{D}.f < {D}.t", ("value", True)),
        (f"{D}.l < {D}.l", ("error", "no such overload")),
        # operands left to right, a method's argument before its target
        (f"{D}.x == {D}.y", ("error", "no such key: x")),
        (f"{D}.x.compareTo({D}.y) == 0", ("error", "no such key: y")),
        (f"{D}.x.startsWith({D}.y)", ("error", "no such key: y")),
        # domains: qualified names, other domains, unknown domains are empty maps
        ('device.attributes["other.example.com"].x == "y"', ("value", True)),
        ('device.attributes["e.example.com"]["s"] == "ABC"', ("value", True)),
        ('device.attributes["unknown.example.com"].x == 1', ("error", "no such key: x")),
        ('"x" in device.attributes["unknown.example.com"]', ("value", False)),
        ('has(device.capacity["unknown.example.com"].m)', ("value", False)),
        ('device.attributes["other.example.com/x"].y == 1', ("error", "no such key: y")),
        ('device.capacity["e.example.com"].m.isLessThan(quantity("1"))', ("value", True)),
        ('"m" in device.capacity["d.example.com"]', ("value", True)),
        (f'"a" in {D}.l', ("value", True)),
        (f'"a" in {D}.s', ("error", "no such overload")),
        (f"1 in {D}.l", ("value", False)),
        # the engine's words for methods on the wrong type
        (f"{D}.i.startsWith('a')", ("error", "undeclared reference to 'startsWith'")),
        (f"{D}.s.contains(1)", ("error", "undeclared reference to 'contains'")),
        (f"{D}.l.lowerAscii() == 'a'", ("error", "no such overload: lowerAscii(list)")),
        (f"{D}.s.major() == 1", ("error", "no such overload: major(string)")),
        (
            f"{D}.v.compareTo(quantity('1')) == 0",
            ("error", "no such overload: compareTo(semver, quantity)"),
        ),
        (f"{D}.v.minor() == 2 && {D}.w.isGreaterThan({D}.v)", ("value", True)),
        (f"{D}.s.lowerAscii() == 'abc'", ("value", True)),
        # conditionals, and results that are not bools
        (f"{D}.t ? {D}.x == 1 : true", ("error", "no such key: x")),
        (f"{D}.f ? {D}.x == 1 : true", ("value", True)),
        (f"{D}.s ? true : false", ("error", "no such overload")),
        (f"{D}.s", ("error", "expression returned a string, not a bool")),
        (f"{D}.v", ("error", "expression returned a semantic version, not a bool")),
        (f"{D}.l", ("error", "expression returned a list, not a bool")),
        (f"!{D}.i", ("error", "no such overload")),
        # strings as the engine reads them
        (f"{D}.s == r'abc'", ("value", True)),
        (f"{D}.s == '\\x61\\u0062\\143'", ("value", True)),
        (f"{D}.s == '''abc'''", ("value", True)),
        # left to the engine for this device
        (f"{D}.v < {D}.w", ("engine", None)),
    ],
)
def test_engine_semantics(expression: str, expected: Outcome) -> None:
    selector = compile_selector(expression, where="test")
    assert selector.has_fast_path
    assert _fast(selector, DEVICE) == expected
    if expected[0] != "engine":
        assert _engine(selector, DEVICE) == expected


def test_a_name_published_twice_goes_to_the_engine() -> None:
    device: Device = ("d.example.com", {"a": 1, "d.example.com/a": 2}, {}, False)
    selector = compile_selector(f"{D}.a == 2", where="test")
    assert selector.matches_fast(*device) is None
    assert selector.matches(device_view(*device)) is True  # the later one, as the engine has it
    assert compile_selector(f'has({D}.a) && "a" in {D}', where="test").matches_fast(*device)


def test_matches_uses_the_fast_path_and_builds_no_engine_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    selector = compile_selector(f"{D}.s == 'abc'", where="test")
    view = device_view(*DEVICE)
    assert selector.matches(view) is True
    assert view._context is None
    monkeypatch.setattr(fastpath, "ENABLED", False)
    assert selector.matches(view) is True
    assert view._context is not None


def test_values_the_engine_may_see_differently_go_to_the_engine() -> None:
    selector = compile_selector(f"{D}.i > 0", where="test")
    assert selector.matches_fast("d.example.com", {"i": 2**63}, {}, False) is None
    odd: dict[str, Any] = {"i": [1]}  # a list, not a tuple
    assert selector.matches_fast("d.example.com", odd, {}, False) is None
    assert selector.matches_fast("d.example.com", {"i": 1}, {}, False) is True


def test_double_negation_is_dropped_as_the_engine_drops_it() -> None:
    for expression, expected in [
        (f"!!{D}.i", ("error", "expression returned an int, not a bool")),
        (f"!!!{D}.i", ("error", "no such overload")),
        (f"!(!{D}.i)", ("error", "no such overload")),
        (f"! !{D}.t", ("value", True)),
    ]:
        selector = compile_selector(expression, where="test")
        assert _fast(selector, DEVICE) == expected == _engine(selector, DEVICE), expression


def test_device_view_still_rejects_bad_versions() -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        device_view("d.example.com", {"v": Version(f"{2**63}.0.0")}, {}, False)


DRIVER_NAMES = ("d.example.com", "e.example.com")
DOMAINS = (*DRIVER_NAMES, "x.example.com", "resource.kubernetes.io")
_DOMAINS = st.sampled_from((*DOMAINS, DRIVER_NAMES[0]))  # the usual driver more often
NAMES = ("a", "b", "s", "v", "l")
STRINGS = ("", "a", "A", "ab", "Ab", "gpu", "1.0.0", "é")
VERSIONS = ("1.0.0", "1.2.3", "1.10.0", "1.2.3-rc.1", "1.2.3+build.1", "0.0.1")
QUANTITIES = ("0", "1", "500m", "2", "1Gi", "1024Mi")

_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-2, 3),
    st.sampled_from(STRINGS),
    st.sampled_from(VERSIONS).map(Version),
)
_LISTS = st.one_of(
    st.lists(st.booleans(), max_size=3),
    st.lists(st.integers(-2, 3), max_size=3),
    st.lists(st.sampled_from(STRINGS), max_size=3),
    st.lists(st.sampled_from(VERSIONS).map(Version), max_size=3),
).map(tuple)
_ATTRIBUTE_NAMES = NAMES + tuple(f"{d}/{n}" for d in DOMAINS if d != "x.example.com" for n in NAMES)
_CAPACITY_NAMES = ("m", "n", "d.example.com/m", "e.example.com/n", "resource.kubernetes.io/m")
DEVICES = st.tuples(
    st.sampled_from(DRIVER_NAMES),
    st.dictionaries(
        st.sampled_from(_ATTRIBUTE_NAMES),
        st.one_of(_SCALARS, _SCALARS, _LISTS),
        min_size=2,
        max_size=12,
    ),
    st.dictionaries(
        st.sampled_from(_CAPACITY_NAMES),
        st.sampled_from(QUANTITIES).map(Quantity.parse),
        max_size=3,
    ),
    st.booleans(),
)

# Expressions, as (text, kind): "atom" needs no parentheses anywhere, "rel" under "!".
Expr = tuple[str, str]


def _string(text: str, single: bool) -> str:
    return "'" + text.replace("'", "\\'") + "'" if single else json.dumps(text)


_STRING_LITERALS = st.builds(_string, st.sampled_from(STRINGS), st.booleans())
_LITERALS = st.one_of(
    _STRING_LITERALS, st.integers(-2, 3).map(str), st.sampled_from(("true", "false"))
)
_ATTRIBUTES = st.builds(
    lambda d, n, select, single: (
        f"device.attributes[{_string(d, single)}].{n}"
        if select
        else f"device.attributes[{_string(d, single)}][{_string(n, not single)}]"
    ),
    _DOMAINS,
    st.sampled_from(NAMES),
    st.booleans(),
    st.booleans(),
)
_CAPACITIES = st.builds(lambda d, n: f'device.capacity["{d}"].{n}', _DOMAINS, st.sampled_from("mn"))
_QUANTITY = st.sampled_from(QUANTITIES).map(lambda q: f'quantity("{q}")')
_SEMVER = st.one_of(
    st.sampled_from(VERSIONS).map(lambda v: f'semver("{v}")'),
    st.just('semver("v1.2", true)'),
)
_VALUES = st.one_of(
    _LITERALS,
    _ATTRIBUTES,
    _ATTRIBUTES,
    st.just("device.driver"),
    st.just("device.allowMultipleAllocations"),
    _ATTRIBUTES.map(lambda a: f"{a}.lowerAscii()"),
    st.builds(lambda a, m: f"{a}.{m}()", _ATTRIBUTES, st.sampled_from(("major", "minor", "patch"))),
    st.builds(lambda a, v: f"{a}.compareTo({v})", _ATTRIBUTES, st.one_of(_SEMVER, _ATTRIBUTES)),
    st.builds(lambda c, q: f"{c}.compareTo({q})", _CAPACITIES, st.one_of(_QUANTITY, _CAPACITIES)),
    _SEMVER,
)
_ATOMS: st.SearchStrategy[Expr] = st.one_of(
    st.builds(
        lambda a, op, b: (f"{a} {op} {b}", "rel"),
        _VALUES,
        st.sampled_from(("==", "!=", "<", "<=", ">", ">=")),
        _VALUES,
    ),
    st.builds(
        lambda c, d, n: (f'has(device.{c}["{d}"].{n})', "atom"),
        st.sampled_from(("attributes", "capacity")),
        _DOMAINS,
        st.sampled_from(("a", "s", "m")),
    ),
    st.builds(
        lambda n, c, d: (f'"{n}" in device.{c}["{d}"]', "rel"),
        st.sampled_from(("a", "s", "m")),
        st.sampled_from(("attributes", "capacity")),
        _DOMAINS,
    ),
    st.builds(lambda v, a: (f"{v} in {a}", "rel"), st.one_of(_LITERALS, _ATTRIBUTES), _ATTRIBUTES),
    st.builds(
        lambda a, m, s: (f"{a}.{m}({s})", "atom"),
        st.one_of(
            _ATTRIBUTES, st.just("device.driver"), _ATTRIBUTES.map(lambda a: a + ".lowerAscii()")
        ),
        st.sampled_from(("startsWith", "endsWith", "contains")),
        st.one_of(_STRING_LITERALS, _STRING_LITERALS, _ATTRIBUTES),
    ),
    st.builds(
        lambda a, m, v: (f"{a}.{m}({v})", "atom"),
        _ATTRIBUTES,
        st.sampled_from(("isGreaterThan", "isLessThan")),
        _SEMVER,
    ),
    st.builds(
        lambda c, m, q: (f"{c}.{m}({q})", "atom"),
        _CAPACITIES,
        st.sampled_from(("isGreaterThan", "isLessThan")),
        _QUANTITY,
    ),
    st.builds(lambda c, q: (f"{c} == {q}", "rel"), _CAPACITIES, _QUANTITY),
    st.sampled_from(("true", "false", "device.allowMultipleAllocations")).map(
        lambda t: (t, "atom")
    ),
    _ATTRIBUTES.map(lambda a: (a, "atom")),  # often not a bool
)


def _wrap(expr: Expr, keep: tuple[str, ...], paren: bool = False) -> str:
    text, kind = expr
    return text if kind in keep and not paren else f"({text})"


def _compound(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def chain(op: str, terms: list[tuple[Expr, bool]]) -> Expr:
        kind = "and" if op == "&&" else "or"
        keep = ("atom", "rel", kind) if op == "||" else ("atom", "rel", "and")
        return f" {op} ".join(_wrap(t, keep, paren) for t, paren in terms), kind

    return st.one_of(
        st.builds(
            chain,
            st.sampled_from(("&&", "||")),
            st.lists(st.tuples(children, st.booleans()), min_size=2, max_size=5),
        ),
        children.map(lambda e: ("!" + _wrap(e, ("atom",)), "atom")),
        st.builds(
            lambda c, a, b: (
                f"{_wrap(c, ('atom',))} ? {_wrap(a, ('atom',))} : {_wrap(b, ('atom',))}",
                "cond",
            ),
            children,
            children,
            children,
        ),
    )


EXPRESSIONS = st.recursive(_ATOMS, _compound, max_leaves=12).map(lambda e: e[0])


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(EXPRESSIONS, st.lists(DEVICES, min_size=1, max_size=6))
def test_fast_path_agrees_with_the_engine(expression: str, devices: list[Device]) -> None:
    try:
        selector = compile_selector(expression, where="test")
    except SelectorError:
        event("rejected when compiled")
        return
    assert selector.has_fast_path, expression
    for device in devices:
        fast = _fast(selector, device)
        event(f"fast path: {fast[0]}")
        if fast[0] != "engine":
            assert fast == _engine(selector, device), (expression, device)


# --- 3. the allocator, fast path on and off ---------------------------------------------------


def _allocate(case: Case) -> object:
    counter = itertools.count()
    try:
        allocator = Allocator(
            copy.deepcopy(case.slices),
            copy.deepcopy(case.classes),
            allocated_claims=copy.deepcopy(case.allocated),
            strategy="first-fit",
            nodes=[case.node],
            share_id_factory=lambda: f"share-{next(counter)}",
        )
        results = allocator.allocate(case.claims, node=case.node["metadata"]["name"])
    except InvalidInputError as error:
        return ("error", type(error).__name__, str(error))
    return None if results is None else [r.to_dict() for r in results]


def test_the_allocator_gives_the_same_results_without_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast_selectors = 0
    for name, case in CASES.items():
        with_fast_path = _allocate(case)
        monkeypatch.setattr(fastpath, "ENABLED", False)
        assert _allocate(case) == with_fast_path, name
        monkeypatch.setattr(fastpath, "ENABLED", True)
        for expression in _expressions([case.classes, case.claims]):
            with contextlib.suppress(SelectorError):
                fast_selectors += compile_selector(expression, where="test").has_fast_path
    assert fast_selectors > 100

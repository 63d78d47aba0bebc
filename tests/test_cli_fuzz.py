"""No input crashes the command line: every invalid file is exit 2 with one short line.

The contract (docs/cli.md): ``allocate`` and ``explain`` answer 0 or 1 for
input that parses, and 2 with one line on stderr (``error: ...``, values cut to a readable
length) for anything invalid; never a traceback (exit 4 is only for bugs). Size and count
limits are checked before the work they bound.

First the cases the fuzzing of the object files, garbage files and inventories found, as
examples; then the properties (hypothesis) that found them: mutations of valid object
files, of their bytes, and of inventory files. ``make test`` runs a small derandomized
set; ``make fuzz`` (``HYPOTHESIS_PROFILE=fuzz``) many more random ones.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dra_jupyter.cli import main
from dra_jupyter.cli.main import MAX_LINE
from dra_jupyter.inventory import nvidia, simulated
from dra_jupyter.objectfile import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES
from tests.fuzzing import fuzz_settings
from tests.local.worker import claim_for
from tests.test_cli import (
    GPU,
    MIG,
    NODE,
    PCIE_ROOT,
    PROFILE_1G,
    allocated,
    claim,
    hgx,
    mig_node,
    request,
    same,
)

Wire = dict[str, Any]
SHORT = 400  # what an example's one line may be at most: values in it are cut


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def check(code: int, out: str, err: str, allowed: tuple[int, ...] = (0, 1, 2)) -> None:
    """The contract for any input: an allowed exit code, never a traceback; exit 2 is one
    line, ``error: ...``, of at most MAX_LINE characters, and nothing on stdout."""
    assert code in allowed, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    assert "internal error" not in err, err[-4000:]
    if code == 2:
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1, err[:4000]
        assert lines[0].startswith("error: "), lines[0][:1000]
        assert len(lines[0]) <= MAX_LINE, lines[0][:1000]


def one_line(code: int, out: str, err: str) -> str:
    """Exit 2 with one short line; returns it."""
    check(code, out, err, allowed=(2,))
    line = err.rstrip("\n")
    assert len(line) <= SHORT, line[:1000]
    return line


@pytest.fixture
def objects_file(tmp_path: Path) -> Path:
    return tmp_path / "objects.yaml"


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def documents(objects: list[Wire]) -> str:
    return yaml.dump_all(objects, Dumper=yaml.CSafeDumper, sort_keys=False)


def node_selected_slice(selector: Wire) -> list[Wire]:
    """The 8x H200 slice, selected by ``selector`` instead of a node name, with a Node that
    carries labels (so that selectors are matched) and a claim."""
    slice_ = nvidia.hgx_node(NODE)
    del slice_["spec"]["nodeName"]
    slice_["spec"]["nodeSelector"] = selector
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"a": "1"}}}
    return [*nvidia.device_classes(), slice_, node, claim("x", request("gpu"))]


def selector_of(term: Any) -> Wire:
    return {"nodeSelectorTerms": [term]}


def requirement(values: Any, operator: str = "In") -> Wire:
    return selector_of({"matchExpressions": [{"key": "a", "operator": operator, "values": values}]})


# --- the cases the fuzzing found ----------------------------------------------------------------


def test_a_file_that_is_not_utf8(objects_file: Path) -> None:
    text = documents([*hgx(), claim("x", request("gpu"))])
    data = text.encode() + "# café\n".encode("latin-1")
    line = one_line(*cli("allocate", "-f", str(write(objects_file, data))))
    lines = text.count("\n") + 1
    assert line == (
        f"error: {objects_file}: is not UTF-8 text: the byte 0xe9 at line {lines}, column 6 "
        "is not UTF-8; save the file as UTF-8 (kubectl writes UTF-8)"
    )


def test_utf16_with_a_byte_order_mark_is_read(objects_file: Path) -> None:
    """What PowerShell's ``kubectl get ... > objects.yaml`` writes."""
    text = documents([*hgx(), claim("x", request("gpu"))])
    code, _, err = cli("allocate", "-f", str(write(objects_file, text.encode("utf-16"))))
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "[" * 100_000 + "]" * 100_000, "nesting depth"),
        ("".join("  " * i + f"k{i}:\n" for i in range(3000)), "nesting depth"),
        ("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), f"deeper than {MAX_DEPTH}"),
        ("a: &a [*a]\n", f"deeper than {MAX_DEPTH} levels"),  # an alias inside its own anchor
    ],
    ids=["flow-100000", "block-3000", f"over-{MAX_DEPTH}", "self-alias"],
)
def test_deep_nesting(objects_file: Path, text: str, expected: str) -> None:
    line = one_line(*cli("allocate", "-f", str(write(objects_file, text))))
    assert expected in line


@pytest.mark.parametrize("kind", [[1, 2], {"a": 1}, 5, None])
def test_a_kind_that_is_not_a_string(objects_file: Path, kind: Any) -> None:
    path = write(objects_file, documents([{"kind": kind, "metadata": {"name": "x"}}]))
    line = one_line(*cli("allocate", "-f", str(path)))
    assert line.startswith(f"error: {path}, document 1, kind: ")


@pytest.mark.parametrize("where", ["yaml-count", "json-count", "yaml-metadata", "quantity"])
def test_an_integer_over_4300_digits(objects_file: Path, where: str) -> None:
    huge = "9" * 5000
    slices = documents(hgx())
    if where == "yaml-count":
        text = slices + f"---\n{documents([claim('x', request('gpu'))])}".replace(
            "count: 1", f"count: {huge}"
        )
    elif where == "json-count":
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [*hgx(), claim("x")]})
        text = body.replace('"items": [', f'"items": [{{"count": {huge}}}, ', 1)
    elif where == "yaml-metadata":
        text = slices + f"---\nkind: ResourceClaim\nmetadata: {{name: x, generation: {huge}}}\n"
    else:  # a quantity: a string, so the loader takes it; its parser counts the digits
        wanted = request("gpu")
        wanted["exactly"]["capacity"] = {"requests": {"memory": huge}}
        text = documents([*hgx(), claim("x", wanted)])
    line = one_line(*cli("allocate", "-f", str(write(objects_file, text))))
    assert "digits" in line
    assert huge not in line


def test_a_list_whose_items_are_not_a_list(objects_file: Path) -> None:
    line = one_line(*cli("allocate", "-f", str(write(objects_file, "kind: List\nitems: 5\n"))))
    assert line == f"error: {objects_file}, document 1, items: must be a list of objects, not int"


@pytest.mark.parametrize(
    ("selector", "field", "problem"),
    [
        (requirement(5), "matchExpressions[0].values", "must be a list, not int"),
        (requirement([1]), "matchExpressions[0].values[0]", "must be a string, not int"),
        (requirement([[1]], "Gt"), "matchExpressions[0].values[0]", "must be a string"),
        (requirement(["x"], "Gt"), "matchExpressions[0].values", "must be one integer"),
        (requirement(["1"], "Near"), "matchExpressions[0].operator", "'Near' is not one of"),
        (requirement([], "In"), "matchExpressions[0].values", "must not be empty"),
        (selector_of("a"), "", "must be an object, not str"),
        (
            selector_of({"matchFields": [{"key": "x", "operator": "In", "values": ["n"]}]}),
            "matchFields[0].key",
            "'x' is not supported; use metadata.name",
        ),
    ],
    ids=[
        "values-5",
        "values-int",
        "gt-list",
        "gt-text",
        "operator",
        "in-empty",
        "term-str",
        "field",
    ],
)
def test_a_node_selector_of_the_wrong_shape(
    objects_file: Path, selector: Wire, field: str, problem: str
) -> None:
    path = write(objects_file, documents(node_selected_slice(selector)))
    line = one_line(*cli("allocate", "-f", str(path)))
    term = "spec.nodeSelector.nodeSelectorTerms[0]"
    where = f"{term}.{field}" if field else term
    assert line.startswith(f"error: ResourceSlice {NODE}-{GPU}, {where}: {problem}"), line


def test_a_well_formed_node_selector_still_selects(objects_file: Path) -> None:
    path = write(objects_file, documents(node_selected_slice(requirement(["1"]))))
    code, out, err = cli("allocate", "-f", str(path))
    assert (code, err) == (0, "")
    assert "gpu-0" in out


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ("abc", "metadata: must be an object, not str"),
        ({"name": "n", "labels": "a=b"}, "metadata.labels: must be an object, not str"),
        ({"name": "n", "labels": {"a": 1}}, "metadata.labels[a]: must be a string, not int"),
        ({"name": 5}, "metadata.name: must be a string, not 5"),
        ({"name": "N_1"}, "metadata.name: 'N_1' is not a DNS subdomain"),
    ],
    ids=["string", "labels-string", "label-int", "name-int", "name-invalid"],
)
def test_node_metadata_of_the_wrong_shape(objects_file: Path, metadata: Any, problem: str) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
    path = write(objects_file, documents([*hgx(), claim("x", request("gpu")), node]))
    line = one_line(*cli("allocate", "-f", str(path)))
    assert problem in line


def test_a_huge_name_is_cut_in_the_one_line(objects_file: Path) -> None:
    name = "x" * 10_000_000
    path = write(objects_file, documents([*hgx(), claim(name, request("gpu"))]))
    line = one_line(*cli("allocate", "-f", str(path)))
    assert line.count("x" * 61) == 0  # each echo is cut at 60 characters
    assert "(10000000 characters) is longer than 253 characters" in line


def test_huge_values_are_cut_wherever_they_are_echoed(objects_file: Path) -> None:
    huge = "Q" * 1_000_000
    cases: list[tuple[str, Wire]] = [
        ("apiVersion", {**claim("x", request("gpu")), "apiVersion": huge}),
        ("kind", {**claim("x"), "kind": huge}),
        ("namespace", claim("x", request("gpu"), namespace=huge)),
        ("request name", claim("x", request(huge))),
        ("class name", claim("x", request("gpu", huge))),
        ("count", claim("x", {"name": "gpu", "exactly": {"deviceClassName": GPU, "count": huge}})),
        (
            "mode",
            claim("x", {"name": "g", "exactly": {"deviceClassName": GPU, "allocationMode": huge}}),
        ),
        (
            "constraint",
            claim("x", request("gpu"), constraints=[{"requests": [huge], **same(PCIE_ROOT)}]),
        ),
        ("attribute", claim("x", request("gpu"), constraints=[same(huge)])),
    ]
    for what, obj in cases:
        path = write(objects_file, documents([*hgx(), obj]))
        line = one_line(*cli("allocate", "-f", str(path)))
        assert "Q" * 61 not in line, what


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(
    objects_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000,000 selectors: refused by the file's size, before YAML, CEL or the allocator."""

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("parsed or allocated a file over the size limit")

    monkeypatch.setattr("dra_jupyter.objectfile.yaml.load_all", never)
    monkeypatch.setattr("dra_jupyter.cli.objects.Allocator", never)
    selectors = "".join(
        f"      - cel: {{expression: 'device.driver == \"{i}\"'}}\n" for i in range(10)
    )
    text = documents(hgx()) + "---\n" + documents([claim("x", request("gpu"))])
    text = text.replace(
        "      count: 1\n", "      count: 1\n      selectors:\n" + selectors * 100_000
    )
    assert len(text) > MAX_FILE_BYTES
    started = time.perf_counter()
    line = one_line(*cli("allocate", "-f", str(write(objects_file, text))))
    assert time.perf_counter() - started < 5  # it reads at most the limit, parses nothing
    assert line == (
        f"error: {objects_file}: is larger than 16 MiB, the most an object file may be; keep "
        "the objects of the nodes in question, e.g. kubectl get resourceslices "
        "--field-selector spec.nodeName=NODE -o yaml"
    )


def test_aliases_are_counted_each_time_they_are_used(
    objects_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A YAML "billion laughs": a small file whose aliases expand to 10^9 values stops at
    the values' limit, before the allocator."""
    monkeypatch.setattr(
        "dra_jupyter.cli.objects.Allocator", lambda *_, **__: pytest.fail("allocated")
    )
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level, previous in zip("bcdefghi", "abcdefgh", strict=True):
        text += f"{level}: &{level} [{', '.join([f'*{previous}'] * 10)}]\n"
    line = one_line(*cli("allocate", "-f", str(write(objects_file, text))))
    assert f"holds more than {MAX_VALUES:,} values" in line


def test_selectors_over_the_limit_are_refused_before_cel(
    objects_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("compiled CEL of a request over the limits")

    monkeypatch.setattr("dra_jupyter.selectors.engine._compile", never)
    selected = request("gpu", GPU, 1, *(f"device.driver == '{i}'" for i in range(1000)))
    path = write(objects_file, documents([*hgx(), claim("x", selected)]))
    line = one_line(*cli("allocate", "-f", str(path)))
    assert "selectors: has 1000 entries, more than the limit of 32" in line


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("9" * 5000, "syntax error: integer literal out of range (CEL integers are 64-bit)"),
        ("d" + "9" * 5000, "undeclared reference to 'd999"),
        ("device.driver == " + "'" + "x" * 5000, "syntax error: "),
    ],
    ids=["integer", "identifier", "string"],
)
def test_cel_with_a_huge_token(objects_file: Path, expression: str, problem: str) -> None:
    """Found by the long fuzz run (make fuzz): a 5,000-digit CEL literal crashed the parser,
    and an unknown 5,000-character name was quoted whole."""
    classes = [
        {**c, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
        if c["metadata"]["name"] == GPU
        else c
        for c in nvidia.device_classes()
    ]
    path = write(
        objects_file, documents([*classes, nvidia.hgx_node(NODE), claim("x", request("gpu"))])
    )
    line = one_line(*cli("allocate", "-f", str(path)))
    assert line.startswith(f"error: DeviceClass {GPU}, spec.selectors[0]: {problem}"), line


def test_yaml_tags_that_are_not_json_are_refused(objects_file: Path) -> None:
    for tag in ("!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2024-01-01"):
        text = documents([*hgx()]) + f"---\nkind: ResourceClaim\nmetadata: {{name: x}}\nv: {tag}\n"
        line = one_line(*cli("allocate", "-f", str(write(objects_file, text))))
        assert "Kubernetes objects hold only strings" in line


def test_timestamps_stay_strings(objects_file: Path) -> None:
    """As Kubernetes reads YAML: an unquoted creationTimestamp is a string, and the claim
    is written back as it came."""
    obj = claim("x", request("gpu"))
    text = documents([*hgx(), obj]).replace(
        "  name: x\n", "  name: x\n  creationTimestamp: 2024-05-01T10:00:00Z\n"
    )
    code, out, err = cli("allocate", "-f", str(write(objects_file, text)), "-o", "json")
    assert (code, err) == (0, "")
    [item] = json.loads(out)["items"]
    assert item["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"


def test_claims_after_a_huge_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease longer than the longest (30 days) is refused; one already in a ledger (an
    older version took it) shows as far in the future."""
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    line = one_line(*cli("request", "gpu=1", "--lease", "99999999999999d"))
    assert "--lease: '99999999999999d' is longer than the longest lease, 30d" in line
    assert cli("request", "gpu=1", "--lease", "30d")[0] == 0
    code, out, err = cli("claims", "-o", "json")
    assert (code, err) == (0, "")
    [row] = json.loads(out)
    assert row["lease_expires"]
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        conn.execute("UPDATE claims SET lease_expires = 1e300")
    conn.close()
    code, out, err = cli("claims", "--all")
    assert (code, err) == (0, "")
    assert "(far future)" in out


def test_a_count_with_too_many_digits_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    line = one_line(*cli("request", "gpu=" + "9" * 5000))
    assert line.startswith("error: request: gpu='99999")
    assert line.endswith("(5000 characters) is not a number")


@pytest.mark.parametrize(
    "argv",
    [
        ("request", "memory=" + "Q" * 1_000_000),
        ("request", "gpu=2", "same=" + "Q" * 1_000_000),
        ("request", "Q" * 1_000_000 + "=1"),
        ("request", "gpu=1", "--timeout", "Q" * 1_000_000),
        ("devices", "--inventory", "Q" * 1_000_000),
    ],
    ids=["memory", "same", "keyword", "timeout", "inventory"],
)
def test_huge_values_on_the_command_line_are_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]
) -> None:
    monkeypatch.setenv("DRA_JUPYTER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("DRA_JUPYTER_INVENTORY", "h200-8x")
    line = one_line(*cli(*argv))
    assert "Q" * 61 not in line
    assert "(1000000 characters)" in line


# --- properties: mutated object files ---------------------------------------------------------


def _shared_world() -> list[Wire]:
    inventory = simulated.load("h200-shared")
    spec = {"gpu": 1, "share": "20Gi"}
    return [*inventory.device_classes, *inventory.slices, claim_for(inventory, spec, "share")]


def _selected_world() -> list[Wire]:
    world = node_selected_slice(requirement(["1"]))
    alternatives = {
        "name": "pick",
        "firstAvailable": [
            {"name": "big", "deviceClassName": GPU, "count": 9},
            {
                "name": "one",
                "deviceClassName": GPU,
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            },
        ],
    }
    world[-1] = claim("x", alternatives)
    return world


WORLDS: dict[str, list[Wire]] = {
    "hgx": [
        *hgx(),
        allocated("held", NODE, "gpu-0"),
        claim("pair", request("gpu", GPU, 2), constraints=[same(PCIE_ROOT)]),
    ],
    "mig": [*mig_node(gpus=1), claim("slice", request("mig", MIG, 1, PROFILE_1G))],
    "selected": _selected_world(),
    "shared": _shared_world(),
}


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_the_worlds_that_are_mutated_allocate(objects_file: Path, name: str) -> None:
    """Each mutation starts from valid input, so that it tests what it changes."""
    for form in ("yaml", "json"):
        world = [{"apiVersion": "v1", "kind": "List", "items": WORLDS[name]}]
        code, out, err = cli("allocate", "-f", str(write(objects_file, serialize(world, form))))
        assert (code, err) == (0, ""), name
        assert len(yaml.safe_load(out)["items"]) == 1


# Values a mutation puts in place of another: every JSON type, values at and past the
# limits, and words that mean something to the parsers.
SPECIAL_VALUES: list[Any] = [
    "",
    "x" * 300,
    "Gi",
    "1e5000",
    "-1",
    "0",
    "9" * 30,
    "In",
    "Exists",
    "All",
    "List",
    "ResourceClaim",
    "ResourceSlice",
    "DeviceClass",
    "Node",
    GPU,
    "resource.k8s.io/v1",
    "device.driver ==",
    "device.attributes['gpu.nvidia.com'].index == 0",
    "metadata.name",
    2**63,
    -(2**63) - 1,
    10**40,
    1.5,
    float("nan"),
    float("inf"),
]
SPECIAL = st.sampled_from(SPECIAL_VALUES)
KEYS = st.text(max_size=12) | st.sampled_from([v for v in SPECIAL_VALUES if isinstance(v, str)])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    SPECIAL,
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)


JUNK = st.recursive(SCALARS, _containers, max_leaves=6)

Path_ = tuple[Any, ...]


def paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every place in a document: keys of maps and indexes of lists."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def _at(root: Any, path: Path_) -> Any:
    for step in path:
        root = root[step]
    return root


def place(draw: st.DrawFn, world: list[Any]) -> Path_ | None:
    """A place to mutate: first a depth (documents, their fields, fields of those, ...),
    then a place at that depth, so that the few top-level fields are hit as often as the
    many attributes of devices."""
    places = list(paths(world))[1:]
    if not places:
        return None
    depth = draw(st.integers(1, max(len(p) for p in places)))
    return draw(st.sampled_from([p for p in places if len(p) == depth]))


def mutate(draw: st.DrawFn, world: list[Any], operations: tuple[str, ...]) -> None:
    path = place(draw, world)
    if path is None:
        return
    parent, last = _at(world, path[:-1]), path[-1]
    operation = draw(st.sampled_from(operations))
    if operation == "replace":
        parent[last] = draw(JUNK)
    elif operation == "delete":
        del parent[last]
    elif operation == "add" and isinstance(parent[last], dict):
        parent[last][draw(KEYS)] = draw(JUNK)
    elif operation == "add" and isinstance(parent[last], list):
        parent[last].append(draw(JUNK))
    elif isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    else:
        parent[last] = [parent[last], copy.deepcopy(parent[last])]


@st.composite
def mutated_world(draw: st.DrawFn) -> list[Any]:
    """One of WORLDS, as documents or as one List, with one to three mutations."""
    world: list[Any] = copy.deepcopy(WORLDS[draw(st.sampled_from(sorted(WORLDS)))])
    if draw(st.booleans()):
        world = [{"apiVersion": "v1", "kind": "List", "items": world}]
    for _ in range(draw(st.integers(1, 3))):
        mutate(draw, world, ("replace", "replace", "delete", "add", "duplicate"))
    return world


def serialize(world: list[Any], form: str) -> str:
    return json.dumps(world[0]) if form == "json" and len(world) == 1 else documents(world)


_FILES = itertools.count()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def scratch_file(folder: Path, suffix: str = ".yaml") -> Path:
    return folder / f"input-{next(_FILES)}{suffix}"


@fuzz_settings(150)
@given(
    mutated_world(),
    st.sampled_from(["yaml", "json"]),
    st.sampled_from(
        [
            ("allocate",),
            ("explain",),
            ("allocate", "--strategy", "topology"),
            ("explain", "-o", "json"),
        ]
    ),
)
def test_mutated_object_files_never_crash(
    scratch: Path, world: list[Any], form: str, command: tuple[str, ...]
) -> None:
    path = write(scratch_file(scratch), serialize(world, form))
    code, out, err = cli(command[0], "-f", str(path), *command[1:])
    check(code, out, err)
    if code == 0 and command[0] == "allocate":
        assert yaml.safe_load(out)["kind"] == "List"


# Pieces of YAML syntax a byte mutation inserts, beside random bytes.
TOKENS = st.sampled_from(
    [
        b"&a ", b"*a", b"*b", b"!!binary ", b"!!set ", b"!!python/object:os.system ", b"{", b"}",
        b"[", b"]", b": ", b"- ", b"\t", b"---\n", b"...\n", b"\x00", b"\xff\xfe", b"\xef\xbb\xbf",
        b"%YAML 1.1\n", b"? ", b"|\n", b">-\n", b"'", b'"', b"\\", b"#", b"9" * 5000, b"\n",
        b"<<: *a\n", b"\x85", b"\xe9",
    ]
)  # fmt: skip


@st.composite
def garbled(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=400))
    name = draw(st.sampled_from(sorted(WORLDS)))
    data = bytearray(documents(WORLDS[name]).encode())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        operation = draw(st.sampled_from(["insert", "replace", "delete", "truncate", "copy"]))
        if operation == "insert":
            data[at:at] = draw(TOKENS | st.binary(min_size=1, max_size=8))
        elif operation == "replace":
            data[at : at + 1] = draw(TOKENS | st.binary(min_size=1, max_size=1))
        elif operation == "delete":
            del data[at : at + draw(st.integers(1, 200))]
        elif operation == "truncate":
            del data[at:]
        else:
            end = min(len(data), at + draw(st.integers(1, 400)))
            data[at:at] = data[draw(st.integers(0, max(0, len(data) - 1))) :][: end - at]
    return bytes(data)


@fuzz_settings(80)
@given(garbled(), st.sampled_from(["allocate", "explain"]))
def test_garbled_bytes_never_crash(scratch: Path, data: bytes, command: str) -> None:
    path = write(scratch_file(scratch), data)
    check(*cli(command, "-f", str(path)))


# --- properties: mutated inventories ----------------------------------------------------------

INVENTORIES = {
    name: [*simulated.load(name).device_classes, *simulated.load(name).slices]
    for name in ("h200-8x", "h200-mig", "h200-shared", "tpu-v5e-8")
}


@st.composite
def mutated_inventory(draw: st.DrawFn) -> list[Any]:
    world: list[Any] = copy.deepcopy(INVENTORIES[draw(st.sampled_from(sorted(INVENTORIES)))])
    for _ in range(draw(st.integers(1, 3))):
        mutate(draw, world, ("replace", "delete", "add"))
    return world


@fuzz_settings(60)
@given(mutated_inventory(), st.sampled_from([("devices",), ("request", "gpu=1"), ("claims",)]))
def test_mutated_inventories_never_crash(
    scratch: Path, inventory: list[Wire], command: tuple[str, ...]
) -> None:
    path = write(scratch_file(scratch), documents(inventory))
    ledger = scratch_file(scratch, ".sqlite")
    code, out, err = cli(*command, "--inventory", str(path), "--ledger", str(ledger))
    check(code, out, err)

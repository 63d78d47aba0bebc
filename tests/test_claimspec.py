"""``dra.request`` keywords → ``resource.k8s.io/v1`` ResourceClaim (:mod:`dra_jupyter.claimspec`).

Each keyword of the table in the module docstring is checked against the exact claim it
must produce; every produced claim validates strictly against the Kubernetes 1.36 schema
and its CEL compiles. Bad input raises :class:`InvalidInputError` with one line that names
the keyword. Model names are CEL string literals: quotes and backslashes in them must
neither break the expression nor change what it selects.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes_validate
import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import Same, build_claim, parse_same, requested_devices
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.inventory import simulated
from dra_jupyter.selectors import compile_selector, device_view

Wire = dict[str, Any]

NV, AMD, TPU, MIG = "gpu.nvidia.com", "gpu.amd.com", "tpu.google.com", "mig.nvidia.com"
NVIDIA_CLASSES = (NV, MIG)
AMD_CLASSES = (AMD,)
TPU_CLASSES = (TPU,)


def memory_cel(domain: str, amount: str) -> str:
    return (
        f"'memory' in device.capacity['{domain}'] && "
        f"device.capacity['{domain}'].memory.compareTo(quantity('{amount}')) >= 0"
    )


def model_cel(domain: str, attribute: str, wanted: str) -> str:
    return (
        f"'{attribute}' in device.attributes['{domain}'] && "
        f"device.attributes['{domain}'].{attribute}.lowerAscii().contains('{wanted}')"
    )


def profile_cel(profile: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"


def cel(*expressions: str) -> list[Wire]:
    return [{"cel": {"expression": e}} for e in expressions]


def exactly(name: str, cls: str, count: int | None = 1, **extra: Any) -> Wire:
    body: Wire = {"deviceClassName": cls}
    if count is None:
        body["allocationMode"] = "All"
    else:
        body["count"] = count
    body.update(extra)
    return {"name": name, "exactly": body}


def claim(requests: Sequence[Wire], constraints: Sequence[Wire] = (), name: str = "c") -> Wire:
    devices: Wire = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def validate(obj: Wire) -> None:
    with warnings.catch_warnings():
        # kubernetes-validate and its jsonschema stack may deprecate their own APIs; only
        # those are silenced, everything else stays an error
        warnings.filterwarnings(
            "ignore",
            category=DeprecationWarning,
            module=r"(kubernetes_validate|jsonschema|referencing)(\.|$)",
        )
        kubernetes_validate.validate(obj, "1.36.0", strict=True)  # raises if invalid


def expressions(obj: Wire) -> list[str]:
    """Every CEL expression of a claim, in request order."""
    out = []
    for request in obj["spec"]["devices"]["requests"]:
        bodies = [request["exactly"]] if "exactly" in request else request["firstAvailable"]
        for body in bodies:
            out += [s["cel"]["expression"] for s in body.get("selectors", [])]
    return out


# --- every keyword: the exact claim ----------------------------------------------------------

KEYWORD_CASES: list[tuple[str, Wire, tuple[str, ...], Wire]] = [
    ("no keyword: one GPU", {}, NVIDIA_CLASSES, claim([exactly("gpu", NV)])),
    ("gpu=N", {"gpu": 2}, NVIDIA_CLASSES, claim([exactly("gpu", NV, 2)])),
    ("gpu=32, the limit", {"gpu": 32}, NVIDIA_CLASSES, claim([exactly("gpu", NV, 32)])),
    ("gpu='all'", {"gpu": "all"}, NVIDIA_CLASSES, claim([exactly("gpu", NV, None)])),
    ("gpu on an AMD machine", {"gpu": 1}, AMD_CLASSES, claim([exactly("gpu", AMD)])),
    ("None is absent", {"gpu": None, "memory": None}, (), claim([exactly("gpu", NV)])),
    ("count=N alone", {"count": 3}, NVIDIA_CLASSES, claim([exactly("gpu", NV, 3)])),
    ("gpu=N and the same count", {"gpu": 2, "count": 2}, (), claim([exactly("gpu", NV, 2)])),
    ("tpu=N", {"tpu": 4}, TPU_CLASSES, claim([exactly("tpu", TPU, 4)])),
    ("tpu='all'", {"tpu": "all"}, TPU_CLASSES, claim([exactly("tpu", TPU, None)])),
    (
        "mig=profile",
        {"mig": "3g.71gb"},
        NVIDIA_CLASSES,
        claim([exactly("mig", MIG, selectors=cel(profile_cel("3g.71gb")))]),
    ),
    (
        "mig with count",
        {"mig": "1g.18gb", "count": 2},
        NVIDIA_CLASSES,
        claim([exactly("mig", MIG, 2, selectors=cel(profile_cel("1g.18gb")))]),
    ),
    (
        "memory",
        {"memory": "80Gi"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, selectors=cel(memory_cel(NV, "80Gi")))]),
    ),
    (
        "memory is written canonically",
        {"gpu": 1, "memory": "0.5Gi"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, selectors=cel(memory_cel(NV, "512Mi")))]),
    ),
    (
        "memory on AMD: the AMD driver's domain",
        {"gpu": 2, "memory": "192Gi"},
        AMD_CLASSES,
        claim([exactly("gpu", AMD, 2, selectors=cel(memory_cel(AMD, "192Gi")))]),
    ),
    (
        "memory of a MIG device: NVIDIA's domain",
        {"mig": "3g.71gb", "memory": "60Gi"},
        NVIDIA_CLASSES,
        claim([exactly("mig", MIG, selectors=cel(profile_cel("3g.71gb"), memory_cel(NV, "60Gi")))]),
    ),
    (
        "model: case-insensitive productName",
        {"gpu": 1, "model": "H200"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, selectors=cel(model_cel(NV, "productName", "h200")))]),
    ),
    (
        "model of a TPU: tpuGen",
        {"tpu": 1, "model": "V5LitePod"},
        TPU_CLASSES,
        claim([exactly("tpu", TPU, selectors=cel(model_cel(TPU, "tpuGen", "v5litepod")))]),
    ),
    (
        "selector: verbatim",
        {"gpu": 1, "selector": "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"},
        NVIDIA_CLASSES,
        claim(
            [
                exactly(
                    "gpu",
                    NV,
                    selectors=cel("device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"),
                )
            ]
        ),
    ),
    (
        "memory, model and selector: in that order",
        {"selector": "device.driver == 'gpu.nvidia.com'", "model": "h200", "memory": "80Gi"},
        NVIDIA_CLASSES,
        claim(
            [
                exactly(
                    "gpu",
                    NV,
                    selectors=cel(
                        memory_cel(NV, "80Gi"),
                        model_cel(NV, "productName", "h200"),
                        "device.driver == 'gpu.nvidia.com'",
                    ),
                )
            ]
        ),
    ),
    (
        "share: capacity.requests.memory, on a device that allows several claims",
        {"gpu": 1, "share": "20Gi"},
        NVIDIA_CLASSES,
        claim(
            [
                exactly(
                    "gpu",
                    NV,
                    selectors=[{"cel": {"expression": "device.allowMultipleAllocations"}}],
                    capacity={"requests": {"memory": "20Gi"}},
                )
            ]
        ),
    ),
    (
        "same=pcieRoot",
        {"gpu": 2, "same": "pcieRoot"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, 2)], [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]),
    ),
    (
        "same=numaNode",
        {"gpu": 4, "same": "numaNode"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, 4)], [{"matchAttribute": "resource.kubernetes.io/numaNode"}]),
    ),
    (
        "same=pciBusID",
        {"gpu": 1, "same": "pciBusID"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, 1)], [{"matchAttribute": "resource.kubernetes.io/pciBusID"}]),
    ),
    (
        "same=parentUUID",
        {"mig": "1g.18gb", "count": 2, "same": "parentUUID"},
        NVIDIA_CLASSES,
        claim(
            [exactly("mig", MIG, 2, selectors=cel(profile_cel("1g.18gb")))],
            [{"matchAttribute": "gpu.nvidia.com/parentUUID"}],
        ),
    ),
    (
        "same=<fully qualified attribute>",
        {"gpu": 2, "same": "gpu.nvidia.com/partition2"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, 2)], [{"matchAttribute": "gpu.nvidia.com/partition2"}]),
    ),
    (
        "distinct",
        {"gpu": 2, "distinct": "numaNode"},
        NVIDIA_CLASSES,
        claim([exactly("gpu", NV, 2)], [{"distinctAttribute": "resource.kubernetes.io/numaNode"}]),
    ),
    (
        "same and distinct",
        {"gpu": 2, "distinct": "pcieRoot", "same": "numaNode"},
        NVIDIA_CLASSES,
        claim(
            [exactly("gpu", NV, 2)],
            [
                {"matchAttribute": "resource.kubernetes.io/numaNode"},
                {"distinctAttribute": "resource.kubernetes.io/pcieRoot"},
            ],
        ),
    ),
    (
        "alternatives: firstAvailable",
        {
            "alternatives": [
                {"gpu": 2, "memory": "80Gi"},
                {"mig": "3g.71gb", "count": 2},
                {"gpu": "all"},
            ],
            "same": "pcieRoot",
        },
        NVIDIA_CLASSES,
        claim(
            [
                {
                    "name": "devices",
                    "firstAvailable": [
                        {
                            "name": "option-1",
                            "deviceClassName": NV,
                            "count": 2,
                            "selectors": cel(memory_cel(NV, "80Gi")),
                        },
                        {
                            "name": "option-2",
                            "deviceClassName": MIG,
                            "count": 2,
                            "selectors": cel(profile_cel("3g.71gb")),
                        },
                        {"name": "option-3", "deviceClassName": NV, "allocationMode": "All"},
                    ],
                }
            ],
            [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        ),
    ),
    (
        "alternatives: eight, the limit",
        {"alternatives": [{"gpu": n} for n in range(8, 0, -1)]},
        NVIDIA_CLASSES,
        claim(
            [
                {
                    "name": "devices",
                    "firstAvailable": [
                        {"name": f"option-{i + 1}", "deviceClassName": NV, "count": 8 - i}
                        for i in range(8)
                    ],
                }
            ]
        ),
    ),
    (
        "device_class",
        {"device_class": "example.com", "count": 2},
        (),
        claim([exactly("devices", "example.com", 2)]),
    ),
    (
        "device_class with memory: that driver's domain",
        {"device_class": TPU, "memory": "16Gi"},
        TPU_CLASSES,
        claim([exactly("devices", TPU, selectors=cel(memory_cel(TPU, "16Gi")))]),
    ),
]


@pytest.mark.parametrize(
    ("spec", "classes", "expected"),
    [
        pytest.param(spec, classes, expected, id=name)
        for name, spec, classes, expected in KEYWORD_CASES
    ],
)
def test_keyword_makes_the_documented_claim(
    spec: Wire, classes: tuple[str, ...], expected: Wire
) -> None:
    made = build_claim("c", spec, classes=classes)
    assert made == expected
    validate(made)
    for k, expression in enumerate(expressions(made)):
        compile_selector(expression, where=f"selector {k}")  # raises SelectorError if not


def test_metadata_namespace_and_labels() -> None:
    made = build_claim(
        "nb-7",
        {"gpu": 1},
        namespace="team-a",
        classes=NVIDIA_CLASSES,
        labels={"dra-jupyter/user": "alice", "dra-jupyter/kernel": "k-1"},
    )
    assert made["metadata"] == {
        "name": "nb-7",
        "namespace": "team-a",
        "labels": {"dra-jupyter/user": "alice", "dra-jupyter/kernel": "k-1"},
    }
    validate(made)


def test_build_claim_does_not_change_its_input() -> None:
    spec: Wire = {"alternatives": [{"gpu": 2}], "same": "pcieRoot"}
    labels = {"dra-jupyter/user": "alice"}
    made = build_claim("c", spec, labels=labels)
    made["metadata"]["labels"]["x"] = "y"
    made["spec"]["devices"]["requests"][0]["firstAvailable"][0]["count"] = 5
    assert spec == {"alternatives": [{"gpu": 2}], "same": "pcieRoot"}
    assert labels == {"dra-jupyter/user": "alice"}


# --- the claims mean what the keywords say: allocated on bundled inventories -----------------


def allocated(inventory: str, spec: Wire) -> list[Wire] | None:
    """The devices (wire dicts) the claim of ``spec`` gets on an idle bundled inventory."""
    inv = simulated.load(inventory)
    made = build_claim("c", spec, classes=[c["metadata"]["name"] for c in inv.device_classes])
    results = Allocator(inv.slices, inv.device_classes).allocate([made])
    if results is None:
        return None
    by_name = {
        d["name"]: d for s in inv.slices for d in s["spec"].get("devices") or () if "name" in d
    }
    return [by_name[r["device"]] for r in results[0].to_dict()["devices"]["results"]]


def attr(device: Mapping[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


def test_memory_selects_by_capacity() -> None:
    # an H200 has 143771Mi (140.4Gi)
    assert allocated("h200-8x", {"gpu": 8, "memory": "140Gi"}) is not None
    assert allocated("h200-8x", {"gpu": 1, "memory": "141Gi"}) is None
    # an H100 SXM has 81559Mi: "80Gi" is 81920Mi
    assert allocated("h100-8x", {"gpu": 1, "memory": "79Gi"}) is not None
    assert allocated("h100-8x", {"gpu": 1, "memory": "80Gi"}) is None


def test_model_matches_case_insensitively() -> None:
    got = allocated("h200-8x", {"gpu": 1, "model": "h200"})
    assert got is not None
    assert attr(got[0], "productName") == "NVIDIA H200"
    assert allocated("h200-8x", {"gpu": 1, "model": "H100"}) is None
    assert allocated("tpu-v5e-8", {"tpu": 2, "model": "V5LITE"}) is not None
    assert allocated("mi300x-8", {"gpu": 1, "model": "mi300x"}) is not None


def test_mig_profile_count_and_same() -> None:
    got = allocated("h200-mig", {"mig": "3g.71gb", "count": 2, "same": "parentUUID"})
    assert got is not None
    assert [attr(d, "profile") for d in got] == ["3g.71gb", "3g.71gb"]
    assert allocated("h200-mig", {"mig": "3g.71gb", "count": 3}) is None


def test_same_and_distinct_constraints() -> None:
    same = allocated("h200-8x", {"gpu": 2, "same": "pcieRoot"})
    assert same is not None
    assert len({attr(d, "resource.kubernetes.io/pcieRoot") for d in same}) == 1
    distinct = allocated("h200-8x", {"gpu": 4, "distinct": "pcieRoot"})
    assert distinct is not None
    assert len({attr(d, "resource.kubernetes.io/pcieRoot") for d in distinct}) == 4
    assert allocated("h200-8x", {"gpu": 3, "same": "pcieRoot"}) is None


def test_alternatives_take_the_first_that_fits() -> None:
    got = allocated("workstation-4gpu", {"alternatives": [{"gpu": 8}, {"gpu": 2}, {"gpu": 1}]})
    assert got is not None
    assert len(got) == 2


# --- bad input: one clear line that names the keyword ----------------------------------------

ERROR_CASES: list[tuple[str, Wire, str]] = [
    ("negative gpu", {"gpu": -1}, "gpu"),
    ("zero gpu", {"gpu": 0}, "gpu"),
    ("bool gpu", {"gpu": True}, "gpu"),
    ("bool tpu", {"tpu": False}, "tpu"),
    ("float gpu", {"gpu": 2.0}, "gpu"),
    ("string gpu", {"gpu": "2"}, "gpu"),
    ("zero count", {"count": 0}, "count"),
    ("negative count with mig", {"mig": "1g.18gb", "count": -2}, "count"),
    ("bool count", {"mig": "1g.18gb", "count": True}, "count"),
    ("gpu over 32", {"gpu": 33}, "gpu=33"),
    ("tpu over 32", {"tpu": 64}, "tpu=64"),
    ("count over 32", {"mig": "1g.18gb", "count": 33}, "count=33"),
    ("gpu and a different count", {"gpu": 2, "count": 3}, "count"),
    ("unknown keyword", {"gpu": 1, "colour": "green"}, "'colour'"),
    ("misspelt keyword", {"gpus": 2}, "'gpus'"),
    ("gpu and tpu", {"gpu": 1, "tpu": 1}, "'gpu', 'tpu'"),
    ("gpu and mig", {"gpu": 1, "mig": "1g.18gb"}, "'gpu', 'mig'"),
    (
        "mig and device_class",
        {"mig": "1g.18gb", "device_class": "x.example.com"},
        "'mig', 'device_class'",
    ),
    ("mig not a profile name", {"mig": 3}, "mig"),
    ("empty mig", {"mig": ""}, "mig"),
    ("alternatives with top-level gpu", {"alternatives": [{"gpu": 1}], "gpu": 1}, "alternatives"),
    (
        "alternatives with top-level memory",
        {"alternatives": [{"gpu": 1}], "memory": "80Gi"},
        "alternatives",
    ),
    ("nine alternatives", {"alternatives": [{"gpu": 1}] * 9}, "alternatives"),
    ("empty alternatives", {"alternatives": []}, "alternatives"),
    ("alternatives not a list", {"alternatives": "gpu=1"}, "alternatives"),
    ("alternative not a dict", {"alternatives": [{"gpu": 1}, 3]}, "alternatives[1]"),
    (
        "constraint inside an alternative",
        {"alternatives": [{"gpu": 2, "same": "pcieRoot"}]},
        "'same'",
    ),
    (
        "bad count inside an alternative",
        {"alternatives": [{"gpu": 1}, {"gpu": 0}]},
        "alternatives[1]",
    ),
    (
        "bad memory inside an alternative",
        {"alternatives": [{"gpu": 1}, {"gpu": 1, "memory": "lots"}]},
        "alternatives[1]",
    ),
    ("memory not a quantity", {"memory": "eighty"}, "memory='eighty'"),
    ("memory in GB", {"memory": "80GB"}, "memory='80GB'"),
    ("memory a float", {"memory": 1.5}, "memory=1.5"),
    ("memory without a unit", {"memory": "80"}, "memory='80' is 80 bytes (no unit)"),
    ("memory a bare number", {"memory": 80}, "memory=80 is 80 bytes (no unit)"),
    ("memory in bare exponent", {"memory": "8e4"}, "memory='8e4'"),
    ("share without a unit", {"share": "20"}, "share='20' is 20 bytes (no unit)"),
    ("negative memory", {"memory": "-5Gi"}, "memory"),
    ("share not a quantity", {"share": "half"}, "share='half'"),
    ("negative share", {"share": "-1Gi"}, "share"),
    ("same not an attribute", {"gpu": 2, "same": "pcieroot"}, "same='pcieroot'"),
    ("empty same", {"gpu": 2, "same": ""}, "same=''"),
    ("distinct not an attribute", {"gpu": 2, "distinct": "socket"}, "distinct='socket'"),
    ("empty selector", {"selector": " "}, "selector"),
    ("selector not a string", {"selector": 5}, "selector"),
]


@pytest.mark.parametrize(
    ("spec", "names"), [pytest.param(spec, names, id=case) for case, spec, names in ERROR_CASES]
)
def test_bad_input_is_one_clear_line(spec: Wire, names: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", spec, classes=NVIDIA_CLASSES)
    message = str(caught.value)
    assert message.startswith("dra.request"), message
    assert "\n" not in message
    assert names in message, message


def test_a_plain_number_of_a_megabyte_or_more_is_bytes() -> None:
    """Only what cannot be meant as bytes is refused: 2000000 bytes is a size someone
    may mean."""
    claim = build_claim("c", {"memory": "2000000"}, classes=NVIDIA_CLASSES)
    assert "quantity('2M')" in json.dumps(claim)


def test_limit_errors_say_the_limit() -> None:
    with pytest.raises(InvalidInputError, match="limit of 32 devices per claim"):
        build_claim("c", {"gpu": 33})
    with pytest.raises(InvalidInputError, match="at most 8 alternatives"):
        build_claim("c", {"alternatives": [{"gpu": 1}] * 9})


def test_attribute_error_lists_the_short_names() -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", {"gpu": 2, "same": "root"})
    for short in ("pcieRoot", "numaNode", "pciBusID", "parentUUID"):
        assert short in str(caught.value)


def test_unknown_keyword_lists_the_keywords() -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", {"colour": "green"})
    for keyword in ("gpu", "tpu", "mig", "memory", "model", "same", "alternatives"):
        assert keyword in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "near"),
    [({"gpuu": 1}, "gpu"), ({"memroy": "80Gi"}, "memory"), ({"sme": "pcieRoot"}, "same")],
)
def test_a_misspelt_keyword_names_the_one_meant(spec: Wire, near: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", spec)
    assert f"(did you mean {near}?)" in str(caught.value)


def test_an_unknown_word_suggests_nothing() -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", {"colour": "green"})
    assert "did you mean" not in str(caught.value)


# --- CEL string literals ---------------------------------------------------------------------

# Model names with characters that are special in a CEL string literal. Each must compile
# and select exactly the device whose productName contains it.
TRICKY_MODELS = [
    pytest.param("it's", id="single quote"),
    pytest.param('say "hi"', id="double quotes"),
    pytest.param("back\\slash", id="backslash"),
    pytest.param("a\\'b", id="backslash then quote"),
    pytest.param("x\\nline", id="backslash n, not a newline"),
    pytest.param("' || true || '", id="quote injection"),
    pytest.param("tab\there", id="tab"),
    pytest.param("two\nlines", id="newline"),
    pytest.param("Ünicode", id="non-ASCII"),
]
ALL_TRICKY = [
    "it's",
    'say "hi"',
    "back\\slash",
    "a\\'b",
    "x\\nline",
    "' || true || '",
    "tab\there",
    "two\nlines",
    "Ünicode",
]


@pytest.mark.parametrize("model", TRICKY_MODELS)
def test_model_names_are_escaped(model: str) -> None:
    made = build_claim("c", {"gpu": 1, "model": model})
    validate(made)
    [expression] = expressions(made)
    selector = compile_selector(expression, where="model")
    devices = {
        name: device_view(NV, {"productName": f"Vendor {name} GPU"}, {}, False)
        for name in ALL_TRICKY
    }
    devices["plain"] = device_view(NV, {"productName": "NVIDIA H200"}, {}, False)
    matching = sorted(name for name, device in devices.items() if selector.matches(device))
    assert matching == [model]


def test_model_quote_selects_only_its_device_and_is_case_insensitive() -> None:
    made = build_claim("c", {"gpu": 1, "model": "IT'S"})
    [expression] = expressions(made)
    selector = compile_selector(expression, where="model")
    assert selector.matches(device_view(NV, {"productName": "NVIDIA it's GPU"}, {}, False))
    assert not selector.matches(device_view(NV, {"productName": "NVIDIA its GPU"}, {}, False))
    assert not selector.matches(device_view(NV, {"productName": "NVIDIA it"}, {}, False))
    # a device without productName is not selected (and the selector does not fail on it)
    assert not selector.matches(device_view(NV, {"uuid": "GPU-1"}, {}, False))


def test_mig_profile_with_a_quote_is_escaped() -> None:
    made = build_claim("c", {"mig": "3g'.71gb"})
    [expression] = expressions(made)
    selector = compile_selector(expression, where="mig")
    assert selector.matches(device_view(NV, {"profile": "3g'.71gb"}, {}, False))
    assert not selector.matches(device_view(NV, {"profile": "3g.71gb"}, {}, False))


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        ({"gpu": 2}, 2),
        ({"mig": "3g.71gb"}, 1),  # no count: one device
        ({"mig": "1g.18gb", "count": 3}, 3),
        ({"alternatives": [{"gpu": 4}, {"gpu": 1}]}, 4),  # the preferred one
        ({"gpu": "all"}, None),  # only an allocation can count it
    ],
)
def test_requested_devices(spec: Mapping[str, Any], count: int | None) -> None:
    claim = build_claim("c", spec, classes=NVIDIA_CLASSES)
    assert requested_devices(claim) == count


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"gpu": 10**4000}, "gpu=<an integer of about 4001 digits> exceeds the limit of 32"),
        ({"model": "H" * 50_000_000}, "model: at most 64 characters"),
        ({"mig": "3" * 65}, "mig: at most 64 characters"),
    ],
    ids=["huge-count", "50mb-model", "long-mig"],
)
def test_huge_values_are_refused_in_one_short_line(spec: Mapping[str, Any], words: str) -> None:
    """Before any work on them (a 50 MB model took seconds to quote as CEL): issue #18."""
    with pytest.raises(InvalidInputError) as caught:
        build_claim("x", spec)
    assert words in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    ("value", "devices", "nodes"),
    [
        ("pcieRoot", ("resource.kubernetes.io/pcieRoot",), ()),
        ("gpu.nvidia.com/partition2", ("gpu.nvidia.com/partition2",), ()),
        ("zone", (), ("topology.kubernetes.io/zone",)),
        ("region", (), ("topology.kubernetes.io/region",)),
        ("nvlink", (), ("nvidia.com/gpu.clique",)),
        ("node:zone", (), ("topology.kubernetes.io/zone",)),
        ("node:example.com/rack", (), ("example.com/rack",)),
        ("node:kubernetes.io/hostname", (), ("kubernetes.io/hostname",)),
        # a device attribute its driver takes from a node label: that label
        ("node:tpu.google.com/accelerator", (), ("cloud.google.com/gke-tpu-accelerator",)),
        (
            ["pcieRoot", "zone", "resource.kubernetes.io/pcieRoot"],
            ("resource.kubernetes.io/pcieRoot",),
            ("topology.kubernetes.io/zone",),
        ),
    ],
)
def test_same_is_split_into_device_attributes_and_node_labels(
    value: object, devices: tuple[str, ...], nodes: tuple[str, ...]
) -> None:
    assert parse_same(value, where="dra.run") == Same(devices, nodes)


@pytest.mark.parametrize(
    ("value", "drivers", "message"),
    [
        (
            "node:pcieRoot",
            (),
            "dra.run: same='node:pcieRoot': pcieRoot is a device attribute, which Kubernetes "
            "makes equal only among the devices of one claim (one pod), not across the pods' "
            "nodes; use same='pcieRoot' (the devices of each pod share it), or a node label: "
            "same='zone' or same='node:<node label key>'",
        ),
        ("node:gpu.nvidia.com/productName", (), "productName is a device attribute"),
        ("node:acme.dev/board", ("acme.dev",), "board is a device attribute"),  # a driver's
        (
            "topology.kubernetes.io/zone",
            (),
            "dra.run: same='topology.kubernetes.io/zone' is a node label, not a device "
            "attribute; write same='node:topology.kubernetes.io/zone' to keep the pods of a "
            "multi-node run on nodes that share its value",
        ),
        ("nvidia.com/gpu.clique", (), "write same='node:nvidia.com/gpu.clique'"),
        ("node:bad key!", (), "dra.run: same='node:bad key!': 'bad key!' is not a qualified"),
        ("rack", (), "or, for the pods of a multi-node run, zone, region, nvlink or node:"),
        ([], (), "dra.run: same=[] names nothing"),
        ([3], (), "dra.run: same=3 is not an attribute"),
    ],
)
def test_same_that_neither_claims_nor_nodes_express_is_one_line(
    value: object, drivers: tuple[str, ...], message: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_same(value, where="dra.run", drivers=drivers)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_a_claim_takes_device_attributes_only() -> None:
    """One claim's devices are on one node: a node label is for a multi-node run."""
    claim = build_claim("c", {"gpu": 2, "same": ["pcieRoot", "numaNode"]})
    assert claim["spec"]["devices"]["constraints"] == [
        {"matchAttribute": "resource.kubernetes.io/pcieRoot"},
        {"matchAttribute": "resource.kubernetes.io/numaNode"},
    ]
    with pytest.raises(InvalidInputError) as caught:
        build_claim("c", {"gpu": 2, "same": "zone"})
    assert str(caught.value) == (
        "dra.request: same='zone' asks the nodes of several pods to share "
        "topology.kubernetes.io/zone, which only a multi-node run can (dra.run(..., nodes=N) "
        "on Kubernetes); one claim's devices are on one node: leave it out, or name a device "
        "attribute (same='pcieRoot')"
    )

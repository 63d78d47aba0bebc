"""The REST contract written once: ``specification/dra-rest-api.yml`` is the source, and
the TypedDicts of ``dra_jupyter/server/models.py`` and a real server's answers must agree
with it.

* Each component schema has its TypedDict (the table ``SCHEMAS``) and back, with the same
  fields, the same required ones, and the same types (enums included).
* Every operation of the spec is called on a real server; each answer's status is one the
  spec lists for the operation, and its body validates against the spec's schema, with no
  field the schema does not describe.

The widgets' JavaScript is checked against the same spec in tests/widgets/test_wire_types.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, Required, Union

import jsonschema
import pytest
import yaml

from dra_jupyter.api import Session
from dra_jupyter.kernel.asking import SECRET_HEADER
from dra_jupyter.server import models
from dra_jupyter.server.claims import Caller
from dra_jupyter.server.models import (
    ClaimModel,
    ClaimRequest,
    ClaimsResponse,
    ClusterCountsModel,
    DeviceMetricsModel,
    DeviceModel,
    DevicesResponse,
    ErrorModel,
    GpuActivityModel,
    HistoryModel,
    JoinedModel,
    KernelAsk,
    MetricsResponse,
    PossibleModel,
    ReleasedModel,
    RestartResponse,
    RunLogsResponse,
    RunModel,
    RunsResponse,
    SampleModel,
    ShapeCountModel,
    UsageResponse,
    WaiterModel,
)
from tests.server.conftest import Fetch, start_extensions
from tests.server.test_kernels import started_kernel
from tests.server.test_rest import extension

SPEC_PATH = Path(__file__).parents[2] / "specification" / "dra-rest-api.yml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
REF = "#/components/schemas/"

# Each component schema of the spec and the TypedDict that types it in the server's code.
SCHEMAS: dict[str, type] = {
    "Error": ErrorModel,
    "Device": DeviceModel,
    "Devices": DevicesResponse,
    "ClusterCounts": ClusterCountsModel,
    "ShapeCount": ShapeCountModel,
    "Claim": ClaimModel,
    "Released": ReleasedModel,
    "GpuActivity": GpuActivityModel,
    "Waiter": WaiterModel,
    "Sample": SampleModel,
    "History": HistoryModel,
    "DeviceMetrics": DeviceMetricsModel,
    "Metrics": MetricsResponse,
    "Claims": ClaimsResponse,
    "Joined": JoinedModel,
    "Restart": RestartResponse,
    "ClaimRequest": ClaimRequest,
    "KernelAsk": KernelAsk,
    "Possible": PossibleModel,
    "Usage": UsageResponse,
    "Run": RunModel,
    "Runs": RunsResponse,
    "RunLogs": RunLogsResponse,
}

# Fields the spec gives an enum that the TypedDict types as plain ``str``, and why. The
# answers' values are still checked against the enum (the validation below).
STR_ENUMS = {
    ("Metrics", "source"): (
        "MetricsSource.name of dra_jupyter/metrics/base.py is a str: a Literal here needs "
        "the metrics sources' names typed too"
    ),
}

# Keywords that constrain or describe values without changing their type, and those that
# make it (of schemas of fields: no properties, the spec names each object's schema).
VALUE_ONLY = frozenset({"description", "minimum", "maximum", "maxItems", "minItems", "maxLength"})
SHAPE = frozenset({"type", "enum", "nullable", "items", "$ref", "allOf", "oneOf", "anyOf"})
SHAPE |= {"additionalProperties"}

# A type, written the same way for both sides: a frozenset of alternatives, each one of
# "string", "integer", "number", "boolean", "null", "any", ("enum", values),
# ("array", items), ("map", values) or ("model", schema name).
Shape = frozenset[Any]


# --- the TypedDicts against the component schemas ---------------------------------------------


def spec_shape(schema: Mapping[str, Any], where: str) -> Shape:
    """The shape of the values an OpenAPI 3.0 schema allows."""
    unknown = set(schema) - VALUE_ONLY - SHAPE
    assert not unknown, f"{where}: teach this test the schema keywords {sorted(unknown)}"
    null: Shape = frozenset({"null"}) if schema.get("nullable") else frozenset()
    if "$ref" in schema:
        return frozenset({("model", schema["$ref"].removeprefix(REF))}) | null
    if "allOf" in schema:
        (only,) = schema["allOf"]
        return spec_shape(only, where) | null
    if "oneOf" in schema or "anyOf" in schema:
        parts = [spec_shape(s, where) for s in schema.get("oneOf", schema.get("anyOf", []))]
        return frozenset().union(*parts) | null
    if "enum" in schema:
        return frozenset({("enum", frozenset(schema["enum"]))}) | null
    kind = schema["type"]
    if kind == "array":
        return frozenset({("array", spec_shape(schema["items"], f"{where}[]"))}) | null
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        values = frozenset({"any"}) if extra is True else spec_shape(extra, f"{where}{{}}")
        return frozenset({("map", values)}) | null
    assert kind in ("string", "integer", "number", "boolean"), f"{where}: type {kind}"
    return frozenset({kind}) | null


PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def python_shape(annotation: Any, where: str, schemas: Mapping[str, type] | None = None) -> Shape:
    """The shape of the values a (resolved) annotation of a TypedDict allows (the
    TypedDicts of ``schemas``, by default :data:`SCHEMAS`, named by their schema)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    schemas = SCHEMAS if schemas is None else schemas
    names = {cls: name for name, cls in schemas.items()}
    if origin in (Required, NotRequired):
        return python_shape(args[0], where, schemas)
    if origin in (Union, types.UnionType):
        return frozenset().union(*(python_shape(a, where, schemas) for a in args))
    if origin is Literal:
        return frozenset({("enum", frozenset(args))})
    if origin is list:
        return frozenset({("array", python_shape(args[0], f"{where}[]", schemas))})
    if origin is dict:
        assert args[0] is str, f"{where}: JSON object keys are strings"
        return frozenset({("map", python_shape(args[1], f"{where}{{}}", schemas))})
    if annotation in (object, Any):
        return frozenset({"any"})
    if annotation in PLAIN:
        return frozenset({PLAIN[annotation]})
    assert annotation in names, f"{where}: {annotation} is no TypedDict of the SCHEMAS table"
    return frozenset({("model", names[annotation])})


def required_fields(cls: type) -> set[str]:
    """The keys a TypedDict requires. Read from the annotations: on Python 3.11 the
    ``__required_keys__`` of a module with ``from __future__ import annotations`` count
    NotRequired fields as required."""
    hints = typing.get_type_hints(cls, include_extras=True)
    total = bool(getattr(cls, "__total__", True))
    required = set()
    for name, hint in hints.items():
        origin = typing.get_origin(hint)
        if origin is Required or (total and origin is not NotRequired):
            required.add(name)
    return required


def test_every_schema_has_its_typeddict_and_back() -> None:
    typeddicts = {
        cls
        for cls in vars(models).values()
        if typing.is_typeddict(cls)
        # the server's own, or a shared type it answers with as it is (types/)
        and (cls.__module__ == models.__name__ or cls.__module__.startswith("dra_jupyter.types."))
    }
    assert set(SCHEMAS) == set(SPEC["components"]["schemas"])
    assert set(SCHEMAS.values()) == typeddicts
    assert len(set(SCHEMAS.values())) == len(SCHEMAS)  # one TypedDict per schema


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_typeddict_has_the_schemas_fields_and_types(name: str) -> None:
    schema = SPEC["components"]["schemas"][name]
    cls = SCHEMAS[name]
    assert schema["type"] == "object", name
    hints = typing.get_type_hints(cls, include_extras=True)
    properties: dict[str, Any] = schema["properties"]
    assert set(hints) == set(properties), f"{name}: fields"
    assert required_fields(cls) == set(schema.get("required", ())), f"{name}: required"
    for field, prop in properties.items():
        where = f"{name}.{field}"
        expected = spec_shape(prop, where)
        got = python_shape(hints[field], where)
        if (name, field) in STR_ENUMS:
            # the exception is kept only while it is one: the spec's enum, a str here
            assert got == {"string"}, f"{where} is no plain str now: drop it from STR_ENUMS"
            assert {kind for kind, *_ in expected} == {"enum"}, where
            continue
        assert got == expected, f"{where}: {hints[field]} in models.py, {prop} in the spec"


def test_the_table_of_str_enums_names_fields_of_the_spec() -> None:
    for name, field in STR_ENUMS:
        assert "enum" in SPEC["components"]["schemas"][name]["properties"][field]


def test_the_shapes_tell_types_apart() -> None:
    """What the comparison above rests on: different types give different shapes."""
    assert spec_shape({"type": "integer"}, "") != python_shape(float, "")
    assert spec_shape({"type": "string", "enum": ["a"]}, "") != python_shape(str, "")
    assert spec_shape({"type": "number", "nullable": True}, "") == python_shape(float | None, "")
    assert spec_shape({"type": "array", "items": {"type": "integer"}}, "") != python_shape(
        list[int | None], ""
    )
    assert spec_shape({"$ref": REF + "Claim"}, "") == python_shape(ClaimModel, "")
    assert spec_shape({"$ref": REF + "Claim"}, "") != python_shape(DeviceModel, "")
    assert required_fields(ErrorModel) == {"message"}
    assert required_fields(ClaimRequest) == set()


# --- the server's answers against the spec ------------------------------------------------------


def json_schema(schema: Any, *, closed: bool) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema (2020-12): ``nullable`` becomes a null
    alternative, references point into ``$defs``. ``closed``: objects with properties allow
    no others (an answer must carry only what the spec describes)."""
    if isinstance(schema, list):
        return [json_schema(s, closed=closed) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_schema(v, closed=closed) for k, v in schema.items() if k != "nullable"}
    if "$ref" in out:
        out["$ref"] = "#/$defs/" + out["$ref"].removeprefix(REF)
    if closed and "properties" in out:
        out.setdefault("additionalProperties", False)
    if schema.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def validator(
    schema: Mapping[str, Any], *, closed: bool = True, spec: Mapping[str, Any] | None = None
) -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` with the component schemas of ``spec`` (by default
    :data:`SPEC`)."""
    components = (SPEC if spec is None else spec)["components"]["schemas"]
    defs = {n: json_schema(s, closed=closed) for n, s in components.items()}
    root = {"$defs": defs, **json_schema(dict(schema), closed=closed)}
    jsonschema.Draft202012Validator.check_schema(root)
    return jsonschema.Draft202012Validator(root)


def operation_of(method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The spec's operation ("GET /claims/{name}") for a request path under the API."""
    for template, item in SPEC["paths"].items():
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and method.lower() in item:
            return f"{method} {template}", item[method.lower()]
    raise AssertionError(f"{method} {path}: no operation of the spec")


class Contract:
    """REST calls on a real server, each answer checked against the spec; remembers the
    operations and statuses seen."""

    def __init__(self, jp_fetch: Fetch) -> None:
        self.fetch = jp_fetch
        self.seen: set[tuple[str, int]] = set()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        status: int,
        headers: Mapping[str, str] | None = None,
        **params: str,
    ) -> Any:
        """Make the call, check the answer, and return its JSON (None: no body)."""
        operation, spec = operation_of(method, path)
        kwargs: dict[str, Any] = {"method": method, "raise_error": False, "params": params}
        if headers:
            kwargs["headers"] = dict(headers)
        if method in ("POST", "PUT", "PATCH"):  # tornado sends a body with these only
            kwargs["body"] = "" if body is None else json.dumps(body)
        if body is not None and "requestBody" in spec and 200 <= status < 300:
            schema = spec["requestBody"]["content"]["application/json"]["schema"]
            validator(schema).validate(body)  # what the spec allows, the server took
        r = await self.fetch("dra", "api", *path.strip("/").split("/"), **kwargs)
        assert r.code == status, (operation, r.code, r.body)
        answers = {int(code): answer for code, answer in spec["responses"].items()}
        assert r.code in answers, f"{operation} answered {r.code}, which the spec does not list"
        self.seen.add((operation, r.code))
        answer = answers[r.code]
        if "$ref" in answer:  # components/responses
            answer = SPEC["components"]["responses"][answer["$ref"].rsplit("/", 1)[-1]]
        for header in answer.get("headers", {}):
            assert r.headers.get(header), f"{operation} {r.code}: no {header} header"
        if "content" not in answer:
            assert not r.body, f"{operation} {r.code}: a body the spec does not describe"
            return None
        if "text/plain" in answer["content"]:  # Prometheus's text format
            assert r.headers["Content-Type"].startswith("text/plain"), operation
            return r.body.decode()
        assert r.headers["Content-Type"].startswith("application/json"), operation
        document = json.loads(r.body)
        schema = answer["content"]["application/json"]["schema"]
        errors = sorted(validator(schema).iter_errors(document), key=lambda e: e.json_path)
        assert not errors, f"{operation} {r.code}: " + "; ".join(
            f"{e.json_path}: {e.message}" for e in errors
        )
        return document


async def kernel_asks(api: Contract, secret: str) -> None:
    """What the server's kernels ask: with the kernels' secret, without it (the user's token
    that every call carries is not enough)."""
    ask = {"request": {"gpu": 1}, "name": ""}
    path = "/kernel-asks/possible"
    said = await api.call("POST", path, ask, status=200, headers={SECRET_HEADER: secret})
    assert said["possible"] is True and said["classes"], said
    never = {"request": {"gpu": 999}, "name": ""}
    said = await api.call("POST", path, never, status=200, headers={SECRET_HEADER: secret})
    assert said == {"possible": False}
    await api.call("POST", path, ask, status=403, headers={SECRET_HEADER: "guessed"})


async def every_error(api: Contract, mine: str, theirs: str) -> None:
    """Each error once, with the spec's Error body (``mine``: a claim of the caller's,
    released by now; ``theirs``: another user's)."""
    await api.call("GET", "/metrics", status=400, history="many")
    await api.call("POST", "/claims", {"bogus": 1}, status=400)
    await api.call("POST", "/claims", {"gpu": 1, "kernel_id": "no-such-kernel"}, status=404)
    await api.call("POST", "/claims", {"gpu": 9}, status=422)
    await api.call("POST", "/claims", {"gpu": 7}, status=409)  # 2 of the 8 are held
    await api.call("GET", f"/claims/{theirs}", status=403)
    await api.call("GET", "/claims/Upper", status=400)  # no claim name
    await api.call("DELETE", "/claims/Upper", status=400)
    await api.call("POST", "/claims/Upper/keep", status=400)
    gone = await api.call("GET", f"/claims/{mine}", status=200)  # released lately
    assert gone["released"]["reason"] == "user"
    await api.call("GET", "/claims/no-such-claim", status=404)
    await api.call("DELETE", f"/claims/{mine}", status=404)
    await api.call("POST", f"/claims/{mine}/keep", status=404)
    await api.call("POST", f"/claims/{mine}/move", status=404)
    await api.call("POST", "/claims/Upper/move", status=400)
    await api.call("GET", "/kernels/no-such-kernel/claims", status=404)
    await api.call("POST", "/kernels/no-such-kernel/restart-with-claims", status=404)
    await api.call("POST", "/runs/no-such-run/cancel", status=404)
    await api.call("POST", "/runs/Upper/cancel", status=400)
    await api.call("GET", "/runs/no-such-run/logs", status=404)
    await api.call("GET", "/runs/no-such-run/logs", status=400, tail="0")


async def a_run(api: Contract, app: Any) -> None:
    """A background run of the server's user (dra.run, on the server's ledger): listed, its
    output read, cancelled."""
    session = Session(app.service.session.settings)
    run = await asyncio.to_thread(session.run, ["sleep", "300"], gpu=1, name="contract")
    try:
        listed = await api.call("GET", "/runs", status=200)
        assert [r["name"] for r in listed["runs"]] == ["contract"]
        await api.call("GET", "/runs/contract/logs", status=200, tail="5")
        cancelled = await api.call("POST", "/runs/contract/cancel", status=200)
        assert cancelled["phase"] == "Cancelled"
    finally:
        await asyncio.to_thread(run.cancel)


async def test_every_operation_answers_as_the_spec_says(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await start_extensions(jp_serverapp)
    api = Contract(jp_fetch)
    app = extension(jp_serverapp)
    async with started_kernel(jp_serverapp) as kernel:
        await kernel.run("pass")  # an execution: the kernel's claims get an idle deadline
        await api.call("GET", "/devices", status=200)
        await api.call("GET", "/claims", status=200)
        mine = await api.call("POST", "/claims", {"gpu": 2, "lease": "1h"}, status=201)
        assert mine["lease_expires"] is not None
        ours = await api.call("POST", "/claims", {"gpu": 1, "kernel_id": kernel.id}, status=201)
        assert ours["idle_deadline"] is not None
        theirs = await app.call(app.service.create, Caller("someone-else"), {"gpu": 1})

        devices = await api.call("GET", "/devices", status=200)
        assert {d["state"] for d in devices["devices"]} >= {"free", "held"}
        listed = await api.call("GET", "/claims", status=200)
        assert {c["name"] for c in listed["claims"]} == {mine["name"], ours["name"]}
        await api.call("GET", f"/claims/{mine['name']}", status=200)
        await api.call("POST", f"/claims/{ours['name']}/keep", status=200)
        await api.call("GET", f"/kernels/{kernel.id}/claims", status=200)
        await api.call("GET", "/metrics", status=200)
        some = devices["devices"][0]["device"]
        metrics = await api.call("GET", "/metrics", status=200, history="2", device=some)
        assert [m["device"] for m in metrics["devices"]] == [some]
        usage = await api.call("GET", "/usage", status=200, since="1d")
        assert usage["gpu_seconds"] > 0 and len(usage["daily_gpu_hours"]) == 1
        await api.call("GET", "/usage", status=400, since="1y")
        text = await api.call("GET", "/metrics/prometheus", status=200)
        assert "dra_jupyter_held_gpu_seconds_total{" in text
        restart = await api.call("POST", f"/kernels/{kernel.id}/restart-with-claims", status=200)
        assert [c["name"] for c in restart["claims"]] == [ours["name"]]
        moved = await api.call("POST", f"/claims/{ours['name']}/move", status=200)
        [ours] = moved["claims"]  # the same again, the old one released
        await api.call("POST", f"/claims/{mine['name']}/move", status=400)  # of no kernel
        await api.call("DELETE", f"/claims/{mine['name']}", status=204)
        await a_run(api, app)
        await kernel_asks(api, app.kernel_secret)

        await every_error(api, mine["name"], theirs.name)

    operations = {
        f"{method.upper()} {path}"
        for path, item in SPEC["paths"].items()
        for method in item
        if method != "parameters"
    }
    succeeded = {op for op, code in api.seen if code < 300}
    assert succeeded == operations, f"never answered with success: {operations - succeeded}"


async def test_an_unauthenticated_call_answers_with_the_error_schema(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str
) -> None:
    r = await http_server_client.fetch(f"{jp_base_url}dra/api/devices", raise_error=False)
    assert r.code in {int(c) for c in SPEC["paths"]["/devices"]["get"]["responses"]}
    validator({"$ref": REF + "Error"}).validate(json.loads(r.body))


# Request bodies next to what the server does with them: the spec allows what the server
# takes, and the server refuses (400) these bodies that the spec refuses.
TAKEN = [
    {"gpu": "all"},
    {"gpu": 2, "same": "pcieRoot", "lease": 3600, "timeout": 0, "name": "spec-ok"},
    {"device_class": "gpu.nvidia.com", "count": "all"},
    {"alternatives": [{"gpu": 9}, {"gpu": 1}], "timeout": "0s"},
]
REFUSED = [
    {"gpu": 0},
    {"gpu": 33},
    {"gpu": "two"},
    {"count": "many"},
    {"gpu": True},
    {"bogus": 1},
    {"alternatives": [{"gpu": 1}] * 9},
    [{"gpu": 1}],
    {"gpu": 1, "model": "H" * 65},
    {"gpu": 1, "lease": 2592001},
    {"gpu": 1, "lease": "1" * 65},
    {"gpu": 1, "timeout": 86401},
    {"gpu": 1, "name": "n" * 254},
    {"gpu": 1, "selector": "true || " * 1300 + "true"},
]


async def test_the_spec_allows_the_bodies_the_server_takes(jp_fetch: Fetch) -> None:
    api = Contract(jp_fetch)
    for body in TAKEN:
        claim = await api.call("POST", "/claims", body, status=201)  # validates the body too
        await api.call("DELETE", f"/claims/{claim['name']}", status=204)


async def test_the_server_refuses_bodies_the_spec_refuses(jp_fetch: Fetch) -> None:
    api = Contract(jp_fetch)
    schema = SPEC["paths"]["/claims"]["post"]["requestBody"]["content"]["application/json"]
    check = validator(schema["schema"])
    for body in REFUSED:
        assert not check.is_valid(body), body
        await api.call("POST", "/claims", body, status=400)

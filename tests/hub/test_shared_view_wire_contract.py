"""The shared view's contract written once: ``specification/shared-view-api.yml`` is the
source, and the TypedDicts the view answers with and a real view's answers (over loopback,
on counts made here: :func:`dra_jupyter.hub.sharedview.make_server`) must agree with it, as
tests/server/test_wire_contract.py holds the server's API to ``dra-rest-api.yml``.

* Each component schema has its TypedDict (the table ``SCHEMAS``), with the same fields,
  the same required ones and the same types.
* Every operation of the spec is called; each answer's status is one the spec lists for
  the operation, its body validates against the spec's schema with no field the schema
  does not describe, and every status the spec lists is seen.
"""

from __future__ import annotations

import json
import re
import threading
import typing
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_jupyter.errors import UnavailableError
from dra_jupyter.hub.formwire import ChoiceModel, ExplainAsk, Explained, SharedChoices, explain_ask
from dra_jupyter.hub.sharedview import Choosing, make_server
from dra_jupyter.inventory import simulated
from dra_jupyter.kube.sharedview import HeldRow, SharedDevices
from dra_jupyter.server.models import ErrorModel, KernelAsk, PossibleModel
from dra_jupyter.types.shapes import ShapeCount
from tests.hub import test_shared_view_answers as answers
from tests.hub.test_explain_view import reader, spawn_claim
from tests.hub.test_form_view import Counts as ViewCounts
from tests.server.test_wire_contract import (
    python_shape,
    required_fields,
    spec_shape,
    validator,
)

SPEC_PATH = Path(__file__).parents[2] / "specification" / "shared-view-api.yml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
PREFIX = "/services/dra-devices/"
OWN = "the-views-own-token"

SCHEMAS: dict[str, type] = {
    "Error": ErrorModel,
    "SharedDevices": SharedDevices,
    "ShapeCount": ShapeCount,
    "HeldRow": HeldRow,
    "KernelAsk": KernelAsk,
    "Possible": PossibleModel,
    "SharedChoices": SharedChoices,
    "Choice": ChoiceModel,
    "ExplainAsk": ExplainAsk,
    "Explained": Explained,
}


def test_every_schema_has_its_typeddict() -> None:
    assert set(SCHEMAS) == set(SPEC["components"]["schemas"])
    assert len(set(SCHEMAS.values())) == len(SCHEMAS)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_typeddict_has_the_schemas_fields_and_types(name: str) -> None:
    schema = SPEC["components"]["schemas"][name]
    cls = SCHEMAS[name]
    hints = typing.get_type_hints(cls, include_extras=True)
    properties: dict[str, Any] = schema["properties"]
    assert set(hints) == set(properties), f"{name}: fields"
    assert required_fields(cls) == set(schema.get("required", ())), f"{name}: required"
    for field, prop in properties.items():
        where = f"{name}.{field}"
        got = python_shape(hints[field], where, SCHEMAS)
        assert got == spec_shape(prop, where), (
            f"{where}: {hints[field]} in code, {prop} in the spec"
        )


class Counts(ViewCounts):
    """What the view answers from: :class:`answers.Counts`'s rows for ``api/devices``, a
    bundled inventory for ``api/choices``; ``problem``: both unsynced."""

    def __init__(self) -> None:
        super().__init__(simulated.load("h200-8x"), [])
        self.devices = answers.Counts()
        self.reader = reader([])  # what api/explain reads

    def answer(self, user: str) -> SharedDevices:
        if self.problem is not None:
            raise UnavailableError(self.problem)
        return self.devices.answer(user)


@pytest.fixture
def view() -> Iterator[tuple[str, Counts]]:
    counts = Counts()
    server = make_server(
        ("127.0.0.1", 0),
        counts,  # type: ignore[arg-type]
        answers.USERS.get,
        PREFIX,
        answers.ask,
        choose=Choosing(counts),  # type: ignore[arg-type]
        own_token=OWN,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{PREFIX}", counts
    finally:
        server.shutdown()
        server.server_close()


def operation_of(method: str, path: str) -> tuple[str, dict[str, Any]]:
    template = "/" + path.split("?", 1)[0]
    item = SPEC["paths"].get(template) or {}
    assert method.lower() in item, f"{method} {template}: no operation of the spec"
    return f"{method} {template}", item[method.lower()]


def call(
    seen: set[tuple[str, int]],
    url: str,
    method: str,
    path: str,
    token: str | None,
    body: bytes | None = None,
) -> int:
    operation, spec = operation_of(method, path)
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            status, raw = int(r.status), r.read()
    except urllib.error.HTTPError as error:
        with error:
            status, raw = error.code, error.read()
    responses = {int(code): answer for code, answer in spec["responses"].items()}
    assert status in responses, f"{operation} answered {status}, which the spec does not list"
    answer = responses[status]
    if "$ref" in answer:
        answer = SPEC["components"]["responses"][answer["$ref"].rsplit("/", 1)[-1]]
    schema = answer["content"]["application/json"]["schema"]
    validator(schema, spec=SPEC).validate(json.loads(raw))
    seen.add((operation, status))
    return status


def test_every_operation_answers_as_the_spec_says(view: tuple[str, Counts]) -> None:
    url, counts = view
    seen: set[tuple[str, int]] = set()
    ask = json.dumps({"request": {"gpu": 1}, "name": ""}).encode()
    never = json.dumps({"request": {"gpu": 9}, "name": ""}).encode()
    explain = json.dumps(explain_ask("team-a", spawn_claim({"gpu": 9}), {"gpu": 9})).encode()
    for token in (None, "made-up"):
        call(seen, url, "GET", "api/devices", token)
        call(seen, url, "GET", "api/choices", token)
        call(seen, url, "POST", "api/possible", token, ask)
        call(seen, url, "POST", "api/explain", token, explain)
    assert call(seen, url, "GET", "api/devices", "alice-token") == 200
    assert call(seen, url, "GET", "api/choices?namespace=team-a", OWN) == 200
    assert call(seen, url, "GET", "api/choices", "alice-token") == 200
    assert call(seen, url, "POST", "api/possible", "alice-token", ask) == 200
    assert call(seen, url, "POST", "api/possible", "alice-token", never) == 200
    assert call(seen, url, "POST", "api/possible", "alice-token", b"[]") == 400
    assert call(seen, url, "POST", "api/possible", "alice-token", b"x" * 70_000) == 413
    assert call(seen, url, "POST", "api/explain", "alice-token", explain) == 403
    assert call(seen, url, "POST", "api/explain", OWN, explain) == 200
    assert call(seen, url, "POST", "api/explain", OWN, b"[]") == 400
    assert call(seen, url, "POST", "api/explain", OWN, b"x" * 70_000) == 413
    counts.problem = "the shared view's watches of the cluster are not synced"
    for path in ("api/devices", "api/choices"):
        assert call(seen, url, "GET", path, "alice-token") == 503
    assert call(seen, url, "POST", "api/explain", OWN, explain) == 503
    listed = {
        (f"{method.upper()} {path}", int(code))
        for path, item in SPEC["paths"].items()
        for method, operation in item.items()
        for code in operation["responses"]
    }
    unseen = listed - seen
    # api/possible answers 503 only where the hub cannot say who a token is of (HubIdentity)
    assert unseen == {("POST /api/possible", 503)}, unseen
    assert all(re.fullmatch(r"/api/\w+", p) for p in SPEC["paths"])

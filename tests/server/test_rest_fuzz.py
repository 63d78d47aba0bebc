"""Bad input never crashes the REST API: every answer under ``/dra/api/`` is JSON, never a
5xx for a bad request, and no bad request leaks a device or breaks the next reader.

One real ``jupyter server`` per module (a separate process, as a user starts it, on a Unix
socket: no port to race for), with its own ledger and the simulated h200-8x; requests are
sent as raw HTTP (``http.client``), so bodies can be any bytes and headers can lie.

First the cases of issue #18 as examples; then the properties (hypothesis) over mutated
bodies of every POST route, raw byte bodies, and path segments. After every example
``GET /dra/api/claims`` must parse with a strict JSON parser (no NaN, no Infinity) and the
devices the ledger holds must be those of the claims listed. ``make test`` runs a small
derandomized set; ``make fuzz`` (``HYPOTHESIS_PROFILE=fuzz``) many more random ones.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from dra_jupyter.local.ledger import Ledger
from tests.fuzzing import fuzz_settings
from tests.helpers import running
from tests.server.test_wire_contract import REF, validator

ERROR = validator({"$ref": REF + "Error"})  # closed: no field the spec does not describe
SOCKET_DIR = "/tmp" if Path("/tmp").is_dir() else None  # a Unix socket's path: ~100 bytes at most
START_SECONDS = 60.0  # how long the server may take to answer before the test fails
MAX_MESSAGE = 1000  # an error's one line is at most this long: values in it are cut


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the server's Unix socket. ``one_write``: the request goes out in one write,
    headers and body, when its answer is asked for (as a browser sends a small one):
    http.client writes the body after the headers, and a server that refuses the request
    from its headers (authentication first) answers and closes the connection, which a
    body written after that meets as a broken pipe."""

    def __init__(self, path: str, timeout: float, *, one_write: bool = False) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path
        self._held: list[bytes] | None = [] if one_write else None

    def send(self, data: Any) -> None:
        if self._held is not None and isinstance(data, bytes):
            self._held.append(data)
        else:
            super().send(data)

    def getresponse(self) -> http.client.HTTPResponse:
        if self._held:
            held, self._held = b"".join(self._held), []
            super().send(held)
        return super().getresponse()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body, parsed strictly: NaN and Infinity are no JSON."""
        return json.loads(self.body, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} in an answer is not JSON (a browser's JSON.parse refuses it)")


@dataclass
class Server:
    sock: Path
    token: str
    ledger: Path
    log: Path

    def connection(self, timeout: float = 60, *, one_write: bool = False) -> _UnixConnection:
        return _UnixConnection(str(self.sock), timeout, one_write=one_write)

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        token: bool = True,
    ) -> Reply:
        """One request on a new connection, in one write; ``path`` is under the server's
        root."""
        conn = self.connection(one_write=True)
        try:
            sent = {"Content-Type": "application/json", **(headers or {})}
            if token:
                sent["Authorization"] = f"token {self.token}"
            conn.request(method, path, body=body, headers=sent)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def post(self, path: str, payload: Any) -> Reply:
        return self.call("POST", path, json.dumps(payload).encode())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``jupyter server`` with the extension, its own ledger and the simulated h200-8x."""
    tmp = tmp_path_factory.mktemp("rest")
    short = Path(tempfile.mkdtemp(prefix="dra-rest-", dir=SOCKET_DIR))  # AF_UNIX: a short path
    sock = short / "server.sock"
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "rt"))
    argv = [
        sys.executable, "-m", "jupyter_server", "--no-browser",
        f"--ServerApp.sock={sock}", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp}",
        f"--DRAExtensionApp.ledger={tmp / 'ledger.sqlite'}",
        "--DRAExtensionApp.inventory=h200-8x", "--DRAExtensionApp.metrics_interval=0",
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    found = Server(sock, token, tmp / "ledger.sqlite", tmp / "server.log")
    try:
        with running(
            argv,
            log=found.log,
            ready=lambda: found.call("GET", "/dra/api/devices").status == 200,
            env=env,
            wait=START_SECONDS,
            what="jupyter server",
        ):
            yield found
    finally:
        shutil.rmtree(short, ignore_errors=True)


def error_line(reply: Reply) -> str:
    """The answer is an error of the spec's shape, JSON, with a one-line message."""
    assert reply.headers.get("content-type", "").startswith("application/json"), reply
    document = reply.json()
    ERROR.validate(document)
    message: str = document["message"]
    assert "\n" not in message and len(message) <= MAX_MESSAGE, message[:2000]
    return message


def check_invariants(server: Server) -> None:
    """What every answer leaves: GET claims is strict JSON, and the ledger holds the
    devices of the claims listed, no other."""
    listed = server.call("GET", "/dra/api/claims")
    assert listed.status == 200, listed
    claims = listed.json()["claims"]
    held = sorted(
        key for record in Ledger(server.ledger).read_claims() for key in record.device_keys
    )
    assert held == sorted(d for c in claims for d in c["devices"])


def release_all(server: Server) -> None:
    for claim in server.call("GET", "/dra/api/claims").json()["claims"]:
        r = server.call("DELETE", f"/dra/api/claims/{claim['name']}")
        assert r.status == 204, r


@pytest.fixture
def api(server: Server) -> Iterator[Server]:
    """The module's server, with no claim before and after the test."""
    release_all(server)
    yield server
    check_invariants(server)
    release_all(server)


# --- the cases of issue #18 ---------------------------------------------------------------------

DIGITS_400 = "9" * 400


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"gpu": 1, "lease": [60]}', "lease: expected a duration"),
        (b'{"gpu": 1, "lease": {"h": 1}}', "lease: expected a duration"),
        (f'{{"gpu": 1, "lease": {DIGITS_400}}}'.encode(), "lease: "),
        (f'{{"gpu": 1, "lease": "{DIGITS_400}"}}'.encode(), "lease: "),
        (b'{"gpu": 1, "timeout": [0]}', "timeout: expected a duration"),
        (f'{{"gpu": 1, "timeout": {DIGITS_400}}}'.encode(), "timeout: "),
        (b'{"gpu": 1, "name": "\xff\xfe"}', "not UTF-8"),
        ('{"gpu": 1}'.encode("utf-16"), "not UTF-8"),
        ('{"gpu": 1}'.encode("utf-16-le"), "not UTF-8"),
    ],
    ids=[
        "lease-list",
        "lease-object",
        "lease-400-digits",
        "lease-400-digit-string",
        "timeout-list",
        "timeout-400-digits",
        "not-utf8",
        "utf16-bom",
        "utf16-no-bom",
    ],
)
def test_bad_bodies_are_400_with_one_line(api: Server, body: bytes, words: str) -> None:
    r = api.call("POST", "/dra/api/claims", body)
    assert r.status == 400, r
    assert words in error_line(r)


def test_metrics_history_of_5000_digits(api: Server) -> None:
    r = api.call("GET", "/dra/api/metrics?history=" + "9" * 5000)
    assert r.status == 200, r  # more than is kept: all that is kept
    assert all(isinstance(d["history"]["time"], list) for d in r.json()["devices"])
    for bad in ("-1", "1e3", "%D9%A1", "x" * 5000):
        r = api.call("GET", f"/dra/api/metrics?history={bad}")
        assert r.status == 400, (bad, r)
        assert "history must be a whole number" in error_line(r)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("lease", "NaN", "lease: "),
        ("lease", "Infinity", "lease: "),
        ("lease", "-Infinity", "lease: "),
        ("lease", "-1", "lease: must be more than 0, got -1"),
        ("lease", "0", "lease: must be more than 0"),
        ("lease", "1e300", "lease: "),
        ("lease", "1e400", "lease: "),
        ("lease", '"999999999999999999999d"', "lease: "),
        ("lease", '"1000000000000d"', "lease: "),
        ("lease", '"31d"', "lease: "),
        ("lease", "2592001", "lease: "),
        ("timeout", "NaN", "timeout: "),
        ("timeout", "Infinity", "timeout: "),
        ("timeout", "1e300", "timeout: "),
        ("timeout", '"25h"', "timeout: "),
    ],
)
def test_leases_and_timeouts_are_finite_and_bounded(
    api: Server, field: str, value: str, words: str
) -> None:
    r = api.call("POST", "/dra/api/claims", f'{{"gpu": 1, "{field}": {value}}}'.encode())
    assert r.status == 400, r
    line = error_line(r)
    assert line.startswith(words) or f": {words}" in line, line
    if value not in ("-1", "-Infinity", "0"):
        assert ("30d" if field == "lease" else "24h") in line or "not JSON" in line, line


def test_the_longest_lease_is_taken_and_answered_as_json(api: Server) -> None:
    r = api.post("/dra/api/claims", {"gpu": 1, "lease": "30d"})
    assert r.status == 201, r
    claim = r.json()
    assert claim["lease_expires"] - claim["created"] == pytest.approx(30 * 86400)


@pytest.mark.parametrize("length", [50 * 2**20, 10**12, 10**40], ids=["50MiB", "1TB", "40-digits"])
def test_a_50mb_model_is_refused_before_it_is_read(api: Server, length: int) -> None:
    """The size is known from Content-Length: the server answers without reading the body
    (here it is never sent), and a GET right after is answered; beyond jupyter_server's
    own limit (max_body_size, 512 MiB) too."""
    conn = api.connection()
    try:
        conn.putrequest("POST", "/dra/api/claims")
        conn.putheader("Authorization", f"token {api.token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 413
        line = error_line(Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()))
    finally:
        conn.close()
    assert "256 KiB" in line
    assert api.call("GET", "/dra/api/claims").status == 200


def test_a_large_body_sent_in_chunks_is_refused(api: Server) -> None:
    """Without Content-Length the body is counted as it arrives (what is over the limit is
    dropped), then refused."""
    conn = api.connection()
    try:
        conn.putrequest("POST", "/dra/api/claims")
        conn.putheader("Authorization", f"token {api.token}")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        pieces = [b'{"gpu": 1, "model": "', *[b"x" * 2**18] * 8, b'"}']
        for piece in pieces:
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
        r = conn.getresponse()
        assert r.status == 413
        line = error_line(Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()))
    finally:
        conn.close()
    assert "256 KiB" in line


def test_a_body_of_50mb_in_chunks_is_not_read_to_its_end(api: Server) -> None:
    """Beyond 16 times the limit the server answers at once and closes the connection: the
    client cannot send the rest."""
    conn = api.connection()
    try:
        conn.putrequest("POST", "/dra/api/claims")
        conn.putheader("Authorization", f"token {api.token}")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        chunk = b"%x\r\n%s\r\n" % (2**20, b"x" * 2**20)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(50):
                conn.send(chunk)
    finally:
        conn.close()
    assert api.call("GET", "/dra/api/claims").status == 200


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"gpu": 1, "model": "H" * 65}, "model: at most 64 characters"),
        ({"gpu": 1, "name": "n" * 254}, "name: at most 253 characters"),
        ({"gpu": 1, "selector": "true || " * 2000 + "true"}, "selector: at most 10240 bytes"),
        ({"alternatives": [{"gpu": 1}] * 9}, "alternatives: at most 8"),
        ({"gpu": 1, "memory": "8" * 65}, "memory: at most 64 characters"),
        ({"gpu": 1, "same": "s" * 254}, "same: at most 253 characters"),
        ({"gpu": 1, "kernel_id": "k" * 254}, "kernel_id: at most 253 characters"),
    ],
    ids=["model", "name", "selector", "alternatives", "memory", "same", "kernel_id"],
)
def test_fields_have_bounded_sizes(api: Server, payload: Any, words: str) -> None:
    r = api.post("/dra/api/claims", payload)
    assert r.status == 400, r
    assert words in error_line(r)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"gpu": 1.5}, "gpu must be a positive number of devices"),
        ({"gpu": [1]}, "gpu must be a positive number of devices"),
        ({"gpu": 10**40}, "exceeds the limit of 32 devices"),
        ({"model": ["H200"]}, "model: expected a string"),
        ({"model": {"a": 1}}, "model: expected a string"),
        ({"same": 1, "gpu": 2}, "same: expected a string"),
        ({"device_class": None}, "device_class: expected a string"),
        ({"name": 5, "gpu": 1}, "name: expected a string"),
        ({"kernel_id": [], "gpu": 1}, "kernel_id: expected a string"),
        ({"alternatives": {"gpu": 1}}, "alternatives: expected a list"),
        ({"alternatives": [5]}, "alternatives[0]: expected an object"),
        ({"alternatives": [{"model": 5}]}, "alternatives[0].model: expected a string"),
        ({"alternatives": [{"same": "pcieRoot"}]}, "unknown keyword 'same'"),
    ],
)
def test_any_wrong_type_is_400(api: Server, payload: Any, words: str) -> None:
    r = api.post("/dra/api/claims", payload)
    assert r.status == 400, r
    assert words in error_line(r)


def test_a_nested_selector_is_refused_in_words(api: Server) -> None:
    selector = "(" * 99 + "true" + ")" * 99
    r = api.post("/dra/api/claims", {"gpu": 1, "selector": selector})
    assert r.status == 400, r
    line = error_line(r)
    assert "nests more than 96 levels" in line, line
    assert "ParseError" not in line and "Recursion limit" not in line


@pytest.mark.parametrize(
    ("method", "path", "status", "words"),
    [
        ("GET", "/dra/api/claims/Upper", 400, "DNS subdomain"),
        ("DELETE", "/dra/api/claims/Upper", 400, "DNS subdomain"),
        ("POST", "/dra/api/claims/Upper/keep", 400, "DNS subdomain"),
        ("GET", "/dra/api/claims/" + "a" * 300, 400, "longer than 253 characters"),
        ("GET", "/dra/api/claims/a%20b", 400, "DNS subdomain"),
        ("GET", "/dra/api/kernels/no.such.kernel!/claims", 404, "is not running"),
        ("GET", "/dra/api/nope", 404, "no such endpoint"),
        ("GET", "/dra/api/", 404, "no such endpoint"),
        ("GET", "/dra/api", 404, "no such endpoint"),
        ("GET", "/dra/api/claims/x/y/z", 404, "no such endpoint"),
        ("POST", "/dra/api/nope", 404, "no such endpoint"),
        ("PUT", "/dra/api/claims", 405, "this endpoint answers GET and POST only"),
        ("PATCH", "/dra/api/devices", 405, "this endpoint answers GET only"),
        ("DELETE", "/dra/api/claims", 405, "answers GET and POST only"),
        ("POST", "/dra/api/devices", 405, "answers GET only"),
        ("GET", "/dra/api/claims/%ff", 400, "is not a DNS subdomain"),
        ("PUT", "/dra/api/claims/x", 405, "answers GET and DELETE only"),
        ("POST", "/dra/api/runs/Upper/cancel", 400, "is not one a run can have"),
        ("POST", "/dra/api/runs/nope/cancel", 404, "no run nope of yours"),
        ("GET", "/dra/api/runs/nope/logs", 404, "no run nope of yours"),
        ("GET", "/dra/api/runs/nope/logs?tail=" + "9" * 5000, 400, "tail must be a whole"),
        ("DELETE", "/dra/api/runs", 405, "answers GET only"),
        ("GET", "/dra/api/runs/nope/cancel", 405, "answers POST only"),
    ],
)
def test_everything_under_the_prefix_answers_json(
    api: Server, method: str, path: str, status: int, words: str
) -> None:
    r = api.call(method, path, b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert r.status == status, r
    assert words in error_line(r)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/dra/api/claims/Upper"),
        ("GET", "/dra/api/nope"),
        ("PUT", "/dra/api/claims"),
        ("POST", "/dra/api/claims"),
        ("GET", "/dra/api/kernels/x!/claims"),
        ("GET", "/dra/api/metrics?history=" + "9" * 5000),
    ],
)
def test_authentication_comes_first(server: Server, method: str, path: str) -> None:
    r = server.call(method, path, b"{}" if method in ("POST", "PUT") else None, token=False)
    assert r.status == 403, r
    error_line(r)


def test_a_huge_body_without_a_token_is_refused_before_it_is_read(server: Server) -> None:
    conn = server.connection()
    try:
        conn.putrequest("POST", "/dra/api/claims")
        conn.putheader("Content-Length", str(50 * 2**20))
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 403
    finally:
        conn.close()


def test_an_explanation_of_many_lines_is_answered_as_one(api: Server) -> None:
    """Found by the fuzzing: the allocator explains per node, on lines of their own."""
    r = api.post("/dra/api/claims", {"gpu": 3, "same": "pcieRoot"})
    assert r.status == 422, r
    line = error_line(r)
    assert "can never be met" in line and "PCIe roots: node gpu-node-1: " in line, line


def test_a_number_of_5000_digits_is_refused_in_words(api: Server) -> None:
    r = api.call("POST", "/dra/api/claims", b'{"gpu": ' + b"9" * 5000 + b"}")
    assert r.status == 400, r
    assert "a number has more than 4300 digits" in error_line(r)


def test_no_answer_is_ever_non_finite(api: Server) -> None:
    """The claims and metrics of a server answer strict JSON."""
    assert api.post("/dra/api/claims", {"gpu": 1, "lease": 3600.5}).status == 201
    for path in ("/dra/api/claims", "/dra/api/devices", "/dra/api/metrics?history=3"):
        r = api.call("GET", path)
        assert r.status == 200
        r.json()


# --- the properties ----------------------------------------------------------------------------

VALID_BODIES: list[dict[str, Any]] = [
    {"gpu": 1},
    {"gpu": 2, "same": "pcieRoot", "lease": "1h"},
    {"gpu": 1, "model": "H200", "memory": "80Gi", "timeout": 0},
    {"selector": 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"', "count": 1},
    {"alternatives": [{"gpu": 9}, {"gpu": 1, "model": "h200"}], "timeout": "0s"},
    {"device_class": "gpu.nvidia.com", "count": 2, "distinct": "pcieRoot"},
    {"gpu": 1, "name": "fuzz-claim", "lease": 60},
    {"mig": "3g.71gb"},
    {"gpu": "all"},
]
KEYS = [
    "gpu", "tpu", "mig", "count", "memory", "model", "selector", "share", "device_class",
    "same", "distinct", "alternatives", "name", "lease", "timeout", "kernel_id",
]  # fmt: skip

numbers = st.one_of(
    st.integers(),
    st.builds(
        lambda digits, sign: sign * 10**digits, st.integers(19, 500), st.sampled_from([1, -1])
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 32, 33, -1, 2**63, 2**64, 1e300, 0.5, 2592000, 2592001, 86401]),
)
texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "all",
            "1h",
            "30d",
            "31d",
            "NaN",
            "inf",
            "1e300",
            "999999999999999999d",
            "0s",
            "80Gi",
            "H200",
            "pcieRoot",
            "Upper",
            "a" * 300,
            "\x00",
            "\ud7ff",
            "😀" * 20,
            "true",
            "(" * 99 + "true" + ")" * 99,
            "device.attributes",
            "gpu.nvidia.com",
        ]
    ),
    st.text(min_size=60, max_size=300),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of ``inner`` (a def: hypothesis reads its source to see that it
    recurses, which a multi-line lambda defeats)."""
    return st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)


values = st.recursive(scalars, containers, max_leaves=12)


@st.composite
def mutated_body(draw: st.DrawFn) -> Any:
    """A valid body of POST claims with a few keys set to anything, dropped, or added."""
    body: Any = json.loads(json.dumps(draw(st.sampled_from(VALID_BODIES))))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["set", "set", "drop", "alternative", "whole", "wrap"]))
        if action == "set":
            key = draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=12)))
            if isinstance(body, dict):
                body[key] = draw(values)
        elif action == "drop" and isinstance(body, dict) and body:
            body.pop(draw(st.sampled_from(sorted(body))))
        elif action == "alternative" and isinstance(body, dict):
            alt = {draw(st.sampled_from(KEYS)): draw(values)}
            body["alternatives"] = [alt, *draw(st.lists(st.just({"gpu": 1}), max_size=9))]
        elif action == "whole":
            body = draw(values)
        elif action == "wrap":
            body = [body] if draw(st.booleans()) else {"body": body}
    return body


def encode(body: Any, style: str) -> bytes:
    """JSON text of ``body``, the way a careless client might write it."""
    text = json.dumps(body, allow_nan=True, ensure_ascii=style == "ascii")
    if style == "utf-16":
        return text.encode("utf-16")
    return text.encode("utf-8", "surrogatepass")


def check_answer(server: Server, reply: Reply) -> None:
    """Never a 5xx; always JSON; an error of the spec's shape with a one-line message; a
    claim made is released again."""
    assert reply.status < 500, (reply, server.log.read_text()[-3000:])
    event(f"status {reply.status}")
    if reply.status in (201, 200):
        claim = reply.json()
        if reply.status == 201:
            assert all(math.isfinite(claim[k]) for k in ("created", "last_activity"))
            gone = server.call("DELETE", f"/dra/api/claims/{claim['name']}").status
            # a lease of a fraction of a second may have ended already
            assert gone == 204 or (gone == 404 and claim["lease_expires"] is not None), gone
    elif reply.status != 204:
        error_line(reply)
    check_invariants(server)


@fuzz_settings(120)
@given(body=mutated_body(), style=st.sampled_from(["ascii", "utf-8", "utf-8", "utf-16"]))
def test_mutated_claim_bodies(server: Server, body: Any, style: str) -> None:
    check_answer(server, server.call("POST", "/dra/api/claims", encode(body, style)))


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(VALID_BODIES)
    .map(lambda b: json.dumps(b).encode())
    .flatmap(
        lambda b: st.integers(0, len(b)).map(lambda n: b[:n])  # cut short
    ),
    st.sampled_from(["[" * 5000, '{"a":' * 5000, "1" * 5000, '"' + "\\" * 3, "\ufeff{}"]).map(
        str.encode
    ),
    st.sampled_from(VALID_BODIES).flatmap(
        lambda b: st.sampled_from(["utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252"]).map(
            lambda enc: json.dumps({**b, "model": "Ä"}, ensure_ascii=False).encode(enc)
        )
    ),
)


@fuzz_settings(60)
@given(
    body=raw_bodies,
    target=st.sampled_from(
        ["/dra/api/claims", "/dra/api/claims/fuzz/keep", "/dra/api/kernels/k/restart-with-claims"]
    ),
)
def test_raw_byte_bodies(server: Server, body: bytes, target: str) -> None:
    check_answer(server, server.call("POST", target, body))


def percent(raw: bytes) -> str:
    """Every byte percent-encoded: any bytes as a path segment."""
    return "".join(f"%{x:02X}" for x in raw)


segments = st.one_of(
    st.text(max_size=30).map(lambda s: percent(s.encode("utf-8", "surrogatepass"))),
    st.from_regex(r"[A-Za-z0-9._~-]{1,300}", fullmatch=True),
    st.binary(min_size=1, max_size=20).map(percent),
)


@fuzz_settings(60)
@given(
    segment=segments,
    route=st.sampled_from(
        [
            ("GET", "/dra/api/claims/{}"),
            ("DELETE", "/dra/api/claims/{}"),
            ("POST", "/dra/api/claims/{}/keep"),
            ("GET", "/dra/api/kernels/{}/claims"),
            ("POST", "/dra/api/kernels/{}/restart-with-claims"),
            ("GET", "/dra/api/{}"),
            ("GET", "/dra/api/metrics?history={}"),
            ("GET", "/dra/api/metrics?device={}"),
            ("POST", "/dra/api/runs/{}/cancel"),
            ("GET", "/dra/api/runs/{}/logs"),
            ("GET", "/dra/api/runs/nope/logs?tail={}"),
        ]
    ),
)
def test_path_segments(server: Server, segment: str, route: tuple[str, str]) -> None:
    method, template = route
    body = b"{}" if method == "POST" else None
    reply = server.call(method, template.format(segment), body)
    assert reply.status != 200 or method == "GET", reply
    check_answer(server, reply)


def test_the_log_says_once_where_the_claims_are_kept(server: Server) -> None:
    """The server's log says which backend its claims live in, once at start (issue 42,
    item 15: it never said which backend, namespace and cluster the extension uses)."""
    log = server.log.read_text()
    line = f"dra_jupyter: claims are kept in the ledger {server.ledger} (8x NVIDIA H200"
    assert log.count(line) == 1, log[-2000:]

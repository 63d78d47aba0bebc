"""The JupyterLab extension's TypeScript unit tests (``labextension/test/*.test.ts``: the
model, the countdowns, busy, MIG grouping, error messages), compiled by ``tsc`` and run
by node's own test runner (``jlpm test``); node_modules is what ``make test`` installs.
And the event types of ``src/tokens.ts`` against the server's event schemas."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

LAB = Path(__file__).parents[2] / "labextension"
TSC = LAB / "node_modules" / "typescript" / "bin" / "tsc"


def test_the_typescript_unit_tests_pass() -> None:
    node = shutil.which("node")
    assert node, "the TypeScript tests need Node.js on the PATH (make test installs it)"
    assert TSC.exists(), f"{TSC} is missing: run make test (jlpm install in labextension/)"
    built = subprocess.run(
        [node, str(TSC), "--project", "tsconfig.test.json", "--pretty", "false"],
        cwd=LAB, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    ran = subprocess.run(
        [node, "--test", "--test-force-exit", "--test-reporter=tap", "build-test/test/"],
        cwd=LAB, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "# fail 0" in ran.stdout
    assert "# pass 0" not in ran.stdout  # the tests were found


EVENTS = Path(__file__).parents[2] / "dra_jupyter" / "server" / "events"
TOKENS = LAB / "src" / "tokens.ts"


def _interfaces(ts: str) -> dict[str, tuple[str, set[str]]]:
    """Each ``export interface`` of ``ts``: the schema file its doc comment names (its
    basename, '' when none) and its fields, with those of the interface it extends."""
    found: dict[str, tuple[str, set[str]]] = {}
    pattern = r"(/\*\*(?:(?!\*/).)*\*/\s*)?export interface (\w+)(?: extends (\w+))? \{(.*?)\n\}"
    for doc, name, base, body in re.findall(pattern, ts, flags=re.S):
        schema = re.search(r"dra_jupyter/server/events/(\w+\.json)", doc or "")
        fields = set(re.findall(r"^\s+(\w+)\??:", body, flags=re.M))
        fields |= found.get(base, ("", set()))[1]
        found[name] = (schema.group(1) if schema else "", fields)
    return found


def test_the_event_types_follow_the_servers_event_schemas() -> None:
    """tokens.ts's EVENTS name every event the server emits (its schemas), and each event's
    interface has the schema's required fields and no field the schema does not have."""
    ts = TOKENS.read_text()
    interfaces = _interfaces(ts)
    for path in sorted(EVENTS.glob("*.json")):
        schema = json.loads(path.read_text())
        assert f"${{EVENT_BASE}}/{path.stem}/v{schema['version']}`" in ts, path.name
        [(name, fields)] = [(n, f) for n, (s, f) in interfaces.items() if s == path.name]
        fields.discard("schema_id")  # the capsule's, not the event's data
        assert set(schema["required"]) <= fields, (name, set(schema["required"]) - fields)
        assert fields <= set(schema["properties"]), (name, fields - set(schema["properties"]))

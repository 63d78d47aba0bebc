"""The JupyterLab extension's TypeScript unit tests (``labextension/test/*.test.ts``: the
model, the countdowns, busy, MIG grouping, error messages), compiled by ``tsc`` and run
by node's own test runner (``jlpm test``); node_modules is what ``make test`` installs."""

from __future__ import annotations

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

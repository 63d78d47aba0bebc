"""``dra_jupyter.__version__`` is the installed distribution's version (pyproject.toml's,
through the package metadata), not a copy of it; a source tree that is not installed has
a fallback."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import dra_jupyter

ROOT = Path(__file__).parents[1]
PRINT_VERSION = "import sys, dra_jupyter; sys.stdout.write(dra_jupyter.__version__)"


def test_the_version_is_the_installed_distributions() -> None:
    assert dra_jupyter.__version__ == importlib.metadata.version("dra-jupyter")


def test_the_version_follows_the_distribution(tmp_path: Path) -> None:
    """With another version of the distribution first on the path, that one is reported."""
    dist = tmp_path / "dra_jupyter-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dra-jupyter\nVersion: 9.9.9\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run(
        [sys.executable, "-c", PRINT_VERSION], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "9.9.9"


def test_a_source_tree_that_is_not_installed_has_a_fallback_version() -> None:
    # -I -S: no site-packages and no PYTHONPATH, so no metadata of dra-jupyter anywhere
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); {PRINT_VERSION}"
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0+unknown"

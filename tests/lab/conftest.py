"""JupyterLab with the dra-jupyter JupyterLab extension built from ``labextension/``.

The extension JupyterLab loads is the build in ``dra_jupyter/labextension`` (``make
install`` and ``make test`` build it: ``jlpm build:prod``), found through
``--LabApp.extra_labextensions_path``, which comes before the installed extensions: the
page runs this checkout's extension even where another copy is installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.browser.conftest import Lab, browser, page, running_lab

__all__ = ["browser", "built_extension", "lab", "page"]

ROOT = Path(__file__).parents[2]
BUILD = ROOT / "dra_jupyter" / "labextension"
SOURCES = [ROOT / "labextension" / p for p in ("src", "schema", "style", "package.json")]
NAME = "dra-jupyter-labextension"


def _newest(path: Path) -> float:
    if path.is_file():
        return path.stat().st_mtime
    return max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=0.0)


@pytest.fixture(scope="session")
def built_extension(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A labextensions folder holding (a link to) this checkout's built extension."""
    entry = BUILD / "static" / "style.js"
    if not entry.exists():
        pytest.fail(f"{BUILD} is not built: run 'make test' (it builds labextension/)")
    if max(_newest(p) for p in SOURCES) > _newest(BUILD):
        pytest.fail(f"{BUILD} is older than labextension/: run 'make labextension'")
    folder = tmp_path_factory.mktemp("labextensions")
    (folder / NAME).symlink_to(BUILD, target_is_directory=True)
    return folder


def lab_argv(tmp: Path, extensions: Path, *extra: str) -> Sequence[str]:
    return [
        f"--LabApp.extra_labextensions_path={extensions}",
        f"--DRAExtensionApp.ledger={tmp / 'ledger.sqlite'}",
        "--DRAExtensionApp.inventory=h200-8x",
        "--DRAExtensionApp.check_interval=0.5",
        *extra,
    ]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, built_extension: Path) -> Iterator[Lab]:
    """JupyterLab with both extensions, a fresh ledger and the simulated h200-8x."""
    tmp = tmp_path_factory.mktemp("lab")
    with running_lab(tmp, lab_argv(tmp, built_extension)) as server:
        yield server

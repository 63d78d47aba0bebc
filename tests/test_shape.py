"""The shape of the package, guarded: the root holds roles, not features; no module passes
800 lines and no class about 400; README.md stays a front page. Each failure says where the
new thing belongs (docs/architecture.md, "Where a feature lives")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dra_jupyter"

# The roles at the package root (the root-layers contract of pyproject.toml orders them).
ROOT_MODULES = {
    "__init__",  # the public functions: dra.request, dra.run, ...
    "backends",  # the one place that knows the backend kinds
    "claimspec",  # keywords to a v1 ResourceClaim
    "durations",  # "10m", "2h" and leases
    "errors",  # the one error hierarchy
    "identity",  # who the user is, from what cannot be forged
    "objectfile",  # object files of a cluster (the CLI's -f)
    "outofservice",  # devices taken out under a claim, in its holder's words
    "runner",  # dra.run's launcher on one machine (python -m dra_jupyter.runner)
    "settings",  # the settings, from one source
    "tables",  # devices and claims as tables
    "verdicts",  # why a request can never be met, in the user's terms
    "version",
}
ROOT_PACKAGES = {
    "accounting", "allocator", "api", "cli", "hub", "inventory", "kernel", "kube", "local",
    "magics", "metrics", "model", "selectors", "server", "service", "sharing", "types",
    "widgets",
}  # fmt: skip

# Where a feature's new module goes (docs/architecture.md, "Where a feature lives").
HOMES = (
    "api/ (what serves only the Python API), kernel/ (what runs in a kernel's process), "
    "kube/kernels/ (GPU kernels in pods), kube/runs/ or local/ (a run's backend side), "
    "server/ (the Jupyter server), cli/ (a command), model/ (a v1 object, pure), "
    "allocator/ (the allocator, pure), types/ (what every backend shares)"
)
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 450  # "about 400": a class past it is split, not stretched
MAX_README_LINES = 250


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_root_holds_only_its_listed_roles() -> None:
    """A module or package new at the root is named with the folder it belongs in."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    new = sorted(f"dra_jupyter/{m}.py" for m in modules - ROOT_MODULES) + sorted(
        f"dra_jupyter/{p}/" for p in packages - ROOT_PACKAGES
    )
    assert not new, (
        f"{', '.join(new)}: new at the package root, which holds roles, not features; put "
        f"it in the folder of its feature: {HOMES}; a new role is added to ROOT_MODULES "
        "here and to the root-layers contract of pyproject.toml"
    )
    gone = sorted((ROOT_MODULES - modules) | (ROOT_PACKAGES - packages))
    assert not gone, f"{', '.join(gone)}: listed in tests/test_shape.py but not in dra_jupyter/"


def test_no_module_passes_800_lines() -> None:
    long = [
        f"{p.relative_to(ROOT)} has {n} lines"
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, (
        f"{'; '.join(long)} (over {MAX_MODULE_LINES}): split it by concern into modules of "
        "its folder (as api/ splits session, claim and runs)"
    )


def test_no_class_passes_about_400_lines() -> None:
    """About 400: a class that grows past 450 lines gives a concern of it a home."""
    long = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long.append(f"{path.relative_to(ROOT)}: {node.name} has {lines} lines")
    assert not long, (
        f"{'; '.join(long)} (over {MAX_CLASS_LINES}): give a concern of it a class or module "
        "of its own in the same folder, which it holds or calls"
    )


def test_the_readme_is_a_front_page() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (over {MAX_README_LINES}): it is a front page; move the "
        "detail to a page of docs/ and keep one line with its link"
    )

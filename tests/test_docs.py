"""The documentation's links and commands: every relative link in README.md, docs/*.md,
BENCHMARKS.md and CHANGELOG.md names a file or folder of the repository, and an
``#anchor`` a heading of the page it points into (GitHub's slugs); every ``make TARGET``
those pages name is a target of the Makefile; every page of docs/ is listed in its index;
the layers docs/architecture.md draws are the root-layers contract of pyproject.toml.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "BENCHMARKS.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)

FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the text may hold brackets of its own, one level
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s+(\S+)", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
MAKE = re.compile(r"(?:^|[\s(;&|])make((?:\s+[^\s#;&|)]+)+)")


def lines_outside_code(text: str) -> Iterator[tuple[int, str]]:
    """Numbered lines that are not in a fenced code block."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def code(text: str) -> Iterator[tuple[int, str]]:
    """Numbered pieces of code: the lines of fenced blocks, and each inline code span."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            yield number, line.split("#", 1)[0]  # a shell comment is prose
        else:
            for span in INLINE_CODE.finditer(line):
                yield number, span[2]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (no markup), lower case, without punctuation
    other than ``-`` and ``_``, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w: letters, digits and _, in any script
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated one gets ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in lines_outside_code(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    """The targets of a page's links and images outside code, with their line numbers."""
    for number, line in lines_outside_code(page.read_text(encoding="utf-8")):
        prose = INLINE_CODE.sub("", line)
        for match in LINK.finditer(prose):
            yield number, match[1]
        for match in REFERENCE.finditer(prose):
            yield number, match[1]


def link_problem(page: Path, target: str) -> str | None:
    """Why a relative link of ``page`` does not resolve, or None."""
    if EXTERNAL.match(target):
        return None
    path, _, anchor = target.partition("#")
    file = (page.parent / unquote(path)).resolve() if path else page
    if not file.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not file.exists():
        return f"{target}: no such file or folder"
    if anchor:
        if file.suffix != ".md":
            return f"{target}: an anchor into {file.name}, which is not Markdown"
        if unquote(anchor) not in anchors(file):
            return f"{target}: {file.relative_to(ROOT)} has no heading with that anchor"
    return None


def makefile_targets() -> set[str]:
    """The Makefile's targets, with its simple variables and ``$(addprefix ...)`` expanded."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    variables: dict[str, str] = {}
    for name, value in re.findall(r"^(\w+)\s*[:?]?=\s*(.*)$", text, re.M):
        variables.setdefault(name, value.strip())

    def expand(words: str) -> str:
        for _ in range(10):
            words = re.sub(
                r"\$\(addprefix ([^,()]*),([^()]*)\)",
                lambda m: " ".join(m[1] + w for w in m[2].split()),
                re.sub(r"\$\((\w+)\)", lambda m: variables.get(m[1], m[0]), words),
            )
        return words

    targets: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"^([^\t#=:][^#=:]*?):(?![=])", line)
        if match and "$(" not in (names := expand(match[1])):  # $(NODE): a path found at run time
            targets.update(names.split())
    return targets


def made(piece: str) -> Iterator[str]:
    """The targets of each ``make ...`` in a piece of code (variables and flags skipped)."""
    for match in MAKE.finditer(piece):
        for word in match[1].split():
            if "=" in word or word.startswith("-"):
                continue
            if not re.fullmatch(r"[\w.<>-]+", word):
                break  # the command goes on: `make test` is `...`, `make check` before ...
            yield word


def test_the_pages_exist() -> None:
    for page in PAGES:
        assert page.is_file(), f"{page.relative_to(ROOT)} is missing"


# (not "page": the browser tier's fixture of that name would make these tests browser tests)
@pytest.mark.parametrize("doc", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(doc: Path) -> None:
    problems = [
        f"{doc.relative_to(ROOT)}:{number}: {problem}"
        for number, target in links(doc)
        if (problem := link_problem(doc, target))
    ]
    assert problems == []


@pytest.mark.parametrize("doc", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_make_target_named_exists(doc: Path) -> None:
    targets = makefile_targets()
    problems = []
    for number, piece in code(doc.read_text(encoding="utf-8")):
        for target in made(piece):
            # a placeholder (`make test-<tier>`) stands for at least one target
            pattern = re.sub(r"<[^>]*>", r"[\\w-]+", re.escape(target))
            if not any(re.fullmatch(pattern, t) for t in targets):
                problems.append(f"{doc.relative_to(ROOT)}:{number}: make {target}")
    assert problems == [], f"not targets of the Makefile: {problems}"


def test_the_index_lists_every_page_of_docs() -> None:
    index = ROOT / "docs" / "README.md"
    listed = {(index.parent / target.partition("#")[0]).resolve() for _, target in links(index)}
    pages = set((ROOT / "docs").glob("*.md")) - {index}
    assert sorted(p.name for p in pages - listed) == []


def test_slugs_follow_github() -> None:
    assert slug("JupyterLab extension (`benchmarks/bench_lab.py`)") == (
        "jupyterlab-extension-benchmarksbench_labpy"
    )
    assert slug("A shared machine: the service") == "a-shared-machine-the-service"
    assert slug("JupyterHub on Kubernetes: KubeSpawner with DRA") == (
        "jupyterhub-on-kubernetes-kubespawner-with-dra"
    )
    assert slug("The [API](api.md) — in short") == "the-api--in-short"


def test_the_checks_catch_what_they_should() -> None:
    """A broken link, a missing anchor and an unknown target are each found."""
    index = ROOT / "docs" / "README.md"
    assert link_problem(index, "no-such-page.md") is not None
    assert link_problem(index, "../README.md#no-such-heading") is not None
    assert link_problem(index, "../README.md#two-commands") is None
    assert link_problem(index, "https://example.com/x.md#y") is None
    assert list(made("make check")) == ["check"]
    assert list(made("make fuzz-upstream N=10000")) == ["fuzz-upstream"]
    assert list(made("make lint typecheck layers pytest")) == [
        "lint", "typecheck", "layers", "pytest",
    ]  # fmt: skip
    assert "check" in makefile_targets()
    assert "test-kernel" in makefile_targets()
    assert "no-such-target" not in makefile_targets()


def test_benchmarks_speak_to_outside_readers() -> None:
    """BENCHMARKS.md names no issue of this project (`#13`, "issue 16"); another project's
    (`kubernetes/kubernetes#128980`) it may."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    ours = re.findall(r"(?<![\w/-])#\d+\b|\bissues? \d+", text, re.I)
    assert ours == []


def test_the_drawn_layers_are_the_checked_contract() -> None:
    """docs/architecture.md lists the root's layers as pyproject.toml's root-layers contract
    does, in the same order (``a | b`` and ``a : b`` as written there), and that contract is
    exhaustive and counts type-only imports."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "root-layers"]
    assert contract["exhaustive"] is True
    assert contract["containers"] == ["dra_jupyter"]
    assert config.get("exclude_type_checking_imports", False) is False
    text = (ROOT / "docs" / "architecture.md").read_text()
    marker = "<!-- the root-layers contract of pyproject.toml"
    block = text[text.index(marker) :].split("```")[1]
    drawn = [line.strip() for line in block.splitlines() if line.strip()]
    assert drawn == [re.sub(r"\s*([|:])\s*", r" \1 ", layer) for layer in contract["layers"]]

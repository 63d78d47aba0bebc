"""Reading and writing files of Kubernetes objects (multi-document YAML, JSON, or a List)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra_jupyter.errors import InvalidInputError, ObjectError

USED_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "Node")


@dataclass
class ObjectSet:
    """The objects of one file, sorted by kind; claims keep their file order."""

    classes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def allocated(self) -> list[dict[str, Any]]:
        return [c for c in self.claims if (c.get("status") or {}).get("allocation")]

    def pending_claims(self) -> list[dict[str, Any]]:
        pending = [c for c in self.claims if not (c.get("status") or {}).get("allocation")]
        if not pending:
            raise InvalidInputError(
                "the input has no ResourceClaim without status.allocation; add the claims to "
                "allocate (claims that carry status.allocation only mark devices as in use)"
            )
        return pending

    def add(self, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise ObjectError(where, "", f"is a {type(obj).__name__}, not a Kubernetes object")
        kind = obj.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in obj):
            for i, item in enumerate(obj.get("items") or []):
                self.add(item, f"{where}, items[{i}]")
            return
        targets = {
            "DeviceClass": self.classes,
            "ResourceSlice": self.slices,
            "ResourceClaim": self.claims,
            "Node": self.nodes,
        }
        if kind not in targets:
            raise ObjectError(
                where,
                "kind",
                f"{kind!r} is not used here",
                f"give only {', '.join(USED_KINDS)} objects (remove the others)",
            )
        targets[kind].append(obj)


def _documents(text: str, source: str) -> Iterator[Any]:
    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InvalidInputError(f"{source}{at}: not valid YAML: {problem}") from err


def load_objects(path: str) -> ObjectSet:
    """Load ``path`` ('-' for standard input) into an :class:`ObjectSet`."""
    if path == "-":
        text, source = sys.stdin.read(), "standard input"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidInputError(f"{path}: cannot read the file: {err.strerror}") from err
        source = path
    objects = ObjectSet()
    for index, doc in enumerate(_documents(text, source)):
        if doc is None:
            continue
        objects.add(doc, f"{source}, document {index + 1}")
    return objects


def dump_yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)

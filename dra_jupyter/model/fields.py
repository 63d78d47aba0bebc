"""The checks of the full parse: the fields of a wire-form object one by one, each
problem an :class:`~dra_jupyter.errors.ObjectError` naming the object and field path.

:class:`Ctx` knows which object is being read (``ResourceClaim default/nb-7``) and reads
one field's value at a time; :func:`check_kind` and :func:`read_metadata` read what
every object has (kind, apiVersion, metadata). Used by :mod:`dra_jupyter.model.parse`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from dra_jupyter.errors import ECHO_LIMIT, ObjectError, shown
from dra_jupyter.model import limits, recall
from dra_jupyter.model.limits import API_VERSION, INT64_MAX, INT64_MIN
from dra_jupyter.model.quantity import Quantity


def cut(text: str) -> str:
    """A name or key as a message shows it: at most ECHO_LIMIT characters, then ``…``."""
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "…"


class Ctx:
    """Where we are: the object being parsed, for error messages."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, problem: str, remedy: str = "") -> ObjectError:
        return ObjectError(self.where, path, problem, remedy)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
        if value is None:
            if required:
                raise self.fail(path, "is required")
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {type(value).__name__}")
        return value

    def seq(
        self, value: Any, path: str, max_items: int | None = None, remedy: str = ""
    ) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {type(value).__name__}")
        if max_items is not None and len(value) > max_items:
            raise self.fail(
                path,
                f"has {len(value)} entries, more than the limit of {max_items}",
                remedy or f"keep at most {max_items}",
            )
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str:
        if value is None or value == "":
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, not {type(value).__name__}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, not {shown(value)}")
        return value

    def integer(self, value: Any, path: str, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {shown(value)}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise self.fail(path, f"{shown(value)} is out of range for a 64-bit integer")
        return value

    def quantity(self, value: Any, path: str) -> Quantity:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.fail(path, f"must be a quantity such as 40Gi, not {shown(value)}")
        try:
            return recall.quantity(value)
        except ValueError as err:
            raise self.fail(path, str(err), "write a quantity such as 80Gi, 500m or 4") from err

    def name(self, value: Any, path: str, check: Callable[[str], str | None]) -> str:
        text = self.string(value, path, required=True)
        problem = check(text)
        if problem:
            suggestion = re.sub(r"[^a-z0-9.-]+", "-", text[:63].lower()).strip("-.") or "name"
            raise self.fail(path, problem, f"rename it, for example to {suggestion!r}")
        return text

    def unique(self, names: list[str], path: str, what: str) -> None:
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise self.fail(path, f"{what} {shown(n)} appears more than once")
            seen.add(n)


def read_metadata(obj: Mapping[str, Any], kind: str, *, namespaced: bool) -> tuple[Ctx, str, str]:
    meta = obj.get("metadata")
    if meta is None:
        raise ObjectError(kind, "metadata", "is missing", "every object needs metadata.name")
    if not isinstance(meta, Mapping):
        raise ObjectError(kind, "metadata", f"must be an object, not {type(meta).__name__}")
    name = meta.get("name")
    if name is None or name == "":
        raise ObjectError(kind, "metadata.name", "is missing")
    if not isinstance(name, str):
        raise ObjectError(kind, "metadata.name", f"must be a string, not {shown(name)}")
    namespace = ""
    if namespaced:
        namespace = Ctx(f"{kind} {cut(name)}").name(
            meta.get("namespace") or "default", "metadata.namespace", limits.dns_label_problem
        )
    ctx = Ctx(f"{kind} {namespace}/{cut(name)}" if namespaced else f"{kind} {cut(name)}")
    problem = limits.dns_subdomain_problem(name)
    if problem:
        raise ctx.fail("metadata.name", problem)
    return ctx, name, namespace


def _describe(obj: Mapping[str, Any], kind: str) -> str:
    """``ResourceClaim default/nb-7`` when the object has a name, else just the kind."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return kind
    name = cut(meta["name"])
    if kind == "ResourceClaim":
        namespace = meta.get("namespace") or "default"
        return f"{kind} {cut(namespace) if isinstance(namespace, str) else '?'}/{name}"
    return f"{kind} {name}"


def check_kind(obj: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ObjectError(kind, "", f"must be an object, not {type(obj).__name__}")
    got = obj.get("kind", kind)
    where = _describe(obj, kind)
    if got != kind:
        raise ObjectError(where, "kind", f"expected {kind}, got {shown(got)}")
    version = obj.get("apiVersion", API_VERSION)
    if kind != "Node" and version != API_VERSION:
        raise ObjectError(
            where,
            "apiVersion",
            f"{shown(version)} is not supported",
            f"convert it to {API_VERSION} (kubectl get -o yaml shows v1 since Kubernetes 1.34)",
        )
    return obj

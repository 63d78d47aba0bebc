"""Reading and writing files of Kubernetes objects (multi-document YAML, JSON, or a List).

A file is read within limits checked before the work they bound, so that no input can
crash the reader or keep it busy for long (docs/cli.md):

* at most :data:`MAX_FILE_BYTES` (16 MiB), checked before it is parsed;
* UTF-8 text (UTF-16 with a byte-order mark too, as PowerShell's ``>`` writes it);
* values nested at most :data:`MAX_DEPTH` levels deep, and at most :data:`MAX_VALUES`
  values per document, each YAML alias counted as often as it is used;
* integers of at most Python's ``int_max_str_digits`` (4,300) digits;
* only JSON values (strings, numbers, booleans, null, lists, maps), as Kubernetes reads
  YAML: timestamps stay strings, and tags such as ``!!binary`` or ``!!set`` are refused.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra_jupyter.errors import InvalidInputError, ObjectError, shown

USED_KINDS = ("DeviceClass", "ResourceSlice", "DeviceTaintRule", "ResourceClaim", "Node")

MAX_FILE_BYTES = 16 * 2**20
MAX_DEPTH = 100  # Kubernetes objects nest about 10 levels; opaque parameters a few more
MAX_VALUES = 2_000_000  # a 16 MiB file of DynamicMIG slices holds about 1.7 million

_SIZE_REMEDY = (
    "keep the objects of the nodes in question, e.g. kubectl get resourceslices "
    "--field-selector spec.nodeName=NODE -o yaml"
)


@dataclass
class ObjectSet:
    """The objects of one file, sorted by kind; claims keep their file order."""

    classes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    taint_rules: list[dict[str, Any]] = field(default_factory=list)  # DeviceTaintRules

    @property
    def allocated(self) -> list[dict[str, Any]]:
        return [c for c in self.claims if _allocation(c)]

    def pending_claims(self) -> list[dict[str, Any]]:
        pending = [c for c in self.claims if not _allocation(c)]
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
        if kind is None:
            raise ObjectError(
                where, "kind", "is missing", f"give each object its kind: {', '.join(USED_KINDS)}"
            )
        if not isinstance(kind, str):
            raise ObjectError(
                where, "kind", f"must be a string such as ResourceSlice, not {shown(kind)}"
            )
        if kind == "List" or (kind.endswith("List") and "items" in obj):
            items = obj.get("items")
            if items is not None and not isinstance(items, list):
                raise ObjectError(
                    where, "items", f"must be a list of objects, not {type(items).__name__}"
                )
            for i, item in enumerate(items or []):
                self.add(item, f"{where}, items[{i}]")
            return
        targets = {
            "DeviceClass": self.classes,
            "ResourceSlice": self.slices,
            "ResourceClaim": self.claims,
            "Node": self.nodes,
            "DeviceTaintRule": self.taint_rules,
        }
        if kind not in targets:
            raise ObjectError(
                where,
                "kind",
                f"{shown(kind)} is not used here",
                f"give only {', '.join(USED_KINDS)} objects (remove the others)",
            )
        targets[kind].append(obj)


def _allocation(claim: dict[str, Any]) -> Any:
    status = claim.get("status")
    return status.get("allocation") if isinstance(status, dict) else None


# --- YAML as Kubernetes reads it ---------------------------------------------------------------

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]  # CSafeLoader where libyaml is
    """The safe loader (libyaml's when it is there), with timestamps left as strings (as
    Kubernetes' YAML-to-JSON reading leaves them) and integers of bounded length."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    limit = sys.get_int_max_str_digits()
    if limit and len(node.value) > limit:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"found an integer of {len(node.value)} characters, more than the {limit} digits "
            "a number may have (Kubernetes numbers are 64-bit: at most 19)",
            node.start_mark,
        )
    value: int = yaml.SafeLoader.construct_yaml_int(loader, node)
    return value


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _decode(data: bytes, source: str) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif data.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    else:
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        name = encoding.removesuffix("-sig").upper()
        raise ObjectError(
            source,
            "",
            f"is not {name} text: the byte 0x{data[err.start]:02x} at line {line}, "
            f"column {column} is not {name}",
            "save the file as UTF-8 (kubectl writes UTF-8)",
        ) from err


def _read(path: str) -> tuple[str, str]:
    """The text of ``path`` ('-': standard input) and how messages name it."""
    if path == "-":
        source = "standard input"
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream without bytes below it (tests, notebooks)
            text = sys.stdin.read(MAX_FILE_BYTES + 1)
            data = text.encode("utf-8", "surrogateescape")
        else:
            data = stream.read(MAX_FILE_BYTES + 1)
    else:
        source = path
        try:
            with Path(path).open("rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as err:
            raise InvalidInputError(f"{path}: cannot read the file: {err.strerror}") from err
    if len(data) > MAX_FILE_BYTES:
        raise ObjectError(
            source,
            "",
            f"is larger than {MAX_FILE_BYTES // 2**20} MiB, the most an object file may be",
            _SIZE_REMEDY,
        )
    return _decode(data, source), source


def _documents(text: str, source: str) -> Iterator[Any]:
    try:
        yield from yaml.load_all(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InvalidInputError(f"{source}{at}: not valid YAML: {_one_line(problem)}") from err
    except RecursionError as err:  # the pure-Python loader, without libyaml
        raise ObjectError(
            source, "", f"nests deeper than {MAX_DEPTH} levels, the most an object file may"
        ) from err


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_shape(doc: Any, where: str, count: int) -> int:
    """Refuse a document nested deeper than MAX_DEPTH, a file of more than MAX_VALUES values
    (aliases counted each time they are used: a YAML "billion laughs" stops here), or a
    value that is not JSON. Iterative and bounded: the work stops at the limit. Returns the
    values counted so far (``count`` those of earlier documents)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ObjectError(
                where,
                "",
                f"holds more than {MAX_VALUES:,} values (YAML aliases counted each time they "
                "are used), the most an object file may",
                _SIZE_REMEDY,
            )
        if isinstance(value, dict):
            if depth >= MAX_DEPTH and value:
                raise _too_deep(where)
            count += len(value)  # the keys
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            if depth >= MAX_DEPTH and value:
                raise _too_deep(where)
            stack.extend((v, depth + 1) for v in value)
        elif not isinstance(value, _JSON_SCALARS):
            raise ObjectError(
                where,
                "",
                f"holds a value of type {type(value).__name__} (a YAML tag such as !!binary "
                "or !!set)",
                "Kubernetes objects hold only strings, numbers, booleans, null, lists and maps",
            )
    return count


def _too_deep(where: str) -> ObjectError:
    return ObjectError(
        where,
        "",
        f"nests deeper than {MAX_DEPTH} levels, the most an object file may (or a YAML alias "
        "refers to its own anchor)",
    )


def load_objects(path: str) -> ObjectSet:
    """Load ``path`` ('-' for standard input) into an :class:`ObjectSet`."""
    text, source = _read(path)
    objects = ObjectSet()
    count = 0
    for index, doc in enumerate(_documents(text, source)):
        if doc is None:
            continue
        where = f"{source}, document {index + 1}"
        count = _check_shape(doc, where, count)
        objects.add(doc, where)
    return objects


def dump_yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)

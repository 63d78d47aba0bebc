"""A waiting request's shape (the claim's spec, :func:`shape_of`: requests of one shape wait
in one FIFO queue), in short (:func:`shape_summary`) and back in the words of
``dra.request``, for ``dra-jupyter waiting`` (:func:`shape_words`): ``gpu=2,
memory='80Gi'``, not ``2 gpu.nvidia.com + selectors``.

The ledger keeps only the shape, so the keywords are read back from what
:mod:`dra_jupyter.claimspec` writes: the class (``gpu``, ``tpu``, ``mig``, else
``device_class``), the count, the selectors it makes of ``memory``, ``model`` and ``mig``,
``share`` and ``same``/``distinct``. A selector of the user's own is ``selector=…``
(its CEL is too long for a line). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dra_jupyter.claimspec import GPU_CLASSES, MIG_CLASS, TPU_CLASS
from dra_jupyter.model.objects import Wire

_MEMORY = re.compile(r"\.memory\.compareTo\(quantity\('([^']*)'\)\) >= 0$")
_MODEL = re.compile(r"\.(?:productName|tpuGen)\.lowerAscii\(\)\.contains\('([^']*)'\)$")
_PROFILE = re.compile(r"^device\.attributes\['gpu\.nvidia\.com'\]\.profile == '([^']*)'$")
_STANDARD = "resource.kubernetes.io/"


def shape_of(claim: Wire) -> str:
    """Requests of the same shape wait in one FIFO queue: the claim's spec, canonically."""
    return json.dumps(claim.get("spec", {}), sort_keys=True, separators=(",", ":"))


def shape_summary(shape: str) -> str:
    """A queue's shape (:func:`shape_of`) in short, for who sees it wait: ``8
    gpu.nvidia.com``, ``1 mig-3g.71gb.nvidia.com + selectors``."""
    try:
        requests = json.loads(shape).get("devices", {}).get("requests", [])
    except (ValueError, AttributeError):
        return "devices"
    parts = []
    for request in requests if isinstance(requests, list) else []:
        exactly: Any = request.get("exactly") or next(iter(request.get("firstAvailable") or []), {})
        if not isinstance(exactly, dict):
            continue
        count = "all" if exactly.get("allocationMode") == "All" else exactly.get("count", 1)
        text = f"{count} {exactly.get('deviceClassName', 'devices')}"
        if exactly.get("selectors"):
            text += " + selectors"
        parts.append(text)
    return ", ".join(parts) or "devices"


def shape_classes(shape: str) -> tuple[str, ...]:
    """The device classes ``shape`` asks for, each once (``()`` where it cannot be read)."""
    try:
        requests = json.loads(shape).get("devices", {}).get("requests", [])
    except (ValueError, AttributeError):
        return ()
    classes: list[str] = []
    for request in requests if isinstance(requests, list) else []:
        for exactly in [request.get("exactly"), *(request.get("firstAvailable") or [])]:
            cls = exactly.get("deviceClassName") if isinstance(exactly, dict) else None
            if isinstance(cls, str) and cls not in classes:
                classes.append(cls)
    return tuple(classes)


def shape_words(shape: str) -> str:
    """The request of ``shape`` as ``dra.request``'s keywords, one request's after the
    other's (``; ``); ``devices`` where the shape cannot be read."""
    try:
        spec = json.loads(shape)
        devices = spec.get("devices", {})
        requests = devices.get("requests", [])
    except (ValueError, AttributeError):
        return "devices"
    parts = []
    for request in requests if isinstance(requests, list) else []:
        exactly: Any = request.get("exactly") or next(iter(request.get("firstAvailable") or []), {})
        if isinstance(exactly, dict):
            parts.append(_request_words(exactly))
    words = "; ".join(parts) or "devices"
    for constraint in devices.get("constraints") or ():
        for key, word in (("matchAttribute", "same"), ("distinctAttribute", "distinct")):
            if isinstance(constraint, dict) and constraint.get(key):
                words += f", {word}={str(constraint[key]).removeprefix(_STANDARD)}"
    return words


def _request_words(exactly: dict[str, Any]) -> str:
    cls = str(exactly.get("deviceClassName", "devices"))
    count: Any = "'all'" if exactly.get("allocationMode") == "All" else exactly.get("count", 1)
    words: list[str] = []
    rest: list[str] = []
    for selector in exactly.get("selectors") or ():
        cel = str((selector.get("cel") or {}).get("expression", ""))
        if (found := _PROFILE.match(cel)) and cls == MIG_CLASS:
            words.append(f"mig={found.group(1)!r}")
        elif found := _MEMORY.search(cel):
            rest.append(f"memory={found.group(1)!r}")
        elif found := _MODEL.search(cel):
            rest.append(f"model={found.group(1)!r}")
        else:
            rest.append("selector=…")
    if cls in GPU_CLASSES:
        words.insert(0, f"gpu={count}")
    elif cls == TPU_CLASS:
        words.insert(0, f"tpu={count}")
    elif cls == MIG_CLASS and words:
        words += [f"count={count}"] if count != 1 else []
    else:
        words += [f"device_class={cls!r}", f"count={count}"]
    share = ((exactly.get("capacity") or {}).get("requests") or {}).get("memory")
    if share:
        rest.append(f"share={share!r}")
    return ", ".join(words + rest)

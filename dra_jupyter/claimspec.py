"""From ``dra.request(gpu=2, memory="80Gi", same="pcieRoot")`` to a ``resource.k8s.io/v1``
ResourceClaim: the one place where the friendly keywords become DRA.

Every keyword has a direct DRA meaning, so the claim works unchanged on a cluster:

========================  ==============================================================
keyword                   ResourceClaim
========================  ==============================================================
``gpu=N`` / ``tpu=N``     a request for N devices of the GPU (TPU) DeviceClass; ``"all"``
                          asks for every matching device (``allocationMode: All``)
``mig="3g.71gb"``         a request of class ``mig.nvidia.com`` selecting that profile
``count=N``               how many devices, with ``mig``, ``selector`` or ``device_class``
``memory="80Gi"``         selector ``device.capacity[<driver>].memory >= 80Gi``
``model="H200"``          selector: the product name contains it (case-insensitive)
``selector="<CEL>"``      a CEL selector of your own
``share="20Gi"``          ``capacity.requests.memory``: a share of a device that allows
                          multiple allocations (and the selector
                          ``device.allowMultipleAllocations``: never a whole device)
``share="mps"``           the devices shared by their driver (``share="time-slicing"``
                          too), with ``threads=``, ``pinned_memory=`` or ``interval=``:
                          the request's opaque ``config`` (see
                          :mod:`dra_jupyter.sharing.gpushare`)
``same="pcieRoot"``       constraint ``matchAttribute`` (``pcieRoot``, ``numaNode``,
                          ``parentUUID`` or any fully qualified attribute): the
                          devices of one claim share it (of each pod, in a Job)
``same="zone"``           a Job's pods (``dra.run(..., nodes=N)``) on nodes that share
                          a label: ``zone``, ``region``, ``nvlink`` or
                          ``"node:<label key>"`` (see :func:`parse_same`); a Job only
``distinct=...``          constraint ``distinctAttribute``
``alternatives=[...]``    ``firstAvailable``: the first list entry that can be met wins
``device_class="..."``    any DeviceClass by name
========================  ==============================================================
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from dra_jupyter.errors import InvalidInputError, said_by, shown
from dra_jupyter.model.limits import MAX_ATTRIBUTE_STRING_LENGTH, label_name_problem
from dra_jupyter.model.objects import Wire
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.sharing.gpushare import (
    SHAREABLE,
    SHARING_KEYS,
    GpuSharing,
    names_a_strategy,
    parse_sharing,
    strategy_name,
    unknown_strategy,
)
from dra_jupyter.sharing.joins import JOIN, makes_none

if TYPE_CHECKING:
    from dra_jupyter.types import OnWait


GPU_CLASSES = ("gpu.nvidia.com", "gpu.amd.com")
TPU_CLASS = "tpu.google.com"
MIG_CLASS = "mig.nvidia.com"
SHORT_ATTRIBUTES = {
    "pcieRoot": "resource.kubernetes.io/pcieRoot",
    "numaNode": "resource.kubernetes.io/numaNode",
    "pciBusID": "resource.kubernetes.io/pciBusID",
    "parentUUID": "gpu.nvidia.com/parentUUID",
}
DEVICE_KEYS = (
    "gpu",
    "tpu",
    "mig",
    "count",
    "memory",
    "model",
    "selector",
    "share",
    *SHARING_KEYS,
    "device_class",
)
CLAIM_KEYS = (*DEVICE_KEYS, "same", "distinct", "alternatives")
INTEGER_KEYS = ("gpu", "tpu", "count")  # keywords whose value is a number of devices

Count = int | Literal["all"]  # a number of devices, or every matching one


class DeviceKeywords(TypedDict, total=False):
    """The keywords of one request's devices (:data:`DEVICE_KEYS`), for editors and type
    checkers: ``dra.request(gpu=2, memory="80Gi")``; an alternative is one of these."""

    gpu: Count
    tpu: Count
    mig: str
    count: Count
    memory: str | int
    model: str
    selector: str
    share: str | int
    interval: str
    threads: int | str
    pinned_memory: str | int
    device_class: str


class ClaimKeywords(DeviceKeywords, total=False):
    """The keywords of a whole claim (:data:`CLAIM_KEYS`): its devices, the constraints
    between them, or alternatives."""

    same: str | Sequence[str]
    distinct: str
    alternatives: Sequence[DeviceKeywords]


class RequestKeywords(ClaimKeywords, total=False):
    """:func:`request`'s keywords: the claim's (:class:`ClaimKeywords`), then how to get it."""

    timeout: str | float | None
    lease: str | float | None
    name: str
    apply_env: bool
    on_wait: OnWait | None
    reserve: bool
    restart: bool
    join: str  # a claim that exists, instead of the claim's keywords (sharing.joins)


class RunKeywords(ClaimKeywords, total=False):
    """:func:`run`'s keywords: the claim's, then the pod's (see :mod:`dra_jupyter.kube.runs.run`),
    then the run's (``nodes``: machines; ``lease``: how long its claim may last;
    ``gang_timeout``: how long the pods of ``nodes=N`` may wait to start together)."""

    image: str | None
    name: str | None
    timeout: str | float | None
    start_timeout: str | float | None
    node_selector: Mapping[str, str] | None
    nodes: int | None
    queue: str | None
    lease: str | float | None
    retries: int
    wait: bool
    gang_timeout: str | float | None
    group: Mapping[str, Any] | None


REQUEST_KEYS = tuple(RequestKeywords.__annotations__)  # dra.request's, in the order shown
RUN_KEYS = tuple(RunKeywords.__annotations__)
REQUEST = "dra.request"  # the caller a request's refusals name (DraJupyterError.said_by)
RUN = "dra.run"  # the caller a run's refusals name


def unknown_keyword(key: object, allowed: Sequence[str], *, at: str = "") -> InvalidInputError:
    """The one-line refusal of a keyword not in ``allowed``, with the nearest one it may
    be a typo of: ``unknown keyword 'gpuu' (did you mean gpu?); use gpu, ...``; ``at``:
    where in the call (``alternatives[1]``). The caller says it as its own
    (:meth:`~dra_jupyter.errors.DraJupyterError.said_by`)."""
    near = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return refused(at, f"unknown keyword {shown(key)}{hint}; use {', '.join(allowed)}")


def refused(at: str, text: str) -> InvalidInputError:
    """``text`` refused, after ``at`` (where in the call: ``alternatives[1]``) if any."""
    return InvalidInputError(f"{at}: {text}" if at else text)


def class_driver(device_class: str) -> str:
    """The driver whose domain a class's attributes live in (``mig.nvidia.com`` is NVIDIA's)."""
    return "gpu.nvidia.com" if device_class == MIG_CLASS else device_class


def _count(value: Any, key: str, at: str) -> int | str:
    if value == "all":
        return "all"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refused(
            at, f"{key} must be a positive number of devices (or 'all'), not {shown(value)}"
        )
    if value > 32:
        raise refused(
            at,
            f"{key}={shown(value)} exceeds the limit of 32 devices per claim; "
            "split the work over several claims",
        )
    return value


def _quantity(value: Any, key: str, at: str) -> str:
    try:
        q = Quantity.parse(value)
    except (ValueError, TypeError) as err:
        raise refused(
            at, f"{key}={shown(value)} is not a quantity; write e.g. '80Gi' or '40G'"
        ) from err
    if q.value <= 0:
        raise refused(at, f"{key}={shown(value)} must be more than zero")
    if q.value < MEBIBYTE and _unitless(value):
        # "80" is 80 bytes, which any device has: surely a missing unit
        raise refused(
            at, f"{key}={shown(value)} is {value} bytes (no unit); write e.g. '80Gi' or '40G'"
        )
    return str(q)


MEBIBYTE = 2**20
_PLAIN_NUMBER = re.compile(r"\s*[+-]?[0-9.]+([eE][+-]?[0-9]+)?\s*")


def _unitless(value: Any) -> bool:
    """A plain number (``80``, ``"80"``, ``"1.5"``): a quantity written without its unit."""
    if isinstance(value, int | float):
        return True
    return (
        isinstance(value, str)
        and re.fullmatch(r"\s*[+-]?[0-9.]+([eE][+-]?[0-9]+)?\s*", value) is not None
    )


def _literal(text: str) -> str:
    """A CEL string literal: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in "\\'\"":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "'" + "".join(out) + "'"


def _lower_ascii(text: str) -> str:
    """Lower case as CEL's ``lowerAscii()`` does: ASCII letters only."""
    return "".join(c.lower() if c.isascii() else c for c in text)


def _attribute(name: str, keyword: str) -> str:
    full = SHORT_ATTRIBUTES.get(name, name)
    if "/" not in full:
        known = ", ".join(SHORT_ATTRIBUTES)
        nodes = (
            f" (or, for the pods of a multi-node run, {', '.join(NODE_TOPOLOGY)} or "
            f"{NODE_PREFIX}<node label key>)"
        ) * (keyword == "same")
        raise InvalidInputError(
            f"{keyword}={shown(name)} is not an attribute; use one of {known} "
            f"or a fully qualified name such as gpu.nvidia.com/parentUUID{nodes}"
        )
    return full


# --- same= across the pods of a Job: their nodes' labels ------------------------------------

NODE_PREFIX = "node:"  # same="node:<label key>": the pods' nodes share that label's value
# Short names of node labels that say where a node is (well-known labels; nvidia.com/gpu.clique
# is GPU Feature Discovery's label of a node's NVLink domain, which ComputeDomains use).
NODE_TOPOLOGY = {
    "zone": "topology.kubernetes.io/zone",
    "region": "topology.kubernetes.io/region",
    "nvlink": "nvidia.com/gpu.clique",
}
# Device attributes a driver takes from a node label, so that the label says the same of the
# pod's node: Google's TPU driver publishes GKE's accelerator and topology labels.
ATTRIBUTE_NODE_LABELS = {
    "tpu.google.com/accelerator": "cloud.google.com/gke-tpu-accelerator",
    "tpu.google.com/topology": "cloud.google.com/gke-tpu-topology",
}
# Domains of device attributes (the drivers', the standard one): not node labels.
DEVICE_DOMAINS = (
    "resource.kubernetes.io",
    *GPU_CLASSES,
    TPU_CLASS,
    "compute-domain.nvidia.com",
    "gpu.intel.com",
    "gpu.example.com",
)


@dataclass(frozen=True)
class Same:
    """``same=`` split by where it applies: ``devices``, attributes the devices of one claim
    (each pod's, in a Job) share, as ``matchAttribute``; ``nodes``, node label keys the
    nodes of a Job's pods share (required pod affinity among them on that key)."""

    devices: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


def _node_label_looking(name: str, drivers: Collection[str]) -> bool:
    """A well-known node label written without ``node:``: it names no device attribute."""
    domain, sep, _ = name.rpartition("/")
    if not sep or domain in drivers or domain in DEVICE_DOMAINS:
        return False
    return (
        domain == "nvidia.com"
        or domain.endswith("kubernetes.io")
        or domain in ("cloud.google.com", "eks.amazonaws.com", "karpenter.sh")
    )


def _device_attribute(name: str, drivers: Collection[str]) -> bool:
    """``name`` names a device attribute (a short name, or a driver's domain)."""
    domain, sep, _ = name.rpartition("/")
    return name in SHORT_ATTRIBUTES or (
        bool(sep) and (domain in DEVICE_DOMAINS or domain in drivers)
    )


def _same_one(name: object, drivers: Collection[str]) -> tuple[bool, str]:
    """One name of ``same=``: (whether it is about nodes, the attribute or label key)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(
            f"same={shown(name)} is not an attribute; use one of "
            f"{', '.join(SHORT_ATTRIBUTES)}, a fully qualified attribute, or, for the pods of "
            f"a multi-node run, {', '.join(NODE_TOPOLOGY)} or {NODE_PREFIX}<node label key>"
        )
    if name in NODE_TOPOLOGY:
        return True, NODE_TOPOLOGY[name]
    if name.startswith(NODE_PREFIX):
        key = name.removeprefix(NODE_PREFIX)
        if key in NODE_TOPOLOGY:
            return True, NODE_TOPOLOGY[key]
        if key in ATTRIBUTE_NODE_LABELS:
            return True, ATTRIBUTE_NODE_LABELS[key]
        if _device_attribute(key, drivers):
            plain = key.rpartition("/")[2]
            raise InvalidInputError(
                f"same={shown(name)}: {plain} is a device attribute, which Kubernetes "
                "makes equal only among the devices of one claim (one pod), not across the "
                f"pods' nodes; use same={shown(key)} (the devices of each pod share it), or a "
                f"node label: same='zone' or same='{NODE_PREFIX}<node label key>'"
            )
        problem = label_name_problem(key)
        if problem is not None:
            raise InvalidInputError(
                f"same={shown(name)}: {problem}; after {NODE_PREFIX} give a node "
                "label key, such as topology.kubernetes.io/zone"
            )
        return True, key
    if _node_label_looking(name, drivers):
        raise InvalidInputError(
            f"same={shown(name)} is a node label, not a device attribute; write "
            f"same={shown(NODE_PREFIX + name)} to keep the pods of a multi-node run on nodes "
            "that share its value"
        )
    return False, _attribute(name, "same")


def parse_same(value: object, *, where: str = REQUEST, drivers: Collection[str] = ()) -> Same:
    """``same=`` (a name or a list of names) split into device attributes and node label
    keys (:class:`Same`), or InvalidInputError in one line. A name is a device attribute
    (``pcieRoot``, ``numaNode``, ``pciBusID``, ``parentUUID``, ``<domain>/<name>``), or a
    node's: ``zone``, ``region``, ``nvlink`` (:data:`NODE_TOPOLOGY`), or
    ``node:<label key>``; a device attribute after ``node:`` is refused (devices of
    different pods cannot be made to share one) unless its driver takes it from a node
    label (:data:`ATTRIBUTE_NODE_LABELS`). ``drivers``: the cluster's, whose domains are
    device attributes too; ``where``: the caller, whose refusals they are."""
    with said_by(where):
        return _same(value, drivers)


def _same(value: object, drivers: Collection[str]) -> Same:
    if value is None:
        return Same()
    names = [value] if isinstance(value, str) or not isinstance(value, list | tuple) else value
    if not names:
        raise InvalidInputError(
            "same=[] names nothing; give an attribute (pcieRoot) or leave it out"
        )
    devices: list[str] = []
    nodes: list[str] = []
    for name in names:
        about_nodes, key = _same_one(name, drivers)
        chosen = nodes if about_nodes else devices
        if key not in chosen:
            chosen.append(key)
    return Same(tuple(devices), tuple(nodes))


def _attribute_string(value: Any, key: str, at: str) -> str:
    """``value`` as text compared with a device attribute: at most as long as one can be
    (a longer one could never match, and would only cost time)."""
    text = str(value)
    if len(text) > MAX_ATTRIBUTE_STRING_LENGTH:
        raise refused(
            at,
            f"{key}: at most {MAX_ATTRIBUTE_STRING_LENGTH} characters (a device "
            f"attribute's string is at most that), not {shown(text)}",
        )
    return text


def _selectors(spec: Mapping[str, Any], cls: str, at: str) -> list[str]:
    """CEL for ``memory``, ``model`` and ``selector``, in the class's driver domain."""
    driver = _literal(class_driver(cls))
    out = []
    if spec.get("memory") is not None:
        amount = _literal(_quantity(spec["memory"], "memory", at))
        out.append(
            f"'memory' in device.capacity[{driver}] && "
            f"device.capacity[{driver}].memory.compareTo(quantity({amount})) >= 0"
        )
    if spec.get("model") is not None:
        model = _literal(_lower_ascii(_attribute_string(spec["model"], "model", at)))
        attr = "tpuGen" if cls == TPU_CLASS else "productName"
        out.append(
            f"'{attr}' in device.attributes[{driver}] && "
            f"device.attributes[{driver}].{attr}.lowerAscii().contains({model})"
        )
    if spec.get("selector") is not None:
        if not isinstance(spec["selector"], str) or not spec["selector"].strip():
            raise refused(at, "selector must be a CEL expression (a string)")
        out.append(spec["selector"])
    return out


def device_request(
    spec: Mapping[str, Any], classes: Sequence[str], *, at: str = ""
) -> tuple[str, Wire]:
    """The kind of device (``gpu``, ``tpu``, ``mig`` or a class) and the ``exactly`` body;
    ``at``: where in the call, before each refusal (``alternatives[1]``)."""
    unknown = sorted(set(spec) - set(DEVICE_KEYS))
    if unknown:
        raise unknown_keyword(unknown[0], DEVICE_KEYS, at=at)
    kinds = [k for k in ("gpu", "tpu", "mig", "device_class") if spec.get(k) is not None]
    if len(kinds) > 1:
        raise refused(at, f"give one of gpu, tpu, mig, device_class, not {kinds}")
    kind = kinds[0] if kinds else "gpu"
    selectors: list[str] = []
    count: int | str = 1
    if kind in ("gpu", "tpu"):
        if kind == "tpu":
            cls = TPU_CLASS
        else:
            cls = next((c for c in GPU_CLASSES if c in classes), GPU_CLASSES[0])
        if spec.get(kind) is not None:
            count = _count(spec[kind], kind, at)
            if spec.get("count") is not None and spec["count"] != spec[kind]:
                raise refused(at, f"give the number once ({kind}=N), not count too")
        elif spec.get("count") is not None:
            count = _count(spec["count"], "count", at)
    elif kind == "mig":
        cls = MIG_CLASS
        profile = spec["mig"]
        if not isinstance(profile, str) or not profile:
            raise refused(at, "mig must be a profile name such as '3g.71gb'")
        _attribute_string(profile, "mig", at)
        selectors.append(f"device.attributes['gpu.nvidia.com'].profile == {_literal(profile)}")
        count = _count(spec.get("count", 1), "count", at)
    else:
        cls = str(spec["device_class"])
        count = _count(spec.get("count", 1), "count", at)
    selectors.extend(_selectors(spec, cls, at))
    share = spec.get("share")
    shared_by_capacity = share is not None and strategy_name(share) is None
    if shared_by_capacity:
        if names_a_strategy(share):
            raise unknown_strategy(share, at)
        selectors.append(SHAREABLE)  # never a whole ordinary device beside shareable ones
    body: Wire = {"deviceClassName": cls}
    if count == "all":
        body["allocationMode"] = "All"
    else:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if shared_by_capacity:
        body["capacity"] = {"requests": {"memory": _quantity(share, "share", at)}}
    return kind, body


def request_sharing(
    spec: Mapping[str, Any], body: Mapping[str, Any], at: str = ""
) -> GpuSharing | None:
    """How the devices of the request ``body`` (made of ``spec`` by :func:`device_request`)
    are shared by their driver (``share="mps"``, ...), or None."""
    cls = str(body["deviceClassName"])
    return parse_sharing(spec, device_class=cls, mig=cls == MIG_CLASS, at=at)


def build_claim(
    name: str,
    spec: Mapping[str, Any],
    *,
    namespace: str = "default",
    classes: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    keywords: Sequence[str] = CLAIM_KEYS,
    caller: str = REQUEST,
) -> Wire:
    """The ResourceClaim for one ``dra.request(...)`` call. ``keywords``: what the caller
    takes in all (its own and the claim's), listed when a keyword is unknown; ``caller``:
    whose refusals they are (``dra.run``'s for a run's claim)."""
    with said_by(caller):
        devices = _devices(spec, classes, keywords)
    metadata: Wire = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": devices},
    }


def _devices(spec: Mapping[str, Any], classes: Sequence[str], keywords: Sequence[str]) -> Wire:
    """A claim's ``spec.devices``: its request and the constraints between its devices."""
    unknown = sorted(set(spec) - set(CLAIM_KEYS))
    if JOIN in unknown:  # dra.request's, which makes no claim (the REST API's body, say)
        raise InvalidInputError(makes_none(spec[JOIN]))
    if unknown:
        raise unknown_keyword(unknown[0], keywords)
    alternatives = spec.get("alternatives")
    device_spec = {k: v for k, v in spec.items() if k in DEVICE_KEYS}
    configs: list[Wire] = []  # the driver's config of each shared request
    if alternatives is not None:
        if device_spec:
            raise InvalidInputError("with alternatives, put gpu/memory/... inside each alternative")
        if not isinstance(alternatives, list | tuple) or not alternatives:
            raise InvalidInputError("alternatives must be a non-empty list of dicts")
        if len(alternatives) > 8:
            raise InvalidInputError("at most 8 alternatives (a DRA limit)")
        subs = []
        for i, alt in enumerate(alternatives):
            if not isinstance(alt, Mapping):
                raise InvalidInputError(f"alternatives[{i}] must be a dict")
            at = f"alternatives[{i}]"
            _kind, body = device_request(alt, classes, at=at)
            subs.append({"name": f"option-{i + 1}", **body})
            sharing = request_sharing(alt, body, at)
            if sharing is not None:
                configs.append(sharing.config([f"devices/option-{i + 1}"]))
        request: Wire = {"name": "devices", "firstAvailable": subs}
    else:
        kind, body = device_request(device_spec, classes)
        request = {"name": "devices" if kind == "device_class" else kind, "exactly": body}
        sharing = request_sharing(device_spec, body)
        if sharing is not None:
            configs.append(sharing.config([request["name"]]))
    constraints: list[Wire] = []
    same = parse_same(spec.get("same"))
    if same.nodes:
        raise InvalidInputError(
            f"same={shown(spec['same'])} asks the nodes of several pods to share "
            f"{', '.join(same.nodes)}, which only a multi-node run can (dra.run(..., nodes=N) "
            "on Kubernetes); one claim's devices are on one node: leave it out, or name a "
            "device attribute (same='pcieRoot')"
        )
    constraints += [{"matchAttribute": attribute} for attribute in same.devices]
    if spec.get("distinct") is not None:
        constraints.append({"distinctAttribute": _attribute(str(spec["distinct"]), "distinct")})
    devices: Wire = {"requests": [request]}
    if constraints:
        devices["constraints"] = constraints
    if configs:
        devices["config"] = configs
    return devices


def requested_devices(claim: Mapping[str, Any]) -> int | None:
    """How many devices a ResourceClaim asks for: the sum over its requests of
    ``exactly.count`` (1 when absent), or of the first ``firstAvailable`` subrequest's (the
    one preferred); None when a request asks for every matching device (``allocationMode:
    All``): only an allocation can count those."""
    total = 0
    for request in claim.get("spec", {}).get("devices", {}).get("requests") or ():
        first: Mapping[str, Any] = next(iter(request.get("firstAvailable") or ()), {})
        body: Mapping[str, Any] = request.get("exactly") or first
        if body.get("allocationMode") == "All":
            return None
        total += int(body.get("count", 1))
    return total

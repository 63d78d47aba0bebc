"""Taints an admin puts on one device by hand (``dra-jupyter taint gpu-3 --effect
NoSchedule --reason "fan"``), as the DeviceTaintRules that carry them.

One rule per device and taint key, the same on every backend: the local ledger keeps the
taint and hands the allocator this rule (:func:`device_rule`); on a cluster it is the
DeviceTaintRule object created (``timeAdded`` then stamped by kube-apiserver). Its name is
made of the device and the key (:func:`rule_name`), so that ``untaint`` finds the rule
again from what the admin typed, and a second ``taint`` of the same device and key meets
the first. A taint's value must be a label value (63 characters of ``[-_.A-Za-z0-9]``);
the admin's reason is free text, so it is the value only where it fits (``fan``), and is
always kept whole beside the taint (the ledger's row, the rule's annotation).

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from dra_jupyter.errors import InvalidInputError, shown
from dra_jupyter.model import limits
from dra_jupyter.model.objects import Wire

DEFAULT_KEY = "dra-jupyter/admin"  # the taint's key when the admin names none
EFFECTS = ("NoSchedule", "NoExecute")  # what an admin may set (None marks only: not offered)
MAX_REASON = 1024  # characters of a reason: a sentence, not a file
# On the rules dra-jupyter makes: who made them (a label, to list them) and the reason and
# user (annotations: free text).
MANAGED_BY = ("app.kubernetes.io/managed-by", "dra-jupyter")
REASON_ANNOTATION = "dra-jupyter/reason"
USER_ANNOTATION = "dra-jupyter/tainted-by"
# On a rule the ledger makes for a partition of a GPU tainted whole: the GPU's rule, which
# explanations name (the one ``untaint`` takes away), not the partition's own
PART_OF_ANNOTATION = "dra-jupyter/part-of"


def check_taint(command: str, effect: str, key: str, reason: str) -> None:
    """Refuse what kube-apiserver would refuse of the rule, and an empty reason, in one
    line naming the value (``command``: ``taint``)."""
    if effect not in EFFECTS:
        raise InvalidInputError(
            f"{command}: --effect {shown(effect)} is not NoSchedule or NoExecute; use "
            "NoSchedule to keep new claims off the device, NoExecute to evict its pods too"
        )
    check_key(command, key)
    if not reason.strip():
        raise InvalidInputError(
            f"{command}: --reason is empty; say why (e.g. --reason 'fan failing'), so that "
            "other admins and users read it"
        )
    control = next((c for c in reason if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if control is not None:
        raise InvalidInputError(
            f"{command}: --reason holds the control character {control!r}; write it on "
            "one line, without tabs or escape codes (it is shown in tables)"
        )
    if len(reason) > MAX_REASON:
        raise InvalidInputError(
            f"{command}: --reason has {len(reason)} characters; keep it under {MAX_REASON}"
        )


def check_key(command: str, key: str) -> None:
    problem = limits.label_name_problem(key)
    if problem:
        raise InvalidInputError(
            f"{command}: --key {shown(key)}: {problem}; use a label key such as {DEFAULT_KEY}"
        )


def rule_name(device: str, key: str) -> str:
    """The DeviceTaintRule's name for the taint ``key`` on ``device`` (``driver/pool/device``):
    ``dra-jupyter-<device>-<10 hex digits of both>``, a DNS subdomain whatever they are."""
    digest = hashlib.sha256(f"{device}\n{key}".encode()).hexdigest()[:10]
    name = device.rsplit("/", 1)[-1].lower()
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")[:40]
    return f"dra-jupyter-{name or 'device'}-{digest}".replace("--", "-")


def taint_value(reason: str) -> str:
    """The reason as the taint's value where it is a label value (``fan``), else empty."""
    return "" if limits.label_value_problem(reason) else reason


def device_rule(
    device: str,
    key: str,
    effect: str,
    reason: str,
    user: str,
    *,
    value: str | None = None,
    part_of: str | None = None,
) -> Wire:
    """The DeviceTaintRule that puts this taint on ``device`` (``driver/pool/device``) only;
    its value is ``value`` (the health watcher's: an XID), else the reason where it fits.
    ``part_of``: the rule of the whole GPU whose taint covers this partition."""
    driver, pool, name = split_device(device)
    taint: Wire = {"key": key, "effect": effect}
    value = value if value is not None else taint_value(reason)
    if value:
        taint["value"] = value
    annotations = {REASON_ANNOTATION: reason, USER_ANNOTATION: user}
    if part_of:
        annotations[PART_OF_ANNOTATION] = part_of
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(device, key),
            "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
            "annotations": annotations,
        },
        "spec": {
            "deviceSelector": {"driver": driver, "pool": pool, "device": name},
            "taint": taint,
        },
    }


def split_device(device: str) -> tuple[str, str, str]:
    """``driver``, ``pool`` and ``device`` of ``driver/pool/device`` (a pool's name may
    hold slashes: the driver is before the first, the device after the last)."""
    driver, _, rest = device.partition("/")
    pool, _, name = rest.rpartition("/")
    if not driver or not pool or not name:
        raise InvalidInputError(
            f"taint: {shown(device)} is not driver/pool/device; name a device as "
            "dra-jupyter devices lists it"
        )
    return driver, pool, name


def partitions_of(slices: Iterable[Mapping[str, Any]], device: str) -> list[str]:
    """The partitions of ``device`` (``driver/pool/device``) where it is a whole physical
    device that is also published in parts: the devices of its pool that consume the
    counter sets it consumes whole (a GPU and its MIG partitions, as the NVIDIA DRA driver
    publishes them), in slice order; none for a partition or a device that is not split.
    On this machine's ledger an admin's taint of a whole GPU covers them: a GPU taken out
    is taken out whole. A DeviceTaintRule on a cluster selects what its selector picks,
    one device; this is the ledger's reading of a taint by hand, not the rule's."""
    driver, pool, name = split_device(device)
    mine: list[Mapping[str, Any]] = []
    totals: dict[str, Any] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver or (spec.get("pool") or {}).get("name") != pool:
            continue
        mine.extend(spec.get("devices") or ())
        totals.update({c.get("name"): c.get("counters") for c in spec.get("sharedCounters") or ()})
    whole = {
        c.get("counterSet")
        for d in mine
        if d.get("name") == name
        for c in d.get("consumesCounters") or ()
        if c.get("counters") and c.get("counters") == totals.get(c.get("counterSet"))
    }
    return [
        f"{driver}/{pool}/{d['name']}"
        for d in mine
        if d.get("name") != name
        and any(c.get("counterSet") in whole for c in d.get("consumesCounters") or ())
    ]

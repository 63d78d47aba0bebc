"""``dra-jupyter taint | untaint`` on a cluster: one DeviceTaintRule per device and taint key
(:func:`dra_jupyter.model.admintaints.device_rule`: its name from both, labelled as
dra-jupyter's, the reason and the user in annotations), created and deleted through the API
server, which stamps ``timeAdded`` and checks RBAC (an admin's ClusterRole in
deploy/device-admin-rbac.yaml). kube-scheduler then honours it, and so does everything
here that reads the cluster's rules (:func:`read_taint_rules`).

Who and when: the annotation says which dra-jupyter user made the rule (their own word:
the API server's audit log has the account that did), ``timeAdded`` when. A deleted rule
is gone: the cluster keeps no history (its audit log does).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.errors import ForbiddenError, InvalidInputError, NotFoundError
from dra_jupyter.kube.connect import cluster_error, to_model, to_wire
from dra_jupyter.model.admintaints import (
    REASON_ANNOTATION,
    USER_ANNOTATION,
    device_rule,
    rule_name,
)
from dra_jupyter.types import DeviceTaint

_log = logging.getLogger("dra_jupyter")

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from dra_jupyter.model.objects import Wire

RBAC = (
    "the cluster refused it: an admin's account needs the ClusterRole "
    "dra-jupyter-device-admin (deploy/device-admin-rbac.yaml)"
)


def _when(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def taint_of(rule: dict[str, Any]) -> DeviceTaint:
    """A rule as a taint: its device (``driver/pool/device``, whichever parts it selects
    by), key, effect, the reason and user of its annotations (else its value, and ``?``)."""
    meta, spec = rule.get("metadata") or {}, rule.get("spec") or {}
    notes = meta.get("annotations") or {}
    selector = spec.get("deviceSelector") or {}
    taint = spec.get("taint") or {}
    device = "/".join(selector.get(k) or "*" for k in ("driver", "pool", "device"))
    return DeviceTaint(
        device=device,
        key=str(taint.get("key", "")),
        effect=str(taint.get("effect", "")),
        reason=str(notes.get(REASON_ANNOTATION) or taint.get("value") or ""),
        user=str(notes.get(USER_ANNOTATION) or "?"),
        added=_when(taint.get("timeAdded")) or _when(meta.get("creationTimestamp")),
        rule=str(meta.get("name", "")),
    )


def _fail(error: Exception, action: str, api: ApiClient) -> Exception:
    if isinstance(error, ApiException) and error.status == 403:
        return ForbiddenError(f"{action}: {RBAC}")
    return cluster_error(error, action, api)


def create(
    api: ApiClient, device: str, key: str, effect: str, reason: str, user: str
) -> DeviceTaint:
    """Create the rule; one that exists already (the device has this key) is refused."""
    body = device_rule(device, key, effect, reason, user)
    resource = client.ResourceV1Api(api)
    try:
        made = resource.create_device_taint_rule(body=to_model(client.V1DeviceTaintRule, body))
    except ApiException as error:
        if error.status == 409:
            raise InvalidInputError(
                f"taint: {device} has the taint {key} already (DeviceTaintRule "
                f"{body['metadata']['name']}); untaint it first to change it"
            ) from error
        raise _fail(error, "taint: creating a DeviceTaintRule", api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, "taint: creating a DeviceTaintRule", api) from error
    return taint_of(to_wire(api, made))


def delete(api: ApiClient, device: str, key: str) -> DeviceTaint:
    """Delete the rule of this device and key (what it was); none is NotFoundError."""
    name = rule_name(device, key)
    resource = client.ResourceV1Api(api)
    try:
        rule = to_wire(api, resource.read_device_taint_rule(name))
        resource.delete_device_taint_rule(name)
    except ApiException as error:
        if error.status == 404:
            raise NotFoundError(
                f"untaint: {device} has no taint {key} (no DeviceTaintRule {name}); "
                "dra-jupyter taint --list shows the devices' taints"
            ) from error
        raise _fail(error, "untaint: deleting a DeviceTaintRule", api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, "untaint: deleting a DeviceTaintRule", api) from error
    return taint_of(rule)


def read_taint_rules(api: ApiClient) -> tuple[Wire, ...]:
    """The cluster's DeviceTaintRules (``resource.k8s.io/v1``, served by default since
    Kubernetes 1.37), which kube-scheduler applies to the slices before it allocates. A
    cluster that does not serve them (older than 1.37: v1beta2 and off by default in 1.36),
    or RBAC that hides them, gives none, with one log line: allocations, explanations and
    counts then see the slices' own taints only."""
    resource = client.ResourceV1Api(api)
    try:
        listed = resource.list_device_taint_rule().items
    except ApiException as error:
        if error.status == 404:
            _log.info(
                "dra.devices: the cluster serves no resource.k8s.io/v1 DeviceTaintRules "
                "(Kubernetes < 1.37); only the slices' own device taints are read"
            )
            return ()
        if error.status == 403:
            _log.warning(
                "dra.devices: RBAC hides the cluster's DeviceTaintRules (list "
                "devicetaintrules.resource.k8s.io); devices they taint count as usable here, "
                "which kube-scheduler will not allocate"
            )
            return ()
        raise cluster_error(error, "dra.devices: reading DeviceTaintRules", api) from error
    except urllib3.exceptions.HTTPError as error:
        raise cluster_error(error, "dra.devices: reading DeviceTaintRules", api) from error
    return tuple(to_wire(api, r) for r in listed)

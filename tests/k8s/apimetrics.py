"""What the API server counts of the requests it served, read from its own ``/metrics`` as
the admin: the tests count our LISTs and WATCHes there, not in our own code.

``apiserver_request_total`` says neither who asked nor in which namespace, and the namespace
controller lists every kind of a namespace being deleted (earlier tests' namespaces, while
they empty). :func:`counted_user` makes the requests of one user countable on their own:
a FlowSchema per verb that matches only that user's requests on one resource, whose
``apiserver_flowcontrol_dispatched_requests_total`` counts them (API Priority and Fairness
dispatches a request before RBAC decides, so refused ones count too)."""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_jupyter.kube.connect import api_client, to_model
from tests.k8s import testenv
from tests.k8s.fixtures import wait_for

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
PRECEDENCE = 100  # before every FlowSchema a cluster has but "exempt" (1)


def sample(cluster: testenv.Cluster, metric: str, **labels: str) -> float:
    """The sum of ``metric``'s series whose labels include ``labels``."""
    status, text = cluster.get("/metrics")
    assert status == 200, text[:300]
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        found = dict(LABEL.findall(series))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


def open_watches(cluster: testenv.Cluster, resource: str, **labels: str) -> int:
    """How many WATCHes of ``resource`` are open now (of anyone)."""
    counted = sample(
        cluster, "apiserver_longrunning_requests", verb="WATCH", resource=resource, **labels
    )
    return int(counted)


@dataclass
class Counted:
    """A user whose requests of some verbs on one resource the API server counts apart."""

    cluster: testenv.Cluster
    user: str
    kubeconfig: Path
    api: client.ApiClient
    schemas: dict[str, str]  # verb -> its FlowSchema

    def count(self, verb: str) -> int:
        """How many ``verb`` requests (``list``, ``watch``) of this user the API server
        dispatched so far."""
        metric = "apiserver_flowcontrol_dispatched_requests_total"
        return int(sample(self.cluster, metric, flow_schema=self.schemas[verb]))


def _flow_schema(name: str, subject: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """A FlowSchema that sorts ``subject``'s requests matching ``rule`` into its own flow."""
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": "workload-low"},
            "matchingPrecedence": PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [subject], "resourceRules": [rule]}],
        },
    }


def _digested(flow: client.FlowcontrolApiserverV1Api, name: str) -> bool:
    """Whether the API server's flow control took the FlowSchema in (it writes the status)."""
    status = flow.read_flow_schema(name).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Dangling" and c.status == "False" for c in conditions)


@contextlib.contextmanager
def counted_user(
    cluster: testenv.Cluster,
    admin: client.ApiClient,
    namespace: str,
    *,
    resource: str = "resourceclaims",
    group: str = "resource.k8s.io",
    verbs: Sequence[str] = ("list", "watch"),
    allowed: Sequence[str] = ("get", "list", "watch", "create", "patch", "delete"),
) -> Iterator[Counted]:
    """A new user with a client, allowed ``allowed`` on ``resource`` in ``namespace`` (none:
    RBAC refuses all), whose ``verbs`` requests the API server counts apart."""
    user = f"counted-{namespace}"
    if allowed:
        rbac = client.RbacAuthorizationV1Api(admin)
        role = {
            "metadata": {"name": user},
            "rules": [{"apiGroups": [group], "resources": [resource], "verbs": list(allowed)}],
        }
        rbac.create_namespaced_role(namespace, body=to_model(client.V1Role, role))
        binding = {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        rbac.create_namespaced_role_binding(namespace, body=to_model(client.V1RoleBinding, binding))
    flow = client.FlowcontrolApiserverV1Api(admin)
    schemas = {verb: f"{user}-{verb}" for verb in verbs}
    for verb, name in schemas.items():
        subject = {"kind": "User", "user": {"name": user}}
        rule = {"verbs": [verb], "apiGroups": [group], "resources": [resource], "namespaces": ["*"]}
        body = _flow_schema(name, subject, rule)
        flow.create_flow_schema(body=to_model(client.V1FlowSchema, body))
    try:
        for name in schemas.values():
            wait_for(f"FlowSchema {name} in effect", functools.partial(_digested, flow, name))
        kubeconfig = cluster.kubeconfig_for(user)
        with api_client(str(kubeconfig)) as api:
            yield Counted(cluster, user, kubeconfig, api, schemas)
    finally:
        for name in schemas.values():
            with contextlib.suppress(ApiException):
                flow.delete_flow_schema(name)


SCOPES = ("namespace", "cluster")  # a request in one namespace; one of no namespace or all


@dataclass
class Everything:
    """A service account whose requests of some verbs, on any resource, the API server counts
    apart, by scope: ``namespace`` (in one namespace), ``cluster`` (a cluster-scoped kind,
    or every namespace)."""

    cluster: testenv.Cluster
    schemas: dict[tuple[str, str], str]  # (verb, scope) -> its FlowSchema

    def count(self, verb: str, scope: str | None = None) -> int:
        """How many ``verb`` requests (of ``scope``; None: both) were dispatched so far."""
        metric = "apiserver_flowcontrol_dispatched_requests_total"
        return sum(
            int(sample(self.cluster, metric, flow_schema=name))
            for (v, s), name in self.schemas.items()
            if v == verb and scope in (None, s)
        )


@contextlib.contextmanager
def counted_account(
    cluster: testenv.Cluster,
    admin: client.ApiClient,
    namespace: str,
    account: str,
    *,
    verbs: Sequence[str] = ("list", "watch"),
    groups: Sequence[str] = ("*",),
    resources: Sequence[str] = ("*",),
) -> Iterator[Everything]:
    """FlowSchemas that count every ``verbs`` request of the service account ``account`` of
    ``namespace`` (on ``resources`` of ``groups``: any by default), by scope
    (:class:`Everything`); deleted after."""
    flow = client.FlowcontrolApiserverV1Api(admin)
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"name": account, "namespace": namespace},
    }
    schemas = {(v, s): f"all-{namespace}-{v}-{s}" for v in verbs for s in SCOPES}
    for (verb, scope), name in schemas.items():
        rule: dict[str, Any] = {
            "verbs": [verb],
            "apiGroups": list(groups),
            "resources": list(resources),
        }
        if scope == "namespace":
            rule["namespaces"] = ["*"]
        else:
            rule["clusterScope"] = True
        body = _flow_schema(name, subject, rule)
        flow.create_flow_schema(body=to_model(client.V1FlowSchema, body))
    try:
        for name in schemas.values():
            wait_for(f"FlowSchema {name} in effect", functools.partial(_digested, flow, name))
        yield Everything(cluster, schemas)
    finally:
        for name in schemas.values():
            with contextlib.suppress(ApiException):
                flow.delete_flow_schema(name)

"""deploy/flowcontrol.yaml on the real control plane (issue #38, item 6): applied exactly
(the namespace replaced, as tests apply deploy/hub-rbac.yaml), the requests of a real
``jupyter server`` on the ``dra-singleuser`` account are classified under its FlowSchema
``dra-jupyter`` into its priority level ``dra-jupyter``, counted by the API server's own
``apiserver_flowcontrol_dispatched_requests_total``; and the server's Prometheus endpoint
says what its watched views did. The objects are deleted after.

Its FlowSchema (precedence 8000) is the only one of these accounts here: the counting
FlowSchemas of :func:`tests.k8s.apimetrics.counted_account` (precedence 100) would take
the same requests first, so this test does not use them."""

from __future__ import annotations

import contextlib
import functools
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from dra_jupyter.kube.connect import to_model
from dra_jupyter.kube.simulate import SimulatedCluster
from tests.k8s import testenv
from tests.k8s.apimetrics import sample
from tests.k8s.fixtures import wait_for
from tests.k8s.kernelserver import ROOT, Server, gone, running_server

FLOW_CONTROL = ROOT / "deploy" / "flowcontrol.yaml"
NAME = "dra-jupyter"  # the FlowSchema's and the priority level's
DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"


def _gone(delete: Any, name: str) -> None:
    with contextlib.suppress(ApiException):
        delete(name)


def _in_effect(flow: client.FlowcontrolApiserverV1Api) -> bool:
    """Whether the API server's flow control took the FlowSchema in: it found its priority
    level (the status it writes says ``Dangling`` False)."""
    status = flow.read_flow_schema(NAME).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Dangling" and c.status == "False" for c in conditions)


@contextlib.contextmanager
def flow_control(api: client.ApiClient, namespace: str) -> Iterator[None]:
    """deploy/flowcontrol.yaml with ``namespace`` for ``jupyterhub``, in effect; deleted
    after."""
    text = FLOW_CONTROL.read_text().replace("namespace: jupyterhub", f"namespace: {namespace}")
    flow = client.FlowcontrolApiserverV1Api(api)
    try:
        for doc in yaml.safe_load_all(text):
            kind = doc["kind"]
            if kind == "PriorityLevelConfiguration":
                body = to_model(client.V1PriorityLevelConfiguration, doc)
                flow.create_priority_level_configuration(body=body)
            elif kind == "FlowSchema":
                flow.create_flow_schema(body=to_model(client.V1FlowSchema, doc))
            else:
                raise AssertionError(f"{FLOW_CONTROL}: unexpected kind {kind}")
        wait_for(f"FlowSchema {NAME} in effect", functools.partial(_in_effect, flow))
        yield
    finally:
        _gone(flow.delete_flow_schema, NAME)
        _gone(flow.delete_priority_level_configuration, NAME)


def dispatched(cluster: testenv.Cluster) -> int:
    """The requests the API server dispatched under our FlowSchema into our level so far."""
    return int(sample(cluster, DISPATCHED, flow_schema=NAME, priority_level=NAME))


def watch_counters(server: Server) -> dict[tuple[str, str, str], float]:
    """The server's watched views' samples, by (name, resource, scope)."""
    request = urllib.request.Request(
        server.url + "/dra/api/metrics/prometheus",
        headers={"Authorization": f"token {server.token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, s.labels["resource"], s.labels["scope"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("dra_jupyter_watch_")
    }


def test_a_servers_requests_go_to_the_priority_level_of_deploy_flowcontrol(
    cluster: testenv.Cluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    published: SimulatedCluster,
) -> None:
    with (
        flow_control(api, namespace),
        running_server(cluster, api, namespace, tmp_path, None, idle_timeout=3600) as server,
    ):
        before = dispatched(cluster)  # the test's own checks as dra-singleuser: before this
        made = server.call("POST", "/dra/api/claims", {"gpu": 1})  # the server creates it
        claims = server.call("GET", "/dra/api/claims")["claims"]  # and starts its views
        assert [c["name"] for c in claims] == [made["name"]]
        wait_for(
            "the server's requests dispatched under FlowSchema dra-jupyter",
            lambda: dispatched(cluster) > before,
        )

        # its views' counters on its Prometheus endpoint: the claims of its namespace were
        # listed once and are watched, holding the one claim
        claims_view = ("resourceclaims", "namespace")

        def counted() -> dict[tuple[str, str, str], float] | None:
            said = watch_counters(server)
            held = said.get(("dra_jupyter_watch_objects", *claims_view))
            return said if held == 1 else None

        said = wait_for("the claims view to hold the claim", counted)
        assert said[("dra_jupyter_watch_lists_total", *claims_view)] >= 1
        assert said[("dra_jupyter_watch_relists_total", *claims_view)] == 0
        assert ("dra_jupyter_watch_restarts_total", *claims_view) in said
        assert ("dra_jupyter_watch_errors_total", *claims_view) in said

    flow = client.FlowcontrolApiserverV1Api(api)  # deleted after
    assert gone(flow.read_flow_schema, NAME)
    assert gone(flow.read_priority_level_configuration, NAME)

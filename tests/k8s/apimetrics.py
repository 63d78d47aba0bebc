"""What the API server counts of the requests it served, read from its own ``/metrics`` as
the admin: the tests count our LISTs and WATCHes there, not in our own code."""

from __future__ import annotations

import re

from tests.k8s import testenv

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


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


def requests(cluster: testenv.Cluster, verb: str, resource: str, **labels: str) -> int:
    """How many ``verb`` requests on ``resource`` the API server has served (a WATCH counts
    once it ended), of every answer code unless ``code`` is given."""
    counted = sample(cluster, "apiserver_request_total", verb=verb, resource=resource, **labels)
    return int(counted)


def open_watches(cluster: testenv.Cluster, resource: str, **labels: str) -> int:
    """How many WATCHes of ``resource`` are open now."""
    counted = sample(
        cluster, "apiserver_longrunning_requests", verb="WATCH", resource=resource, **labels
    )
    return int(counted)

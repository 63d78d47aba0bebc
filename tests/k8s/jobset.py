"""Real JobSet for the test control plane, an add-on of :mod:`.addon` (built from the Go module
proxy at a pinned version, cached beside Kubernetes, started on loopback against a running
:class:`Cluster`, ``Cluster.stop`` stops it); what is JobSet's own:

* the build: the controller of ``sigs.k8s.io/jobset`` (the module's root package,
  ``main.go``), with its CRD and webhook manifests;
* every webhook of the manifests kept (its internal certificate management off); the pod
  webhooks see only pods of JobSets (an object selector on the label JobSet puts on its
  pods), so the other tests' pods never pass through JobSet;
* no leader election, no metrics, the admin's kubeconfig.

Installing the CRD changes what ``dra.run`` does on that cluster (it uses JobSet when the API
is served), so tests start JobSet only on a control plane of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.k8s import addon
from tests.k8s.addon import GoAddon

JOBSET_VERSION = "v0.11.1"  # the version Kueue v0.17.0 requires; served by the Go module proxy
GO_DIRECTIVE = "1.25.0"  # what sigs.k8s.io/jobset v0.11.1 declares
PACKAGE = "sigs.k8s.io/jobset"  # the controller: the module's root main.go
POD_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet puts it on every pod of a JobSet


ADDON = GoAddon(
    name="jobset",
    title="JobSet",
    module=PACKAGE,
    version=JOBSET_VERSION,
    go_directive=GO_DIRECTIVE,
    package=PACKAGE,
)
build, is_built, cache_dir = ADDON.build, ADDON.is_built, ADDON.cache_dir


# --- configuration (pure) ---------------------------------------------------------------------


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's Configuration for the test control plane (see the module)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def webhook_configurations(manifests: str, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The manifests' webhook configurations with each webhook served at ``url`` + its path;
    the pod webhooks see only pods of JobSets (see the module)."""
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document:
            continue
        for hook in document.get("webhooks") or ():
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
            if "pods" in {r for rule in hook.get("rules") or () for r in rule["resources"]}:
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": POD_LABEL, "operator": "Exists"}]
                }
            hook["timeoutSeconds"] = 10
        document["metadata"] = {"name": f"jobset-{document['metadata']['name']}"}
        configurations.append(document)
    return configurations


# --- running ----------------------------------------------------------------------------------


def start(cluster: Any, timeout: float = addon.START_TIMEOUT_S) -> None:
    """Start JobSet against ``cluster`` (a :class:`tests.k8s.testenv.Cluster`) and return once
    its CRD is established and its webhooks answer (see the module)."""
    addon.start(
        cluster,
        ADDON,
        manager_config,
        webhook_configurations,
        flags=lambda health_port: (
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--leader-elect=false",
        ),
        timeout=timeout,
    )

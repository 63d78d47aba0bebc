"""Real Kueue for the test control plane, an add-on of :mod:`.addon` (built from the Go module
proxy at a pinned version, cached beside Kubernetes, started on loopback against a running
:class:`Cluster`, ``Cluster.stop`` stops it); what is Kueue's own:

* the build: ``cmd/kueue`` of ``sigs.k8s.io/kueue``, with its CRDs and webhook manifests;
* the webhook configurations of the manifests kept only for the integrations it runs
  (``batch/job``, ``pod``) and for Kueue's own kinds; the pod and Job webhooks see only
  objects labelled with a queue (an object selector), so the other tests' pods never pass
  through Kueue;
* Kueue's DRA quota accounting on (feature gate ``DynamicResourceAllocation``), devices of
  the DeviceClass ``gpu.nvidia.com`` counted as :data:`GPU_RESOURCE`; the visibility API
  server off (it would need an aggregated APIService, which loopback cannot serve);
* no leader election, no metrics (but a metrics certificate: :func:`metrics_certificate`),
  the admin's kubeconfig, its namespace :data:`NAMESPACE`, its log at level 4.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.k8s import addon
from tests.k8s.addon import GoAddon, serving_certificate
from tests.k8s.k8sbuild import TestenvError

KUEUE_VERSION = "v0.17.0"  # the newest the Go module proxy serves (2026-12)
GO_DIRECTIVE = "1.25.0"  # what sigs.k8s.io/kueue v0.17.0 declares
GPU_RESOURCE = "nvidia.com/gpu"  # the quota's name for devices of the class below
GPU_CLASS = "gpu.nvidia.com"
GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE = "kueue-system"
FRAMEWORKS = ("batch/job", "pod")
# webhook paths kept: Kueue's own kinds and the integrations in FRAMEWORKS
KEPT = ("kueue-x-k8s-io", "batch-v1-job", "--v1-pod")
LABELLED = ("batch-v1-job", "--v1-pod")  # these see only objects with a queue label


ADDON = GoAddon(
    name="kueue",
    title="Kueue",
    module="sigs.k8s.io/kueue",
    version=KUEUE_VERSION,
    go_directive=GO_DIRECTIVE,
    package="sigs.k8s.io/kueue/cmd/kueue",
)
build, is_built, cache_dir = ADDON.build, ADDON.is_built, ADDON.cache_dir


# --- configuration (pure) ---------------------------------------------------------------------


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for the test control plane (see the module)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"DynamicResourceAllocation": True, "VisibilityOnDemand": False},
        "resources": {
            "deviceClassMappings": [{"name": GPU_RESOURCE, "deviceClassNames": [GPU_CLASS]}]
        },
    }


def webhook_configurations(manifests: str, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The manifests' webhook configurations with each kept webhook served at ``url`` + its
    path (see the module); the others dropped."""
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document:
            continue
        kept = []
        for hook in document.get("webhooks") or ():
            path = hook["clientConfig"]["service"]["path"]
            if not any(k in path for k in KEPT):
                continue
            hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
            if any(k in path for k in LABELLED):
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]
                }
            hook["timeoutSeconds"] = 10
            kept.append(hook)
        document["webhooks"] = kept
        document["metadata"] = {"name": f"kueue-{document['metadata']['name']}"}
        configurations.append(document)
    return configurations


def cluster_queue(name: str, gpus: int) -> dict[str, Any]:
    """A ClusterQueue whose quota is ``gpus`` GPUs (of any namespace), one flavor."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [{"name": GPU_RESOURCE, "nominalQuota": gpus}],
                        }
                    ],
                }
            ],
        },
    }


def resource_flavor() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default-flavor"},
    }


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


# --- running ----------------------------------------------------------------------------------


# Kueue 0.17 reads a metrics certificate from this fixed path whenever its internal
# certificate management is off (cmd/kueue/main.go), even with the metrics server off, and
# exits without it; the test environment writes one there (as root) unless one is there.
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
OURS = "written-by-dra-jupyter-testenv"  # marks a METRICS_CERTS that we may write again


def metrics_certificate(pki: Path, certs: Path = METRICS_CERTS) -> None:
    """A throwaway certificate where Kueue reads its metrics certificate (see above)."""
    if (certs / "tls.crt").is_file() and not (certs / OURS).is_file():
        return  # somebody else's: left as it is
    try:
        serving_certificate(pki, certs, "kueue-webhook")
        (certs / OURS).write_text("a throwaway certificate; Kueue's metrics server is off\n")
    except PermissionError as error:
        raise TestenvError(
            f"k8s-testenv: Kueue {KUEUE_VERSION} needs a certificate in {certs} (it reads "
            f"one there even with metrics off) and this user cannot write it ({error}); run "
            "the tests as root (as CI does), or put any tls.crt and tls.key there"
        ) from None


def start(cluster: Any, timeout: float = addon.START_TIMEOUT_S) -> None:
    """Start Kueue against ``cluster`` (a :class:`tests.k8s.testenv.Cluster`) and return once
    its CRDs are established and its webhooks answer (see the module)."""
    ADDON.require_built()
    metrics_certificate(cluster.state_dir / "pki")
    addon.start(
        cluster,
        ADDON,
        manager_config,
        webhook_configurations,
        # its queue's decisions in logs/kueue.log, for a test that waits on one
        flags=lambda health_port: ("--zap-log-level=4",),
        namespace=NAMESPACE,
        timeout=timeout,
    )

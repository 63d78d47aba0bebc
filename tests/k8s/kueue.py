"""Real Kueue for the test control plane: built from the Go module proxy at a pinned version,
cached beside Kubernetes (:mod:`.k8sbuild`), and started against a running :class:`Cluster`.

``sigs.k8s.io/kueue`` has no ``replace`` directive, so one throwaway module that requires it
builds ``cmd/kueue``; its CRDs and webhook manifests are copied from the module's download
into the cache, so starting needs no network. :func:`start` runs the manager on loopback as
one more component of the cluster (``Cluster.stop`` stops it):

* the webhook server on 127.0.0.1 with a certificate of the cluster's CA, and the webhook
  configurations of the manifests with their Service replaced by that URL, only those of the
  integrations it runs (``batch/job``, ``pod``) and of Kueue's own kinds; the pod and Job
  webhooks see only objects labelled with a queue (an object selector), so the other tests'
  pods never pass through Kueue;
* Kueue's DRA quota accounting on (feature gate ``DynamicResourceAllocation``), devices of
  the DeviceClass ``gpu.nvidia.com`` counted as :data:`GPU_RESOURCE`; the visibility API
  server off (it would need an aggregated APIService, which loopback cannot serve);
* no leader election, no metrics, the admin's kubeconfig.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.k8sbuild import TestenvError, _Go, _tools_go, locked

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
START_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    from tests.k8s.k8sbuild import cache_dir as k8s_cache  # noqa: PLC0415

    return k8s_cache().parent / f"kueue-{KUEUE_VERSION}"


def binary() -> Path:
    return cache_dir() / "bin" / "kueue"


def is_built() -> bool:
    stamp = cache_dir() / "stamp.json"
    try:
        built = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return (
        built == {"kueue": KUEUE_VERSION}
        and binary().is_file()
        and (cache_dir() / "crds").is_dir()
        and (cache_dir() / "webhooks.yaml").is_file()
    )


def build(*, force: bool = False, log: Any = None) -> Path:
    """Build the manager and copy its CRDs and webhook manifests, unless done already."""
    import sys  # noqa: PLC0415

    out = log or sys.stderr
    root = cache_dir()
    with locked(root.parent / f"{root.name}.lock"):
        if is_built() and not force:
            return binary()
        start = time.monotonic()
        root.mkdir(parents=True, exist_ok=True)
        log_path = root / "build.log"
        log_path.write_text("")
        out.write(
            f"k8s-testenv: building Kueue {KUEUE_VERSION} into {root} (once per machine; "
            f"a few minutes on 2 cores; log: {log_path})\n"
        )
        out.flush()
        go = _Go(out, log_path)
        module = root / "module"
        module.mkdir(exist_ok=True)
        (module / "go.mod").write_text(
            f"module kueuetestenv\n\ngo {GO_DIRECTIVE}\n\n"
            f"require sigs.k8s.io/kueue {KUEUE_VERSION}\n"
        )
        command = "sigs.k8s.io/kueue/cmd/kueue"
        (module / "tools.go").write_text(_tools_go([command]))
        info = json.loads(
            go.run(
                ["mod", "download", "-json", f"sigs.k8s.io/kueue@{KUEUE_VERSION}"],
                module,
                f"downloading sigs.k8s.io/kueue {KUEUE_VERSION}",
            )
        )
        go.run(["mod", "tidy"], module, "resolving the Kueue modules (go mod tidy)")
        (root / "bin").mkdir(exist_ok=True)
        go.run(
            ["build", "-ldflags", "-s -w", "-o", str(binary()), command],
            module,
            "building Kueue",
        )
        source = Path(info["Dir"]) / "config" / "components"
        crds = root / "crds"
        shutil.rmtree(crds, ignore_errors=True)
        crds.mkdir()
        for crd in sorted((source / "crd" / "bases").glob("*.yaml")):
            shutil.copyfile(crd, crds / crd.name)
        shutil.copyfile(source / "webhook" / "manifests.yaml", root / "webhooks.yaml")
        (root / "stamp.json").write_text(json.dumps({"kueue": KUEUE_VERSION}))
        out.write(f"k8s-testenv: built Kueue in {time.monotonic() - start:.0f} s\n")
        return binary()


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
        _serving_certificate(pki, certs)
        (certs / OURS).write_text("a throwaway certificate; Kueue's metrics server is off\n")
    except PermissionError as error:
        raise TestenvError(
            f"k8s-testenv: Kueue {KUEUE_VERSION} needs a certificate in {certs} (it reads "
            f"one there even with metrics off) and this user cannot write it ({error}); run "
            "the tests as root (as CI does), or put any tls.crt and tls.key there"
        ) from None


def _serving_certificate(pki: Path, certs: Path) -> None:
    """``tls.crt`` and ``tls.key`` for 127.0.0.1, signed by the cluster's CA."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    from tests.k8s.pki import certificate, pem_key  # noqa: PLC0415

    ca = (
        x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()),
        serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None),
    )
    cert, key = certificate("kueue-webhook", issuer=ca, hosts=("127.0.0.1",))
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (certs / "tls.key").write_bytes(pem_key(key))


def _create(call: Any, *args: Any) -> None:
    """Create, or leave what exists (a second start on the same cluster)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        call(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def start(cluster: Any, timeout: float = START_TIMEOUT_S) -> None:
    """Start Kueue against ``cluster`` (a :class:`tests.k8s.testenv.Cluster`) and return once
    its CRDs are established and its webhooks answer (see the module)."""
    import base64  # noqa: PLC0415
    import ssl  # noqa: PLC0415
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415
    from tests.k8s.testenv import _spawn, _wait, free_port  # noqa: PLC0415

    if not is_built():
        raise TestenvError(
            f"k8s-testenv: Kueue is not built in {cache_dir()}; run `scripts/k8s-testenv build`"
        )
    deadline = time.monotonic() + timeout
    state = cluster.state_dir / "kueue"
    pki = cluster.state_dir / "pki"
    _serving_certificate(pki, state / "certs")
    metrics_certificate(pki)
    webhook_port, health_port = free_port(), free_port()
    config = state / "config.yaml"
    config.write_text(yaml.safe_dump(manager_config(webhook_port, health_port, state / "certs")))
    with api_client(str(cluster.kubeconfig)) as api:
        extensions = client.ApiextensionsV1Api(api)
        names = []
        for path in sorted((cache_dir() / "crds").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            names.append(crd["metadata"]["name"])
            _create(extensions.create_custom_resource_definition, crd)

        def established() -> tuple[bool, str]:
            for name in names:
                crd = extensions.read_custom_resource_definition(name)
                listed = crd.status.conditions if crd.status else None
                conditions = {c.type: c.status for c in listed or ()}
                if conditions.get("Established") != "True":
                    return False, f"CRD {name} not established"
            return True, ""

        _wait(cluster, "Kueue's CRDs", established, deadline)
        _create(
            client.CoreV1Api(api).create_namespace,
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)),
        )
        _spawn(
            cluster,
            "kueue",
            # its queue's decisions in logs/kueue.log, for a test that waits on one
            [f"--config={config}", f"--kubeconfig={cluster.kubeconfig}", "--zap-log-level=4"],
            program=[str(binary())],
        )

        def ready() -> tuple[bool, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=5) as r:
                return r.status == 200, r.read().decode()

        _wait(cluster, "Kueue's /readyz", ready, deadline)
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))

        def webhooks() -> tuple[bool, str]:
            # any answer over TLS with our CA (404 too): the webhook server serves
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(
                    f"https://127.0.0.1:{webhook_port}/", timeout=5, context=context
                ).close()
            return True, ""

        _wait(cluster, "Kueue's webhook server", webhooks, deadline)
        bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        admission = client.AdmissionregistrationV1Api(api)
        url = f"https://127.0.0.1:{webhook_port}"
        for configuration in webhook_configurations(
            (cache_dir() / "webhooks.yaml").read_text(), url, bundle
        ):
            mutating = configuration["kind"] == "MutatingWebhookConfiguration"
            kind = "mutating" if mutating else "validating"
            name = configuration["metadata"]["name"]
            # a previous start's (on another port) goes first
            with contextlib.suppress(ApiException):
                getattr(admission, f"delete_{kind}_webhook_configuration")(name)
            getattr(admission, f"create_{kind}_webhook_configuration")(configuration)
